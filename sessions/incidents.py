"""How often one source of rejected input may write to the log.

Whoever connects decides what a broker's rejections are, so a log line per
rejection would let one client fill the log. An :class:`IncidentLog` allows
each key (a session, an address) one line per ``interval`` seconds; what it
holds back is counted, and the next line it allows says how many were held
back. It keeps at most ``max_keys`` keys, forgetting the least recently seen
first, so a flood of keys costs bounded memory (and at worst lets a forgotten
key write one line early). Time comes only from the ``now`` each call is
given (seconds, monotonic).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["IncidentLog"]


class IncidentLog:
    """Decides which incidents get a log line (see the module docstring)."""

    def __init__(self, interval: float = 10.0, max_keys: int = 10_000) -> None:
        if interval < 0 or max_keys < 1:
            raise ValueError("interval must be >= 0 and max_keys >= 1")
        self.interval = interval
        self.max_keys = max_keys
        #: key -> [when its last line was written, incidents held back since]
        self._keys: OrderedDict[Hashable, list[float]] = OrderedDict()
        #: every incident held back, over all keys (for statistics)
        self.suppressed = 0

    def record(self, key: Hashable, now: float) -> str | None:
        """An incident of ``key`` at ``now``: ``None`` to write nothing, else the
        text to end its line with (empty, or how many incidents were held back)."""
        entry = self._keys.get(key)
        if entry is not None and now - entry[0] < self.interval:
            entry[1] += 1
            self.suppressed += 1
            self._keys.move_to_end(key)
            return None
        held = int(entry[1]) if entry is not None else 0
        self._keys[key] = [now, 0]
        self._keys.move_to_end(key)
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)
        return f" ({held:,} more like it not logged)" if held else ""

    def forget(self, key: Hashable) -> None:
        """Drop what is known of ``key`` (its session ended)."""
        self._keys.pop(key, None)

    def __len__(self) -> int:
        return len(self._keys)
