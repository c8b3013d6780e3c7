"""Throttle: sliding-window rate limiting with per-key conflation (views/throttle.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from views.throttle import Throttle

SECOND = 1_000
HOUR = 3_600 * SECOND


# -- specification examples-----------------------------------------------------------------


def test_two_updates_every_five_seconds() -> None:
    throttle: Throttle[str, int] = Throttle(2, 5 * SECOND)
    assert throttle.offer("a/b", 1, 0) is True
    assert throttle.offer("a/b", 2, 100) is True
    assert throttle.offer("a/b", 3, 200) is False
    assert throttle.offer("a/b", 4, 300) is False  # replaces 3
    assert len(throttle) == 1
    assert throttle.next_due() == 5 * SECOND  # the publication at 0 leaves the window
    assert throttle.due(5 * SECOND - 1) == []
    assert throttle.due(5 * SECOND) == [("a/b", 4)]
    assert len(throttle) == 0 and throttle.next_due() is None
    # Window (50, 5050] holds the publications at 100 and 5000.
    assert throttle.offer("a/b", 5, 5_050) is False
    assert throttle.next_due() == 5_100
    assert throttle.due(5_100) == [("a/b", 5)]


def test_one_update_every_hour() -> None:
    throttle: Throttle[str, str] = Throttle(1, HOUR)
    assert throttle.offer("k", "first", 0) is True
    assert throttle.offer("k", "second", 1_000) is False
    assert throttle.offer("k", "third", 2_000) is False
    assert throttle.next_due() == HOUR
    assert throttle.due(HOUR - 1) == []
    assert throttle.due(HOUR) == [("k", "third")]
    assert throttle.offer("k", "fourth", HOUR + 1) is False
    assert throttle.next_due() == 2 * HOUR
    assert throttle.due(3 * HOUR) == [("k", "fourth")]


def test_hourly_updates_pass_straight_through() -> None:
    throttle: Throttle[str, int] = Throttle(1, HOUR)
    for i in range(5):
        assert throttle.offer("k", i, i * HOUR) is True
    assert len(throttle) == 0 and throttle.next_due() is None


def test_updates_slower_than_the_rate_pass_through() -> None:
    throttle: Throttle[str, int] = Throttle(2, SECOND)
    for i in range(50):  # exactly 2 per second, at 0, 500, 1000, ...
        assert throttle.offer("k", i, i * 500) is True
        assert throttle.due(i * 500) == []
    assert len(throttle) == 0 and throttle.next_due() is None


def test_a_burst_publishes_n_then_holds_the_last() -> None:
    throttle: Throttle[str, int] = Throttle(3, SECOND)
    results = [throttle.offer("k", i, i) for i in range(10)]
    assert results == [True] * 3 + [False] * 7
    assert len(throttle) == 1
    assert throttle.next_due() == SECOND  # when the publication at 0 leaves the window
    assert throttle.due(SECOND - 1) == []
    assert throttle.due(SECOND) == [("k", 9)]
    assert throttle.due(SECOND) == []  # released exactly once
    # Window (1, 1001] holds the publications at 2 and 1000: one more fits, and
    # at 1002 the publication at 2 has left the window too.
    assert throttle.offer("k", 10, SECOND + 1) is True
    assert throttle.offer("k", 11, SECOND + 2) is True
    assert throttle.offer("k", 12, SECOND + 3) is False
    assert throttle.due(10 * SECOND) == [("k", 12)]
    assert throttle.due(20 * SECOND) == []


def test_keys_are_throttled_independently() -> None:
    throttle: Throttle[str, int] = Throttle(1, 100)
    assert throttle.offer("a", 1, 0) is True
    assert throttle.offer("b", 1, 0) is True
    assert throttle.offer("a", 2, 10) is False
    assert throttle.offer("c", 1, 10) is True
    assert len(throttle) == 1


def test_due_returns_keys_in_the_order_they_were_first_held() -> None:
    throttle: Throttle[str, int] = Throttle(1, 100)
    assert throttle.offer("a", 1, 0) is True
    assert throttle.offer("b", 1, 50) is True
    assert throttle.offer("b", 2, 60) is False  # held first, due at 150
    assert throttle.offer("a", 2, 70) is False  # held second, due at 100
    assert throttle.offer("b", 3, 80) is False  # replacing keeps b's place
    assert throttle.next_due() == 100
    assert throttle.due(200) == [("b", 3), ("a", 2)]


def test_a_key_with_a_held_value_holds_every_update_until_due() -> None:
    """Even when the window would allow it, a newer update must not overtake the held one."""
    throttle: Throttle[str, int] = Throttle(1, 100)
    assert throttle.offer("k", 1, 0) is True
    assert throttle.offer("k", 2, 10) is False
    assert throttle.offer("k", 3, 500) is False  # due() was not called in time
    assert throttle.due(500) == [("k", 3)]


def test_forget_discards_the_held_value_and_the_window() -> None:
    throttle: Throttle[str, int] = Throttle(1, SECOND)
    assert throttle.offer("a", 1, 0) is True
    assert throttle.offer("a", 2, 1) is False
    assert throttle.offer("b", 1, 2) is True
    assert throttle.offer("b", 2, 3) is False
    throttle.forget("a")
    throttle.forget("missing")
    assert len(throttle) == 1
    assert throttle.next_due() == SECOND + 2
    assert throttle.due(10 * SECOND) == [("b", 2)]
    throttle.forget("b")
    assert len(throttle) == 0 and throttle.next_due() is None
    assert throttle.offer("b", 3, 10 * SECOND) is True  # a fresh window


def test_forgetting_many_held_keys_keeps_next_due_right() -> None:
    throttle: Throttle[int, int] = Throttle(1, 1_000)
    for key in range(200):
        assert throttle.offer(key, 0, key) is True
        assert throttle.offer(key, 1, key) is False
    for key in range(199):
        throttle.forget(key)
    assert len(throttle) == 1
    assert throttle.next_due() == 199 + 1_000
    assert throttle.due(5_000) == [(199, 1)]
    assert throttle.next_due() is None


def test_idle_keys_are_dropped() -> None:
    throttle: Throttle[int, int] = Throttle(2, 100)
    for key in range(1_000):
        throttle.offer(key, 0, key // 10)
    assert throttle.tracked_keys() == 1_000
    throttle.offer(5_000, 0, 150)  # windows of keys last published at <= 50 are empty
    assert throttle.tracked_keys() == 1_000 - 510 + 1
    assert throttle.due(1_000) == []
    assert throttle.tracked_keys() == 0


def test_a_held_key_is_kept_until_released() -> None:
    throttle: Throttle[str, int] = Throttle(1, 100)
    throttle.offer("k", 1, 0)
    throttle.offer("k", 2, 1)
    throttle.offer("other", 1, 500)  # sweeps, but must not drop the held value
    assert len(throttle) == 1
    assert throttle.due(500) == [("k", 2)]
    assert throttle.due(1_000) == [] and throttle.tracked_keys() == 0


def test_time_going_backwards_counts_as_the_latest_time() -> None:
    throttle: Throttle[str, int] = Throttle(1, 100)
    assert throttle.offer("a", 1, 1_000) is True
    assert throttle.offer("b", 1, 0) is True  # counted as a publication at 1000, not at 0
    assert throttle.offer("b", 2, 1_050) is False
    assert throttle.offer("a", 2, 0) is False  # treated as 1000, not as an empty window
    assert throttle.due(50) == []
    assert throttle.due(1_100) == [("b", 2), ("a", 2)]


@pytest.mark.parametrize(("updates", "period"), [(0, 1), (1, 0), (-1, 10), (2, -5), (True, 10)])
def test_invalid_parameters(updates: int, period: int) -> None:
    with pytest.raises(ValueError):
        Throttle(updates, period)


def test_parameters_are_exposed() -> None:
    throttle: Throttle[str, int] = Throttle(3, 250)
    assert (throttle.updates, throttle.period_ms) == (3, 250)


# -- property test against a brute-force model ---------------------------------------


@dataclass
class Model:
    """Keeps every publication time; recomputes windows from scratch."""

    updates: int
    period: int
    publications: dict[int, list[int]] = field(default_factory=dict)
    held: dict[int, tuple[int, int]] = field(default_factory=dict)  # key -> (held order, value)
    order: int = 0

    def allowed(self, key: int, now: int) -> bool:
        times = self.publications.get(key, [])
        return sum(1 for t in times if now - self.period < t <= now) < self.updates

    def offer(self, key: int, value: int, now: int) -> bool:
        if key in self.held:
            self.held[key] = (self.held[key][0], value)
            return False
        if self.allowed(key, now):
            self.publications.setdefault(key, []).append(now)
            return True
        self.order += 1
        self.held[key] = (self.order, value)
        return False

    def due(self, now: int) -> list[tuple[int, int]]:
        out = []
        for key, (_, value) in sorted(self.held.items(), key=lambda item: item[1][0]):
            if self.allowed(key, now):
                self.publications[key].append(now)
                del self.held[key]
                out.append((key, value))
        return out

    def next_due(self) -> int | None:
        times = [self.publications[key][-self.updates] + self.period for key in self.held]
        return min(times, default=None)

    def forget(self, key: int) -> None:
        self.publications.pop(key, None)
        self.held.pop(key, None)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("offer"), st.integers(0, 3), st.integers(0, 12)),
        st.tuples(st.just("due"), st.just(0), st.integers(0, 25)),
        st.tuples(st.just("forget"), st.integers(0, 3), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(updates=st.integers(1, 3), period=st.integers(1, 20), ops=operations)
def test_matches_the_brute_force_model(updates: int, period: int, ops: list[tuple[str, int, int]]) -> None:
    throttle: Throttle[int, int] = Throttle(updates, period)
    model = Model(updates, period)
    now = 0
    value = 0
    epoch: dict[int, int] = {}  # bumped by forget: windows restart
    published_at: dict[tuple[int, int], list[int]] = {}
    published: set[int] = set()
    last_offered: dict[int, int] = {}

    def record(key: int, v: int, at: int) -> None:
        assert v not in published, f"value {v} published twice"
        published.add(v)
        published_at.setdefault((key, epoch.get(key, 0)), []).append(at)

    for op, key, dt in ops:
        now += dt
        if op == "offer":
            value += 1
            last_offered[key] = value
            result = throttle.offer(key, value, now)
            assert result == model.offer(key, value, now)
            if result:
                record(key, value, now)
        elif op == "due":
            released = throttle.due(now)
            assert released == model.due(now)
            for key_, v in released:
                record(key_, v, now)
        else:
            throttle.forget(key)
            model.forget(key)
            epoch[key] = epoch.get(key, 0) + 1
            last_offered.pop(key, None)
        assert len(throttle) == len(model.held)
        assert throttle.next_due() == model.next_due()
        next_due = throttle.next_due()
        if next_due is not None:
            assert next_due > now or op != "due"  # due() left nothing overdue behind

    # Every held value is eventually released, and it is the newest one offered.
    now += period
    released = throttle.due(now)
    assert released == model.due(now)
    for key_, v in released:
        record(key_, v, now)
    assert len(throttle) == 0 and throttle.next_due() is None
    for key, v in last_offered.items():
        assert v in published, f"newest value {v} of key {key} never published"

    # Never more than N publications of a key in any window of length P.
    for times in published_at.values():
        assert times == sorted(times)
        for i, t in enumerate(times):
            assert sum(1 for u in times[i:] if u < t + period) <= updates

    # Memory: once every window is empty, no key state remains.
    now += period
    assert throttle.due(now) == []
    assert throttle.tracked_keys() == 0
