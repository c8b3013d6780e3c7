"""Fan-out connections (``session.fanout``) and remote server definitions
(``session.remote_servers``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from canopy.client.session import Session


class Fanout:
    """This server's fan-out connections to its primaries (``session.fanout``)."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def list(self) -> list[dict[str, Any]]:
        """Each connection: ``name``, ``primaries``, ``state``, ``error``, ``sessions``,
        ``forwarded`` (missing-topic notifications passed on), the lag (``lag_ms``: half the
        primary's round trip ``rtt_ms`` plus ``apply_ms``, an update's arrival to its
        application here; ``apply_max_ms`` since the last listing; ``last_update_s``), and
        ``links``, each with its ``selector``, ``topics`` mirrored, ``updates`` and
        ``contested`` paths (VIEW_SERVER)."""
        listed: list[dict[str, Any]] = await self._s._call("fanout_list")
        return listed

    async def add(
        self, name: str, primaries: str | Sequence[str], links: str | Sequence[str], *,
        principal: str | None = None, password: str | None = None,
        retry_delay: float = 1.0, reconnect_timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Make this server a secondary of ``primaries`` (URLs tried in turn) for the topics
        ``links`` (selectors) match there (CONTROL_SERVER). Kept in the replicated configuration
        (the password too: it is needed to connect); a name in use, or a bad definition, raises
        :class:`~canopy.errors.InvalidFanoutError`. Returns the definition, without the password."""
        definition = {
            "name": name, "primaries": [primaries] if isinstance(primaries, str) else list(primaries),
            "links": [links] if isinstance(links, str) else list(links), "principal": principal,
            "password": password, "retry_delay": retry_delay, "reconnect_timeout": reconnect_timeout,
        }
        added: dict[str, Any] = await self._s._call("fanout_add", definition)
        return added

    async def remove(self, name: str) -> bool:
        """Remove a connection added at run time (its replicas go); False when there is none."""
        removed: bool = await self._s._call("fanout_remove", name)
        return removed


class RemoteServers:
    """Remote server definitions (``session.remote_servers``), the sources of remote topic
    views (``map ?a// from NAME to ...``). Kept in the replicated configuration (with the
    password, which the server needs to connect)."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def add(
        self, name: str, urls: str | Sequence[str], *, principal: str | None = None, password: str | None = None,
        retry_delay: float = 1.0, reconnect_timeout: float = 60.0, missing_topic_filter: str | None = None,
    ) -> dict[str, Any]:
        """Define a remote server (CONTROL_SERVER); views naming it become active once it connects.
        A bad definition or a name in use raises :class:`~canopy.errors.InvalidRemoteServerError`."""
        definition = {
            "name": name, "urls": [urls] if isinstance(urls, str) else list(urls), "principal": principal,
            "password": password, "retry_delay": retry_delay, "reconnect_timeout": reconnect_timeout,
            "missing_topic_filter": missing_topic_filter,
        }
        added: dict[str, Any] = await self._s._call("server_add", definition)
        return added

    async def list(self) -> list[dict[str, Any]]:
        """Every definition (no password), with the ``views`` naming it, its connection's
        ``state`` and ``error`` (VIEW_SERVER)."""
        listed: list[dict[str, Any]] = await self._s._call("server_list")
        return listed

    async def check(self, name: str) -> dict[str, Any]:
        """Open a session with the definition and close it: ``{name, ok, error, ms}`` (VIEW_SERVER)."""
        checked: dict[str, Any] = await self._s._call("server_check", name)
        return checked

    async def remove(self, name: str) -> bool:
        """Remove a definition (CONTROL_SERVER): views naming it go inactive; False when there is none."""
        removed: bool = await self._s._call("server_remove", name)
        return removed
