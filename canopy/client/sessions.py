"""Other sessions: their properties, closing them (``session.sessions``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from canopy import errors

if TYPE_CHECKING:
    from canopy.client.session import Session


def _target(session_id: str | None, session_filter: str | None) -> list[str]:
    if (session_id is None) == (session_filter is None):
        raise errors.InvalidRequestError("name exactly one of session_id and filter")
    return ["id", session_id] if session_id is not None else ["filter", session_filter]  # type: ignore[list-item]


class Sessions:
    """Other sessions (``session.sessions``): their properties, VIEW_SESSION to read and
    MODIFY_SESSION to change, and closing them (both). A target is one session id or a
    session filter."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def get_properties(
        self, session_id: str | None = None, *, filter: str | None = None
    ) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = await self._s._call("session_get", _target(session_id, filter))
        return found

    async def set_properties(
        self, properties: dict[str, str | None], session_id: str | None = None, *, filter: str | None = None
    ) -> int:
        """Change user properties (``None`` removes one); return how many sessions changed."""
        changed: int = await self._s._call("session_set", _target(session_id, filter), dict(properties))
        return changed

    async def close(self, session_id: str | None = None, *, filter: str | None = None) -> int:
        """Close the sessions a target names, on every gateway; return how many closed. Their
        clients are told ``CLOSED_BY_CLIENT_CONTROL`` and do not reconnect. Closing this
        session itself ends it before any answer: the call fails with
        :class:`~canopy.errors.SessionClosedError`."""
        closed: int = await self._s._call("session_close", _target(session_id, filter))
        return closed
