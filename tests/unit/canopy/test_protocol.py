from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from canopy import protocol as wire

V = wire.PROTOCOL_VERSION
MESSAGES: list[wire.Message] = [
    wire.Hello(V, "alice", "secret", {"TIER": "1"}),
    wire.Hello(V, None, None, {}),
    wire.Hello(V, "alice", "secret", {}, wire.Resume("gw0-1", "token")),
    wire.Welcome(V, "gw0-1", {"$SessionId": "gw0-1"}, 1024, "hub", 500, "token"),
    wire.Welcome(V, "gw0-1", {"$SessionId": "gw0-1"}, 1024, "hub", 500, "token", True, 12),
    wire.Request(7, "set", ["a", b"\xa1", False, None, True]),
    wire.Response(7, None),
    wire.Response(8, [["a", "STRING", None, b"x"]]),
    wire.Error(9, "INVALID_PATH", "bad"),
    wire.Subscribed(3, "a/b", "JSON", [["CONFLATION", "off"]], b"\xa0"),
    wire.Subscribed(4, "a/c", "STRING", [], None),
    wire.Value(3, b"\x01"),
    wire.Value(3, b"\x02", False),
    wire.Unsubscribed(3, "REMOVED"),
    wire.Close("QUEUE_LIMIT", "too slow"),
    wire.Notify("missing_topic", {"id": "gw0:m1", "selector": ">a/d", "servers": ["s1"]}),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(message: wire.Message) -> None:
    assert wire.decode(wire.frame([wire.encode(message)])) == [message]


def test_many_messages_per_frame() -> None:
    data = wire.frame([wire.encode(m) for m in MESSAGES])
    assert wire.decode(data) == MESSAGES


@pytest.mark.parametrize(
    "data",
    [b"", b"\xc1", b"\x91", msgpack.packb({"a": 1}), msgpack.packb(5), msgpack.packb([1]) + b"\x00"],
)
def test_garbage_frames_raise(data: bytes) -> None:
    with pytest.raises(wire.ProtocolError):
        wire.decode(data)


@pytest.mark.parametrize(
    ("item", "cid", "fragment"),
    [
        ([], 0, "non-empty array"),
        ("x", 0, "non-empty array"),
        ([99], 0, "unknown message type"),
        ([True], 0, "unknown message type"),
        ([wire.REQUEST, 5, "set"], 5, "has 3 fields"),
        ([wire.REQUEST, 5, 6, []], 5, "operation must be str"),
        ([wire.REQUEST, 0, "set", []], 0, "must be positive"),
        ([wire.REQUEST, 5, "set", "args"], 5, "args must be list"),
        ([wire.HELLO, 3, None, None, {"k": 1}, None], 0, "map strings to strings"),
        ([wire.VALUE, 3, b"x", 1], 0, "retained must be bool"),
        ([wire.VALUE, 3, b"x", True, b""], 0, "has 2 fields"),
        ([wire.HELLO, 3, None, None], 0, "has 6 fields, got 3"),
        ([wire.HELLO, 3, None, None, {}, None, None, None], 0, "has 6 fields, got 7"),
        ([wire.HELLO, 3, None, None, {}, None, ["deltas"]], 0, "options must be a map"),
        ([wire.DELTA, 3], 0, "has 2 fields, got 1"),
        ([wire.DELTA, 3, "x"], 0, "delta must be bytes"),
        ([wire.HELLO, 3, None, None, {}, ["gw0-1"]], 0, "resume must be [session id, resume token]"),
        ([wire.HELLO, 3, None, None, {}, "gw0-1"], 0, "resume must be list"),
        ([wire.HELLO, "3", None, None, {}, None], 0, "version must be int"),
        ([wire.WELCOME, 3, "s", {}, 1024, "hub", 10, "t", 1, 0], 0, "resumed must be bool"),
        ([wire.WELCOME, 3, "s", {}, 1024, "hub", 10, "t", True, -1], 0, "refresh may not be negative"),
        ([wire.VALUE, 1, "text"], 0, "value must be bytes"),
    ],
)
def test_malformed_messages_keep_their_neighbours(item: object, cid: int, fragment: str) -> None:
    good = wire.Request(1, "fetch", [">a"])
    decoded = wire.decode(msgpack.packb([[wire.REQUEST, 1, "fetch", [">a"]], item], use_bin_type=True))
    assert decoded[0] == good
    bad = decoded[1]
    assert isinstance(bad, wire.Malformed)
    assert bad.cid == cid and fragment in bad.reason


def test_client_protocol_batches_and_splits_frames() -> None:
    client = wire.ClientProtocol()
    ids = [client.request("set", "a", b"x" * 100, False, None, False) for _ in range(10)]
    assert ids == list(range(1, 11))
    frames = client.data_to_send(max_size=400)
    assert len(frames) > 1 and all(len(f) <= 400 for f in frames)
    assert [m.cid for f in frames for m in wire.decode(f)] == ids  # type: ignore[union-attr]
    assert client.data_to_send() == []


def test_client_protocol_refuses_oversized_request() -> None:
    client = wire.ClientProtocol()
    with pytest.raises(ValueError, match="exceeds the frame limit"):
        client.request("set", "a", b"x" * 2000, False, None, False, max_size=1024)
    assert client.data_to_send() == []


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("a", b"\xf6", False, 99999999999999999999), "integer 99999999999999999999 is outside the 64-bit range"),
        (("a", b"\xf6", False, -(2**63) - 1), f"integer {-(2**63) - 1} is outside"),
        (([["set_password", "p", 2**64]],), "integer 18446744073709551616 is outside"),
        (("a", 10**5000), "integer of 16610 bits is outside"),  # too long to print
        (("a", object()), "not a wire value"),
        (("a", _nested(5000)), "nested too deeply"),
        (("\ud800",), "lone surrogate"),
    ],
)
def test_client_protocol_refuses_arguments_msgpack_cannot_carry(args: tuple[object, ...], fragment: str) -> None:
    client = wire.ClientProtocol()
    with pytest.raises(wire.UnencodableRequestError, match=fragment) as caught:
        client.request("append", *args)
    assert str(caught.value).startswith("append request cannot be encoded: ")
    assert client.data_to_send() == []
    assert client.request("append", "a", b"\xf6", False, 2**64 - 1) > 0  # the edges of the range still go
    assert client.request("append", "a", b"\xf6", False, -(2**63)) > 0


def test_a_hello_may_leave_out_resume() -> None:
    data = msgpack.packb([[wire.HELLO, wire.PROTOCOL_VERSION, "alice", "pw", {}]], use_bin_type=True)
    assert wire.decode(data) == [wire.Hello(wire.PROTOCOL_VERSION, "alice", "pw", {}, None)]


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ([wire.HELLO, 2, "alice", "pw", {}], wire.Hello(2, None, None, {})),  # a version 2 client's
        ([wire.HELLO, 99, "x"], wire.Hello(99, None, None, {})),
        ([wire.WELCOME, 2, "gw0-1", {}, 1024, "hub", 10], wire.Welcome(2, "", {}, 0, "")),  # a version 2 server's
    ],
)
def test_of_another_versions_handshake_only_the_version_is_read(item: list[object], expected: wire.Message) -> None:
    assert wire.decode(msgpack.packb([item], use_bin_type=True)) == [expected]


def test_client_rejects_other_protocol_version() -> None:
    client = wire.ClientProtocol()
    with pytest.raises(wire.ProtocolError, match="version 2, not 3"):
        client.receive(wire.frame([wire.encode(wire.Welcome(2, "s", {}, 1024, "hub", 1000))]))


def test_a_hello_asks_to_resume_and_discarding_keeps_the_correlation_ids_going() -> None:
    client = wire.ClientProtocol()
    hello = wire.decode(client.hello("p", "pw", {"K": "v"}, wire.Resume("gw0-7", "secret")))
    assert hello == [wire.Hello(wire.PROTOCOL_VERSION, "p", "pw", {"K": "v"}, wire.Resume("gw0-7", "secret"))]
    assert wire.decode(client.hello()) == [wire.Hello(wire.PROTOCOL_VERSION, None, None, {}, None)]
    assert [client.request("fetch", ">a") for _ in range(2)] == [1, 2]
    client.discard()  # their connection is gone: they never leave
    assert client.data_to_send() == []
    assert client.request("fetch", ">a") == 3


def test_a_notify_needs_a_string_kind() -> None:
    [bad] = wire.decode(msgpack.packb([[wire.NOTIFY, 5, {}]]))
    assert isinstance(bad, wire.Malformed) and "kind" in bad.reason


# -- nesting --------------------------------------------------------------------------


def _fetch_frame(nested: bytes) -> bytes:
    """A frame of one REQUEST 7 ``fetch`` whose second argument is ``nested`` (msgpack
    bytes: built by hand, since msgpack's packer refuses to nest deeper than 511)."""
    return b"\x91" + b"\x94\x02\x07\xa5fetch" + b"\x92\xa2>a" + nested


@given(st.integers(min_value=0, max_value=5000), st.sampled_from([b"\x91", b"\x81\xa1k"]))
def test_nesting_past_msgpacks_stack_is_a_protocol_error(depth: int, level: bytes) -> None:
    """msgpack's C unpacker raises a bare StackError past 1,024 levels; it becomes a
    ProtocolError that says so. Within them, a REQUEST's args may nest 32 levels."""
    frame = _fetch_frame(level * depth + b"\xc0")
    if depth + 3 > wire.MSGPACK_MAX_DEPTH:  # the frame, the message and the args are 3 levels
        with pytest.raises(wire.ProtocolError, match=f"deeper than {wire.MSGPACK_MAX_DEPTH} levels"):
            wire.decode(frame)
        return
    [message] = wire.decode(frame)
    if depth <= wire.MAX_ARGS_DEPTH:
        assert isinstance(message, wire.Request) and message.cid == 7
        return
    assert message == wire.Malformed(7, f"args nest arrays and maps deeper than {wire.MAX_ARGS_DEPTH} levels")


def test_stack_error_exactly_at_msgpacks_limit() -> None:
    wire.unpack_frame(b"\x91" * wire.MSGPACK_MAX_DEPTH + b"\xc0")
    with pytest.raises(wire.ProtocolError, match="frame nests arrays and maps deeper than 1024 levels"):
        wire.unpack_frame(b"\x91" * (wire.MSGPACK_MAX_DEPTH + 1) + b"\xc0")


ARG_VALUES = st.recursive(
    st.none() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=3) | st.binary(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@given(st.lists(ARG_VALUES, max_size=4), st.integers(min_value=0, max_value=60), st.booleans())
def test_request_args_may_nest_up_to_the_limit(args: list[object], extra: int, as_map: bool) -> None:
    """Args whose deepest array or map is ``extra`` levels further down than ``args``' own."""
    deep: object = args
    for _ in range(extra):
        deep = {"k": deep} if as_map else [deep]
    request = [deep] if extra else args
    [message] = wire.decode(msgpack.packb([[wire.REQUEST, 3, "op", request]], use_bin_type=True))
    if _depth(request) - 1 <= wire.MAX_ARGS_DEPTH:  # args itself is level 0
        assert message == wire.Request(3, "op", request)
    else:
        assert isinstance(message, wire.Malformed) and message.cid == 3
        assert f"deeper than {wire.MAX_ARGS_DEPTH} levels" in message.reason


def test_a_value_says_retained_only_when_it_is_not() -> None:
    assert msgpack.unpackb(wire.encode(wire.Value(3, b"x"))) == [wire.VALUE, 3, b"x"]
    assert msgpack.unpackb(wire.encode(wire.Value(3, b"x", False))) == [wire.VALUE, 3, b"x", False]
