"""Delta streaming and per-message compression: a session's new values sent as differences from
the values it has, or deflated (pure).

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

**Compression.** A client whose HELLO says ``compression`` is sent a value that still goes whole,
is retained and is at least :data:`MIN_COMPRESSED` bytes, of a topic whose COMPRESSION is not
``off`` (the reference system's default is ``low``; DOUBLE, INT64 and TIME_SERIES topics are
never compressed), deflated with zlib at the topic's level (:data:`LEVELS`), when that is smaller.
The gateway's cache deflates each value object once for every session. Deltas, being small, are
not compressed. A compressed value is the basis for the next delta like any value.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from sessions.deliveries import CompressedUpdate, DeltaUpdate, Subscribed, Unsubscribed, Update
from topics.deltas import diff
from topics.properties import COMPRESSION, PUBLISH_VALUES_ONLY

__all__ = [
    "DELTA_TYPES", "LEVELS", "MIN_COMPRESSED", "MIN_SIZE", "DeltaCache", "DeltaStream", "accepts_deltas",
    "compression_level",
]

#: the topic types whose values may travel as deltas
DELTA_TYPES = frozenset({"STRING", "JSON", "BINARY"})
#: values shorter than this go whole without trying a delta
MIN_SIZE = 64
#: the cache forgets everything when it holds this many topics (each entry holds two values)
MAX_CACHED = 65_536
#: values shorter than this are never compressed
MIN_COMPRESSED = 512
#: zlib's level for each COMPRESSION value (``true`` is the reference system's old name for medium)
LEVELS = {"off": 0, "false": 0, "low": 1, "medium": 6, "true": 6, "high": 9}
#: the topic types whose values may be compressed
COMPRESSED_TYPES = DELTA_TYPES


def compression_level(subscribed: Subscribed) -> int:
    """zlib's level for a topic's values (0: not compressed); a topic without COMPRESSION is ``low``."""
    if subscribed.type not in COMPRESSED_TYPES:
        return 0
    for name, value in subscribed.properties:
        if name == COMPRESSION:
            return LEVELS.get(value.lower(), 1)
    return LEVELS["low"]


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

    __slots__ = ("_last", "_deflated", "made", "saved", "deltas", "compressed", "compressed_saved")

    def __init__(self) -> None:
        self._last: dict[int, tuple[bytes, bytes, DeltaUpdate | Update]] = {}
        self._deflated: dict[int, tuple[bytes, CompressedUpdate | Update]] = {}
        #: diffs computed (the rest were found here); of every stream sharing the cache: the
        #: bytes of values not sent thanks to deltas, and the deltas sent; values sent
        #: compressed and the bytes that saved
        self.made = self.saved = self.deltas = self.compressed = self.compressed_saved = 0

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

    def deflate(self, update: Update, level: int) -> CompressedUpdate | Update:
        """``update`` deflated at ``level`` if that is smaller, else ``update`` itself."""
        alias, value = update.alias, update.value
        cached = self._deflated.get(alias)
        if cached is not None and cached[0] is value:
            return cached[1]
        data = zlib.compress(value, level)
        out: CompressedUpdate | Update = CompressedUpdate(alias, data, len(value)) if len(data) < len(value) else update
        if len(self._deflated) >= MAX_CACHED and alias not in self._deflated:
            self._deflated.clear()
        self._deflated[alias] = (value, out)
        return out

    def forget(self, alias: int) -> None:
        self._last.pop(alias, None)
        self._deflated.pop(alias, None)


class DeltaStream:
    """One connection's bases — what it was last sent of each topic that may take deltas — and
    the compression level of each topic it may get compressed values of. ``deltas`` and
    ``compression``: what the client said it understands."""

    __slots__ = ("_cache", "_basis", "_eligible", "_levels", "_deltas_on", "_compression_on", "saved", "deltas")

    def __init__(self, cache: DeltaCache, deltas: bool = True, compression: bool = False) -> None:
        self._cache = cache
        self._basis: dict[int, bytes] = {}
        self._eligible: set[int] = set()
        self._levels: dict[int, int] = {}
        self._deltas_on, self._compression_on = deltas, compression
        #: bytes of values not sent thanks to deltas and compression, and how many deltas were sent
        self.saved = 0
        self.deltas = 0

    def outgoing(self, items: Iterable[object]) -> list[object]:
        """The deliveries as they are to be written, in order: some updates replaced by
        deltas. Call it with everything written to the connection, in the order written."""
        out: list[object] = []
        append = out.append
        basis, eligible, cache, levels = self._basis, self._eligible, self._cache, self._levels
        last = cache._last
        for item in items:
            kind = type(item)
            if kind is Update:
                update: Update = item  # type: ignore[assignment]
                alias, value = update.alias, update.value
                sent: object = update
                if alias in eligible:
                    previous = basis.get(alias)
                    basis[alias] = value
                    if previous is not None and update.retained and len(value) >= MIN_SIZE:
                        cached = last.get(alias)  # the delta made for the sessions in step, inline
                        if cached is not None and cached[0] is previous and cached[1] is value:
                            delta = cached[2]
                        else:
                            delta = cache.encode(previous, update)
                        if type(delta) is DeltaUpdate:
                            saved = len(value) - len(delta.delta)
                            self.saved += saved
                            self.deltas += 1
                            cache.saved += saved
                            cache.deltas += 1
                            sent = delta
                if sent is update and levels and update.retained and len(value) >= MIN_COMPRESSED:
                    level = levels.get(alias)
                    if level:  # still whole: deflated if that is smaller
                        packed = cache.deflate(update, level)
                        if type(packed) is CompressedUpdate:
                            saved = len(value) - len(packed.data)
                            self.saved += saved
                            cache.compressed += 1
                            cache.compressed_saved += saved
                            sent = packed
                append(sent)
                continue
            if kind is Subscribed:
                alias = item.alias  # type: ignore[attr-defined]
                if self._compression_on:
                    level = compression_level(item)  # type: ignore[arg-type]
                    if level:
                        levels[alias] = level
                    else:
                        levels.pop(alias, None)
                if self._deltas_on and accepts_deltas(item):  # type: ignore[arg-type]
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
                levels.pop(alias, None)
            append(item)
        return out
