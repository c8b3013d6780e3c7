"""Session locks (``session.locks``): named locks shared by every session of the cluster."""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import TYPE_CHECKING, Any

from canopy import errors

if TYPE_CHECKING:
    from canopy.client.session import Session

log = logging.getLogger("canopy.client")


class SessionLockScope(str, enum.Enum):
    """When the server releases a lock its owner did not unlock."""

    #: when the owner's session ends (closed, expired, its gateway lost)
    UNLOCK_ON_SESSION_LOSS = "UNLOCK_ON_SESSION_LOSS"
    #: also when the owner's session loses its connection, even if the session is resumed
    UNLOCK_ON_CONNECTION_LOSS = "UNLOCK_ON_CONNECTION_LOSS"


UNLOCK_ON_SESSION_LOSS = SessionLockScope.UNLOCK_ON_SESSION_LOSS
UNLOCK_ON_CONNECTION_LOSS = SessionLockScope.UNLOCK_ON_CONNECTION_LOSS


class SessionLock:
    """A lock the session was granted. Two grants of one lock to one session are equal.

    ``sequence`` is a fencing token: a later grant of the same name, to any session, has a
    larger one. ``owned`` says what the client knows: false once unlocked, once the session
    ended or was replaced by a new one after a reconnection, and, for
    :data:`UNLOCK_ON_CONNECTION_LOSS`, once the connection it was granted on dropped. The
    server may hand the lock on before the client notices a loss, so checking ``owned`` and
    then acting is a race; use the lock as an update constraint
    (:func:`canopy.constraints.locked`) where it matters."""

    def __init__(self, locks: Locks, name: str, sequence: int, scope: SessionLockScope) -> None:
        self._locks = locks
        self.name = name
        self.sequence = sequence
        self.scope = scope
        session = locks._s
        self._session_id = session.session_id
        self._connection = session.reconnects

    @property
    def owned(self) -> bool:
        session = self._locks._s
        if session.closed or session.session_id != self._session_id:
            return False
        if self._locks._handed.get(self.name) != self.sequence:
            return False
        return self.scope is UNLOCK_ON_SESSION_LOSS or (session.connected and session.reconnects == self._connection)

    async def unlock(self) -> bool:
        """Release the lock: true if the session owned it (at this sequence). Afterwards the
        session does not own it, even if this raised."""
        return await self._locks._unlock(self.name, self.sequence)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SessionLock):
            return NotImplemented
        return (self.name, self.sequence, self.scope) == (other.name, other.sequence, other.scope)

    def __hash__(self) -> int:
        return hash((self.name, self.sequence, self.scope))

    def __repr__(self) -> str:
        return f"SessionLock({self.name!r}, sequence={self.sequence}, scope={self.scope.value}, owned={self.owned})"


class Locks:
    """Session locks (``session.locks``). A lock's name is a path (at most 256 characters):
    acquiring it needs the ACQUIRE_LOCK path permission there; :meth:`list` needs VIEW_SERVER."""

    def __init__(self, session: Session) -> None:
        self._s = session
        #: name -> the sequence of the lock handed to the application (until it unlocks)
        self._handed: dict[str, int] = {}

    async def lock(self, name: str, scope: SessionLockScope | str = UNLOCK_ON_SESSION_LOSS) -> SessionLock:
        """Acquire lock ``name``: returns once the session owns it, which may take until
        every session that asked before had it. A lock the session holds already is
        returned at once (an equal lock; asked with :data:`UNLOCK_ON_CONNECTION_LOSS`, it
        keeps that scope). Cancelling the call withdraws the request (and releases the lock
        if it was granted meanwhile). When the connection drops while waiting, the request
        is made again on the next connection."""
        try:
            wanted = SessionLockScope(scope)
        except ValueError:
            known = ", ".join(s.value for s in SessionLockScope)
            raise errors.InvalidRequestError(f"scope {scope!r} is not one of {known}") from None
        try:
            while True:
                try:
                    answer = await self._s._call("lock", name, wanted.value)
                    break
                except errors.ConnectionInterruptedError:
                    continue  # the server stopped waiting with the connection: asked again
        except asyncio.CancelledError:
            if not self._s.closed:
                asyncio.ensure_future(self._withdraw(name))
            raise
        granted, sequence, granted_scope = answer
        self._handed[granted] = sequence
        return SessionLock(self, granted, sequence, SessionLockScope(granted_scope))

    async def _withdraw(self, name: str) -> None:
        """A cancelled :meth:`lock`: stop waiting; a lock granted meanwhile (and not handed to
        the application by another call) is released."""
        try:
            _withdrawn, owned = await self._s._call("lock_cancel", name)
            if owned is not None and self._handed.get(owned[0]) != owned[1]:
                await self._s._call("unlock", owned[0], owned[1])
        except errors.CanopyError as e:
            log.info("withdrawing a cancelled request for lock %r: %s", name, e)

    async def _unlock(self, name: str, sequence: int) -> bool:
        if self._handed.get(name) == sequence:
            del self._handed[name]
        owned: bool = await self._s._call("unlock", name, sequence)
        return owned

    async def list(self) -> list[dict[str, Any]]:
        """Every lock held now: ``name``, ``sequence``, ``session_id`` (the owner), ``scope``
        and ``waiting`` (how many sessions wait for it). Needs VIEW_SERVER."""
        listed: list[dict[str, Any]] = await self._s._call("lock_list")
        return listed
