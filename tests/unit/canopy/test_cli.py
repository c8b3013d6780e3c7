"""The CLI's reading of VALUE and its ``--json`` output, without a server
(the commands against a real server are in tests/e2e/test_cli.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from canopy import cli
from canopy.errors import CanopyError


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("12.5", "DOUBLE", 12.5),
        (" -3 ", "DOUBLE", -3.0),
        ("1e308", "DOUBLE", 1e308),
        ("inf", "DOUBLE", math.inf),
        ("-Infinity", "DOUBLE", -math.inf),
        ('{"a": [1, 2.5, null]}', "JSON", {"a": [1, 2.5, None]}),
        ("1e-400", "JSON", 0.0),  # underflow is not an error: the nearest float is 0
        ("7", "INT64", 7),
        ("AAH/", "BINARY", b"\x00\x01\xff"),
        ("NaN", "STRING", "NaN"),
    ],
)
def test_values_are_parsed_by_type(text: str, kind: str, expected: Any) -> None:
    assert cli._parse_value(text, kind) == expected


def test_nan_is_a_double_when_spelled_out() -> None:
    assert math.isnan(cli._parse_value("nan", "DOUBLE"))


@pytest.mark.parametrize(
    ("text", "kind", "fragment"),
    [
        ("1e400", "DOUBLE", "number 1e400 is out of range for a 64-bit float"),
        ("-1e400", "DOUBLE", "out of range"),
        ("abc", "DOUBLE", "could not convert"),
        ("1e400", "JSON", "number 1e400 is out of range"),
        ('{"a": [1, 1E+999]}', "JSON", "number 1E\\+999 is out of range"),
        ("NaN", "JSON", "NaN is not JSON"),
        ("[1, Infinity]", "JSON", "Infinity is not JSON"),
        ("-Infinity", "JSON", "-Infinity is not JSON"),
        (nested(5000), "JSON", "nested deeper than 256 levels"),
        ("{", "JSON", "Expecting property name"),
        ("12x", "INT64", "invalid literal"),
        ("-inf", "INT64", "-inf is not a finite number"),
        ("NaN", "INT64", "NaN is not a finite number"),
        ("-inf", "JSON", "-inf is not JSON"),
    ],
)
def test_bad_values_are_one_invalid_value_error(text: str, kind: str, fragment: str) -> None:
    with pytest.raises(CanopyError, match=fragment) as caught:
        cli._parse_value(text, kind)
    assert caught.value.code == "INVALID_VALUE"
    assert len(str(caught.value)) < 300  # a 10,000-character VALUE is not echoed whole


@pytest.mark.parametrize(
    ("value", "shown"),
    [(math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity"), (1.5, 1.5), (None, None), (b"\x00", "AA==")],
)
def test_json_output_is_strict_json(value: Any, shown: Any) -> None:
    line = cli._json_line({"path": "a", "type": "DOUBLE", "value": cli._render(value)})

    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in --json output")

    assert json.loads(line, parse_constant=refuse)["value"] == shown


def test_json_output_refuses_a_non_finite_float_it_was_not_given_rendered() -> None:
    with pytest.raises(ValueError):
        cli._json_line({"value": math.nan})


def test_an_unreadable_specification_file_is_one_line_before_connecting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.view"
    status = cli.main(["view", "create", "v", "--file", str(missing), "--url", "ws://127.0.0.1:1"])
    err = capsys.readouterr().err
    assert status == 1 and err.startswith("canopy: INVALID_REQUEST: cannot read --file") and err.count("\n") == 1
