"""ControllerActor: the named, detached actor that owns one canopy instance.

It creates the partitions and one gateway per alive node, reports where the
gateways listen, and tears everything down again. Start-up is all or
nothing: if any gateway cannot start (its port is taken, say) every actor
created so far is killed and the error is raised to the caller. While it
runs, :meth:`ControllerActor.check` says which of the actors that serve
(partitions, gateways, the view evaluator, the session tree actor) crashed,
brings back the ones Ray restarted, and says which died for good.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import time
import uuid
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors import gateway, partition, session_trees, views
from cluster import names
from replication.configuration import SECURITY_FILE, ConfigurationFile
from sessions.security import ADMINISTRATOR, SecurityStore, default_store

START_TIMEOUT = 120.0
STOP_TIMEOUT = 15.0
RECOVER_TIMEOUT = 60.0
#: restarts in a minute after which an actor counts as dead for good
CRASH_LOOP = 5


class StartupError(RuntimeError):
    pass


def death_reason(error: BaseException) -> str:
    """One line out of Ray's many-line account of an actor's death."""
    text = str(error)
    why = re.search(r"The actor is dead because ([^.\n]+)", text)
    pid = re.search(r"^\s*pid: (\d+)$", text, re.MULTILINE)
    exit_type = re.search(r"Worker exit type: (\w+)", text)
    details = [f"pid {pid.group(1)}"] if pid else []
    details += [exit_type.group(1)] if exit_type else []
    head = why.group(1) if why else type(error).__name__
    return head + (f" ({', '.join(details)})" if details else "")


class Liveness:
    """Which actors crashed, came back or died for good, found without waiting on any of them.

    :meth:`poll` keeps one ``incarnation()`` call in flight per actor and reads the
    answers that have come in. Each actor answers a token it made when it started, so:

    * ``ActorUnavailableError`` -- the actor crashed and Ray is restarting it (``crashed``);
    * a token other than the last one seen -- it was restarted (``restarted``): whoever
      owns it must bring it back into the instance (start it, push what it missed);
    * ``ActorDiedError`` -- it is dead for good (``dead``): Ray gave up on it, or it was
      killed; so is one restarted more than :data:`CRASH_LOOP` times in a minute.

    A call still pending means the actor is busy (a partition stalled by a costly
    selector, say), which is not a crash."""

    def __init__(self) -> None:
        self._pending: dict[str, Any] = {}  # actor name -> the ObjectRef of its probe
        self._dead: dict[str, str] = {}  # actor name -> why
        self._known: dict[str, str] = {}  # actor name -> incarnation last seen
        self._down: set[str] = set()
        self._restarts: dict[str, list[float]] = {}  # actor name -> when it said it restarted

    def restarted(self, name: str) -> None:
        """An actor's constructor said it started again (see :mod:`actors.supervision`)."""
        now = time.monotonic()
        self._restarts[name] = [t for t in self._restarts.get(name, []) if now - t < 60] + [now]

    def baseline(self, actors: dict[str, Any], timeout: float) -> None:
        """Learn each actor's incarnation now (at start), so that a restart right
        after it is seen as one."""
        tokens = ray.get([handle.incarnation.remote() for handle in actors.values()], timeout=timeout)
        self._known.update(zip(actors, tokens))

    def poll(self, actors: dict[str, Any]) -> list[tuple[str, str, str]]:
        """``[(name, "crashed" | "restarted" | "dead", detail)]`` since the last poll."""
        events: list[tuple[str, str, str]] = []
        for name, handle in actors.items():
            if name not in self._pending and name not in self._dead:
                self._pending[name] = handle.incarnation.remote()
        if not self._pending:
            return events
        ready, _ = ray.wait(list(self._pending.values()), num_returns=len(self._pending), timeout=0)
        answered = set(ready)
        for name, ref in list(self._pending.items()):
            if ref not in answered:
                continue
            del self._pending[name]
            try:
                incarnation = ray.get(ref, timeout=0)
            except ray.exceptions.ActorUnavailableError as e:
                if name not in self._down:
                    self._down.add(name)
                    events.append((name, "crashed", death_reason(e)))
                continue
            except ray.exceptions.RayActorError as e:
                self._dead[name] = death_reason(e)
                events.append((name, "dead", self._dead[name]))
                continue
            before = self._known.get(name)
            self._known[name] = incarnation
            if before is not None and before != incarnation:
                if name not in self._down:  # crashed and came back between two probes
                    events.append((name, "crashed", "its process died"))
                self._down.discard(name)
                now = time.monotonic()
                recent = [t for t in self._restarts.get(name, []) if now - t < 60]
                if len(recent) > CRASH_LOOP:
                    self._dead[name] = f"it crashed {len(recent)} times in a minute"
                    events.append((name, "dead", self._dead[name]))
                else:
                    events.append((name, "restarted", ""))
        return events


class ControllerActor:
    """Also the owner of the security store (``security.json`` in the data
    directory): it applies changes, persists them and pushes every new
    version to the gateways before answering."""

    def __init__(self, config: dict[str, Any], home_node: str | None = None) -> None:
        self.config = config
        self.home_node = home_node
        self.partitions: list[Any] = []
        self.gateways: list[Any] = []
        self.session_trees: Any = None
        self.views: Any = None
        self.gateway_info: list[dict[str, Any]] = []
        self.started_at: float | None = None
        self.generated_admin_password: str | None = None
        self._security_file = ConfigurationFile(config["data_dir"], SECURITY_FILE)
        self.security = self._load_security()
        self._liveness = Liveness()

    def _load_security(self) -> SecurityStore:
        stored = self._security_file.load()
        configured = self.config.get("admin_password")
        if stored is None:
            password = configured or secrets.token_urlsafe(12)
            if not configured:
                self.generated_admin_password = password
            store = default_store(password)
        else:
            store = SecurityStore.from_dict(stored)
            if configured:
                if "admin" in store.principals:
                    store = store.apply([["set_password", "admin", configured]])
                else:
                    store = store.apply([["add_principal", "admin", configured, [ADMINISTRATOR]]])
        allow = self.config.get("allow_anonymous")
        if allow is not None and allow != store.anonymous_allowed:
            store = store.apply([["set_anonymous", bool(allow), sorted(store.anonymous_roles)]])
        self._security_file.save(store.to_dict())
        return store

    def _nodes(self) -> list[dict[str, Any]]:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        alive.sort(key=lambda n: (n["NodeID"] != self.home_node, n.get("NodeManagerAddress", ""), n["NodeID"]))
        return alive

    def start(self) -> dict[str, Any]:
        count = self.config["partitions"]
        partition_cls = partition.remote_class()
        gateway_cls = gateway.remote_class()
        try:
            self.partitions = [
                partition_cls.options(name=names.partition(i)).remote(i, count, self.config) for i in range(count)
            ]
            port = self.config["port"]
            nodes = self._nodes()
            home = NodeAffinitySchedulingStrategy(nodes[0]["NodeID"], soft=False)
            self.session_trees = session_trees.remote_class().options(
                name=names.SESSION_TREES, scheduling_strategy=home
            ).remote(self.config["data_dir"])
            trees = ray.get(self.session_trees.snapshot.remote(), timeout=START_TIMEOUT)
            security = self.security.to_dict()
            self.views = views.remote_class().options(name=names.VIEWS, scheduling_strategy=home).remote(
                self.partitions, self.config, security
            )
            ray.get(self.views.start.remote(), timeout=START_TIMEOUT)
            for k, node in enumerate(nodes):
                gateway_id = f"gw{k}-{uuid.uuid4().hex[:8]}"
                strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
                self.gateways.append(
                    gateway_cls.options(name=names.gateway(k), scheduling_strategy=strategy).remote(
                        gateway_id, self.partitions, self.config, self.config["host"], port + k if port else 0,
                        security, trees, self.session_trees,
                    )
                )
            self.gateway_info = ray.get([g.start.remote() for g in self.gateways], timeout=START_TIMEOUT)
            ray.get(
                [g.set_peers.remote(self.gateways) for g in self.gateways]
                + [self.session_trees.set_gateways.remote(self.gateways)],
                timeout=START_TIMEOUT,
            )
        except Exception as e:
            self._kill_all()
            cause = e.cause if isinstance(e, ray.exceptions.RayTaskError) and e.cause else e
            raise StartupError(_explain(cause, self.config)) from None
        self._liveness.baseline({name: handle for name, (_, handle) in self._serving().items()}, START_TIMEOUT)
        self.started_at = time.time()
        return self.describe()

    def update_security(self, commands: list[Any]) -> int:
        """Apply security commands, persist, push to every gateway; return the new version."""
        store = self.security.apply(commands)
        self._security_file.save(store.to_dict())
        self.security = store
        wire = store.to_dict()
        ray.get([g.set_security.remote(wire) for g in self.gateways] + [self.views.set_security.remote(wire)], timeout=60)
        return store.version

    def take_generated_password(self) -> str | None:
        """The admin password generated at first start, handed out once."""
        password, self.generated_admin_password = self.generated_admin_password, None
        return password

    def describe(self) -> dict[str, Any]:
        return {
            "namespace": self.config["namespace"],
            "partitions": len(self.partitions),
            "gateways": self.gateway_info,
            "urls": [g["url"] for g in self.gateway_info],
            "started_at": self.started_at,
            "controller_host": socket.gethostname(),
            "controller_pid": os.getpid(),
        }

    def started(self, name: str) -> None:
        """Called by every serving actor's constructor: after the instance started,
        a start is a restart (counted, to tell a crash loop)."""
        if self.started_at is not None:
            self._liveness.restarted(name)

    def check(self) -> list[dict[str, str]]:
        """What happened to the serving actors since the last call:
        ``[{"name", "actor" (its class), "event", "reason"}]`` with event ``crashed``
        (Ray restarts it), ``recovered`` (it is back and serving), ``dead`` (for good),
        or ``failed`` (it came back but could not be brought into the instance).

        Cheap and never blocks on a busy actor (see :class:`Liveness`), except to bring
        a restarted actor back; canopy serve calls it every second."""
        serving = self._serving()
        report = []
        for name, event, reason in self._liveness.poll({name: handle for name, (_, handle) in serving.items()}):
            kind, handle = serving[name]
            if event == "restarted":
                try:
                    self._recover(name, handle)
                    event, reason = "recovered", ""
                except Exception as e:
                    event, reason = "failed", f"{type(e).__name__}: {e}"
            report.append({"name": name, "actor": kind, "event": event, "reason": reason})
        return report

    def _recover(self, name: str, handle: Any) -> None:
        """Bring a restarted actor back into the instance: it started afresh from
        its creation arguments, so it is started again and told what changed since.
        A partition needs nothing: it recovers its topics from its journal, and the
        links reconnect to it by themselves."""
        security = self.security.to_dict()
        if handle in self.gateways:
            k = self.gateways.index(handle)
            trees = ray.get(self.session_trees.snapshot.remote(), timeout=RECOVER_TIMEOUT)
            ray.get(handle.set_security.remote(security), timeout=RECOVER_TIMEOUT)
            ray.get(handle.set_session_trees.remote(trees), timeout=RECOVER_TIMEOUT)
            self.gateway_info[k] = ray.get(handle.start.remote(), timeout=RECOVER_TIMEOUT)
            ray.get(handle.set_peers.remote(self.gateways), timeout=RECOVER_TIMEOUT)
        elif handle is self.views:
            ray.get(handle.set_security.remote(security), timeout=RECOVER_TIMEOUT)
            ray.get(handle.start.remote(), timeout=RECOVER_TIMEOUT)
        elif handle is self.session_trees:
            ray.get(handle.set_gateways.remote(self.gateways), timeout=RECOVER_TIMEOUT)

    def _serving(self) -> dict[str, tuple[str, Any]]:
        actors = {
            names.partition(i): (partition.PartitionActor.__name__, p) for i, p in enumerate(self.partitions)
        }
        actors.update({names.gateway(k): (gateway.GatewayActor.__name__, g) for k, g in enumerate(self.gateways)})
        if self.views is not None:
            actors[names.VIEWS] = (views.ViewEvaluatorActor.__name__, self.views)
        if self.session_trees is not None:
            actors[names.SESSION_TREES] = (session_trees.SessionTreeActor.__name__, self.session_trees)
        return actors

    def stats(self) -> dict[str, Any]:
        return {
            "partitions": ray.get([p.stats.remote() for p in self.partitions], timeout=30),
            "gateways": ray.get([g.stats.remote() for g in self.gateways], timeout=30),
            "views": ray.get(self.views.stats.remote(), timeout=30) if self.views is not None else None,
        }

    def shutdown(self) -> None:
        if self.gateways:
            try:
                ray.get([g.stop.remote() for g in self.gateways], timeout=STOP_TIMEOUT)
            except Exception:  # best effort: the actors are killed next anyway
                pass
        if self.views is not None:
            try:
                ray.get(self.views.stop.remote(), timeout=STOP_TIMEOUT)
            except Exception:
                pass
        if self.partitions:
            try:  # their journals get what waits for an fsync
                ray.get([p.stop.remote() for p in self.partitions], timeout=STOP_TIMEOUT)
            except Exception:
                pass
        self._kill_all()

    def _kill_all(self) -> None:
        extra = [h for h in (self.session_trees, self.views) if h is not None]
        for handle in [*self.gateways, *self.partitions, *extra]:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:
                pass
        self.gateways, self.partitions, self.gateway_info, self.session_trees, self.views = [], [], [], None, None


def _explain(error: BaseException, config: dict[str, Any]) -> str:
    if isinstance(error, OSError) and error.errno in (98, 48):  # EADDRINUSE
        return (
            f"cannot listen on {config['host']}:{config['port']}: the address is already in use "
            "(is another canopy or another server running there?)"
        )
    return f"canopy failed to start: {type(error).__name__}: {error}"


def remote_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=0)(ControllerActor)
