"""The configuration log's writer as a state machine that does no I/O (:class:`ConfigWriter`).

Every step of the writer that needs the copies' answers *yields* an :class:`Ask` -- the calls
to make side by side, node by node, each bounded by :data:`CALL_TIMEOUT` -- and is resumed with
the :data:`Answers`: each node's result or its error (a copy that did not answer in time has a
:class:`NoAnswer`). Whoever drives it carries the calls: ``actors.configuration.ConfigLogActor``
over Ray (one operation at a time, under its lock), the simulator over simulated time and
network. So the same recovery, append and catch-up code runs in both.

The rules (see :mod:`replication.config_log` for the copies and ``actors.configuration`` for
the writer's place in the cluster):

* **Recovery** (:meth:`ConfigWriter.recover`): a majority of the copies must answer; the term
  goes above every term seen; the copy with the highest committed position is the truth, with
  the entries after it that a majority hold (:func:`~replication.config_log.recovered_commit`);
  every copy is then caught up (cut back to its committed position, sent what it misses).
* **Append** (:meth:`ConfigWriter.append`): a copy that missed an entry is caught up first; the
  entry is stored on every caught-up copy; committed once a majority of the copies the log has
  now stored it, then each is told so. Fewer than a majority: the entry is cut back on every
  copy asked to store it, and the append is refused (:class:`NotCommitted`) only once all of
  them confirmed (else a recovery decides, :meth:`ConfigWriter._undo`).
* **Tending** (:meth:`ConfigWriter.tend`, at the controller's checks, every :data:`TEND_EVERY`): a copy that missed an
  entry is caught up without waiting for the next change; a writer that could not recover
  tries again.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable
from typing import Any, NamedTuple, TypeVar

from replication.config_entries import ConfigLogError, Entry, LogState, commit_point, majority, newest, recovered_commit

__all__ = ["Answers", "Ask", "CALL_TIMEOUT", "LOG_START_ATTEMPT", "TEND_EVERY", "ConfigWriter", "NoAnswer", "NotCommitted", "OutcomeUnknown", "Step",
           "decide", "drive"]

#: seconds a copy may take to answer before it counts as not having stored an entry
CALL_TIMEOUT = 10.0
#: seconds between two of the controller's tendings of the writer (:meth:`ConfigWriter.tend`)
TEND_EVERY = 5.0
#: seconds after which whoever starts the writer asks again (an answer lost on its way would
#: otherwise hold a whole start; a second start recovers again after the first, under a higher term)
LOG_START_ATTEMPT = 30.0

T = TypeVar("T")


class NotCommitted(Exception):
    """A majority of the copies did not store the entry: the change is not made."""

    code = "UNAVAILABLE"

    def __init__(self, message: str) -> None:
        super().__init__(message)

    def __reduce__(self) -> Any:
        return (NotCommitted, (str(self),))


class OutcomeUnknown(Exception):
    """An append reached no majority and the writer could not learn whether a copy keeps the
    entry: a writer's later recovery decides (see ``actors.configuration.commit``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)

    def __reduce__(self) -> Any:
        return (OutcomeUnknown, (str(self),))


class NoAnswer(Exception):
    """A copy did not answer within :data:`CALL_TIMEOUT` (the call may still run there)."""


class Ask(NamedTuple):
    """Calls to make side by side: ``{node: (method, args)}`` on each node's copy."""

    calls: dict[str, tuple[str, tuple[Any, ...]]]


#: each asked node's ``(result, None)`` or ``(None, error)``
Answers = dict[str, tuple[Any, BaseException | None]]
#: a writer's operation: yields what it asks, is sent the answers, returns its result
Step = Generator[Ask, Answers, T]


def drive(step: Step[T], carry: Any) -> T:
    """Run ``step`` to its end, ``carry(ask) -> answers`` making each ask's calls (a synchronous
    driver; the Ray actor has its own, asynchronous one)."""
    answers: Answers | None = None
    while True:
        try:
            ask = step.send(answers)  # type: ignore[arg-type]  # the first send must be None
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        answers = carry(ask)


def decide(documents: dict[str, Any], name: str, document: Any) -> None:
    """After a writer went away during an append and another recovered the log: the change was
    made if the log holds it, else it never will be (:class:`NotCommitted`). This holds because
    each document has one appender, which makes its changes one after the other: no later change
    of the same document can have replaced it meanwhile."""
    if json.dumps(documents.get(name), sort_keys=True) != json.dumps(document, sort_keys=True):
        raise NotCommitted(f"the change to {name} was not made (the configuration log's writer restarted)")


class ConfigWriter:
    """The writer's state: its term, the committed entries still retained, the documents, and
    how far each copy is known to have committed."""

    def __init__(self) -> None:
        self.nodes: list[str] = []
        self.term = 0
        #: the committed entries still retained (a copy that catches up gets them)
        self.entries: list[Entry] = []
        self.committed = 0
        self.documents: dict[str, Any] = {}
        #: each copy's last committed position as far as the writer knows
        self.copies: dict[str, int] = {}
        self.ready = False

    # -- the operations ----------------------------------------------------------------------

    def recover(self, nodes: Iterable[str]) -> Step[dict[str, Any]]:
        """Recover the log from the copies on ``nodes``; the committed documents."""
        self.ready = False
        self.nodes = list(nodes)
        found = yield Ask({n: ("held", ()) for n in self.nodes})
        states: dict[str, LogState] = {}
        logs: dict[str, list[Entry]] = {}
        for n in self.nodes:
            held, error = found.get(n, (None, NoAnswer(f"{n}: not asked")))
            if error is None:
                states[n] = LogState(*held[0])
                logs[n] = [Entry(*e) for e in held[1]]
        if len(states) < majority(len(self.nodes)):
            raise NotCommitted(
                f"the configuration log cannot be recovered: {len(states)} of {len(self.nodes)} node copies "
                "answered, not a majority"
            )
        self.term = max(s.term for s in states.values()) + 1
        source = newest(states)
        held = [{(e.position, e.term) for e in entries} for entries in logs.values()]
        self.committed = recovered_commit(logs[source], states[source].committed, held, len(self.nodes))
        kept = [e for e in logs[source] if e.position <= self.committed]
        self.entries = [e for e in kept if not any(later.name == e.name and later.position > e.position
                                                   for later in kept)]
        self.documents = {e.name: e.value() for e in sorted(self.entries)}
        self.copies = {}
        yield from self._catch_up(self.nodes)
        self.ready = True
        return dict(self.documents)

    def set_nodes(self, nodes: Iterable[str], renewed: Iterable[str] = ()) -> Step[None]:
        """The nodes changed: copies of joined nodes, and the ``renewed`` ones (a node's copy made
        again: its node came back), are caught up; lost ones leave the count."""
        nodes, renewed = list(nodes), set(renewed)
        joined = [n for n in nodes if n not in self.nodes or n in renewed]
        self.nodes = nodes
        self.copies = {n: c for n, c in self.copies.items() if n in nodes and n not in renewed}
        yield from self._catch_up(joined)

    def append(self, name: str, document: Any) -> Step[int]:
        """Store ``document`` as ``name``'s new version on a majority and commit it; its position.
        Raises :class:`NotCommitted` (nothing changed) otherwise."""
        if not self.ready:
            raise NotCommitted("the configuration log is recovering; try again")
        entry = Entry(self.committed + 1, self.term, name, json.dumps(document, sort_keys=True))
        yield from self._catch_up([n for n in self.nodes if self.copies.get(n) != self.committed])  # missed one
        current = [n for n in self.nodes if self.copies.get(n) == self.committed]
        answers = yield Ask({n: ("store_entries", (self.term, [tuple(entry)])) for n in current})
        stored = _states(answers, current)
        point = commit_point([s.last for s in stored.values()], len(self.nodes))
        if point < entry.position:
            # a copy that refused the entry (a newer writer's term, say) does not hold it; one that
            # stored it or did not answer (the call may have run there) may
            held = [n for n in current if not isinstance(answers.get(n, (None, None))[1], ConfigLogError)]
            return (yield from self._undo(entry, held, len(stored)))
        committed = _states((yield Ask({n: ("commit", (self.term, entry.position)) for n in stored})), stored)
        self.committed = entry.position
        self.entries = [e for e in self.entries if e.name != name] + [entry]
        self.documents[name] = document
        self.copies = {n: s.committed for n, s in committed.items()}
        return entry.position

    def tend(self, nodes: Iterable[str], renewed: Iterable[str] = ()) -> Step[None]:
        """What the controller asks at its checks, with the copies on ``nodes`` (``renewed``: as
        :meth:`set_nodes`): a writer that has not recovered (Ray restarted it unseen, or it could
        not recover, or lost track of an append's outcome) recovers from them; otherwise the nodes
        are taken (a change it was told of may have been lost on its way) and every copy that
        missed an entry is caught up (with no change to come, none would be)."""
        nodes, renewed = list(nodes), list(renewed)
        if not self.ready:
            if not nodes:
                return
            try:
                yield from self.recover(nodes)
            except NotCommitted:
                pass  # still no majority: asked again at the next check
            return
        if nodes != self.nodes or renewed:
            yield from self.set_nodes(nodes, renewed)
        yield from self._catch_up([n for n in self.nodes if self.copies.get(n) != self.committed])

    def _undo(self, entry: Entry, held: list[str], stored: int) -> Step[int]:
        """The append of ``entry`` reached no majority: cut it back on every copy that may hold it
        (``held``: one that did not answer may have stored it meanwhile; Ray runs one caller's
        calls to an actor in order, so the cut comes after). :class:`NotCommitted` only when every
        one of them is cut back: a copy that keeps it could make a later recovery take it, and the
        change would be made after being refused. Otherwise a recovery says whether it was made
        (its position then), and :class:`OutcomeUnknown` when not even that can be done."""
        self.copies = {}  # each copy is caught up (or cut back) before the next append
        refused = (f"the change to {entry.name} was stored by {stored} of {len(self.nodes)} node copies, not a "
                   "majority; it is not made")
        if held:
            cut = _states((yield Ask({n: ("truncate", (self.term, self.committed)) for n in held})), held)
            if len(cut) == len(held):
                raise NotCommitted(refused)
        else:
            raise NotCommitted(refused)
        try:
            documents = yield from self.recover(self.nodes)
        except NotCommitted as e:
            raise OutcomeUnknown(f"the change to {entry.name} reached no majority, and whether a copy keeps it "
                                 f"is not known: {e}") from None
        if json.dumps(documents.get(entry.name), sort_keys=True) == entry.document:
            return max(e.position for e in self.entries if e.name == entry.name)
        raise NotCommitted(refused)

    def position(self) -> dict[str, Any]:
        return {"term": self.term, "committed": self.committed, "copies": dict(self.copies),
                "nodes": len(self.nodes), "majority": majority(len(self.nodes)) if self.nodes else 0}

    # -- catching a copy up --------------------------------------------------------------------

    def _catch_up(self, nodes: list[str]) -> Step[None]:
        """Bring the copies on ``nodes`` to the writer's term and committed entries, side by side,
        one call each (:meth:`~replication.config_log.ConfigLogStore.catch_up`); one that fails
        stays out of :attr:`copies` (it is tried again before the next append)."""
        if not nodes:
            return
        for node in nodes:
            self.copies.pop(node, None)
        entries = [tuple(e) for e in self.entries]
        done = _states((yield Ask({n: ("catch_up", (self.term, entries, self.committed)) for n in nodes})), nodes)
        for node, state in done.items():
            if state.committed == self.committed:
                self.copies[node] = self.committed


def _states(answers: Answers, asked: Iterable[str]) -> dict[str, LogState]:
    """The copies that answered a call returning their state, and their states."""
    out = {}
    for node in asked:
        result, error = answers.get(node, (None, NoAnswer(f"{node}: not asked")))
        if error is None:
            out[node] = LogState(*result)
    return out
