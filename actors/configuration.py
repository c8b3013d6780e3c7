"""The replicated configuration log: a NodeAgentActor on every node keeps a copy
(:class:`replication.config_log.ConfigLogStore`, SQLite in the node's data
directory); the ConfigLogActor is the one writer.

Views, branch mapping tables and the security store are documents in it (see
:mod:`replication.config_log`). Whoever changes one (the view evaluator, the
session tree actor, the controller for the security store) calls
:meth:`ConfigLogActor.append` with the whole new document and applies the
change only once that returns: the entry is then stored on a majority of the
nodes' copies and committed. When no majority can store it, ``append`` raises
:class:`NotCommitted` and the change is not applied anywhere: the client's
request fails with ``UNAVAILABLE``.

The majority is of the copies the log has now: one per alive node, as Ray's
failure detector says (a lost node's copy leaves the count; a joining node's
copy is caught up before it counts). So a 3-node cluster commits with 2 copies,
and goes on after losing one node, with 2 of 2.

At start (and after a restart of the writer) the log is recovered from the
copies that answer: the copy with the highest committed position is the truth,
every other copy drops what it had not committed and takes the missing entries,
and the writer's term goes above every term seen, so an older writer's late
entries are refused. When no copy holds anything, the JSON documents a
single-node canopy kept in its data directory are imported once (and renamed
``*.imported``).

The writer is its own actor, not the controller: the actors that append
(session trees, views) are also called by the controller, and a writer that
never calls them back cannot deadlock with them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import ray

from actors.supervision import announce_start, new_incarnation
from replication.config_log import (
    ConfigLogStore,
    Entry,
    LogState,
    commit_point,
    import_documents,
    majority,
    newest,
    recovered_commit,
)

log = logging.getLogger("canopy.configuration")
#: seconds a copy may take to answer before it counts as not having stored an entry
CALL_TIMEOUT = 10.0


class NotCommitted(Exception):
    """A majority of the copies did not store the entry: the change is not made."""

    code = "UNAVAILABLE"

    def __init__(self, message: str) -> None:
        super().__init__(message)

    def __reduce__(self) -> Any:
        return (NotCommitted, (str(self),))


class NodeAgentActor:
    """One node's copy of the log (a thin shell around :class:`ConfigLogStore`)."""

    def __init__(self, directory: str) -> None:
        self.store = ConfigLogStore(directory)
        announce_start()

    def state(self) -> LogState:
        return self.store.state()

    def begin_term(self, term: int) -> LogState:
        return self.store.begin_term(term)

    def store_entries(self, term: int, entries: list[tuple[int, int, str, str]]) -> LogState:
        return self.store.store(term, [Entry(*e) for e in entries])

    def commit(self, term: int, position: int) -> LogState:
        return self.store.commit(term, position)

    def truncate(self, term: int, position: int) -> LogState:
        return self.store.truncate(term, position)

    def entries_after(self, position: int) -> list[tuple[int, int, str, str]]:
        return [tuple(e) for e in self.store.entries_after(position)]  # type: ignore[misc]

    def documents(self) -> dict[str, Any]:
        return self.store.documents()


class ConfigLogActor:
    """The writer: appends under its term, commits on a majority, catches copies up."""

    def __init__(self) -> None:
        self.agents: dict[str, Any] = {}
        self.term = 0
        #: the committed entries still retained (a copy that catches up gets them)
        self.entries: list[Entry] = []
        self.committed = 0
        self.documents: dict[str, Any] = {}
        #: each copy's last committed position as far as the writer knows
        self.copies: dict[str, int] = {}
        self.ready = False
        self._lock = asyncio.Lock()
        self._incarnation = new_incarnation()
        announce_start()

    async def incarnation(self) -> str:
        return self._incarnation

    async def start(self, agents: dict[str, Any], import_files: dict[str, str] | None = None) -> dict[str, Any]:
        """Recover the log from the copies in ``agents`` ({node name: NodeAgentActor});
        return the committed documents."""
        async with self._lock:
            self.ready = False
            self.agents = dict(agents)
            states = await self._gather({n: a.state.remote() for n, a in self.agents.items()})
            if len(states) < majority(len(self.agents)):
                raise NotCommitted(
                    f"the configuration log cannot be recovered: {len(states)} of {len(self.agents)} node copies "
                    "answered, not a majority"
                )
            self.term = max(s.term for s in states.values()) + 1
            source = newest(states)
            logs: dict[str, list[Entry]] = {}
            for n in states:
                try:
                    found = await asyncio.wait_for(_await(self.agents[n].entries_after.remote(0)), CALL_TIMEOUT)
                except Exception as e:
                    if n == source:
                        raise
                    log.warning("the configuration copy on %s did not answer: %s", n, e)
                    continue
                logs[n] = [Entry(*entry) for entry in found]
            held = [{(e.position, e.term) for e in entries} for entries in logs.values()]
            self.committed = recovered_commit(logs[source], states[source].committed, held, len(self.agents))
            self.entries = [e for e in logs[source] if e.position <= self.committed]
            self.entries = [e for e in self.entries if not any(
                later.name == e.name and later.position > e.position for later in self.entries)]
            self.documents = _documents(self.entries)
            self.copies = {}
            for name in self.agents:
                await self._catch_up(name)
            self.ready = True
            if not self.entries and import_files:
                imported = import_documents({k: Path(v) for k, v in import_files.items()})
                for name, document in imported:
                    await self._append(name, document)
                for name, _ in imported:
                    path = Path(import_files[name])
                    path.rename(path.with_name(path.name + ".imported"))
                    log.warning("imported %s into the replicated configuration log", path)
            log.info("configuration log recovered from %s: term %d, committed %d", source, self.term, self.committed)
            return dict(self.documents)

    async def set_agents(self, agents: dict[str, Any]) -> None:
        """The nodes changed: copies of joined nodes are caught up; lost ones leave the count."""
        async with self._lock:
            joined = [n for n in agents if n not in self.agents]
            self.agents = dict(agents)
            self.copies = {n: c for n, c in self.copies.items() if n in agents}
            for name in joined:
                await self._catch_up(name)

    async def append(self, name: str, document: Any) -> int:
        """Store ``document`` as ``name``'s new version on a majority and commit it; return
        its position. Raises :class:`NotCommitted` (nothing changed) otherwise."""
        async with self._lock:
            if not self.ready:
                raise NotCommitted("the configuration log is recovering; try again")
            return await self._append(name, document)

    async def _append(self, name: str, document: Any) -> int:
        entry = Entry(self.committed + 1, self.term, name, json.dumps(document, sort_keys=True))
        for node in [n for n in self.agents if self.copies.get(n) != self.committed]:
            await self._catch_up(node)  # a copy that missed an entry gets it first
        stored = await self._gather({n: a.store_entries.remote(self.term, [tuple(entry)]) for n, a in self.agents.items()
                                     if self.copies.get(n) == self.committed})
        point = commit_point([s.last for s in stored.values()], len(self.agents))
        if point < entry.position:
            for node in self.agents:
                self.copies.pop(node, None)  # each copy is caught up (or cut back) before the next append
            raise NotCommitted(
                f"the change to {name} was stored by {len(stored)} of {len(self.agents)} node copies, not a majority; "
                "it is not made"
            )
        committed = await self._gather({n: self.agents[n].commit.remote(self.term, entry.position) for n in stored})
        self.committed = entry.position
        self.entries = [e for e in self.entries if e.name != name] + [entry]
        self.documents[name] = document
        self.copies = {n: s.committed for n, s in committed.items()}
        return entry.position

    async def _catch_up(self, node: str) -> None:
        agent = self.agents[node]
        try:
            state: LogState = await asyncio.wait_for(_await(agent.begin_term.remote(self.term)), CALL_TIMEOUT)
            await asyncio.wait_for(_await(agent.truncate.remote(self.term, state.committed)), CALL_TIMEOUT)
            missing = [tuple(e) for e in self.entries if e.position > state.committed]
            if missing:
                await asyncio.wait_for(_await(agent.store_entries.remote(self.term, missing)), CALL_TIMEOUT)
            done: LogState = await asyncio.wait_for(_await(agent.commit.remote(self.term, self.committed)),
                                                    CALL_TIMEOUT)
            if done.committed == self.committed:
                self.copies[node] = done.committed
        except Exception as e:
            self.copies.pop(node, None)
            log.warning("the configuration copy on %s could not be caught up: %s", node, e)

    async def _gather(self, calls: dict[str, Any]) -> dict[str, LogState]:
        names = list(calls)
        results = await asyncio.gather(
            *[asyncio.wait_for(_await(calls[n]), CALL_TIMEOUT) for n in names], return_exceptions=True
        )
        out = {}
        for name, result in zip(names, results):
            if isinstance(result, BaseException):
                log.warning("the configuration copy on %s did not answer: %s", name, result)
            else:
                out[name] = LogState(*result)
        return out

    async def get_documents(self) -> dict[str, Any]:
        if not self.ready:
            raise NotCommitted("the configuration log is recovering; try again")
        return dict(self.documents)

    async def position(self) -> dict[str, Any]:
        return {"term": self.term, "committed": self.committed, "copies": dict(self.copies),
                "nodes": len(self.agents), "majority": majority(len(self.agents)) if self.agents else 0}


#: how long an appender waits for a restarted writer before it gives up on learning an outcome
OUTCOME_WAIT = 60.0


def _decide(documents: dict[str, Any], name: str, document: Any) -> None:
    """After the writer recovered: the change was made if the log holds it, else it never will be."""
    if json.dumps(documents.get(name), sort_keys=True) != json.dumps(document, sort_keys=True):
        raise NotCommitted(f"the change to {name} was not made (the configuration log's writer restarted)")


async def commit(config_log: Any, name: str, document: Any) -> None:
    """Append ``document`` as ``name``'s new version and return once it is committed;
    raise :class:`NotCommitted` when it is not made. Never leaves the caller unsure: when
    the writer died during the append (its outcome unknown), this waits until a writer
    has recovered the log, which then either holds the document (committed: made) or
    does not (never to be: not made)."""
    try:
        await config_log.append.remote(name, document)
        return
    except NotCommitted:
        raise
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
        log.warning("the configuration log's writer went away during a change to %s (%s): asking again", name, e)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + OUTCOME_WAIT
    while True:
        try:
            documents = await config_log.get_documents.remote()
            break
        except Exception as e:
            if loop.time() > deadline:
                raise NotCommitted(f"the change to {name}: the configuration log did not come back: {e}") from None
            await asyncio.sleep(0.2)
    _decide(documents, name, document)


def commit_sync(config_log: Any, name: str, document: Any) -> None:
    """:func:`commit` for a synchronous actor."""
    try:
        ray.get(config_log.append.remote(name, document), timeout=OUTCOME_WAIT)
        return
    except NotCommitted:
        raise
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
        log.warning("the configuration log's writer went away during a change to %s (%s): asking again", name, e)
    deadline = time.monotonic() + OUTCOME_WAIT
    while True:
        try:
            documents = ray.get(config_log.get_documents.remote(), timeout=OUTCOME_WAIT)
            break
        except Exception as e:
            if time.monotonic() > deadline:
                raise NotCommitted(f"the change to {name}: the configuration log did not come back: {e}") from None
            time.sleep(0.2)
    _decide(documents, name, document)


async def _await(ref: Any) -> Any:
    return await ref


def _documents(entries: list[Entry]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in sorted(entries):
        out[entry.name] = entry.value()
    return out


def agent_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=-1)(NodeAgentActor)


def log_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=-1)(ConfigLogActor)
