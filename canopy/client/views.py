"""Topic views (``session.views``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from canopy.client.session import Session


@dataclass(frozen=True)
class TopicView:
    """A topic view as the server holds it."""

    name: str
    specification: str
    #: the security context: the creating session's principal and roles
    principal: str
    roles: frozenset[str]
    #: lower wins a path conflict: the order of first creation
    precedence: int
    #: "active", or why not (remote views wait for their remote server)
    state: str

    @classmethod
    def _from_wire(cls, data: dict[str, Any]) -> TopicView:
        return cls(
            data["name"], data["specification"], data["principal"], frozenset(data["roles"]),
            data["precedence"], data["state"],
        )


class TopicViews:
    """Topic views (``session.views``): MODIFY_TOPIC_VIEWS
    and SELECT_TOPIC on the source selector's path prefix to create, replace
    or remove; READ_TOPIC_VIEWS to list."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def create(self, name: str, specification: str) -> TopicView:
        """Create a view, or replace the view of that name (keeping its precedence).
        A bad specification raises :class:`~canopy.errors.InvalidViewError`
        (:class:`~canopy.errors.ViewSyntaxError` when it does not parse)."""
        return TopicView._from_wire(await self._s._call("view_create", name, specification))

    async def list(self) -> list[TopicView]:
        """Every view, in creation order."""
        return [TopicView._from_wire(v) for v in await self._s._call("view_list")]

    async def remove(self, name: str) -> None:
        """Remove a view and its reference topics; succeeds if there is none."""
        await self._s._call("view_remove", name)
