"""How the ``canopy`` command line splits its arguments, without a server: operands
that start with ``-`` (issue 24) and the ``--seconds`` of ``cluster pause-node``."""

from __future__ import annotations

import math

import pytest

from canopy import cli
from canopy.errors import CanopyError
from cluster.cli import add_serve
from history.cli import add_history


def parse(*argv: str) -> dict[str, object]:
    return vars(cli.build_parser(add_serve, add_history).parse_args(argv))


@pytest.mark.parametrize("value", ["-inf", "-Infinity", "-nan", "-1e5", "-0x1", "-1", "-.5", "-x", "- x", "-h=1"])
def test_a_value_may_start_with_a_dash(value: str) -> None:
    assert parse("topic", "set", "p", value)["value"] == value
    assert parse("topic", "set", "p", value, "--type", "DOUBLE")["value"] == value  # options still follow
    assert parse("topic", "set", "--type", "DOUBLE", "--", "p", value)["value"] == value  # and -- still ends them
    assert parse("ts", "append", "p", value, "--json")["value"] == value
    edited = parse("ts", "edit", "p", "-1", value)
    assert (edited["sequence"], edited["value"]) == (-1, value)
    assert parse("hub", "publish", "a.b", value)["value"] == value


def test_an_option_argument_may_start_with_a_dash() -> None:
    assert parse("security", "principal", "add", "bob", "--new-password", "-secret")["new_password"] == "-secret"
    assert parse("topic", "fetch", ">a", "--password", "-pw")["password"] == "-pw"


def test_options_are_still_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse("topic", "set", "p", "v", "--type", "INT64")["type"] == "INT64"
    with pytest.raises(SystemExit) as caught:
        parse("topic", "set", "p", "-h")  # help is help: a value "-h" goes after --
    assert caught.value.code == 0 and "usage: canopy topic set" in capsys.readouterr().out
    with pytest.raises(SystemExit) as caught:
        parse("topic", "fetch", ">a", "--jsn")  # a mistyped long option is a usage error
    assert caught.value.code == 2 and "unrecognized arguments: --jsn" in capsys.readouterr().err


@pytest.mark.parametrize(("kind", "fragment"), [
    ("INT64", "VALUE '-inf' is not a valid INT64 value: -inf is not a finite number"),
    ("JSON", "VALUE '-inf' is not a valid JSON value: -inf is not JSON"),
])
def test_a_bad_dashed_value_gets_the_value_parsers_error(kind: str, fragment: str) -> None:
    args = cli.build_parser().parse_args(["topic", "set", "p", "-inf", "--type", kind])
    with pytest.raises(CanopyError, match=fragment) as caught:
        cli._parse_value(args.value, args.type)
    assert caught.value.code == "INVALID_VALUE"
    assert cli._parse_value(args.value, "DOUBLE") == -math.inf  # spelled out: a DOUBLE holds it


@pytest.mark.parametrize("seconds", ["nan", "NaN", "inf", "-inf", "Infinity", "0", "-1", "3600.5", "1e400", "soon"])
def test_pause_seconds_are_checked_before_anything_is_sent(seconds: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse("cluster", "pause-node", "node-1", "--seconds", seconds)
    err = capsys.readouterr().err
    assert caught.value.code == 2
    assert f"argument --seconds: expected a number of seconds, more than 0 and at most 3600, got {seconds!r}" in err


@pytest.mark.parametrize("seconds", ["nan", "inf", "-1"])
def test_restart_gcs_and_kill_head_seconds_are_checked_too(seconds: str) -> None:
    for action in ("restart-gcs", "kill-head"):
        with pytest.raises(SystemExit) as caught:
            parse("cluster", action, "--seconds", seconds)
        assert caught.value.code == 2


def test_kill_head_takes_its_outage() -> None:
    assert parse("cluster", "kill-head")["seconds"] == 5.0
    assert parse("cluster", "kill-head", "--seconds", "8")["seconds"] == 8.0


def test_the_cli_and_the_server_agree_on_pauses() -> None:
    from actors.node_control import MAX_PAUSE, NodeActionError, NodeControl
    from replication.nodes import Node

    assert cli.MAX_PAUSE == MAX_PAUSE
    assert parse("cluster", "pause-node", "node-1", "--seconds", "0.5")["seconds"] == 0.5
    assert parse("cluster", "pause-node", "node-1", "--seconds", "3600")["seconds"] == 3600.0
    control = NodeControl(3, home_node=None)
    nodes = [Node("node-1", "id-1", "127.0.0.1", True, True)]
    for seconds in (math.nan, math.inf, -math.inf, 0.0, -1.0, MAX_PAUSE + 1):
        with pytest.raises(NodeActionError) as caught:
            control.act("pause", "node-1", seconds, False, nodes)
        assert caught.value.code == "INVALID_REQUEST" and "seconds" in str(caught.value), seconds


def test_the_cli_and_the_server_agree_on_delays(capsys: pytest.CaptureFixture[str]) -> None:
    from actors.node_control import MAX_DELAY_MS, NodeActionError, NodeControl
    from replication.nodes import Node

    assert cli.MAX_DELAY_MS == MAX_DELAY_MS
    assert parse("cluster", "partition", "node-1")["delay_ms"] is None
    assert parse("cluster", "partition", "node-1", "--delay-ms", "200", "--one-way", "in")["delay_ms"] == 200
    assert parse("cluster", "partition", "node-1", "--delay-ms", str(MAX_DELAY_MS))["delay_ms"] == MAX_DELAY_MS
    control = NodeControl(3, home_node=None, namespaces=True)
    nodes = [Node(f"node-{k}", f"id-{k}", "127.0.0.1", True, True) for k in (0, 1)]
    for ms in ("0", "-1", "1.5", "x", str(MAX_DELAY_MS + 1)):
        with pytest.raises(SystemExit) as caught:
            parse("cluster", "partition", "node-1", "--delay-ms", ms)
        assert caught.value.code == 2
        assert f"argument --delay-ms: expected whole milliseconds from 1 to {MAX_DELAY_MS}, got {ms!r}" in (
            capsys.readouterr().err)
    for bad in (0, MAX_DELAY_MS + 1):
        with pytest.raises(NodeActionError, match="options.delay_ms"):
            control.act("partition", "node-1", 5.0, False, nodes, {"delay_ms": bad})
