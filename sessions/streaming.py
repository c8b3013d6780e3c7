"""Delta streaming: a session's new values sent as differences from the values it has (pure).

A client that says it understands deltas (the HELLO's ``deltas`` option) is sent, for a STRING,
JSON or BINARY topic, the binary difference (:mod:`topics.deltas`) between the value it was last
sent for the topic — its *basis* — and the new value, whenever that difference is the smaller;
the client applies it to its basis and hands its subscribers the whole value, as ever. This is
the reference system's default; a topic with PUBLISH_VALUES_ONLY ``true`` is always sent whole.

Two objects share the work, so that one diff serves every session:

* :class:`DeltaCache`, one per gateway: the delta last made for each topic alias, from which
  basis object to which value object. Sessions in step (the common case: they were sent the
  same shared value objects) find the delta made for the first of them and get the same
  delivery object, so the gateway's frames are shared too.
* :class:`DeltaStream`, one per connection that accepts deltas: the basis of every topic the
  connection was sent, kept exactly as the client keeps it. It is advanced as deliveries are
  *written* (not queued), so conflation and dropped values never put the two sides out of step:
  SUBSCRIBED sets a basis, every VALUE or DELTA replaces it, UNSUBSCRIBED forgets it.

What is sent whole: the first value after a SUBSCRIBED without one, a value shorter than
:data:`MIN_SIZE` (a delta's header alone is up to ~20 bytes), a value not retained (it is still
the basis afterwards, on both sides), and any value whose delta is not smaller than it.
"""

from __future__ import annotations

from collections.abc import Iterable

from sessions.deliveries import DeltaUpdate, Subscribed, Unsubscribed, Update
from topics.deltas import diff
from topics.properties import PUBLISH_VALUES_ONLY

__all__ = ["DELTA_TYPES", "MIN_SIZE", "DeltaCache", "DeltaStream", "accepts_deltas"]

#: the topic types whose values may travel as deltas
DELTA_TYPES = frozenset({"STRING", "JSON", "BINARY"})
#: values shorter than this go whole without trying a delta
MIN_SIZE = 64
#: the cache forgets everything when it holds this many topics (each entry holds two values)
MAX_CACHED = 65_536


def accepts_deltas(subscribed: Subscribed) -> bool:
    """Whether a topic's values may be sent as deltas: its type, and PUBLISH_VALUES_ONLY not true."""
    if subscribed.type not in DELTA_TYPES:
        return False
    for name, value in subscribed.properties:
        if name == PUBLISH_VALUES_ONLY:
            return value.lower() != "true"
    return True


class DeltaCache:
    """The delta last made per topic alias, shared by a gateway's delta streams."""

    __slots__ = ("_last", "made", "saved", "deltas")

    def __init__(self) -> None:
        self._last: dict[int, tuple[bytes, bytes, DeltaUpdate | Update]] = {}
        #: diffs computed (the rest were found here); of every stream sharing the cache: the
        #: bytes of values not sent thanks to deltas, and the deltas sent
        self.made = self.saved = self.deltas = 0

    def encode(self, basis: bytes, update: Update) -> DeltaUpdate | Update:
        """``update`` as a delta from ``basis`` if that is smaller, else ``update`` itself."""
        alias, value = update.alias, update.value
        cached = self._last.get(alias)
        if cached is not None and cached[0] is basis and cached[1] is value:
            return cached[2]
        delta = diff(basis, value)
        self.made += 1
        out: DeltaUpdate | Update = DeltaUpdate(alias, delta, len(value)) if len(delta) < len(value) else update
        if len(self._last) >= MAX_CACHED and alias not in self._last:
            self._last.clear()
        self._last[alias] = (basis, value, out)  # holding both keeps their identities unique
        return out

    def forget(self, alias: int) -> None:
        self._last.pop(alias, None)


class DeltaStream:
    """One connection's bases: what it was last sent of each topic that may take deltas."""

    __slots__ = ("_cache", "_basis", "_eligible", "saved", "deltas")

    def __init__(self, cache: DeltaCache) -> None:
        self._cache = cache
        self._basis: dict[int, bytes] = {}
        self._eligible: set[int] = set()
        #: bytes of values not sent thanks to deltas, and how many deltas were sent
        self.saved = 0
        self.deltas = 0

    def outgoing(self, items: Iterable[object]) -> list[object]:
        """The deliveries as they are to be written, in order: some updates replaced by
        deltas. Call it with everything written to the connection, in the order written."""
        out: list[object] = []
        append = out.append
        basis, eligible, cache = self._basis, self._eligible, self._cache
        for item in items:
            kind = type(item)
            if kind is Update:
                alias = item.alias  # type: ignore[attr-defined]
                if alias in eligible:
                    value = item.value  # type: ignore[attr-defined]
                    previous = basis.get(alias)
                    basis[alias] = value
                    if previous is not None and item.retained and len(value) >= MIN_SIZE:  # type: ignore[attr-defined]
                        sent = cache.encode(previous, item)  # type: ignore[arg-type]
                        if sent is not item:
                            saved = len(value) - len(sent.delta)  # type: ignore[union-attr]
                            self.saved += saved
                            self.deltas += 1
                            cache.saved += saved
                            cache.deltas += 1
                            item = sent
            elif kind is Subscribed:
                alias = item.alias  # type: ignore[attr-defined]
                if accepts_deltas(item):  # type: ignore[arg-type]
                    eligible.add(alias)
                    if item.value is None:  # type: ignore[attr-defined]
                        basis.pop(alias, None)
                    else:
                        basis[alias] = item.value  # type: ignore[attr-defined]
                else:
                    eligible.discard(alias)
                    basis.pop(alias, None)
            elif kind is Unsubscribed:
                alias = item.alias  # type: ignore[attr-defined]
                eligible.discard(alias)
                basis.pop(alias, None)
            append(item)
        return out
