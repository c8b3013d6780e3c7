"""Simulated nodes, the processes on them, and Ray calls between processes.

A :class:`SimNode` is a machine with a raylet: powered or not, *paused* until some time (a
stopped VM: nothing on it runs, what arrives waits) and known to the head by an ``id`` that
changes whenever its raylet starts again (``alive`` while the head counts it in). A
:class:`Process` lives on one node: Ray restarts it after :data:`RESTART_NS` when it crashes,
never once it was killed or its node left; each start is a new ``incarnation``, and every
callback into a process checks that the incarnation it was made for still runs.

:class:`Calls` carries Ray calls as two network messages (FIFO per caller and callee): the
callee's :meth:`Process.handle` gets ``(method, args, reply)`` and answers, now or later
(a handover waits for its drain). A call to a process that is down fails with
:class:`ActorUnavailable` (it is restarting) or :class:`ActorDied` (for good); a lost message
or a callee across a cut makes the caller's :class:`CallTimeout`, while the call may still run
later. Every entry into a node's processes goes through :meth:`SimNode.deferred`: while the
node is paused it runs again when the pause ends, in the order it came.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tests.simulation.network import Network
from tests.simulation.world import MS, Timer, World

__all__ = ["ActorDied", "ActorUnavailable", "CallError", "CallTimeout", "Calls", "Process", "SimNode"]

#: Ray restarts a crashed actor after this long
RESTART_NS = 500 * MS

#: what a call answers: (result, None) or (None, the exception)
Done = Callable[[Any, "BaseException | None"], None]


class CallError(Exception):
    """A Ray call that did not get its answer (``ClusterError`` in the design)."""


class ActorUnavailable(CallError):
    """The callee crashed and Ray is restarting it."""


class ActorDied(CallError):
    """The callee is gone for good: killed, or its node left the cluster."""


class CallTimeout(CallError):
    """No answer within the caller's timeout (the call may still run)."""


class SimNode:
    """One machine: its name, its raylet's id, power and pauses, and the processes on it."""

    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        self.id = 1  # the raylet's id: new at each start of the raylet
        self.alive = True  # the head counts this raylet in
        self.powered = True
        self.paused_until = 0
        self.processes: list[Process] = []

    def __repr__(self) -> str:
        return self.name

    def deferred(self, fn: Callable[..., object], *args: Any) -> bool:
        """True when the node is paused: ``fn(*args)`` then runs when the pause ends."""
        world = self.world
        if self.paused_until <= world.now_ns:
            return False
        world.at(self.paused_until - world.now_ns, fn, *args)
        return True

    def running(self) -> bool:
        return self.powered and self.alive


class Process:
    """A process on :attr:`node` (subclasses: :meth:`start`, :meth:`stop`, :meth:`handle`)."""

    def __init__(self, world: World, name: str, node: SimNode) -> None:
        self.world = world
        self.name = name
        self.node = node
        self.incarnation = 0
        self.running = False
        self.dead = False  # killed, or its node left: never restarted
        self._restart: Timer | None = None
        node.processes.append(self)

    def __repr__(self) -> str:
        return f"{self.name}/{self.incarnation}"

    def boot(self) -> None:
        """Start a new incarnation (Ray creates or restarts the actor)."""
        self._restart = None
        if self.dead or self.running or not self.node.running():
            return
        self.incarnation += 1
        self.running = True
        self.world.note("start", self.name, self.incarnation)
        self.start()

    def crash(self) -> None:
        """The process dies; Ray starts it again soon (the operating system keeps its files)."""
        if self.running:
            self.running = False
            self.world.note("crash", self.name, self.incarnation)
            self.stop(clean=False)
        if not self.dead and self._restart is None:
            self._restart = self.world.at(RESTART_NS, self.boot)

    def kill(self, clean: bool = False) -> None:
        """Gone for good (``clean``: stopped, as ``stop()`` at a shutdown: its journal closes)."""
        self.dead = True
        if self._restart is not None:
            World.cancel(self._restart)
            self._restart = None
        if self.running:
            self.running = False
            self.world.note("kill" if not clean else "stop", self.name, self.incarnation)
            self.stop(clean=clean)

    def current(self, incarnation: int) -> bool:
        """Whether a callback made for ``incarnation`` may still run."""
        return self.running and incarnation == self.incarnation

    # -- what a kind of process does

    def start(self) -> None:
        raise NotImplementedError

    def stop(self, clean: bool) -> None:
        raise NotImplementedError

    def handle(self, method: str, args: tuple[Any, ...], reply: Done) -> None:
        raise NotImplementedError(method)


class _Call:
    __slots__ = ("caller", "incarnation", "target", "method", "args", "done", "finished", "timer")

    def __init__(self, caller: Process, target: Process, method: str, args: tuple[Any, ...], done: Done) -> None:
        self.caller = caller
        self.incarnation = caller.incarnation
        self.target = target
        self.method = method
        self.args = args
        self.done = done
        self.finished = False
        self.timer: Timer | None = None


class Calls:
    """Ray calls over a network's messages."""

    def __init__(self, world: World, network: Network) -> None:
        self.world = world
        self.network = network

    def call(self, caller: Process, target: Process, method: str, args: tuple[Any, ...], timeout_ms: int,
             done: Done) -> None:
        """``target.method(*args)``; ``done(result, error)`` runs once in ``caller`` (not at all
        when the caller's incarnation is gone by then)."""
        call = _Call(caller, target, method, args, done)
        call.timer = self.world.at(timeout_ms * MS, self._timeout, call)
        self.network.message(caller.node.name, target.node.name, (caller.name, target.name), self._arrive, call)

    def _arrive(self, call: _Call) -> None:
        target = call.target
        if target.node.deferred(self._arrive, call):
            return
        if target.dead or not target.node.running():
            self._reply(call, None, ActorDied(f"{target.name} is dead"))
        elif not target.running:
            self._reply(call, None, ActorUnavailable(f"{target.name} is restarting"))
        else:
            target.handle(call.method, call.args, functools.partial(self._reply, call))

    def _reply(self, call: _Call, result: Any, error: BaseException | None) -> None:
        self.network.message(call.target.node.name, call.caller.node.name, (call.target.name, call.caller.name),
                             self._answered, call, result, error)

    def _answered(self, call: _Call, result: Any, error: BaseException | None) -> None:
        if call.caller.node.deferred(self._answered, call, result, error):
            return
        self._finish(call, result, error)

    def _timeout(self, call: _Call) -> None:
        if call.caller.node.deferred(self._timeout, call):
            return
        self._finish(call, None, CallTimeout(f"{call.target.name}.{call.method}: no answer"))

    @staticmethod
    def _finish(call: _Call, result: Any, error: BaseException | None) -> None:
        if call.finished:
            return
        call.finished = True
        if call.timer is not None:
            World.cancel(call.timer)
        if call.caller.current(call.incarnation):
            call.done(result, error)
