"""Topic-scoped conflation for the ``throttle to N updates every P`` clause (pure).

A :class:`Throttle` decides, per reference topic key, whether an update may be
published now or must be held back. It never reads a clock: every call is
given the current time as integer milliseconds.

Rate rule (sliding window): a key may publish at ``now`` if fewer than ``N``
of its publications happened in ``(now - P, now]``.

* An update that satisfies the rule is published at once (:meth:`Throttle.offer`
  returns ``True``) and counted.
* An update that would exceed the rate is *held*; only the newest held value
  per key is kept (conflation). While a key has a held value every further
  update for it is held too, replacing the older held value, so updates of one
  key are never published out of order.
* A held value is released exactly once, by :meth:`Throttle.due`, as soon as
  the rule allows it; the release counts as a publication at that time.

Memory is bounded: per key at most ``N`` publication timestamps and one held
value are kept, and the state of a key whose window is empty and which holds
nothing is dropped (lazily, by :meth:`Throttle.offer` and :meth:`Throttle.due`).

Time is expected to be non-decreasing across calls. A time earlier than one
already seen is treated as that latest time (a clock step back never lets a
key publish more than the rate allows).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

__all__ = ["Throttle"]


@dataclass(slots=True)
class _KeyState(Generic[V]):
    """The state of one key.

    ``times`` holds the key's most recent publication times (oldest first, at
    most ``N``). ``held_seq`` is ``None`` when nothing is held; otherwise it is
    the sequence number given when the key was first held (it stays the same
    when a newer value replaces the held one) and ``held`` is the held value.
    """

    times: deque[int]
    held: V | None = None
    held_seq: int | None = None


class Throttle(Generic[K, V]):
    """At most ``updates`` publications per key in any window of ``period_ms``.

    Not thread-safe; it is meant to be owned by one topic view.
    """

    __slots__ = ("_updates", "_period", "_keys", "_heap", "_stale", "_seq", "_now", "_held_count")

    def __init__(self, updates: int, period_ms: int) -> None:
        """Create a throttle allowing ``updates`` publications per ``period_ms``.

        Raises :class:`ValueError` unless both are integers greater than zero.
        """
        for name, number in (("updates", updates), ("period_ms", period_ms)):
            if isinstance(number, bool) or not isinstance(number, int) or number <= 0:
                raise ValueError(f"{name} must be an integer greater than zero, not {number!r}")
        self._updates = updates
        self._period = period_ms
        # Keys in order of their latest publication (oldest first): the front
        # of the dict is where idle keys are swept from.
        self._keys: dict[K, _KeyState[V]] = {}
        # (due time, held seq, key) per held key; entries whose key was
        # forgotten are stale and skipped lazily.
        self._heap: list[tuple[int, int, K]] = []
        self._stale = 0
        self._seq = 0
        self._now: int | None = None
        self._held_count = 0

    @property
    def updates(self) -> int:
        """The number of publications allowed per period."""
        return self._updates

    @property
    def period_ms(self) -> int:
        """The length of the sliding window in milliseconds."""
        return self._period

    def offer(self, key: K, value: V, now_ms: int) -> bool:
        """Offer an update of ``key`` at ``now_ms``.

        Returns ``True`` if the update may be published now; the publication
        is counted. Returns ``False`` if it is held instead: either the key
        already published ``N`` times in ``(now - P, now]``, or the key already
        has a held value (which this value replaces; the key keeps its place
        in the release order of :meth:`due`).
        """
        now = self._clock(now_ms)
        self._sweep(now)
        state = self._keys.get(key)
        if state is None:
            state = _KeyState(deque(maxlen=self._updates))
            self._keys[key] = state
        elif state.held_seq is not None:
            state.held = value
            return False
        else:
            self._expire(state, now)
        if len(state.times) < self._updates:
            self._publish(key, state, now)
            return True
        self._seq += 1
        state.held = value
        state.held_seq = self._seq
        self._held_count += 1
        heapq.heappush(self._heap, (state.times[0] + self._period, self._seq, key))
        return False

    def due(self, now_ms: int) -> list[tuple[K, V]]:
        """Release the held values that may be published at ``now_ms``.

        Each returned ``(key, value)`` is counted as a publication at
        ``now_ms`` and is never returned again. The result is ordered by the
        time each key was first held (earliest first).
        """
        now = self._clock(now_ms)
        released: list[tuple[int, K, V]] = []
        not_yet: list[tuple[int, int, K]] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, seq, key = heapq.heappop(heap)
            state = self._keys.get(key)
            if state is None or state.held_seq != seq:
                self._stale -= 1
                continue
            self._expire(state, now)
            if len(state.times) >= self._updates:  # pragma: no cover - cannot happen
                # The window of a held key does not change, so its due time is exact.
                not_yet.append((state.times[0] + self._period, seq, key))
                continue
            value = cast(V, state.held)
            state.held = None
            state.held_seq = None
            self._held_count -= 1
            self._publish(key, state, now)
            released.append((seq, key, value))
        for entry in not_yet:  # pragma: no cover - cannot happen
            heapq.heappush(heap, entry)
        self._sweep(now)
        released.sort(key=lambda item: item[0])
        return [(key, value) for _, key, value in released]

    def next_due(self) -> int | None:
        """The earliest time (ms) at which :meth:`due` would return something.

        ``None`` if nothing is held. The time may be in the past (a release is
        overdue because :meth:`due` was not called in time). Amortised O(log n).
        """
        heap = self._heap
        while heap:
            _, seq, key = heap[0]
            state = self._keys.get(key)
            if state is not None and state.held_seq == seq:
                return heap[0][0]
            heapq.heappop(heap)
            self._stale -= 1
        return None

    def forget(self, key: K) -> None:
        """Drop all state of ``key``; a held value is discarded, not released.

        A later update of the key starts from an empty window. Forgetting an
        unknown key does nothing.
        """
        state = self._keys.pop(key, None)
        if state is None or state.held_seq is None:
            return
        self._held_count -= 1
        self._stale += 1
        if self._stale > 64 and self._stale * 2 > len(self._heap):
            self._compact()

    def __len__(self) -> int:
        """The number of keys with a held value."""
        return self._held_count

    def tracked_keys(self) -> int:
        """The number of keys with any state (a publication window or a held value)."""
        return len(self._keys)

    # -- internals -----------------------------------------------------------------

    def _clock(self, now_ms: int) -> int:
        if self._now is None or now_ms > self._now:
            self._now = now_ms
        return self._now

    def _expire(self, state: _KeyState[V], now: int) -> None:
        """Drop the publication times of ``state`` outside ``(now - P, now]``."""
        times = state.times
        horizon = now - self._period
        while times and times[0] <= horizon:
            times.popleft()

    def _publish(self, key: K, state: _KeyState[V], now: int) -> None:
        state.times.append(now)
        # Move the key to the back: the dict stays ordered by latest publication.
        del self._keys[key]
        self._keys[key] = state

    def _sweep(self, now: int) -> None:
        """Drop idle keys (empty window, nothing held) from the front of the dict.

        Keys are ordered by their latest publication, so the sweep stops at the
        first key whose window is not yet empty. It also stops at a key with a
        held value: idle keys can only sit behind a held key when that key's
        release is overdue, and :meth:`due` releases it and moves it to the back.
        """
        keys = self._keys
        horizon = now - self._period
        while keys:
            key = next(iter(keys))
            state = keys[key]
            if state.held_seq is not None or (state.times and state.times[-1] > horizon):
                return
            del keys[key]

    def _compact(self) -> None:
        """Rebuild the heap without the entries of forgotten keys."""
        live: list[tuple[int, int, K]] = []
        for entry in self._heap:
            state = self._keys.get(entry[2])
            if state is not None and state.held_seq == entry[1]:
                live.append(entry)
        heapq.heapify(live)
        self._heap = live
        self._stale = 0
