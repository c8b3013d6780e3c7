"""Which of the actors that serve crashed, came back, or died for good (:class:`Liveness`).

It asks through the control plane's seam (:class:`actors.cluster.Cluster`) and reads time
from an injected clock, so that the simulator runs it as the controller does.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from actors.cluster import CallTimeout, Cluster

__all__ = ["CRASH_LOOP", "Liveness", "death_reason"]

log = logging.getLogger("canopy.liveness")

#: restarts in a minute after which an actor counts as dead for good
CRASH_LOOP = 5
#: the incarnation of an actor that was restarting when its baseline was taken
DOWN_AT_BASELINE = "down at baseline"
#: seconds after which a probe still unanswered is sent again (the first one stays in flight)
STALE = 30.0


def death_reason(error: BaseException) -> str:
    """One line out of Ray's many-line account of an actor's death."""
    text = str(error)
    why = re.search(r"The actor is dead because ([^.\n]+)", text)
    pid = re.search(r"^\s*pid: (\d+)$", text, re.MULTILINE)
    exit_type = re.search(r"Worker exit type: (\w+)", text)
    details = [f"pid {pid.group(1)}"] if pid else []
    details += [exit_type.group(1)] if exit_type else []
    head = why.group(1) if why else type(error).__name__
    return head + (f" ({', '.join(details)})" if details else "")


class Liveness:
    """Which actors crashed, came back or died for good, found without waiting on any of them.

    :meth:`poll` keeps one ``incarnation()`` call in flight per actor and reads the
    answers that have come in. Each actor answers a token it made when it started, so:

    * ``ActorUnavailableError`` -- the actor crashed and Ray is restarting it (``crashed``);
    * a token other than the last one seen -- it was restarted (``restarted``): whoever
      owns it must bring it back into the instance (start it, push what it missed);
    * ``ActorDiedError`` -- it is dead for good (``dead``): Ray gave up on it, or it was
      killed; so is one restarted more than :data:`CRASH_LOOP` times in a minute.

    A call still pending means the actor is busy (a partition stalled by a costly
    selector, say), which is not a crash; one pending for :data:`STALE` seconds is sent
    again (a probe lost on the way would otherwise hide every later restart)."""

    def __init__(self, cluster: Cluster, clock: Callable[[], float] = time.monotonic) -> None:
        self._cluster = cluster
        self._clock = clock
        self._pending: dict[str, Any] = {}  # actor name -> its probe (a future)
        self._sent: dict[str, float] = {}  # actor name -> when its probe was sent
        self._dead: dict[str, str] = {}  # actor name -> why
        self._known: dict[str, str] = {}  # actor name -> incarnation last seen
        self._down: set[str] = set()
        self._restarts: dict[str, list[float]] = {}  # actor name -> when it said it restarted

    def restarted(self, name: str) -> None:
        """An actor's constructor said it started again (see :mod:`actors.supervision`)."""
        now = self._clock()
        self._restarts[name] = [t for t in self._restarts.get(name, []) if now - t < 60] + [now]

    def baseline(self, actors: dict[str, Any], timeout: float) -> None:
        """Learn each actor's incarnation now (at start), so that a restart right
        after it is seen as one. One that is restarting now (it crashed while the instance
        started) is seen as restarted when it answers; one that does not answer in time
        takes its first answer as its baseline (a restart before it is found by its owner's
        reconcile, :meth:`actors.replicas.PartitionManager.settle`); any other error is raised."""
        found = self._cluster.outcomes([self._cluster.call(handle, "incarnation") for handle in actors.values()],
                                       timeout)
        for name, (token, error) in zip(actors, found):
            if error is None:
                self._known[name] = token
            elif self._cluster.unavailable(error):
                self._known[name] = DOWN_AT_BASELINE
                self._down.add(name)
            elif not isinstance(error, CallTimeout):  # a busy one: its first answer is its baseline
                raise error

    def forget(self, name: str) -> None:
        """``name`` is a new actor now (the old one was replaced)."""
        for table in (self._pending, self._sent, self._dead, self._known, self._restarts):
            table.pop(name, None)
        self._down.discard(name)

    def node(self, name: str) -> str | None:
        """The Ray id of the node the actor ``name`` last said it runs on."""
        token = self._known.get(name)
        return token.partition("@")[2] or None if token else None

    def poll(self, actors: dict[str, Any]) -> list[tuple[str, str, str]]:
        """``[(name, "crashed" | "restarted" | "dead", detail)]`` since the last poll."""
        events: list[tuple[str, str, str]] = []
        for name in [n for n in self._pending if n not in actors]:
            # no longer serving (replaced, or moved with its node): its answer, when it
            # comes, is about an actor nobody asks after (and whose owner forgot it)
            del self._pending[name]
        now = self._clock()
        for name, handle in actors.items():
            if name in self._pending and now - self._sent[name] > STALE:
                del self._pending[name]  # a probe lost on its way (or a call that hangs): ask again
            if name not in self._pending and name not in self._dead:
                self._pending[name] = self._cluster.call(handle, "incarnation")
                self._sent[name] = now
        if not self._pending:
            return events
        pending = list(self._pending.items())
        for (name, _), (incarnation, error) in zip(pending, self._cluster.outcomes([f for _, f in pending], 0)):
            if isinstance(error, CallTimeout):
                continue  # busy, or slow: not a crash
            del self._pending[name]
            if error is not None and self._cluster.unavailable(error):
                if name not in self._down:
                    self._down.add(name)
                    events.append((name, "crashed", death_reason(error)))
                continue
            if error is not None and self._cluster.died(error):
                # unschedulable: its node is gone, and it may only run there
                self._dead[name] = death_reason(error)
                events.append((name, "dead", self._dead[name]))
                continue
            if error is not None:  # neither restarting nor gone: asked again at the next poll
                log.warning("the probe of %s failed: %s: %s", name, type(error).__name__, error)
                continue
            before = self._known.get(name)
            self._known[name] = incarnation
            if before is not None and before != incarnation:
                if name not in self._down:  # crashed and came back between two probes
                    events.append((name, "crashed", "its process died"))
                self._down.discard(name)
                now = self._clock()
                recent = [t for t in self._restarts.get(name, []) if now - t < 60]
                if len(recent) > CRASH_LOOP:
                    self._dead[name] = f"it crashed {len(recent)} times in a minute"
                    events.append((name, "dead", self._dead[name]))
                else:
                    events.append((name, "restarted", ""))
        return events
