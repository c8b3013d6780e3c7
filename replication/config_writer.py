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
  goes above every term seen; the copy with the highest committed position (then the newest last
  term, then the longest) is the truth, all of it; the writer stores its own entry under the new
  term after it on a majority (catching every copy up on the way) and commits up to it.
* **Append** (:meth:`ConfigWriter.append`): a copy that missed an entry is caught up first; the
  entry is stored on every caught-up copy; committed once a majority of the copies the log has
  now stored it, then each is told so. Fewer than a majority: the entry is cut back on every
  copy that may hold it, and the append is refused (:class:`NotCommitted`) only once all of
  them confirmed; otherwise its outcome is unknown (:class:`OutcomeUnknown`) until the writer's
  next recovery, which it runs before anything else.
* **Tending** (:meth:`ConfigWriter.tend`, at the controller's checks, every :data:`TEND_EVERY`): a copy that missed an
  entry is caught up without waiting for the next change; a writer that could not recover
  tries again.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

from replication.config_entries import WRITER, ConfigLogError, Entry, LogState, commit_point, majority, newest

__all__ = ["Answers", "Ask", "CALL_TIMEOUT", "LOG_START_ATTEMPT", "TEND_EVERY", "ConfigWriter", "NoAnswer",
           "NotCommitted", "OutcomeUnknown", "Step", "decide", "drive", "renewed"]

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


def renewed(known: Mapping[str, Any], given: Mapping[str, Any]) -> list[str]:
    """The nodes of ``given`` ({node: its copy}) whose copy is another than the one ``known`` had
    (made again: its node came back)."""
    return [n for n, copy in given.items() if n in known and known[n] != copy]


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
        """Recover the log from the copies on ``nodes``; the committed documents.

        The copy with the highest committed position (then the newest last term, then the longest)
        among a majority is the truth, all of it: every entry a copy holds was acknowledged (stored
        on a majority, so every majority has a copy of it, and the truth has it) or has an unknown
        outcome -- an append is refused only once no copy can hold its entry (:meth:`_undo`). The
        writer then stores its own entry (:data:`WRITER`, under its new term) after the truth's
        last on a majority, catching each copy up on the way, and commits everything up to it: a
        copy that holds an entry this recovery did not take (one it did not read) can never be the
        truth again (its commit point and last term are behind), so what the recovery did not take
        is never made -- which is what lets a change of unknown outcome be decided by it. Not
        ready (:class:`NotCommitted`) until a majority has stored it: a term used twice would give
        two entries one identity."""
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
        need = majority(len(self.nodes))
        if len(states) < need:
            raise NotCommitted(
                f"the configuration log cannot be recovered: {len(states)} of {len(self.nodes)} node copies "
                "answered, not a majority"
            )
        self.term = max(s.term for s in states.values()) + 1
        source = newest(states)
        truth, known = logs[source], states[source].committed
        mark = Entry((truth[-1].position if truth else 0) + 1, self.term, WRITER, json.dumps({"term": self.term}))
        # what is committed already goes compacted; what is not, whole: a copy committing up to
        # ``known`` needs every entry there, not one a later, uncommitted entry supersedes
        sent = _compacted([e for e in truth if e.position <= known]) + [e for e in truth if e.position > known]
        self.copies = {}
        entries = [tuple(e) for e in sent + [mark]]
        done = _states((yield Ask({n: ("catch_up", (self.term, entries, known)) for n in self.nodes})), self.nodes)
        stored = [n for n, state in done.items() if (state.last, state.last_term) == (mark.position, self.term)]
        if len(stored) < need:
            raise NotCommitted(f"the configuration log cannot be recovered: {len(stored)} of {len(self.nodes)} "
                               "node copies took the writer's term, not a majority")
        committed = _states((yield Ask({n: ("commit", (self.term, mark.position)) for n in stored})), stored)
        self.entries = _compacted(sent + [mark])
        self.committed = mark.position
        self.copies = {n: state.committed for n, state in committed.items() if state.committed == mark.position}
        self.documents = {e.name: e.value() for e in sorted(self.entries) if e.name != WRITER}
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
        Otherwise :class:`NotCommitted` (nothing changed), or :class:`OutcomeUnknown` when a copy
        may still hold it (see :meth:`_undo`). A writer not ready recovers first."""
        if not self.ready:  # it lost track of a change, or could not recover: it recovers first
            if not self.nodes:
                raise NotCommitted("the configuration log is recovering; try again")
            yield from self.recover(self.nodes)
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
        one of them is cut back: a copy that keeps it could be a later recovery's truth, and the
        change would be made after being refused. Otherwise :class:`OutcomeUnknown`: the writer
        recovers before its next operation (or when tended, or asked for its documents), and that
        recovery decides (see :meth:`recover`)."""
        self.copies = {}  # each copy is caught up (or cut back) before the next append
        if held:
            cut = _states((yield Ask({n: ("truncate", (self.term, self.committed)) for n in held})), held)
            if len(cut) < len(held):
                self.ready = False
                raise OutcomeUnknown(f"the change to {entry.name} reached no majority ({stored} of "
                                     f"{len(self.nodes)} node copies stored it), and whether a copy keeps it is "
                                     "not known: the next recovery decides")
        raise NotCommitted(f"the change to {entry.name} was stored by {stored} of {len(self.nodes)} node copies, "
                           "not a majority; it is not made")

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


def _compacted(entries: list[Entry]) -> list[Entry]:
    """``entries`` less those a later one of the same name supersedes."""
    newest: dict[str, int] = {}
    for e in entries:
        newest[e.name] = max(newest.get(e.name, 0), e.position)
    return [e for e in entries if e.position == newest[e.name]]


def _states(answers: Answers, asked: Iterable[str]) -> dict[str, LogState]:
    """The copies that answered a call returning their state, and their states."""
    out = {}
    for node in asked:
        result, error = answers.get(node, (None, NoAnswer(f"{node}: not asked")))
        if error is None:
            out[node] = LogState(*result)
    return out
