"""The partition protocol: every value round-trips; malformed input is refused."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from topics import protocol as p
from topics.constraints import JsonWithoutValue, NoTopic, ValueEquals
from topics.timeseries import Event

EVENT = Event(3, 1000, "alice", b"\x01", 1, 900, "bob")

OPERATIONS: list[p.Operation] = [
    p.AddTopic("a/b", "JSON", {"CONFLATION": "off"}),
    p.AddTopic("a/b", "STRING"),
    p.SetValue("a", b"\xa1", False, "JSON", True),
    p.SetValue("a", b"raw", True),
    p.RemoveTopics("?a//"),
    p.FetchTopics("*.*", False, True, ["STRING"], 5),
    p.Register("?a/.*", 7),
    p.Register("?a/.*", 8, True),
    p.Unregister("?a/.*", True),
    p.Unregister(">a"),
    p.AppendEvent("ts", b"\x01", False, 5, "me"),
    p.EditEvent("ts", 1, b"\x02", False, "me", True),
    p.QueryEvents("ts", "start", 0, "end", 0, "values", None),
    p.RefPut("r", 1, "v", "INT64", {}, b"\x02", None),
    p.RefPut("r", 1, "v", "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "INT64"}, None, p.RefEvent(b"\x02", 9, "x")),
    p.RefReserve("r", 1, "v"),
    p.RefDrop("r", 1),
    p.RefDropView(1),
    p.ReadRecent([">a", "b"], 12),
    p.CountTopics(["?a//", ">b"]),
    p.SetValue("a", b"\x01", False, None, True, constraint=NoTopic() | ValueEquals(b"\x02")),
    p.PatchJson("j", '[{"op": "remove", "path": "/a"}]', JsonWithoutValue(("b",))),
    p.PatchJson("j", "[]"),
]

EVENTS: list[p.TopicEvent] = [
    p.Snapshot(1, "a", "STRING", [["CONFLATION", "off"]], b"x"),
    p.Snapshot(1, "a", "STRING", [], None),
    p.End(1),
    p.Added("b", "INT64", [], None),
    p.Changed("b", b"\x05"),
    p.Removed("b"),
    p.Present(3, "a/b", "STRING", [["CONFLATION", "off"]]),
    p.Present(0, "a/c", "INT64", []),
    p.Absent("a/b"),
    p.Appended("ts", EVENT),
    p.Appended("ts", Event(0, 1, "", b"")),
]


def through_msgpack(item: Any) -> Any:
    return msgpack.unpackb(msgpack.packb(item, use_bin_type=True), raw=False, use_list=True)


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: type(op).__name__)
def test_operations_round_trip(op: p.Operation) -> None:
    assert p.decode_operation(through_msgpack(p.encode_operation(op))) == op


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_events_round_trip(event: p.TopicEvent) -> None:
    decoded = p.decode_event(through_msgpack(p.encode_event(event)))
    assert decoded == event and type(decoded) is type(event)


@pytest.mark.parametrize(
    "op, result",
    [
        (p.AddTopic("a", "STRING"), p.Ok("CREATED")),
        (p.SetValue("a", b"", True), p.Ok(None)),
        (p.SetValue("a", b"", True), p.Failed("NO_SUCH_TOPIC", "no topic at 'a'")),
        (p.FetchTopics(">a"), p.Ok([p.TopicRow("a", "STRING", None, b"x", None)])),
        (p.AppendEvent("ts", b"", True), p.Ok(p.EventMeta(1, 2, "me"))),
        (p.EditEvent("ts", 1, b"", True), p.Ok(p.EditMeta(3, 4, "me", 1, 2, "you"))),
        (p.QueryEvents("ts", "start", 0, "end", 0, "values"), p.Ok(p.QueryAnswer(2, [EVENT], "INT64"))),
        (p.RefDropView(1), p.Ok(4)),
        (p.ReadRecent([">a"], 3), p.Ok(p.RecentAnswer(2, 9, [p.Changed("a/b", b"\x01"), p.Appended("a/ts", EVENT)]))),
        (p.CountTopics(["?a//", ">b"]), p.Ok([{"STRING": 2, "JSON": 1}, {}])),
    ],
)
def test_results_are_typed_by_their_operation(op: p.Operation, result: p.Result) -> None:
    decoded = p.decode_result(op, through_msgpack(p.encode_result(result)))
    assert decoded == result
    if isinstance(result, p.Ok) and isinstance(result.value, list) and result.value:
        assert type(decoded.value[0]) is type(result.value[0])  # type: ignore[union-attr]
    elif isinstance(result, p.Ok):
        assert type(decoded.value) is type(result.value)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "item, message",
    [
        ([], "non-empty list"),
        ("x", "non-empty list"),
        ([0, "a"], "unknown operation code 0"),
        ([99], "unknown operation code 99"),
        ([True, "a"], "unknown operation code True"),
        ([1], "AddTopic has 2..5 fields, got 0"),
        ([5, "?a", 1, True, 2], "Register has 2..3 fields, got 4"),
        ([10, "r", 1, "v", "INT64", {}, None, [1, 2]], "reference topic event"),
    ],
)
def test_malformed_operations_are_refused(item: Any, message: str) -> None:
    with pytest.raises(p.ProtocolError, match=message):
        p.decode_operation(item)


@pytest.mark.parametrize(
    "item",
    [[], [0], [7, "a"], [4, "a"], [6, "ts", [1, 2]], [6, "ts"], None],
)
def test_malformed_events_are_refused(item: Any) -> None:
    with pytest.raises(p.ProtocolError):
        p.decode_event(item)


def test_malformed_results_are_refused() -> None:
    for item in ([], [2, "x"], [0], [1, "CODE"], None):
        with pytest.raises(p.ProtocolError):
            p.decode_result(p.RemoveTopics(">a"), item)


FRAMES: list[p.Frame] = [
    p.Hello("gw0", "secret"),
    p.Batch(1, [p.encode_operation(op) for op in OPERATIONS]),
    p.Done(1, [p.encode_result(p.Ok(None)), p.encode_result(p.Failed("X", "y"))], [p.encode_event(EVENTS[4])], 123),
    p.Events([p.encode_event(e) for e in EVENTS]),
]


@given(st.lists(st.integers(min_value=1, max_value=64), max_size=40))
def test_the_reader_reassembles_frames_however_the_stream_is_cut(cuts: list[int]) -> None:
    data = b"".join(p.encode_frame(f) for f in FRAMES)
    reader = p.FrameReader()
    out: list[p.Frame] = []
    position = 0
    for cut in cuts:
        reader.feed(data[position : position + cut])
        out += reader.frames()
        position += cut
    reader.feed(data[position:])
    out += reader.frames()
    assert out == [type(f)(*through_msgpack(list(f))) for f in FRAMES]
    assert [type(f) for f in out] == [type(f) for f in FRAMES]


def test_the_reader_refuses_garbage_and_oversized_frames() -> None:
    reader = p.FrameReader()
    reader.feed(msgpack.packb([99, 1]))
    with pytest.raises(p.ProtocolError, match="unknown frame code 99"):
        list(reader.frames())
    reader = p.FrameReader()
    reader.feed(b"\xc1")  # never used in msgpack
    with pytest.raises(p.ProtocolError, match="not msgpack"):
        list(reader.frames())
    reader = p.FrameReader()
    reader.feed(b"\x91" * 100_000 + b"\x01")  # past msgpack's fixed stack: a bare StackError
    with pytest.raises(p.ProtocolError, match="nests arrays and maps deeper than msgpack's 1024 levels"):
        list(reader.frames())
    reader = p.FrameReader(max_frame=1024)
    with pytest.raises(p.ProtocolError, match="larger than the stream allows"):
        reader.feed(msgpack.packb([2, 1, [b"x" * 2000]]))
