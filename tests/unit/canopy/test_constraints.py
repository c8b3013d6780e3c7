"""The client's update constraint builders: what they send, and what they refuse before sending."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import cbor2
import pytest

from canopy import constraints as c
from canopy import errors
from topics import types as values
from topics.constraints import Current, evaluate, from_wire
from topics.types import TopicType


@dataclass(frozen=True)
class Lock:
    name: str
    sequence: int


def test_each_builder_sends_the_documented_wire_form() -> None:
    assert c.value_equals("x").to_wire() == ["value_equals", cbor2.dumps("x"), False]
    assert c.value_equals(b"\x00\x01").to_wire() == ["value_equals", b"\x00\x01", True]
    assert c.value_equals(2, "DOUBLE").to_wire() == ["value_equals", cbor2.dumps(2.0), False]
    assert c.value_equals({"a": [1]}, TopicType.JSON).to_wire() == ["value_equals", cbor2.dumps({"a": [1]}), False]
    assert c.no_value().to_wire() == ["no_value"]
    assert c.no_topic().to_wire() == ["no_topic"]
    assert c.locked(Lock("door", 4)).to_wire() == ["locked", "door", 4]
    assert c.json_with_value("/a~1b/0", {"k": None}).to_wire() == ["json_with_value", "/a~1b/0", cbor2.dumps({"k": None})]
    assert c.json_without_value("").to_wire() == ["json_without_value", ""]


def test_builders_combine_with_operators_and_methods() -> None:
    either = c.no_topic() | c.value_equals(1)
    assert either.to_wire() == ["or", [["no_topic"], ["value_equals", cbor2.dumps(1), False]]]
    both = c.json_with_value("/owner", "ann").and_(c.json_without_value("/closed")) & c.no_value()
    assert both.to_wire()[0] == "and" and len(both.to_wire()[1]) == 3
    assert c.no_topic().or_(c.no_value()) == c.no_topic() | c.no_value()


def test_what_a_builder_makes_the_server_reads_back_and_evaluates_as_a_set_encodes() -> None:
    for built in (c.value_equals(1.5), c.value_equals([1, "x"]), c.locked(Lock("l", 0)),
                  c.json_with_value("/x", [1, {"y": 2.0}]), c.no_topic() | (c.no_value() & c.value_equals("v"))):
        assert from_wire(cbor2.loads(cbor2.dumps(built.to_wire()))) == built
    data, _raw = values.encode_any({"n": 1})
    assert evaluate(from_wire(c.value_equals({"n": 1}).to_wire()), Current(TopicType.JSON, data)) is True
    assert evaluate(from_wire(c.json_with_value("/n", 1).to_wire()), Current(TopicType.JSON, data)) is True


@pytest.mark.parametrize(
    "build, error, fragment",
    [
        (lambda: c.value_equals(object()), errors.InvalidValueError, "not a JSON value"),
        (lambda: c.value_equals("x", "INT64"), errors.InvalidValueError, "an INT64 value must be int"),
        (lambda: c.value_equals(1, "NOPE"), errors.InvalidTypeError, "unknown topic type"),
        (lambda: c.json_with_value("a", 1), errors.InvalidConstraintError, "'a' is not a JSON pointer"),
        (lambda: c.json_with_value("/a", b"bytes"), errors.InvalidValueError, "not a JSON value: bytes"),
        (lambda: c.json_without_value("/" + "x" * 1024), errors.InvalidConstraintError, "at most 1024 characters"),
        (lambda: c.json_without_value(3), errors.InvalidConstraintError,  # type: ignore[arg-type]
         "a JSON pointer is a string"),
        (lambda: c.locked(Lock("", 1)), errors.InvalidConstraintError, "a lock's name"),
        (lambda: c.locked(Lock("l", -1)), errors.InvalidConstraintError, "a lock's sequence"),
        (lambda: c.locked(object()), errors.InvalidConstraintError, "a lock's name"),  # type: ignore[arg-type]
    ],
)
def test_builders_refuse_what_the_server_would_with_its_error(build: Any, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        build()


def test_the_server_s_codes_come_back_as_their_own_errors() -> None:
    assert isinstance(errors.error_for("UNSATISFIED_CONSTRAINT", "no"), errors.UnsatisfiedConstraintError)
    assert isinstance(errors.error_for("PATCH_FAILED", "no"), errors.PatchFailedError)
    assert isinstance(errors.error_for("INVALID_CONSTRAINT", "no"), errors.InvalidInputError)


def test_the_builders_import_without_the_server() -> None:
    code = "import sys, canopy.constraints\nprint(sorted(m for m in ('ray', 'sessions', 'views', 'lark') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
