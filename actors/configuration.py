"""The replicated configuration log: a NodeAgentActor on every node keeps a copy
(:class:`replication.config_log.ConfigLogStore`, SQLite in the node's data
directory); the ConfigLogActor is the one writer.

Views, branch mapping tables and the security store are documents in it (see
:mod:`replication.config_log`). Whoever changes one (the view evaluator, the
session tree actor, the controller for the security store) calls
:meth:`ConfigLogActor.append` with the whole new document and applies the
change only once that returns: the entry is then stored on a majority of the
nodes' copies and committed. When no majority stored it and every copy that
may hold it has cut it back, ``append`` raises :class:`NotCommitted` and the
change is not applied anywhere: the client's request fails with
``UNAVAILABLE``; when a copy may still hold it, ``OutcomeUnknown``, and
:func:`commit` asks until the writer's next recovery decided.

The majority is of the copies the log has now: one per alive node, as Ray's
failure detector says (a lost node's copy leaves the count; a joining node's
copy is caught up before it counts). So a 3-node cluster commits with 2 copies,
and goes on after losing one node, with 2 of 2.

At start (and after a restart of the writer) the log is recovered from the
copies that answer (:meth:`replication.config_writer.ConfigWriter.recover`): the
most up-to-date copy of a majority is the truth, every other copy drops what it
had not committed and takes the missing entries, and the writer's term goes
above every term seen and is stored on a majority, so an older writer's late
entries are refused. When no copy holds anything, the JSON documents a
single-node canopy kept in its data directory are imported once (and renamed
``*.imported``).

The writer is its own actor, not the controller: the actors that append
(session trees, views) are also called by the controller, and a writer that
never calls them back cannot deadlock with them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, TypeVar

import ray

from actors.supervision import announce_start, new_incarnation
from replication.config_log import ConfigLogStore, LogState, import_documents
from replication.config_writer import Answers, Ask, ConfigWriter, NoAnswer, NotCommitted, OutcomeUnknown, Step, decide
from replication.config_writer import renewed
from replication.config_writer import CALL_TIMEOUT as CALL_TIMEOUT

log = logging.getLogger("canopy.configuration")

T = TypeVar("T")

__all__ = ["ConfigLogActor", "NodeAgentActor", "NotCommitted", "agent_class", "commit", "commit_sync", "log_class"]


class NodeAgentActor:
    """One node's copy of the log (a thin shell around :class:`ConfigLogStore`)."""

    def __init__(self, directory: str) -> None:
        self.store = ConfigLogStore(directory)
        announce_start()

    def state(self) -> LogState:
        return self.store.state()

    def held(self) -> tuple[LogState, list[tuple[int, int, str, str]]]:
        return self.store.answer("held")  # type: ignore[no-any-return]

    def store_entries(self, term: int, entries: list[tuple[int, int, str, str]]) -> LogState:
        return self.store.answer("store_entries", term, entries)  # type: ignore[no-any-return]

    def commit(self, term: int, position: int) -> LogState:
        return self.store.commit(term, position)

    def truncate(self, term: int, position: int) -> LogState:
        return self.store.truncate(term, position)

    def catch_up(self, term: int, entries: list[tuple[int, int, str, str]], committed: int) -> LogState:
        return self.store.answer("catch_up", term, entries, committed)  # type: ignore[no-any-return]

    def documents(self) -> dict[str, Any]:
        return self.store.documents()


class ConfigLogActor:
    """The writer: :class:`replication.config_writer.ConfigWriter` over Ray, one operation at a
    time (appends, recoveries and node changes under one lock; reads answer at once)."""

    def __init__(self) -> None:
        self.agents: dict[str, Any] = {}
        self.writer = ConfigWriter()
        self._lock = asyncio.Lock()
        self._incarnation = new_incarnation()
        announce_start()

    async def incarnation(self) -> str:
        return self._incarnation

    async def start(self, agents: dict[str, Any], import_files: dict[str, str] | None = None) -> dict[str, Any]:
        """Recover the log from the copies in ``agents`` ({node name: NodeAgentActor});
        return the committed documents."""
        async with self._lock:
            self.agents = dict(agents)
            documents = await self._drive(self.writer.recover(self.agents))
            if not self.writer.documents and import_files:
                imported = import_documents({k: Path(v) for k, v in import_files.items()})
                for name, document in imported:
                    await self._drive(self.writer.append(name, document))
                for name, _ in imported:
                    path = Path(import_files[name])
                    path.rename(path.with_name(path.name + ".imported"))
                    log.warning("imported %s into the replicated configuration log", path)
                documents = dict(self.writer.documents)
            log.info("configuration log recovered: term %d, committed %d", self.writer.term, self.writer.committed)
            return documents

    async def set_agents(self, agents: dict[str, Any]) -> None:
        """The nodes changed: copies of joined nodes are caught up; lost ones leave the count."""
        async with self._lock:
            renewed = self._renewed(agents)
            self.agents = dict(agents)
            await self._drive(self.writer.set_nodes(self.agents, renewed))

    async def append(self, name: str, document: Any) -> int:
        """Store ``document`` as ``name``'s new version on a majority and commit it; return
        its position. Raises :class:`NotCommitted` (nothing changed) otherwise."""
        async with self._lock:
            return await self._drive(self.writer.append(name, document))

    async def tend(self, agents: dict[str, Any]) -> None:
        """The controller's nudge at its checks, with the copies it keeps (:meth:`ConfigWriter.tend`);
        skipped while an operation runs or waits (it does the same)."""
        if self._lock.locked():
            return
        async with self._lock:
            renewed = self._renewed(agents)
            self.agents = dict(agents)
            await self._drive(self.writer.tend(self.agents, renewed))

    def _renewed(self, agents: dict[str, Any]) -> list[str]:
        return renewed(self.agents, agents)

    async def get_documents(self) -> dict[str, Any]:
        """The committed documents. A writer that has not recovered (it lost track of a change)
        recovers first: whoever asks is waiting to learn a change's outcome, and may be the
        controller, whose checks (which tend the writer) wait for it meanwhile."""
        if not self.writer.ready:
            async with self._lock:
                if not self.writer.ready:
                    await self._drive(self.writer.tend(self.agents))
        if not self.writer.ready:
            raise NotCommitted("the configuration log is recovering; try again")
        return dict(self.writer.documents)

    async def position(self) -> dict[str, Any]:
        return self.writer.position()

    async def _drive(self, step: Step[T]) -> T:
        """Run one of the writer's operations, making each of its asks' calls side by side."""
        answers: Answers | None = None
        while True:
            try:
                ask = step.send(answers)  # type: ignore[arg-type]  # the first send must be None
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            answers = await self._carry(ask)

    async def _carry(self, ask: Ask) -> Answers:
        nodes = list(ask.calls)
        results = await asyncio.gather(*[
            asyncio.wait_for(_await(getattr(self.agents[n], method).remote(*args)), CALL_TIMEOUT)
            for n, (method, args) in ask.calls.items()], return_exceptions=True)
        answers: Answers = {}
        for node, result in zip(nodes, results):
            if isinstance(result, asyncio.TimeoutError):
                result = NoAnswer(f"no answer within {CALL_TIMEOUT} s")
            if isinstance(result, BaseException):
                log.warning("the configuration copy on %s did not answer %s: %s", node, ask.calls[node][0], result)
                answers[node] = (None, result)
            else:
                answers[node] = (result, None)
        return answers


#: how long an appender waits for a restarted writer before it gives up on learning an outcome
OUTCOME_WAIT = 60.0


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
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, OutcomeUnknown) as e:
        log.warning("the outcome of a change to %s is not known (%s): asking again", name, e)
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
    decide(documents, name, document)


def commit_sync(config_log: Any, name: str, document: Any) -> None:
    """:func:`commit` for a synchronous actor."""
    try:
        ray.get(config_log.append.remote(name, document), timeout=OUTCOME_WAIT)
        return
    except NotCommitted:
        raise
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, OutcomeUnknown) as e:
        log.warning("the outcome of a change to %s is not known (%s): asking again", name, e)
    deadline = time.monotonic() + OUTCOME_WAIT
    while True:
        try:
            documents = ray.get(config_log.get_documents.remote(), timeout=OUTCOME_WAIT)
            break
        except Exception as e:
            if time.monotonic() > deadline:
                raise NotCommitted(f"the change to {name}: the configuration log did not come back: {e}") from None
            time.sleep(0.2)
    decide(documents, name, document)


async def _await(ref: Any) -> Any:
    return await ref


def agent_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=-1)(NodeAgentActor)


def log_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=-1)(ConfigLogActor)
