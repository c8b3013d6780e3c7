"""topics/deltas.py: a delta applied to its source gives its target, is small when little changed,
and one that does not fit its source is detected."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topics.deltas import BLOCK, DeltaError, apply, diff

small = st.binary(max_size=300)


@given(small, small)
def test_a_delta_applied_to_its_source_gives_its_target(a: bytes, b: bytes) -> None:
    assert apply(diff(a, b), a) == b


@given(st.binary(min_size=1, max_size=2000), st.data())
def test_edits_of_a_value_round_trip(a: bytes, data: st.DataObject) -> None:
    b = bytearray(a)
    for _ in range(data.draw(st.integers(0, 5))):
        at = data.draw(st.integers(0, len(b)))
        cut = data.draw(st.integers(0, 40))
        b[at:at + cut] = data.draw(st.binary(max_size=40))
    assert apply(diff(a, bytes(b)), a) == bytes(b)


def test_one_field_of_a_2_kb_json_document_costs_a_few_bytes() -> None:
    rnd = random.Random(5)
    doc = {f"field{i}": {"value": rnd.random(), "name": f"sensor-{i}", "ok": True} for i in range(30)}
    before = json.dumps(doc).encode()
    doc["field17"]["value"] = 0.25
    after = json.dumps(doc).encode()
    assert len(after) > 2000
    delta = diff(before, after)
    assert apply(delta, before) == after
    assert len(delta) < 0.05 * len(after), len(delta)


def test_moved_blocks_are_copied_not_sent() -> None:
    rnd = random.Random(7)
    blocks = [bytes(rnd.randrange(256) for _ in range(BLOCK * 4)) for _ in range(8)]
    before = b"".join(blocks)
    after = b"".join(reversed(blocks))
    delta = diff(before, after)
    assert apply(delta, before) == after
    assert len(delta) < len(after) // 4


def test_a_delta_for_another_source_or_corrupted_is_detected() -> None:
    before, after = b'{"a": 1, "b": "' + b"x" * 200 + b'"}', b'{"a": 2, "b": "' + b"x" * 200 + b'"}'
    delta = diff(before, after)
    with pytest.raises(DeltaError, match="checksum"):
        apply(delta, before.replace(b"x", b"y", 1))  # same length, other bytes
    with pytest.raises(DeltaError, match=f"source of {len(before)} bytes, not 5"):
        apply(delta, b"short")
    for cut in range(len(delta)):  # every truncation is refused, none crashes
        with pytest.raises(DeltaError):
            apply(delta[:cut], before)
    flipped = bytearray(delta)
    flipped[0] = 9
    with pytest.raises(DeltaError, match="version 9"):
        apply(bytes(flipped), before)


@given(small, small, st.binary(min_size=1, max_size=20), st.integers(0, 400))
def test_random_damage_never_gives_a_wrong_value_silently(a: bytes, b: bytes, junk: bytes, at: int) -> None:
    delta = bytearray(diff(a, b))
    at %= len(delta)
    delta[at:at + len(junk)] = junk
    try:
        result = apply(bytes(delta), a)
    except DeltaError:
        return
    assert result == b  # the damage left it meaning the same (a rewritten byte equal to the old)
