"""The replicated configuration log in the simulator: the real writer and the real copies.

* :class:`SimAgent` -- a node's copy: the real :class:`~replication.config_log.ConfigLogStore`
  (SQLite in memory, kept by :class:`SimConfiguration` per node: it is the node's disk, and a
  full-synchronous SQLite loses nothing at a power cut). Pinned to its node as Ray pins a
  ``NodeAgentActor``: when the node's raylet goes, so does the copy's process, and the
  controller makes another on the node that comes back, over the same store.
* :class:`SimWriter` -- the ``ConfigLogActor`` on the head: the real
  :class:`~replication.config_writer.ConfigWriter`, one operation at a time (its lock), each
  ask's calls made side by side as simulated Ray calls bounded by ``CALL_TIMEOUT``; reads
  answer at once. A crash loses its state (Ray starts it empty); the controller starts it again.
* :class:`SimServices` -- the actor that changes the configuration (the view evaluator, the
  session tree actor): at each :class:`~tests.simulation.schedule.Configure` it appends a new
  document and, when the writer went away meanwhile, asks again until a writer recovered the
  log and :func:`~replication.config_writer.decide` says whether the change was made, as
  ``actors.configuration.commit`` does.
* :class:`SimConfiguration` -- what the controller does for the log (``ControllerActor``'s
  ``_copies_on``, ``_recover_config_log``, ``_agents_follow_nodes``), for ``ManagedController``.
* :class:`ConfigChecker` -- the log's invariants. At every commit on every copy: **prefix
  consistency** (an entry committed at a position on one copy is the entry committed there on
  every copy, and each copy's documents are the committed history's up to its committed
  position) and **no refused change made** (also checked when a change is refused). When the run
  converges: **no acknowledged change lost** (each is in the committed history, and its document's
  newest version or followed by a newer one) and **every copy caught up** (the writer recovered
  and idle, every alive node's copy committed as far as the writer, with its documents).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actors.cluster import CallTimeout
from replication.config_log import WRITER, ConfigLogError, ConfigLogStore, Entry, LogState
from replication.config_writer import CALL_TIMEOUT, LOG_START_ATTEMPT, TEND_EVERY, Answers, ConfigWriter, NotCommitted
from replication.config_writer import Step, decide, renewed
from tests.simulation.processes import ActorUnavailable, Process, SimNode
from tests.simulation.world import MS, SECOND

if TYPE_CHECKING:
    from tests.simulation.managed import SimCluster
    from tests.simulation.run import Sim

__all__ = ["ConfigChecker", "SimAgent", "SimConfiguration", "SimServices", "SimWriter"]

#: the controller's bounds on the writer's start (``START_TIMEOUT``) and on its recovery after a restart
START_S = 120.0
RECOVER_S = 60.0
#: how long an appender asks again for the outcome of a change whose writer went away (``OUTCOME_WAIT``)
OUTCOME_NS = 60 * SECOND
ASK_AGAIN_NS = 200 * MS
CALL_MS = round(CALL_TIMEOUT * 1000)


class SimAgent(Process):
    """A node's copy of the log (``NodeAgentActor``)."""

    def __init__(self, config: SimConfiguration, node: SimNode, name: str, pinned: str) -> None:
        super().__init__(node.world, name, node)
        self.config = config
        self.store = config.store(node.name)
        #: the raylet id it was made for: once its node has another, it never runs
        self.pinned = pinned

    def start(self) -> None:
        pass

    def stop(self, clean: bool) -> None:
        pass

    def handle(self, method: str, args: tuple[Any, ...], reply: Callable[[Any, BaseException | None], None]) -> None:
        store = self.store
        try:
            if method == "incarnation":
                result: Any = self.incarnation
            elif method in ("commit", "catch_up"):  # what it newly commits goes to the checker
                before = store.state().committed
                pending = [Entry(*e) for e in args[1]] if method == "catch_up" else store.entries_after(before)
                result = store.answer(method, *args)
                self.config.checker.committed(self, sorted({e for e in pending if e.position <= result.committed}))
            else:
                result = store.answer(method, *args)
        except ConfigLogError as e:
            reply(None, e)
            return
        reply(result, None)


class SimWriter(Process):
    """The configuration log's writer (``ConfigLogActor``)."""

    def __init__(self, sim: Sim, node: SimNode) -> None:
        super().__init__(sim.world, "configuration-log", node)
        self.sim = sim
        self.writer = ConfigWriter()
        self.agents: dict[str, SimAgent] = {}
        self.queue: deque[tuple[str, tuple[Any, ...], Callable[[Any, BaseException | None], None]]] = deque()
        self.op: tuple[Step[Any], Callable[[Any, BaseException | None], None]] | None = None

    @property
    def idle(self) -> bool:
        return self.op is None and not self.queue

    def start(self) -> None:
        self.writer, self.agents, self.op = ConfigWriter(), {}, None
        self.queue.clear()

    def stop(self, clean: bool) -> None:
        waiting = ([self.op[1]] if self.op is not None else []) + [reply for _, _, reply in self.queue]
        self.op = None
        self.queue.clear()
        for reply in waiting:  # Ray fails the calls of an actor that died with them
            reply(None, ActorUnavailable(f"{self} died during the call"))

    def handle(self, method: str, args: tuple[Any, ...], reply: Callable[[Any, BaseException | None], None]) -> None:
        if method == "incarnation":
            reply(self.incarnation, None)
        elif method == "tend":
            if self.idle:  # skipped while an operation runs or waits, as the actor does
                self.queue.append((method, args, reply))
                self._next()
            else:
                reply(None, None)
        elif method == "get_documents":
            if self.writer.ready:
                reply(dict(self.writer.documents), None)
            else:  # it recovers first, after what runs (the actor's lock)
                self.queue.append((method, args, reply))
                self._next()
        else:
            self.queue.append((method, args, reply))
            self._next()

    def _next(self) -> None:
        if self.op is not None or not self.queue:
            return
        method, args, reply = self.queue.popleft()
        step: Step[Any]
        if method == "start":
            self.agents = dict(args[0])
            step = self.writer.recover(list(self.agents))
        elif method == "get_documents":
            writer = self.writer
            step = _then(writer.tend(list(self.agents)) if not writer.ready else iter(()),
                         lambda: dict(writer.documents) if writer.ready else _recovering())
        elif method in ("set_agents", "tend"):
            changed = renewed(self.agents, args[0])
            self.agents = dict(args[0])
            nodes = list(self.agents)
            step = self.writer.set_nodes(nodes, changed) if method == "set_agents" else self.writer.tend(nodes, changed)
        else:
            assert method == "append", method
            step = self.writer.append(*args)
        if self.world.tracing:
            self.world.note("writer", method, *(sorted(args[0]) if method in ("start", "set_agents", "tend") else args))
        self.op = (step, reply)
        self._resume(None, self.incarnation)

    def _resume(self, answers: Answers | None, incarnation: int) -> None:
        if not self.current(incarnation) or self.op is None:
            return
        step, reply = self.op
        try:
            ask = step.send(answers)  # type: ignore[arg-type]
        except StopIteration as done:
            self.op = None
            self.world.note("writer done", done.value)
            reply(done.value, None)
            self._next()
            return
        except Exception as e:
            self.op = None
            self.world.note("writer failed", type(e).__name__, str(e))
            reply(None, e)
            self._next()
            return
        got: Answers = {}

        def answered(node: str, result: Any, error: BaseException | None) -> None:
            self.world.note("writer hears", node, result if error is None else type(error).__name__)
            got[node] = (result, error)
            if len(got) == len(ask.calls):
                self._resume(got, incarnation)

        if not ask.calls:
            self.world.at(0, self._resume, got, incarnation)
        self.world.note("writer asks", {node: method for node, (method, _) in ask.calls.items()})
        for node, (method, args) in ask.calls.items():
            agent = self.agents[node]
            self.sim.calls.call(self, agent, method, args, CALL_MS,
                                lambda result, error, node=node: answered(node, result, error))


def _then(step: Step[Any], result: Callable[[], Any]) -> Step[Any]:
    """``step``, then ``result()`` as its own result."""
    yield from step
    return result()


def _recovering() -> Any:
    raise NotCommitted("the configuration log is recovering; try again")


class SimServices(Process):
    """The actors that change documents through the log (``commit`` in ``actors.configuration``).

    Each document has one such actor in canopy, which makes its changes one after the other (the
    view evaluator under its lock, the session tree actor and the controller being synchronous
    actors), the outcome of one decided before the next is appended -- which ``decide`` relies on:
    here, a change of a document waits for the one before it."""

    def __init__(self, sim: Sim, node: SimNode) -> None:
        super().__init__(sim.world, f"services@{node.name}", node)
        self.sim = sim
        self.made = 0
        self.failed = 0
        self.unknown = 0
        self.waiting: dict[str, deque[int]] = {}

    def start(self) -> None:
        self.waiting = {}

    def stop(self, clean: bool) -> None:
        self.waiting = {}

    def change(self, name: str, number: int) -> None:
        """Append document ``{"change": number}`` as ``name``'s new version (after the changes of
        ``name`` before it)."""
        if self.node.deferred(self.change, name, number):
            return
        if not self.running:
            return
        queue = self.waiting.setdefault(name, deque())
        queue.append(number)
        if len(queue) == 1:
            self._append(name, number)

    def _done(self, name: str, incarnation: int) -> None:
        if not self.current(incarnation):
            return
        queue = self.waiting[name]
        queue.popleft()
        if queue:
            self._append(name, queue[0])

    def _append(self, name: str, number: int) -> None:
        config = self.sim.config
        assert config is not None
        writer = config.writer
        document = {"change": number}
        incarnation = self.incarnation
        if writer is None:
            self.failed += 1
            self.world.at(0, self._done, name, incarnation)
            return

        def appended(position: Any, error: BaseException | None) -> None:
            if not self.current(incarnation):
                return
            if error is None:
                self.made += 1
                config.checker.acknowledged(name, document, position)
            elif type(error) is NotCommitted:
                self.failed += 1
                config.checker.refused(name, document)
            else:  # the writer went away during it, or lost track of it: ask until one recovered the log
                self.world.note("config", name, number, "outcome unknown", type(error).__name__)
                ask(self.world.now_ns + OUTCOME_NS)
                return
            self._done(name, incarnation)

        def ask(deadline: int) -> None:
            target = config.writer
            if not self.current(incarnation):
                return
            if target is None:
                self.unknown += 1
                self._done(name, incarnation)
                return
            self.sim.calls.call(self, target, "get_documents", (), CALL_MS,
                                lambda documents, error: outcome(documents, error, deadline))

        def outcome(documents: Any, error: BaseException | None, deadline: int) -> None:
            if not self.current(incarnation):
                return
            if error is not None:
                if self.world.now_ns < deadline:
                    self.world.at(ASK_AGAIN_NS, ask, deadline)
                    return
                self.unknown += 1  # NotCommitted to the client, outcome not known: either is allowed
            else:
                try:
                    decide(documents, name, document)
                except NotCommitted:
                    self.failed += 1
                    config.checker.refused(name, document)
                else:
                    self.made += 1
                    config.checker.acknowledged(name, document, None)
            self._done(name, incarnation)

        self.world.note("config", name, number)
        self.sim.calls.call(self, writer, "append", (name, document), 3_600_000, appended)


class SimConfiguration:
    """The configuration log's processes and stores in one run, and the controller's part."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.stores: dict[str, ConfigLogStore] = {}
        self.agents: dict[str, SimAgent] = {}
        self.writer: SimWriter | None = None
        self.checker = ConfigChecker(sim)
        self._made = 0
        self.tended_ns = 0

    def store(self, node: str) -> ConfigLogStore:
        found = self.stores.get(node)
        if found is None:
            found = self.stores[node] = ConfigLogStore.in_memory()
        return found

    def close(self) -> None:
        for store in self.stores.values():
            store.close()

    # -- the controller's part ---------------------------------------------------------------------

    def copies_on(self, nodes: dict[str, Any]) -> bool:
        """A running copy on each node of ``nodes`` (``{name: Node}``): the one it has, or one made
        again (its node came back under a new id, or it was stopped); whether the set changed."""
        sim = self.sim
        changed = set(self.agents) != set(nodes)
        agents = {}
        for name, node in nodes.items():
            agent = self.agents.get(name)
            if agent is None or agent.dead or agent.pinned != node.id:
                self._made += 1
                agent = SimAgent(self, sim.nodes[name], f"config-agent@{name}#{self._made}", node.id)
                if str(sim.nodes[name].id) == node.id and sim.nodes[name].running():
                    agent.boot()
                else:
                    agent.dead = True
                changed = True
            agents[name] = agent
        self.agents = agents
        return changed

    def start(self, cluster: SimCluster, nodes: dict[str, Any], fresh: bool) -> None:
        """The controller starts the log (``fresh``: a new instance, a new writer) or adopts it;
        raises when the writer did not recover."""
        if fresh or self.writer is None or self.writer.dead:
            if self.writer is not None:
                self.writer.kill()
            self.writer = SimWriter(self.sim, cluster.caller.node)
            self.writer.boot()
        self.copies_on(nodes)
        self.recover(cluster, START_S)

    def recover(self, cluster: SimCluster, bound: float) -> None:
        """The writer's start, asked again every ``LOG_START_ATTEMPT`` (``_start_config_log``)."""
        assert self.writer is not None
        world = self.sim.world
        deadline = world.now_ns + round(bound * SECOND)
        while True:
            wait = max(1.0, min(LOG_START_ATTEMPT, (deadline - world.now_ns) / SECOND))
            [(_, error)] = cluster.outcomes([cluster.call(self.writer, "start", dict(self.agents))], wait)
            if not isinstance(error, CallTimeout) or world.now_ns >= deadline:
                break
        if error is not None:
            raise error

    def follow_nodes(self, cluster: SimCluster, nodes: dict[str, Any]) -> None:
        """Each alive node keeps a copy; the writer is told of a change, or else tended every
        ``TEND_EVERY`` (neither waited for)."""
        if self.writer is None:
            return
        now = self.sim.world.now_ns
        if self.copies_on(nodes):
            cluster.call(self.writer, "set_agents", dict(self.agents))
        elif now - self.tended_ns >= round(TEND_EVERY * SECOND):
            self.tended_ns = now
            cluster.call(self.writer, "tend", dict(self.agents))

    def stop_all(self) -> None:
        """serve stops: every process of the log ends (the stores stay)."""
        for process in [*self.agents.values(), *([self.writer] if self.writer is not None else [])]:
            process.kill(clean=True)
        self.agents, self.writer = {}, None

    # -- convergence -------------------------------------------------------------------------------

    def unconverged(self, alive: dict[str, int]) -> str | None:
        writer = self.writer
        if writer is None or not writer.running or not writer.writer.ready:
            return "the configuration log's writer has not recovered"
        if not writer.idle:
            return "the configuration log's writer is busy"
        state = writer.writer
        for name, raylet in alive.items():
            agent = self.agents.get(name)
            if agent is None or not agent.running or agent.pinned != str(raylet):
                return f"no running configuration copy on {name}"
            if agent.store.state().committed != state.committed or agent.store.documents() != state.documents:
                return f"the configuration copy on {name} is not caught up"
        self.checker.kept(state.documents)
        return None


class ConfigChecker:
    """The configuration log's invariants (see the module docstring)."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        #: position -> the entry committed there (the first copy to commit it says which)
        self.history: dict[int, Entry] = {}
        #: JSON of each document a change was acknowledged for -> (name, its position if known)
        self.acked: dict[str, tuple[str, int | None]] = {}
        #: JSON of each document whose change was refused (it must never be committed)
        self.refused_documents: dict[str, str] = {}

    def _fail(self, kind: str, detail: str) -> BaseException:
        return self.sim.checker.fail(kind, detail)

    def committed(self, agent: SimAgent, entries: list[Entry]) -> None:
        """``agent``'s copy committed ``entries`` (its others committed before)."""
        for entry in entries:
            first = self.history.setdefault(entry.position, entry)
            if first != entry:
                raise self._fail("configuration log diverged", f"{agent} committed {entry} at {entry.position}, "
                                                               f"where {first} was committed before")
            if entry.document in self.refused_documents:
                raise self._fail("refused configuration change made", f"{agent} committed {entry}, whose append "
                                                                      "was answered as not made")
        state: LogState = agent.store.state()
        expected = self.documents_at(state.committed)
        found = agent.store.documents()
        if found != expected:
            raise self._fail("configuration log diverged", f"{agent} at committed {state.committed} holds {found}, "
                                                           f"the committed history {expected}")

    def documents_at(self, position: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p in sorted(self.history):
            if p <= position and self.history[p].name != WRITER:
                out[self.history[p].name] = self.history[p].value()
        return out

    def acknowledged(self, name: str, document: Any, position: int | None) -> None:
        self.acked[json.dumps(document, sort_keys=True)] = (name, position)

    def refused(self, name: str, document: Any) -> None:
        text = json.dumps(document, sort_keys=True)
        if any(e.document == text for e in self.history.values()):
            raise self._fail("refused configuration change made", f"the change of {name} to {text} was answered "
                                                                  "as not made, and is committed")
        self.refused_documents[text] = name

    def kept(self, documents: dict[str, Any]) -> None:
        """At convergence: every acknowledged change is committed, and is its document's newest
        version or was followed by a newer one."""
        at = {e.document: p for p, e in self.history.items()}
        for text, (name, position) in self.acked.items():
            found = at.get(text)
            if found is None or (position is not None and found != position):
                raise self._fail("lost configuration change", f"the change of {name} to {text} was acknowledged "
                                 f"(at {position}); the committed history has it at {found}")
            newer = any(e.name == name and p > found for p, e in self.history.items())
            if not newer and json.dumps(documents.get(name), sort_keys=True) != text:
                raise self._fail("lost configuration change", f"{name} is {documents.get(name)} after the change "
                                                              f"to {text} was acknowledged")

