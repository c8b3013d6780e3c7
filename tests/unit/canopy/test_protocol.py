from __future__ import annotations

import msgpack
import pytest

from canopy import protocol as wire

MESSAGES: list[wire.Message] = [
    wire.Hello(1, "alice", "secret", {"TIER": "1"}),
    wire.Hello(1, None, None, {}),
    wire.Welcome(1, "gw0-1", {"$SessionId": "gw0-1"}, 1024, "hub"),
    wire.Request(7, "set", ["a", b"\xa1", False, None, True]),
    wire.Response(7, None),
    wire.Response(8, [["a", "STRING", None, b"x"]]),
    wire.Error(9, "INVALID_PATH", "bad"),
    wire.Subscribed(3, "a/b", "JSON", [["CONFLATION", "off"]], b"\xa0"),
    wire.Subscribed(4, "a/c", "STRING", [], None),
    wire.Value(3, b"\x01"),
    wire.Unsubscribed(3, "REMOVED"),
    wire.Close("QUEUE_LIMIT", "too slow"),
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
        ([wire.HELLO, 1, None, None, {"k": 1}], 0, "map strings to strings"),
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


def test_client_rejects_other_protocol_version() -> None:
    client = wire.ClientProtocol()
    with pytest.raises(wire.ProtocolError, match="version 2"):
        client.receive(wire.frame([wire.encode(wire.Welcome(2, "s", {}, 1024, "hub"))]))
