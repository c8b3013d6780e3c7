"""What a session registered with the server under a token (a missing-topic handler, a request
handler): :meth:`Registration.close` takes it back, once; a :class:`Registrar` keeps them and
registers them again on a new server session."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from canopy import errors

if TYPE_CHECKING:
    from canopy.client.session import Session

log = logging.getLogger("canopy.client")
R = TypeVar("R", bound="Registration")


class Registration:
    """A registration at ``path`` known to the server as ``token``; closing the session ends it
    too. ``_REMOVE`` is the operation that takes it back; ``owner._by_token`` holds the live ones."""

    _REMOVE = ""

    def __init__(self, owner: Any, token: str, path: str) -> None:
        self._owner = owner
        self.token = token
        self.path = path
        self.closed = False

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._owner._by_token.pop(self.token, None)
        session: Session = self._owner._s
        if not session.closed:
            with contextlib.suppress(errors.InvalidRequestError, errors.ConnectionInterruptedError):
                await session._call(self._REMOVE, self.token)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Registrar(Generic[R]):
    """An API area's registrations by token, and the handler calls it has under way.

    ``_WHAT`` names a registration in log lines; :meth:`_register_request` sends one anew."""

    _WHAT = ""

    def __init__(self, session: Session) -> None:
        self._s = session
        self._by_token: dict[str, R] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def _register_request(self, registration: R) -> asyncio.Future[Any]:
        raise NotImplementedError

    async def drain(self) -> None:
        """Wait until every call to a handler made so far has ended (its answer sent)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _register_again(self) -> None:
        """A new server session (the old one was gone): register every handler again."""
        old, self._by_token = self._by_token, {}
        for registration in old.values():
            if not registration.closed:
                future = self._register_request(registration)
                future.add_done_callback(functools.partial(self._registered_again, registration))

    def _registered_again(self, registration: R, future: asyncio.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            log.warning("could not register the %s for %s again: %s", self._WHAT, registration.path,
                        "cancelled" if future.cancelled() else future.exception())
            return
        registration.token = future.result()
        self._by_token[registration.token] = registration
