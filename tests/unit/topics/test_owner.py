"""The OWNER property names one principal, in the reference system's form."""

from __future__ import annotations

import re

import pytest

from topics.errors import SpecificationError
from topics.owner import MAX_OWNER_LENGTH, parse_owner
from topics.specification import TopicSpecification


@pytest.mark.parametrize("text, principal", [
    ("$Principal is 'fred'", "fred"),
    ('$Principal is "fred"', "fred"),
    ("  $Principal   IS  'a b' ", "a b"),
    ("$Principal is 'it\\'s'", "it's"),
    ('$Principal is "back\\\\slash"', "back\\slash"),
])
def test_the_forms_accepted(text: str, principal: str) -> None:
    assert parse_owner(text) == principal


@pytest.mark.parametrize("text, column, expected", [
    ("Department is 'x'", 1, "$Principal"),
    ("$Principal = 'x'", 12, "'is'"),
    ("$Principal isn't 'x'", 12, "'is'"),
    ("$Principal is fred", 15, "a quoted principal name"),
    ("$Principal is 'fred", 15, "a closing quote"),
    ("$Principal is 'fred' or $Principal is 'ann'", 22, "the end of the value"),
    ("$Principal is ''", 15, "a principal name that is not empty"),
])
def test_anything_else_is_refused_with_its_column(text: str, column: int, expected: str) -> None:
    with pytest.raises(SpecificationError, match=f"expected {re.escape(expected)}.* at column {column} ") as raised:
        parse_owner(text)
    assert str(raised.value).splitlines()[-1] == "  " + " " * (column - 1) + "^"


def test_the_property_is_checked_when_a_specification_is_made() -> None:
    assert TopicSpecification.of("JSON", {"OWNER": "$Principal is 'fred'"}).get("OWNER") == "$Principal is 'fred'"
    with pytest.raises(SpecificationError, match="column 1"):
        TopicSpecification.of("JSON", {"OWNER": "all"})
    with pytest.raises(SpecificationError, match="longer than"):
        parse_owner("$Principal is '" + "x" * MAX_OWNER_LENGTH + "'")
