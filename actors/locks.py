"""Session locks across the cluster: the controller decides, every gateway knows.

The lock table (:mod:`sessions.locks`) lives in the replicated configuration as the
document ``locks``. The controller holds it in a :class:`LockKeeper`: every change (a
gateway asking to acquire, release, withdraw or clean up; a gateway lost) is applied to
the table by the pure state machine, committed to the configuration log, and only then
pushed to every gateway (``set_locks``) and answered with the new table, so the asking
gateway knows the outcome before its client does. A change that is not committed
(``UNAVAILABLE``) is not made anywhere.

Each gateway keeps the newest table it was given in its :class:`GatewayLocks` and answers
from it what needs no change: whether a session holds a lock (an update constraint's
``locked`` term) and the listing. A ``lock`` request that must wait stays with the
gateway until a table shows its session as the owner (answered with the lock) or no
longer waiting (``CANCELLED``).

Who releases on loss:

* *a session that ends, or loses its connection*, on its gateway: after every change
  and every pushed table the gateway compares the table's holders of its own process with
  its sessions (:func:`sessions.locks.stale`) and asks the controller to take away what
  no longer holds (``lock_cleanup``), again a second later if the controller did not
  answer, so nothing is lost when one call fails;
* *a gateway lost with its node, or restarted by Ray* (its sessions went with its
  process): the controller, when its check sees it, sweeps the holders of every gateway
  process that is not the live one (:func:`sessions.locks.sweep`); a lock passes to its
  oldest waiter on a surviving gateway;
* *a new start of the instance* keeps only the sequence counter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

from actors import configuration
from sessions.locks import (
    Cleanup,
    Holder,
    Lock,
    LockTable,
    Scope,
    acquire,
    cleanup,
    release,
    stale,
    sweep,
    withdraw,
)
from sessions.requests import RequestError
from topics.constraints import LockLookup

log = logging.getLogger("canopy.locks")
#: seconds before a gateway asks again to clean up what a failed call left
RETRY = 1.0
#: the configuration log's document
DOCUMENT = "locks"


def shown(lock: Lock) -> list[Any]:
    """A lock as a ``lock`` request is answered: name, sequence, scope."""
    return [lock.name, lock.sequence, lock.owner.scope.value]


class LockKeeper:
    """The controller's lock table: changed, committed, pushed (a synchronous actor's part)."""

    def __init__(self, config_log: Callable[[], Any], gateways: Callable[[], list[Any]]) -> None:
        self._config_log = config_log
        self._gateways = gateways
        self.table = LockTable()

    def load(self, document: Any, fresh: bool) -> None:
        """The committed table; at a new start of the instance no session holds anything
        any more (only the sequence counter is kept)."""
        self.table = LockTable.from_wire(document)
        if fresh:
            self._change(self.table.cleared())

    def _change(self, table: LockTable) -> None:
        if table is self.table:
            return
        wire = table.to_wire()
        configuration.commit_sync(self._config_log(), DOCUMENT, wire)
        self.table = table
        for gateway in self._gateways():
            gateway.set_locks.remote(wire)

    def acquire(self, gateway: str, session: str, name: str, scope: str) -> dict[str, Any]:
        table, _decision = acquire(self.table, name, Holder(gateway, session, Scope(scope)))
        self._change(table)
        return self.table.to_wire()

    def release(self, gateway: str, session: str, name: str, sequence: int | None) -> dict[str, Any]:
        table, owned = release(self.table, name, gateway, session, sequence)
        self._change(table)
        return {"owned": owned, "table": self.table.to_wire()}

    def withdraw(self, gateway: str, session: str, name: str) -> dict[str, Any]:
        table, withdrawn = withdraw(self.table, name, gateway, session)
        self._change(table)
        lock = self.table.owned(gateway, session, name)
        return {"withdrawn": withdrawn, "lock": shown(lock) if lock else None, "table": self.table.to_wire()}

    def cleanup(self, gateway: str, what: list[Any]) -> dict[str, Any]:
        self._change(cleanup(self.table, gateway, Cleanup.from_wire(what)))
        return self.table.to_wire()

    def sweep(self, live: dict[str, str | None]) -> None:
        """Take away the holders of gateway processes that are gone (see :func:`sessions.locks.sweep`)."""
        table = sweep(self.table, live)
        if table is not self.table:
            gone = sorted({h.gateway for lock in self.table.locks.values() for h in (lock.owner, *lock.waiters)}
                          - {h.gateway for lock in table.locks.values() for h in (lock.owner, *lock.waiters)})
            log.warning("session locks of lost gateway processes released: %s", ", ".join(gone))
        self._change(table)

    def listing(self) -> dict[str, Any]:
        return self.table.to_wire()


@dataclass
class _Wait:
    """A ``lock`` request waiting for its answer; ``version`` is the table version of the
    controller's decision (``None`` until it came): a table at least that new that shows the
    session neither owning nor waiting means the wait was withdrawn."""

    future: asyncio.Future[list[Any]]
    version: int | None = None


class GatewayLocks:
    """One gateway's side: the table it was given, its sessions' waiting requests."""

    def __init__(self, gateway: str, connected: Callable[[str], bool | None], controller: Callable[[], Any]) -> None:
        #: this gateway process's name in the table (``base~token``)
        self.gateway = gateway
        self._connected = connected
        self._controller = controller
        self.table = LockTable()
        self._waits: dict[tuple[str, str], list[_Wait]] = {}
        self._cleaning = False
        self._again = False

    # -- what needs no change ------------------------------------------------------------

    def lookup(self, session: str) -> LockLookup:
        """Whether ``session`` holds a lock at a sequence (an update constraint's ``locked``)."""
        gateway = self.gateway
        return lambda name, sequence: self.table.owned(gateway, session, name, sequence) is not None

    def listing(self) -> list[dict[str, Any]]:
        return [{"name": lock.name, "sequence": lock.sequence, "session_id": lock.owner.session,
                 "scope": lock.owner.scope.value, "waiting": len(lock.waiters)}
                for lock in sorted(self.table.locks.values(), key=lambda lock: lock.name)]

    def set_table(self, wire: Any) -> None:
        """A table from the controller; an older one than this gateway has is ignored."""
        table = LockTable.from_wire(wire)
        if table.version < self.table.version:
            return
        self.table = table
        for key in list(self._waits):
            self._settle(key)
        self.reconcile()

    # -- requests ------------------------------------------------------------------------

    async def acquire(self, session: str, name: str, scope: Scope) -> list[Any]:
        key = (session, name)
        wait = _Wait(asyncio.get_running_loop().create_future())
        self._waits.setdefault(key, []).append(wait)
        try:
            answer = await self._call("lock_acquire", self.gateway, session, name, scope.value)
            wait.version = int(answer["version"])
            self.set_table(answer)
            self._settle(key)
            return await wait.future
        finally:
            if wait.future.done() and not wait.future.cancelled():
                wait.future.exception()  # retrieved: a failure after the call failed is no news
            waits = self._waits.get(key)
            if waits is not None and wait in waits:
                waits.remove(wait)
                if not waits:
                    del self._waits[key]

    async def release(self, session: str, name: str, sequence: int | None) -> bool:
        answer = await self._call("lock_release", self.gateway, session, name, sequence)
        self.set_table(answer["table"])
        return bool(answer["owned"])

    async def withdraw(self, session: str, name: str) -> list[Any]:
        """Stop waiting for ``name``: [whether the session was waiting, the lock if it owns it]."""
        waits = self._waits.pop((session, name), [])
        for wait in waits:
            _fail(wait, f"the request for lock {name!r} was cancelled")
        answer = await self._call("lock_withdraw", self.gateway, session, name)
        self.set_table(answer["table"])
        return [bool(answer["withdrawn"]), answer["lock"]]

    def session_closed(self, session: str) -> None:
        """A session ended: its waiting requests go (nobody to answer), its locks are released."""
        for key in [k for k in self._waits if k[0] == session]:
            for wait in self._waits.pop(key):
                _fail(wait, "the session ended")
        if self._involved(session):
            asyncio.ensure_future(self._clean(Cleanup(ended=frozenset({session})), alone=True))

    def connection_lost(self, session: str) -> None:
        """A session lost its connection (kept for its client to resume): its waits go and its
        UNLOCK_ON_CONNECTION_LOSS locks are released, asked at once, so that the controller
        hears of it before any request of the resumed session."""
        if self._involved(session):
            asyncio.ensure_future(self._clean(Cleanup(disconnected=frozenset({session})), alone=True))

    def _involved(self, session: str) -> bool:
        return any(h.session == session and h.gateway == self.gateway
                   for lock in self.table.locks.values() for h in (lock.owner, *lock.waiters))

    # -- keeping the table true to this gateway's sessions --------------------------------

    def reconcile(self) -> None:
        """Ask the controller to take away what this gateway's sessions no longer hold, unless
        a call doing so is under way (it looks again when it ends)."""
        if self._cleaning:
            self._again = True
            return
        what = stale(self.table, self.gateway, self._connected, self._waits.keys())
        if what:
            self._cleaning = True
            asyncio.ensure_future(self._clean(what))

    async def _clean(self, what: Cleanup, alone: bool = False) -> None:
        """Ask for ``what``; ``alone``: a call of its own, beside the reconciling one."""
        wire = None
        try:
            wire = await self._call("lock_cleanup", self.gateway, what.to_wire())
        except Exception as e:
            log.warning("could not release the session locks of closed or disconnected sessions: %s; "
                        "trying again in %g s", e, RETRY)
            asyncio.get_running_loop().call_later(RETRY, self.reconcile)
        finally:
            if not alone:
                self._cleaning = False
        if wire is not None:
            self.set_table(wire)  # which reconciles again
        if not alone and self._again:
            self._again = False
            self.reconcile()

    def _settle(self, key: tuple[str, str]) -> None:
        waits = self._waits.get(key)
        if not waits:
            return
        session, name = key
        lock = self.table.owned(self.gateway, session, name)
        if lock is not None:
            answer = shown(lock)
            for wait in self._waits.pop(key):
                if not wait.future.done():
                    wait.future.set_result(answer)
            return
        if self.table.waiting(self.gateway, session, name):
            return
        for wait in [w for w in waits if w.version is not None and self.table.version >= w.version]:
            waits.remove(wait)
            _fail(wait, f"the request for lock {name!r} was withdrawn")
        if not waits:
            del self._waits[key]

    async def _call(self, method: str, *args: Any) -> Any:
        try:
            return await getattr(self._controller(), method).remote(*args)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
            raise RequestError("UNAVAILABLE", f"the controller is not answering now; try again ({e})") from None


def _fail(wait: _Wait, why: str) -> None:
    if not wait.future.done():
        wait.future.set_exception(RequestError("CANCELLED", why))
