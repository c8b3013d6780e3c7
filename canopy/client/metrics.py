"""Metric collectors (``session.metrics``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from canopy.client.session import Session


class Metrics:
    """Metric collectors (``session.metrics``): labelled series every gateway exports on its
    ``/metrics``, kept in the replicated configuration. Putting replaces a collector of the
    same name; a bad definition, or more than 100 collectors, raises
    :class:`~canopy.errors.InvalidCollectorError`. Putting and removing need CONTROL_SERVER,
    listing VIEW_SERVER."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def put_topic_collector(self, name: str, selector: str, group_by_type: bool = False) -> dict[str, Any]:
        """Count the topics ``selector`` selects and the subscriptions to them
        (``canopy_topic_collector_topics``, ``..._subscriptions``), by topic type when
        ``group_by_type``. Returns the definition with ``replaced`` (whether one of that
        name was replaced)."""
        definition = {"kind": "topic", "name": name, "selector": selector, "group_by_type": group_by_type}
        put: dict[str, Any] = await self._s._call("collector_put", definition)
        return put

    async def put_session_collector(
        self, name: str, filter: str, group_by: Sequence[str] = (), remove_metrics_with_no_matches: bool = False,
    ) -> dict[str, Any]:
        """Count the sessions ``filter`` matches (``canopy_session_collector_sessions``, and
        those opened and closed), one series per value of the ``group_by`` session properties;
        with ``remove_metrics_with_no_matches`` a group no session matches now has no series.
        Returns the definition with ``replaced``."""
        definition = {"kind": "session", "name": name, "filter": filter, "group_by": list(group_by),
                      "remove_metrics_with_no_matches": remove_metrics_with_no_matches}
        put: dict[str, Any] = await self._s._call("collector_put", definition)
        return put

    async def list_collectors(self) -> list[dict[str, Any]]:
        """Every collector's definition (``kind`` ``topic`` or ``session``), in the order
        they were first defined."""
        listed: list[dict[str, Any]] = await self._s._call("collector_list")
        return listed

    async def remove_collector(self, name: str) -> bool:
        """Remove a collector (its series go); False when there is none of that name."""
        removed: bool = await self._s._call("collector_remove", name)
        return removed
