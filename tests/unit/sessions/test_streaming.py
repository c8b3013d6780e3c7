"""Delta streaming's bookkeeping: what each connection is sent, and one diff shared by all."""

from __future__ import annotations

import json

from sessions.deliveries import CompressedUpdate, DeltaUpdate, SeriesUpdate, Subscribed, Unsubscribed, Update
from sessions.streaming import MIN_COMPRESSED, MIN_SIZE, DeltaCache, DeltaStream, accepts_deltas, compression_level
from topics.deltas import apply
from topics.timeseries import Event


def _doc(n: int) -> bytes:
    return json.dumps({f"field{i}": f"value {i} " * 4 + str(n if i == 7 else 0) for i in range(40)}).encode()


def _client(stream: DeltaStream, items: list[object], basis: dict[int, bytes]) -> list[bytes]:
    """What a client keeping bases as the protocol says would hand its subscribers."""
    values = []
    for item in stream.outgoing(items):
        if isinstance(item, Subscribed):
            if item.value is not None:
                basis[item.alias] = item.value
        elif isinstance(item, Update):
            basis[item.alias] = item.value
            values.append(item.value)
        elif isinstance(item, DeltaUpdate):
            basis[item.alias] = apply(item.delta, basis[item.alias])
            values.append(basis[item.alias])
    return values


def test_a_large_value_goes_as_a_delta_from_what_the_connection_was_sent() -> None:
    stream = DeltaStream(DeltaCache())
    first, second, third = _doc(1), _doc(2), _doc(3)
    basis: dict[int, bytes] = {}
    got = _client(stream, [Subscribed(1, "a", "JSON", [], first), Update(1, second)], basis)
    assert got == [second]
    out = stream.outgoing([Update(1, third)])
    assert isinstance(out[0], DeltaUpdate) and len(out[0].delta) < len(third) // 10
    assert apply(out[0].delta, second) == third
    assert stream.deltas == 2 and stream.saved > len(second)


def test_sessions_in_step_share_one_delta_object_and_one_diff() -> None:
    cache = DeltaCache()
    streams = [DeltaStream(cache) for _ in range(5)]
    first, second = _doc(1), _doc(2)
    subscribed, update = Subscribed(1, "a", "STRING", [], first), Update(1, second)
    outs = [s.outgoing([subscribed, update])[1] for s in streams]
    assert all(o is outs[0] for o in outs) and isinstance(outs[0], DeltaUpdate)
    assert cache.made == 1 and cache.deltas == 5


def test_a_connection_that_skipped_values_gets_a_delta_from_its_own_basis() -> None:
    cache = DeltaCache()
    ahead, behind = DeltaStream(cache), DeltaStream(cache)
    values = [_doc(n) for n in range(4)]
    subscribed = Subscribed(1, "a", "BINARY", [], values[0])
    basis_ahead: dict[int, bytes] = {}
    basis_behind: dict[int, bytes] = {}
    assert _client(ahead, [subscribed, *(Update(1, v) for v in values[1:])], basis_ahead) == values[1:]
    assert _client(behind, [subscribed, Update(1, values[3])], basis_behind) == [values[3]]  # conflated
    assert basis_ahead == basis_behind == {1: values[3]}


def test_what_goes_whole() -> None:
    stream = DeltaStream(DeltaCache())
    big, big2 = _doc(1), _doc(2)
    small = b"x" * (MIN_SIZE - 1)
    items = [
        Subscribed(1, "none", "JSON", [], None), Update(1, big),  # no basis yet
        Subscribed(2, "int", "INT64", [], big), Update(2, big2),  # a type without deltas
        Subscribed(3, "only", "JSON", [["PUBLISH_VALUES_ONLY", "true"]], big), Update(3, big2),
        Subscribed(4, "small", "STRING", [], small), Update(4, small[:-1] + b"y"),
        Subscribed(5, "transient", "JSON", [], big), Update(5, big2, retained=False),
        Subscribed(6, "series", "TIME_SERIES", [], None), SeriesUpdate(6, Event(1, 2, "a", big)),
    ]
    out = stream.outgoing(items)
    assert not any(isinstance(item, DeltaUpdate) for item in out)
    assert out == items
    # the value not retained is the basis afterwards, on both sides
    later = stream.outgoing([Update(5, big)])[0]
    assert isinstance(later, DeltaUpdate) and apply(later.delta, big2) == big


def test_unsubscribed_forgets_the_basis_and_a_new_subscription_sets_it_again() -> None:
    stream = DeltaStream(DeltaCache())
    a, b, c = _doc(1), _doc(2), _doc(3)
    stream.outgoing([Subscribed(1, "a", "JSON", [], a), Unsubscribed(1, "REMOVED")])
    assert stream.outgoing([Update(1, b)]) == [Update(1, b)]  # no longer eligible
    out = stream.outgoing([Subscribed(1, "a", "JSON", [], b), Update(1, c)])
    assert isinstance(out[1], DeltaUpdate) and apply(out[1].delta, b) == c


def test_a_delta_no_smaller_than_the_value_is_not_sent() -> None:
    stream = DeltaStream(DeltaCache())
    a = bytes(range(256)) * 2
    b = bytes(reversed(a))
    out = stream.outgoing([Subscribed(1, "a", "BINARY", [], a), Update(1, b)])
    assert out[1] == Update(1, b) and stream.deltas == 0


def test_accepts_deltas_reads_the_type_and_the_property() -> None:
    assert accepts_deltas(Subscribed(1, "a", "JSON", [["PUBLISH_VALUES_ONLY", "false"]], None))
    assert not accepts_deltas(Subscribed(1, "a", "JSON", [["PUBLISH_VALUES_ONLY", "TRUE"]], None))
    assert not accepts_deltas(Subscribed(1, "a", "DOUBLE", [], None))


def test_a_large_value_that_goes_whole_is_deflated_once_for_every_session() -> None:
    import zlib

    cache = DeltaCache()
    compressing = [DeltaStream(cache, deltas=False, compression=True) for _ in range(3)]
    plain = DeltaStream(cache, deltas=False, compression=False)
    big = _doc(1)
    items = [Subscribed(1, "a", "JSON", [], None), Update(1, big)]
    outs = [s.outgoing(items)[1] for s in compressing]
    assert all(o is outs[0] for o in outs) and isinstance(outs[0], CompressedUpdate)
    assert zlib.decompress(outs[0].data) == big and len(outs[0].data) < len(big) // 3
    assert cache.compressed == 3 and compressing[0].saved == len(big) - len(outs[0].data)
    assert plain.outgoing(items)[1] == Update(1, big)


def test_what_is_not_compressed() -> None:
    stream = DeltaStream(DeltaCache(), deltas=True, compression=True)
    big, big2 = _doc(1), _doc(2)
    items = [
        Subscribed(1, "off", "JSON", [["COMPRESSION", "off"]], None), Update(1, big),
        Subscribed(2, "int", "INT64", [], None), Update(2, big),
        Subscribed(3, "small", "STRING", [], None), Update(3, b"x" * (MIN_COMPRESSED - 1)),
        Subscribed(4, "transient", "BINARY", [], None), Update(4, big, retained=False),
    ]
    assert stream.outgoing(items) == items
    # a value that can go as a delta goes as one; the first value of a topic, deflated
    out = stream.outgoing([Subscribed(5, "both", "JSON", [["COMPRESSION", "high"]], None), Update(5, big),
                           Update(5, big2)])
    assert isinstance(out[1], CompressedUpdate) and isinstance(out[2], DeltaUpdate)
    assert apply(out[2].delta, big) == big2


def test_compression_levels_follow_the_property() -> None:
    levels = {value: compression_level(Subscribed(1, "a", "JSON", [["COMPRESSION", value]], None))
              for value in ("off", "false", "low", "medium", "true", "high")}
    assert levels == {"off": 0, "false": 0, "low": 1, "medium": 6, "true": 6, "high": 9}
    assert compression_level(Subscribed(1, "a", "BINARY", [], None)) == 1  # the reference system's default
    assert compression_level(Subscribed(1, "a", "DOUBLE", [["COMPRESSION", "high"]], None)) == 0
