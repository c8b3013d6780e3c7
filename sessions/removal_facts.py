"""A gateway's figures for the partitions' removal policies (pure).

A partition names what its REMOVAL policies need (:class:`~topics.protocol.RemovalWatch`:
watched paths, session filters, creator session ids); :func:`gather` counts it over one
gateway's sessions as a :class:`~topics.protocol.RemovalFacts` report. The cost is
proportional to what is named (a path or a creator is one lookup; a filter is evaluated
against each session), never to the number of topics.
"""

from __future__ import annotations

from collections.abc import Collection

from sessions.filters import FilterSyntaxError, parse_filter
from sessions.registry import SessionRegistry
from topics.protocol import RemovalFacts, RemovalWatch

__all__ = ["gather"]


def gather(registry: SessionRegistry, watch: RemovalWatch, internal: Collection[str] = ()) -> RemovalFacts:
    """The report answering ``watch`` for the sessions of ``registry`` (the ``internal``
    ones, which the gateway runs for itself, left out)."""
    subscriptions = {path: registry.subscribers(path) for path in watch.paths}
    sessions: dict[str, int] = {}
    for text in watch.filters:
        try:
            session_filter = parse_filter(text)
        except FilterSyntaxError:
            continue  # a filter this gateway cannot read: its figure stays unknown
        sessions[text] = sum(
            1 for sid, s in registry.sessions.items()
            if sid not in internal and session_filter.matches(s.properties, s.roles)
        )
    creators = {sid: sid in registry.sessions for sid in watch.creators}
    return RemovalFacts(watch.version, subscriptions, sessions, creators)
