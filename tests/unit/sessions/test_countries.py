"""$Country by client address."""

from __future__ import annotations

import pytest

from sessions.countries import CountryTable


def test_first_matching_network_wins() -> None:
    table = CountryTable({"10.1.0.0/16": "FR", "10.0.0.0/8": "DE", "2001:db8::/32": "NL"})
    assert table.lookup("10.1.2.3") == "FR"
    assert table.lookup("10.9.9.9") == "DE"
    assert table.lookup("2001:db8::1") == "NL"
    assert table.lookup("192.0.2.1") == ""


@pytest.mark.parametrize("address", ["", "not-an-address", "999.1.1.1"])
def test_anything_not_an_address_has_no_country(address: str) -> None:
    assert CountryTable({"0.0.0.0/0": "XX"}).lookup(address) == ""


def test_an_empty_table_knows_no_country() -> None:
    assert CountryTable().lookup("10.0.0.1") == "" and len(CountryTable()) == 0


def test_a_bad_network_is_named() -> None:
    with pytest.raises(ValueError, match="'10.0.0.0/99' is not a network"):
        CountryTable({"10.0.0.0/99": "DE"})
    with pytest.raises(ValueError, match="must be a string"):
        CountryTable({"10.0.0.0/8": 5})  # type: ignore[dict-item]
