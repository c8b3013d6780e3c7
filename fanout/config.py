"""Fan-out connection definitions: which primary a secondary mirrors, and what.

A definition is plain data, checked here (pure: no I/O); ``canopy serve``
reads them from its TOML file (``[fanout.NAME]`` tables) and the controller
starts one :class:`~actors.fanout.FanoutLinkActor` for each::

    [fanout.prices]
    primaries = ["ws://primary-1:8080", "ws://primary-2:8080"]   # tried in turn
    links = ["?prices//", ">rates/eur"]                          # selectors to mirror
    principal = "fanout"            # optional; anonymous without
    password = "fanout-password"
    retry_delay = 1.0               # seconds between connection attempts (default 1)
    reconnect_timeout = 60.0        # how long a dropped session tries to resume (default 60)
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from topics.errors import TopicModelError
from topics.selectors import parse_selector

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: links one connection may have
MAX_LINKS = 100
_KEYS = {"primaries", "links", "principal", "password", "retry_delay", "reconnect_timeout"}


class FanoutConfigError(ValueError):
    """A fan-out definition that cannot be used; the message says where and what."""

    code = "INVALID_FANOUT"


@dataclass(frozen=True)
class FanoutConnection:
    name: str
    primaries: tuple[str, ...]
    links: tuple[str, ...]
    principal: str | None = None
    password: str | None = None
    retry_delay: float = 1.0
    reconnect_timeout: float = 60.0

    @classmethod
    def from_dict(cls, table: dict[str, Any], name: str | None = None) -> FanoutConnection:
        """A definition from a TOML table (``name`` its key) or from :meth:`to_dict`."""
        name = table.get("name", name) if name is None else name
        where = f"fan-out connection {name!r}"
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise FanoutConfigError(f"{where}: a name is 1-64 letters, digits, '_', '.' or '-', starting "
                                    "with a letter or digit")
        unknown = sorted(set(table) - _KEYS - {"name"})
        if unknown:
            raise FanoutConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}")
        primaries = urls(table.get("primaries"), f"{where}: primaries")
        links = _strings(table.get("links"), f"{where}: links")
        if len(links) > MAX_LINKS:
            raise FanoutConfigError(f"{where}: at most {MAX_LINKS} links, got {len(links)}")
        for selector in links:
            try:
                parsed = parse_selector(selector)
            except TopicModelError as e:
                raise FanoutConfigError(f"{where}: link {selector!r} is not a selector: {e}") from None
            if not parsed.path_prefix:
                raise FanoutConfigError(f"{where}: link {selector!r} has no path prefix; a link mirrors a branch")
        principal, password = credentials(table, where)
        retry = _seconds(table.get("retry_delay", 1.0), f"{where}: retry_delay", 0.01, 3600)
        reconnect = _seconds(table.get("reconnect_timeout", 60.0), f"{where}: reconnect_timeout", 0, 86_400)
        return cls(name, tuple(primaries), tuple(links), principal, password, retry, reconnect)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["primaries"], data["links"] = list(self.primaries), list(self.links)
        return data

    def shown(self) -> dict[str, Any]:
        """What may be shown to anyone allowed to see the server: no password."""
        data = self.to_dict()
        data.pop("password")
        return data


def urls(value: Any, what: str) -> list[str]:
    """A non-empty list of ws:// or wss:// URLs (one string counts as a list of one)."""
    found = _strings(value, what)
    for url in found:
        if not url.startswith(("ws://", "wss://")):
            raise FanoutConfigError(f"{what}: {url!r} is not a ws:// or wss:// URL")
    return found


def credentials(table: dict[str, Any], where: str) -> tuple[str | None, str | None]:
    """The ``principal`` and ``password`` of a definition: both strings, or both absent."""
    principal, password = table.get("principal"), table.get("password")
    for key, value in (("principal", principal), ("password", password)):
        if value is not None and not isinstance(value, str):
            raise FanoutConfigError(f"{where}: {key} must be a string")
    if (principal is None) != (password is None):
        raise FanoutConfigError(f"{where}: give principal and password together (or neither: anonymous)")
    return principal, password


def _strings(value: Any, what: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise FanoutConfigError(f"{what} must be a non-empty list of non-empty strings")
    return list(value)


def _seconds(value: Any, what: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise FanoutConfigError(f"{what} must be a number of seconds from {low:g} to {high:g}, got {value!r}")
    return float(value)


def from_tables(tables: Any) -> list[FanoutConnection]:
    """Every connection of a ``[fanout]`` TOML table (name -> table), in file order."""
    if not isinstance(tables, dict):
        raise FanoutConfigError("fanout must be a table of connections ([fanout.NAME])")
    connections = []
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise FanoutConfigError(f"fan-out connection {name!r} must be a table ([fanout.{name}])")
        connections.append(FanoutConnection.from_dict(table, name))
    return connections
