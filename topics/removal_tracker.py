"""The removal policies of one partition's topics: what they need to know, and which are due.

A :class:`RemovalTracker` keeps a :class:`~topics.removal_state.RemovalState` for every normal
topic whose specification has a REMOVAL policy, and the facts those policies depend on
(the caller's side of the contract in :mod:`topics.removal`):

* the topic's creation and last update, which the owner reports as they happen
  (:meth:`added`, :meth:`updated`, :meth:`removed`): the store does, and keeps them in
  what it journals, replicates and snapshots, so a rebuilt tracker has them;
* the facts about sessions, which only the gateways know. The tracker's *interest*
  (:meth:`watch`: a version, the watched paths of ``subscriptions <`` terms, the filters
  of ``no session has`` terms, the creators of ``this session closes`` topics) goes to each
  gateway in the answer to its :class:`~topics.protocol.RemovalFacts` report, which the
  gateway sends about every second; :meth:`report` keeps each gateway's latest report.
  A fact is *known* when at least one fresh report exists and every fresh report answers
  it; the cluster's figure is then the sum (subscriptions, sessions) or whether any
  gateway has the session open (creators). A report older than :data:`REPORT_TIMEOUT_MS`
  or from a gateway whose stream closed (:meth:`forget`) drops out. A fact not known
  counts as *not holding* (many subscriptions, a matching session, the creator open): an
  unknown fact can delay a removal, never bring it forward.

:meth:`due` (call it at :meth:`next_check_ms`, or at least every
:data:`CHECK_INTERVAL_MS` while anything is watched) observes every watched topic and
returns the :class:`Due` removals; a policy that came due is spent: the topic is no
longer watched (a ``remove`` clause that does not select the policy topic leaves it,
unwatched, until the topic is added again or a new primary rebuilds the tracker).

Times are passed in (milliseconds since the epoch); nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from topics.removal import (
    FewerSubscriptions,
    NoSessionHas,
    RemovalPolicy,
    SessionCloses,
    parse_policy,
    selector_to_remove,
)
from topics.removal_state import RemovalState, TopicFacts

__all__ = ["CHECK_INTERVAL_MS", "REPORT_TIMEOUT_MS", "Due", "RemovalTracker", "Watch"]

#: a gateway's report older than this drops out (gateways report about every second)
REPORT_TIMEOUT_MS = 5_000
#: while anything is watched, look at least this often (reports come and go)
CHECK_INTERVAL_MS = 1_000
#: a fact not known: subscriptions that never count as fewer
_MANY = 2**62


@dataclass
class _Watched:
    policy: RemovalPolicy
    state: RemovalState
    roles: list[str] | None
    last_update_ms: int | None


@dataclass(frozen=True)
class Due:
    """A policy that came due: remove ``selector`` (its text); ``local`` when that is the
    policy topic alone (the partition that holds it removes it), else a ``remove`` clause
    a gateway carries out across partitions with the creator's ``roles``."""

    path: str
    selector: str
    local: bool
    roles: list[str] | None


@dataclass(frozen=True)
class Watch:
    """The interest of the policies: what the gateways report on."""

    version: int
    paths: tuple[str, ...]
    filters: tuple[str, ...]
    creators: tuple[str, ...]


@dataclass
class _Report:
    received_ms: int
    subscriptions: dict[str, int]
    sessions: dict[str, int]
    creators: dict[str, bool]


@dataclass
class RemovalTracker:
    """See the module docstring."""

    watched: dict[str, _Watched] = field(default_factory=dict)
    reports: dict[str, _Report] = field(default_factory=dict)
    _version: int = 0
    _watch: Watch | None = None
    _watch_names: tuple[tuple[str, ...], ...] = ((), (), ())

    # -- the topics --------------------------------------------------------

    def added(
        self, path: str, policy_text: str, created_ms: int, creator: str | None = None,
        roles: list[str] | None = None, last_update_ms: int | None = None,
    ) -> None:
        """Watch the topic at ``path``, created at ``created_ms`` by session ``creator`` with
        ``roles`` (also when a store is rebuilt: then with what was kept)."""
        policy = parse_policy(policy_text)
        state = RemovalState.start(policy, created_ms, creator, last_update_ms)
        self.watched[path] = _Watched(policy, state, roles, last_update_ms)
        self._changed()

    def updated(self, path: str, at_ms: int) -> None:
        watched = self.watched.get(path)
        if watched is not None and (watched.last_update_ms is None or at_ms > watched.last_update_ms):
            watched.last_update_ms = at_ms

    def removed(self, path: str) -> None:
        if self.watched.pop(path, None) is not None:
            self._changed()

    def clear(self) -> None:
        if self.watched:
            self.watched.clear()
            self._changed()

    def kept(self, path: str) -> list[Any] | None:
        """What a journal or snapshot keeps of the topic's watch:
        ``[created_ms, creator, roles, last_update_ms]``, or ``None`` when not watched."""
        w = self.watched.get(path)
        if w is None:
            return None
        return [w.state.created_ms, w.state.creator_session, w.roles, w.last_update_ms]

    def _changed(self) -> None:
        self._watch = None

    # -- the gateways' facts -----------------------------------------------

    def watch(self) -> Watch:
        """The interest now; its version changes whenever what it names does."""
        if self._watch is None:
            paths: dict[str, None] = {}
            filters: dict[str, None] = {}
            creators: dict[str, None] = {}
            for path, w in self.watched.items():
                for term in w.policy.terms:
                    if isinstance(term, FewerSubscriptions):
                        paths[path] = None
                    elif isinstance(term, NoSessionHas):
                        filters[term.filter] = None
                    elif isinstance(term, SessionCloses) and w.state.creator_session is not None:
                        creators[w.state.creator_session] = None
            names = (tuple(paths), tuple(filters), tuple(creators))
            old = self._watch_names
            if old != names:
                self._version += 1
                self._watch_names = names
            self._watch = Watch(self._version, *names)
        return self._watch

    def report(
        self, gateway: str, now_ms: int, subscriptions: dict[str, int], sessions: dict[str, int],
        creators: dict[str, bool],
    ) -> None:
        """Keep ``gateway``'s figures (its latest report replaces the one before) and observe
        every watched topic with them: a fact that stopped holding is never missed."""
        self.reports[gateway] = _Report(now_ms, dict(subscriptions), dict(sessions), dict(creators))
        self._observe(now_ms)

    def _observe(self, now_ms: int) -> None:
        for path, w in self.watched.items():
            w.state = w.state.observe(self.facts(path, now_ms), now_ms)

    def forget(self, gateway: str) -> None:
        """A gateway's stream closed: its figures drop out."""
        self.reports.pop(gateway, None)

    def _fresh(self, now_ms: int) -> list[_Report]:
        stale = [g for g, r in self.reports.items() if now_ms - r.received_ms > REPORT_TIMEOUT_MS]
        for gateway in stale:
            del self.reports[gateway]
        return list(self.reports.values())

    def facts(self, path: str, now_ms: int) -> TopicFacts:
        """The facts of a watched topic as known now (see the module docstring)."""
        w = self.watched[path]
        reports = self._fresh(now_ms)

        def sessions(text: str) -> int:
            if reports and all(text in r.sessions for r in reports):
                return sum(r.sessions[text] for r in reports)
            return 1

        subscriptions = _MANY
        if reports and all(path in r.subscriptions for r in reports):
            subscriptions = sum(r.subscriptions[path] for r in reports)
        creator = w.state.creator_session
        creator_open = True
        if creator is not None and reports and all(creator in r.creators for r in reports):
            creator_open = any(r.creators[creator] for r in reports)
        return TopicFacts(subscriptions, w.last_update_ms, creator_open, sessions)

    # -- evaluation --------------------------------------------------------

    def due(self, now_ms: int) -> list[Due]:
        """Observe every watched topic at ``now_ms``; the removals that came due (their
        topics are no longer watched)."""
        out: list[Due] = []
        self._observe(now_ms)
        for path, w in list(self.watched.items()):
            if not w.state.due(now_ms):
                continue
            selector = selector_to_remove(w.policy, path)
            local = w.policy.selector is None
            out.append(Due(path, str(selector) if not local else ">" + path, local, w.roles))
            del self.watched[path]
            self._changed()
        return out

    def next_check_ms(self, now_ms: int) -> int | None:
        """When to call :meth:`due` next: ``None`` when nothing is watched, else at the latest
        :data:`CHECK_INTERVAL_MS` from now."""
        if not self.watched:
            return None
        soonest = now_ms + CHECK_INTERVAL_MS
        for w in self.watched.values():
            at = w.state.next_check_ms(now_ms)
            if at is not None and at < soonest:
                soonest = at
        return soonest
