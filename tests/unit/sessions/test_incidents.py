"""Rate-limited log lines per source of rejected input."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sessions.incidents import IncidentLog


def test_one_line_per_interval_and_the_next_says_how_many_were_held_back() -> None:
    log = IncidentLog(interval=10.0)
    assert log.record("s1", 0.0) == ""
    assert log.record("s1", 1.0) is None
    assert log.record("s1", 9.9) is None
    assert log.record("s2", 5.0) == ""  # each key has its own allowance
    assert log.record("s1", 10.0) == " (2 more like it not logged)"
    assert log.suppressed == 2


def test_keys_are_bounded_and_forgotten() -> None:
    log = IncidentLog(interval=10.0, max_keys=3)
    for i in range(100):
        log.record(f"k{i}", 0.0)
    assert len(log) == 3
    log.forget("k99")
    assert len(log) == 2


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 1000)), max_size=200))
def test_lines_per_key_never_exceed_one_per_interval(events: list[tuple[str, float]]) -> None:
    log = IncidentLog(interval=10.0)
    written: dict[str, list[float]] = {}
    for key, now in sorted(events, key=lambda e: e[1]):
        if log.record(key, now) is not None:
            written.setdefault(key, []).append(now)
    for times in written.values():
        assert all(b - a >= 10.0 for a, b in zip(times, times[1:]))
