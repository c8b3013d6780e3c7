"""``$Country``: a session's country from its client address (pure).

The table is configured (``[countries]`` in the server configuration) as
``"CIDR" = "CODE"`` entries; the first network that contains the address
names the country, and an address no entry contains (or that is not an
address at all) has none (``""``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

__all__ = ["CountryTable"]


class CountryTable:
    def __init__(self, table: Mapping[str, str] | None = None) -> None:
        """Raises :class:`ValueError` naming the entry that is not a network."""
        self._networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = []
        for network, code in (table or {}).items():
            try:
                parsed = ipaddress.ip_network(network, strict=False)
            except ValueError as e:
                raise ValueError(f"countries: {network!r} is not a network: {e}") from None
            if not isinstance(code, str):
                raise ValueError(f"countries: the code for {network!r} must be a string")
            self._networks.append((parsed, code))

    def __len__(self) -> int:
        return len(self._networks)

    def lookup(self, address: str) -> str:
        if not self._networks or not address:
            return ""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return ""
        for network, code in self._networks:
            if ip in network:
                return code
        return ""
