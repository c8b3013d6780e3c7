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

import functools
import json
import logging
import os
import secrets
import socket
import time
import uuid
import warnings
from collections.abc import Callable, Iterable
from typing import Any, cast
from urllib.parse import urlsplit

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

# The actor modules this controller makes actors of (gateway, partition, session_trees, views) are
# imported where it makes them: Ray loads this module in every process that holds a handle to
# the controller -- each of canopy's actors, which tells it when it starts -- and those modules
# with it would be some 150 more modules and a fifth of a second of every actor's start.
from actors import configuration, names
from actors.locks import LockKeeper
from actors.node_control import NodeControl
from actors.cluster import ControlEvent, RayCluster
from actors.liveness import Liveness, death_reason
from actors.replicas import NodeLeft, PartitionManager, ReplicaSet
from actors.settings import InstanceSettings
from replication.config_writer import LOG_START_ATTEMPT, TEND_EVERY
from replication.configuration import SECURITY_FILE, SESSION_TREES_FILE, VIEWS_FILE
from replication.nodes import LABEL, Node, alive_by_name, from_ray
from sessions.collectors import CollectorError, Collectors, from_dict
from sessions.security import ADMINISTRATOR, SecurityStore, default_store

log = logging.getLogger("canopy.controller")
START_TIMEOUT = 120.0
STATUS_TIMEOUT = 3.0
#: the gateway statistics a status shows under "guard": what clients attempted and were refused
GUARD_STATS = ("login", "unexpected_errors", "connection_addresses")
STOP_TIMEOUT = 15.0
RECOVER_TIMEOUT = 60.0
#: how long a restarted controller waits for each node's configuration copy before making it again
AGENT_TIMEOUT = 10.0
#: how many security changes the stored store remembers by id (see ``update_security``)
CHANGES_KEPT = 64


class StartupError(RuntimeError):
    pass


def gateway_port(port: int, info: list[dict[str, Any]], nodes: list[str], node: str, same: bool = False) -> int:
    """The port of a new gateway on ``node``, given every gateway's ``info`` (its url and
    whether it was lost) and node so far: the port its lost gateway had (a node that
    rejoins is found at the URL its clients know), else the first of ``port`` + k that
    no gateway ever had; 0 (any) when ``port`` is 0; ``port`` itself when every gateway
    listens on the same port (``gateway_ports = "same"``: nodes with addresses of their own)."""
    if not port or same:
        return port
    ports: list[int | None] = [urlsplit(str(i["url"])).port if i.get("url") else None for i in info]
    live = {p for p, i in zip(ports, info) if not i.get("lost")}
    for k in reversed(range(len(info))):
        known = ports[k]
        if nodes[k] == node and known is not None and known not in live:
            return known
    return next(port + k for k in range(len(ports) + 1) if port + k not in set(ports))


def on_node(node: Node) -> dict[str, Any]:
    """Ray's options that hold an actor to ``node`` for good: by its canopy label when it has one,
    so that Ray restarts the actor there when the node comes back under a new Ray id (the head
    after ``canopy cluster kill-head``, a node added again under its name), and by its Ray id
    otherwise (the actor goes with the node)."""
    if node.labelled:
        return {"label_selector": {LABEL: node.name}}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node.id, soft=False)}


def pinned(node_id: str) -> dict[str, Any]:
    """:func:`on_node` for the node of Ray id ``node_id`` (canopy serve's, for the controller)."""
    node = next((n for n in from_ray(ray.nodes()) if n.id == node_id and n.alive), None)
    if node is None:
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}
    return on_node(node)


def _restarted() -> bool:
    """Whether Ray restarted this actor (the runtime context's question, without the
    deprecation warning Ray's own implementation prints on every controller start)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)


class ControllerActor:
    """Also the owner of the security store: it applies a change, commits it to the
    replicated configuration log (:mod:`actors.configuration`) and pushes the new
    version to the gateways before answering."""

    def __init__(self, config: InstanceSettings, home_node: str | None = None, adopt: bool = False) -> None:
        self.config = config
        self.home_node = home_node
        self.cluster = RayCluster(config)
        self.replicas = ReplicaSet(config, config.partitions, self.cluster)
        self.partition_manager = PartitionManager(self.replicas)
        self.gateways: list[Any] = []
        #: the name of the node each gateway runs on, and the gateways whose node was lost
        self.gateway_nodes: list[str] = []
        self._routes_pushed: list[tuple[int, str]] = []
        self.session_trees: Any = None
        self.views: Any = None
        #: fan-out connection name -> its FanoutLinkActor
        self.fanouts: dict[str, Any] = {}
        #: fan-out connection name -> (definition, its first link's ordinal, from the configuration file?)
        self.fanout_defs: dict[str, Any] = {}
        #: the metric collectors (sessions/collectors.py), pushed to every gateway
        self.collectors = Collectors()
        #: the session locks (sessions/locks.py), committed and pushed to every gateway
        self.locks = LockKeeper(lambda: self.config_log, self._live_gateways)
        #: whether a gateway process went since the locks were last swept of its sessions
        self._lock_sweep_due = False
        self._tended_at = 0.0  # when the configuration log's writer was last tended
        self.gateway_info: list[dict[str, Any]] = []
        self.started_at: float | None = None
        self.generated_admin_password: str | None = None
        #: the configuration log's writer and each node's copy (``{node name: NodeAgentActor}``)
        self.config_log: Any = None
        self.agents: dict[str, Any] = {}
        #: the Ray id of the node each agent this controller made was made on
        self.agent_nodes: dict[str, str] = {}
        self.security = default_store(secrets.token_urlsafe(12))  # until start() reads the log
        #: the ids of the last security changes made, stored with the store
        self.security_changes: list[str] = []
        self._liveness = Liveness(self.cluster)
        #: the steps of :meth:`check` failing now, and what they said
        self._failing: dict[str, str] = {}
        #: what Liveness saw that a check could not handle yet (its nodes or services step failed)
        self._events_due: list[tuple[str, str, str]] = []
        self.node_control = NodeControl(config.local_nodes, home_node, bool(config.gcs_redis_address),
                                        float(config.gcs_reconnect_timeout), config.node_namespaces)
        #: what taking the instance over after a restart of this actor did (said by the next check)
        self._adopted: list[str] = []
        #: when canopy serve last called check (a new serve takes over only an unsupervised controller)
        self._checked_at: float | None = None
        if adopt or _restarted():  # adopt: serve made this one after Ray gave the last one up
            self._adopt()

    def _security_document(self, store: SecurityStore) -> dict[str, Any]:
        return {**store.to_dict(), "changes": self.security_changes[-CHANGES_KEPT:]}

    def _stored_security(self, stored: dict[str, Any] | None) -> dict[str, Any] | None:
        """The store's description without the change ids kept beside it."""
        if stored is None:
            return None
        stored = dict(stored)
        self.security_changes = list(stored.pop("changes", []))
        return stored

    def _load_security(self, document: dict[str, Any] | None) -> SecurityStore:
        stored = self._stored_security(document)
        configured = self.config.admin_password
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
        allow = self.config.allow_anonymous
        if allow is not None and allow != store.anonymous_allowed:
            store = store.apply([["set_anonymous", bool(allow), sorted(store.anonymous_roles)]])
        if store.to_dict() != stored:
            ray.get(self.config_log.append.remote("security", self._security_document(store)), timeout=START_TIMEOUT)
        return store

    def _agent(self, node: Any) -> Any:
        """The configuration log's copy on ``node``, in its data directory (it goes with the node:
        one that comes back under a new Ray id gets a new one, :meth:`_agents_follow_nodes`)."""
        self.agent_nodes[node.name] = node.id
        return configuration.agent_class().options(
            name=names.agent(node.name), lifetime="detached",
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.id, soft=False),
        ).remote(node.data_dir(self.config.data_dir))

    @staticmethod
    def _absent(alive: dict[str, Any]) -> set[str]:
        """The canopy nodes (labelled) Ray lists as dead and not alive again under their name: one
        may hold a partition's newest copy. (A node gone for good stays in Ray's table, and a
        partition that needs it waits: see ``ReplicaSet._replan``.)"""
        return {n.name for n in from_ray(ray.nodes()) if n.labelled} - set(alive)

    def _nodes(self) -> list[Any]:
        """The alive nodes, the home node (the controller's) first."""
        alive = list(alive_by_name(from_ray(ray.nodes())).values())
        alive.sort(key=lambda n: (n.id != self.home_node, n.name))
        return alive

    @property
    def partitions(self) -> list[Any]:
        """The primary replica of each partition."""
        return [r.handle for r in self.replicas.routes()] if self.replicas.placements else []

    def _start_replicas(self) -> list[Any]:
        """Start the partitions on the alive nodes (the home node first, which it returns); when
        a node leaves before its journals are read, read Ray's nodes again and start over, for
        up to :data:`START_TIMEOUT`."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            nodes = self._nodes()
            try:
                alive = {n.name: n for n in nodes}
                self.replicas.start(alive, self._absent(alive))
                return nodes
            except NodeLeft as e:
                if time.monotonic() > deadline:
                    raise
                log.warning("%s; reading the nodes again", e)
                time.sleep(1.0)

    def _agents_on(self, nodes: list[Any]) -> None:
        """The configuration copies made before the replicas were placed, on the nodes the
        placement settled on: a node Ray listed then that left (an old raylet of a restarted
        cluster that registered once more) loses its copy, one new or back under a new Ray id gets
        one (a copy pinned to a gone node never answers, and the log needs a majority)."""
        for name in set(self.agents) - {n.name for n in nodes}:
            try:
                ray.kill(self.agents.pop(name), no_restart=True)
            except Exception:
                pass
            self.agent_nodes.pop(name, None)
        self.agents = self._copies_on(nodes)

    def _copies_on(self, nodes: Iterable[Any]) -> dict[str, Any]:
        """A configuration copy on each of ``nodes``: the one it has, or a new one (made again for a
        node back under a new Ray id: the head after kill-head; its old copy went with it)."""
        agents = {}
        for node in nodes:
            old = self.agents.get(node.name)
            if old is None:
                agents[node.name] = self._agent(node)
            elif self.agent_nodes.get(node.name, node.id) != node.id:
                agents[node.name] = _replace(old, functools.partial(self._agent, node))
            else:
                agents[node.name] = old
        return agents

    def _recover_config_log(self, listed: set[str], nodes: list[Any]) -> tuple[dict[str, Any], bool]:
        """The configuration log's writer, recovered from the copies (it outlives a controller);
        made again on this node when it is gone: Ray gives up a detached actor held to a node by
        its label when the node is declared dead before it comes back (the head, after a long
        outage under load). Its documents, and whether it was made again."""
        if names.CONFIG_LOG in listed:
            try:
                self.config_log = ray.get_actor(names.CONFIG_LOG)
                return self._start_config_log(START_TIMEOUT), False
            except (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnschedulableError, ValueError) as e:
                log.warning("the configuration log's writer is gone (%s); making it again", death_reason(e))
        return self._new_config_log(nodes[0]), True  # this controller's node (the home node first)

    def _start_config_log(self, timeout: float, imports: dict[str, str] | None = None) -> dict[str, Any]:
        """The writer recovers the log from the copies (:meth:`ConfigLogActor.start`); its
        documents. Asked again every :data:`LOG_START_ATTEMPT` seconds, until ``timeout``: an
        answer lost on its way would otherwise hold the whole start (a second start waits for the
        first under the writer's lock, then recovers again, under a higher term)."""
        deadline = time.monotonic() + timeout
        while True:
            call = (self.config_log.start.remote(self.agents, imports) if imports is not None
                    else self.config_log.start.remote(self.agents))
            try:
                documents: dict[str, Any] = ray.get(
                    call, timeout=max(1.0, min(LOG_START_ATTEMPT, deadline - time.monotonic())))
                return documents
            except ray.exceptions.GetTimeoutError:
                if time.monotonic() >= deadline:
                    raise
                log.warning("the configuration log's writer did not answer its start in %.0f s; asking again",
                            LOG_START_ATTEMPT)

    def _new_config_log(self, home: Any) -> dict[str, Any]:
        """A new writer of the configuration log on ``home``, which recovers the log from the
        copies, handed to the view evaluator and the session tree actor (they commit through
        it); its documents."""
        old, deadline = self.config_log, time.monotonic() + START_TIMEOUT
        if old is not None:
            try:
                ray.kill(old, no_restart=True)
            except Exception:
                pass
        while True:
            try:
                self.config_log = configuration.log_class().options(
                    name=names.CONFIG_LOG, lifetime="detached", **on_node(home)
                ).remote()
                break
            except ValueError:  # Ray has not released the dead writer's name yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        documents = self._start_config_log(START_TIMEOUT)
        ray.get([h.set_config_log.remote(self.config_log) for h in (self.session_trees, self.views)
                 if h is not None], timeout=RECOVER_TIMEOUT)
        return documents

    def _adopt(self) -> None:
        """Ray restarted this actor (its process died): take over the instance from the
        actors that serve it, which outlive it (they are detached). The configuration log
        is recovered first (this also waits out a change its writer was making for the
        dead controller), then the gateways, the view evaluator and the session tree
        actor are found by name, and the partition map is rebuilt from what each replica
        says it is (:meth:`ReplicaSet.adopt`); everything is then pushed the current
        security store and routes, which the dead controller may not have pushed."""
        import re

        # Ray may have restarted this actor on another node than its first: the head came back
        # under a new Ray id (canopy cluster kill-head), and this actor is held to it by its label
        self.home_node = self.node_control.home_node = ray.get_runtime_context().get_node_id()
        nodes = self._nodes()
        alive = {n.name: n for n in nodes}
        by_id = {n.id: n.name for n in nodes}
        listed = set(ray.util.list_named_actors())
        self.agents = {}
        for name, node in alive.items():
            self.agents[name] = ray.get_actor(names.agent(name)) if names.agent(name) in listed else self._agent(node)
        # a copy that went with its node is replaced (the head came back under a new Ray id; Ray may
        # not have released the dead copy's name yet): the log's writer needs a majority that answers
        answered = _gather({name: agent.state.remote() for name, agent in self.agents.items()}, AGENT_TIMEOUT)
        remade = []
        for name in sorted(set(self.agents) - set(answered)):
            self.agents[name] = _replace(self.agents[name], functools.partial(self._agent, alive[name]))
            remade.append(f"the configuration copy on {name} did not answer; made again")
        # found before the log: a writer made again is handed to them (_new_config_log)
        self.session_trees = ray.get_actor(names.SESSION_TREES) if names.SESSION_TREES in listed else None
        self.views = ray.get_actor(names.VIEWS) if names.VIEWS in listed else None
        documents, log_remade = self._recover_config_log(listed, nodes)
        if log_remade:
            remade.append("the configuration log's writer was gone; made again")
        stored = self._stored_security(documents.get("security"))
        if stored is not None:
            self.security = SecurityStore.from_dict(stored)
        self._fanout_defs(documents.get("fanout"))
        self.fanouts = {name: ray.get_actor(f"fanout-{name}") for name in self.fanout_defs if f"fanout-{name}" in listed}
        self.collectors = _stored_collectors(documents.get("collectors"))
        self.locks.load(documents.get("locks"), fresh=False)
        self._lock_sweep_due = True  # gateways may have gone while no controller ran
        found = {int(m.group(1)): n for n in listed if (m := re.fullmatch(names.GATEWAY_NAME, n))}
        for k in range(max(found, default=-1) + 1):
            handle = ray.get_actor(found[k]) if k in found else None
            try:
                info = (cast(dict[str, Any], ray.get(handle.start.remote(), timeout=RECOVER_TIMEOUT))
                        if handle else None)
                node = by_id.get(ray.get(handle.node.remote(), timeout=RECOVER_TIMEOUT)) if handle else None
            except Exception as e:
                log.warning("gateway %d did not answer the restarted controller: %s", k, e)
                info = node = None
            self.gateways.append(handle)
            self.gateway_nodes.append(node or "")
            self.gateway_info.append(info or {"gateway": names.gateway(k), "url": None, "lost": True})
        serving = {n: ray.get_actor(n) for n in listed if re.fullmatch(names.REPLICA_NAME, n)}
        self._adopted = remade + self.replicas.adopt(alive, serving, self._absent(alive))
        for name, handle in ((names.SESSION_TREES, self.session_trees), (names.VIEWS, self.views)):
            if handle is None:  # went with its node while no controller ran
                self._make_service(name, self._aside(nodes))
                self._adopted.append(f"{name} was gone; made again")
        self._routes_pushed = [(r.epoch, r.node) for r in self.replicas.routes()]
        security = self.security.to_dict()
        live = self._live_gateways()
        # first: a controller serve made anew (not restarted by Ray) is a new actor the gateways must ask
        me = ray.get_runtime_context().current_actor
        ray.get([g.set_controller.remote(me) for g in live], timeout=RECOVER_TIMEOUT)
        ray.get([g.set_security.remote(security) for g in live] + [g.set_routes.remote(self.replicas.routes())
                                                                     for g in live]
                + [g.set_peers.remote(live) for g in live]
                + [self.views.set_security.remote(security), self.views.set_routes.remote(self.replicas.routes()),
                   self.session_trees.set_gateways.remote(live)], timeout=RECOVER_TIMEOUT)
        self.started_at = time.time()
        self._liveness.baseline({name: handle for name, (_, handle) in self._serving().items()}, START_TIMEOUT)
        log.warning("the controller restarted and took the instance over: %s", "; ".join(self._adopted))

    def start(self) -> dict[str, Any]:
        """Start the instance. Each actor is a process of its own to start (about a second and a
        half of a core each), so those that do not need another's answer are made side by side:
        the configuration log's writer and copies while the partitions' replicas are placed (the
        log recovers once they are, on the nodes the placement settled on), the session tree actor
        beside the view evaluator, then the gateways."""
        from actors import gateway  # when needed: see the note on imports above
        gateway_cls = gateway.remote_class()
        try:
            port = self.config.port
            # the log's writer on the controller's node (Ray restarts both there when that node
            # comes back under its name: on_node), the view evaluator and the session tree actor
            # on another: re-created on a living node when theirs
            # is lost (see _services_follow_nodes; Ray's soft node affinity does not hold
            # a detached actor to its node, so the controller moves them itself)
            first = self._nodes()  # the home node first: the controller's, which does not change
            self.agents = {n.name: self._agent(n) for n in first}
            self.config_log = configuration.log_class().options(
                name=names.CONFIG_LOG, lifetime="detached", **on_node(first[0])
            ).remote()
            nodes = self._start_replicas()
            routes = self.replicas.routes()
            self._routes_pushed = [(r.epoch, r.node) for r in routes]
            self._agents_on(nodes)
            data_dir = self.config.data_dir
            imports = {name: os.path.join(data_dir, file) for name, file in
                       (("security", SECURITY_FILE), ("session_trees", SESSION_TREES_FILE), ("views", VIEWS_FILE))}
            documents = self._start_config_log(START_TIMEOUT, imports)
            self.security = self._load_security(documents.get("security"))
            self.collectors = _stored_collectors(documents.get("collectors"))
            self.locks.load(documents.get("locks"), fresh=True)
            aside = NodeAffinitySchedulingStrategy(self._aside(nodes).id, soft=False)
            from actors import session_trees  # when needed: see the note on imports above
            self.session_trees = session_trees.remote_class().options(
                name=names.SESSION_TREES, scheduling_strategy=aside, lifetime="detached"
            ).remote(self.config_log)
            security = self.security.to_dict()
            from actors import views  # when needed: see the note on imports above
            self.views = views.remote_class().options(
                name=names.VIEWS, scheduling_strategy=aside, lifetime="detached"
            ).remote(
                routes, self.config, security, self.config_log
            )
            views_started = self.views.start.remote()
            trees = ray.get(self.session_trees.snapshot.remote(), timeout=START_TIMEOUT)
            ray.get(views_started, timeout=START_TIMEOUT)
            for k, node in enumerate(nodes):
                gateway_id = f"gw{k}-{uuid.uuid4().hex[:8]}"
                strategy = NodeAffinitySchedulingStrategy(node.id, soft=False)
                self.gateways.append(
                    gateway_cls.options(name=names.gateway(k), scheduling_strategy=strategy, lifetime="detached").remote(
                        gateway_id, routes, self.config, self._gateway_host(node),
                        port if self.config.gateway_ports == "same" else port + k if port else 0,
                        security, trees, self.session_trees,
                    )
                )
                self.gateway_nodes.append(node.name)
            self.gateway_info = ray.get([g.start.remote() for g in self.gateways], timeout=START_TIMEOUT)
            ray.get(
                [g.set_peers.remote(self.gateways) for g in self.gateways]
                + [self.session_trees.set_gateways.remote(self.gateways)],
                timeout=START_TIMEOUT,
            )
            self._start_fanouts(routes, aside, documents.get("fanout"))
        except Exception as e:
            self._kill_all()
            cause = e.cause if isinstance(e, ray.exceptions.RayTaskError) and e.cause else e
            raise StartupError(_explain(cause, self.config)) from None
        self._liveness.baseline({name: handle for name, (_, handle) in self._serving().items()}, START_TIMEOUT)
        self.started_at = time.time()
        return self.describe()

    def _start_fanouts(self, routes: list[Any], strategy: Any, stored: Any) -> None:
        """One FanoutLinkActor per fan-out connection: those of the configuration file
        (``[fanout.NAME]``) and those added at run time (the ``fanout`` document of the
        configuration log), each link with a claim precedence of its own (the earlier
        configured wins a path both mirror)."""
        self._fanout_defs(stored)
        for name in self.fanout_defs:
            self.fanouts[name] = self._fanout_actor(name, routes, strategy)
        if self.fanouts:
            ray.get([h.ensure.remote() for h in self.fanouts.values()], timeout=START_TIMEOUT)
            self._push_fanouts()
        from fanout.mirror import overlapping
        from topics.selectors import parse_selector

        links = {f"{c.name} {s}": [parse_selector(s).path_prefix] for c, _o, _f in self.fanout_defs.values()
                 for s in c.links}
        for a, b, prefix in overlapping(links):
            log.warning("fan-out links %s and %s may both mirror topics under %s: the earlier configured wins "
                        "each such path", a, b, prefix)

    def _fanout_defs(self, stored: Any) -> None:
        """``self.fanout_defs``: name -> (connection, first link ordinal, from the file?)."""
        from fanout.config import FanoutConnection, from_tables

        self.fanout_defs = {}
        ordinal = 0  # the file's links count from 0, those added at run time from RUNTIME_ORDINALS
        for c in from_tables(self.config.fanout or {}):
            self.fanout_defs[c.name] = (c, ordinal, True)
            ordinal += len(c.links)
        for entry in stored or []:
            c = FanoutConnection.from_dict(entry["connection"])
            if c.name not in self.fanout_defs:  # a file definition of the same name wins
                self.fanout_defs[c.name] = (c, int(entry["ordinal"]), False)

    def _fanout_actor(self, name: str, routes: list[Any], strategy: Any) -> Any:
        from actors import fanout

        connection, ordinal, _ = self.fanout_defs[name]
        return fanout.remote_class().options(
            name=f"fanout-{name}", scheduling_strategy=strategy, lifetime="detached"
        ).remote(connection.to_dict(), ordinal, routes, self.config)

    def _push_fanouts(self) -> None:
        routes = self.fanout_routes()
        ray.get([g.set_fanouts.remote(routes) for g in self._live_gateways()], timeout=START_TIMEOUT)

    def fanout_add(self, definition: dict[str, Any]) -> dict[str, Any]:
        """Add a fan-out connection at run time: committed to the configuration log, then
        started. A name in use is refused (remove it first)."""
        from fanout.config import FanoutConfigError, FanoutConnection
        from fanout.mirror import MAX_LINKS, RUNTIME_ORDINALS

        connection = FanoutConnection.from_dict(definition)
        if connection.name in self.fanout_defs:
            raise FanoutConfigError(f"fan-out connection {connection.name!r} exists already; remove it first")
        used = [o + len(c.links) for c, o, from_file in self.fanout_defs.values() if not from_file]
        ordinal = max(used, default=RUNTIME_ORDINALS)  # apart from the file's, which may change at restarts
        if ordinal + len(connection.links) > MAX_LINKS:
            raise FanoutConfigError(f"no claim precedences left for {len(connection.links)} more links")
        self.fanout_defs[connection.name] = (connection, ordinal, False)
        try:
            self._commit_fanouts()
        except Exception:
            del self.fanout_defs[connection.name]
            raise
        strategy = NodeAffinitySchedulingStrategy(self._aside(self._nodes()).id, soft=False)
        handle = self.fanouts[connection.name] = self._fanout_actor(connection.name, self.replicas.routes(), strategy)
        ray.get(handle.ensure.remote(), timeout=START_TIMEOUT)
        self._liveness.baseline({f"fanout-{connection.name}": handle}, START_TIMEOUT)
        self._push_fanouts()
        return connection.shown()

    def fanout_remove(self, name: str) -> bool:
        """Remove a connection added at run time: its replicas go. False when there is none."""
        from fanout.config import FanoutConfigError

        found = self.fanout_defs.get(name)
        if found is None:
            return False
        if found[2]:
            raise FanoutConfigError(f"fan-out connection {name!r} is defined in the configuration file; "
                                    "remove it there and restart")
        del self.fanout_defs[name]
        try:
            self._commit_fanouts()
        except Exception:
            self.fanout_defs[name] = found
            raise
        handle = self.fanouts.pop(name, None)
        self._liveness.forget(f"fanout-{name}")
        self._push_fanouts()
        if handle is not None:
            try:
                ray.get(handle.stop.remote(), timeout=STOP_TIMEOUT)
            except Exception as e:
                log.warning("fan-out %s did not stop cleanly: %s", name, e)
            ray.kill(handle, no_restart=True)
        return True

    def _commit_fanouts(self) -> None:
        document = [{"connection": c.to_dict(), "ordinal": o} for c, o, from_file in self.fanout_defs.values()
                    if not from_file]
        ray.get(self.config_log.append.remote("fanout", document), timeout=START_TIMEOUT)

    def fanout_routes(self) -> list[tuple[str, Any, list[str]]]:
        """What a gateway needs to offer requests to the fan-out links: name, actor, link selectors."""
        return [(name, handle, list(self.fanout_defs[name][0].links)) for name, handle in self.fanouts.items()
                if name in self.fanout_defs]

    def fanout_status(self, take: bool = True) -> list[dict[str, Any]]:
        """Each fan-out connection: its state, primaries and, per link, the topics it mirrors
        (``take`` false: the greatest apply time since the last listing is left for the next)."""
        answers = _gather({name: h.stats.remote(take) for name, h in self.fanouts.items()}, 5.0)
        return [answers.get(name, {"name": name, "state": "not answering", "links": []}) for name in self.fanouts]

    # -- metric collectors -------------------------------------------------------------

    def collector_put(self, definition: dict[str, Any]) -> dict[str, Any]:
        """Define a metric collector, or replace the one of its name: committed to the
        configuration log, then pushed to every gateway. Answers the definition and whether
        it replaced one; a bad one raises :class:`~sessions.collectors.CollectorError`."""
        collector = from_dict(definition)
        collectors, replaced = self.collectors.put(collector)
        self._commit_collectors(collectors)
        return {**collector.to_dict(), "replaced": replaced}

    def collector_remove(self, name: str) -> bool:
        """Remove a metric collector (its series go); False when there is none of that name."""
        collectors = self.collectors.remove(name)
        if collectors is None:
            return False
        self._commit_collectors(collectors)
        return True

    def collector_list(self) -> list[dict[str, Any]]:
        """Every metric collector's definition, in the order they were first defined."""
        return self.collectors.to_wire()

    def _commit_collectors(self, collectors: Collectors) -> None:
        wire = collectors.to_wire()
        configuration.commit_sync(self.config_log, "collectors", wire)
        self.collectors = collectors
        ray.get([g.set_collectors.remote(wire) for g in self._live_gateways()], timeout=60)

    # -- session locks (actors/locks.py) ------------------------------------------------------

    def lock_acquire(self, gateway_process: str, session: str, name: str, scope: str) -> dict[str, Any]:
        return self.locks.acquire(gateway_process, session, name, scope)

    def lock_release(self, gateway_process: str, session: str, name: str, sequence: int | None) -> dict[str, Any]:
        return self.locks.release(gateway_process, session, name, sequence)

    def lock_withdraw(self, gateway_process: str, session: str, name: str) -> dict[str, Any]:
        return self.locks.withdraw(gateway_process, session, name)

    def lock_cleanup(self, gateway_process: str, what: list[Any]) -> dict[str, Any]:
        return self.locks.cleanup(gateway_process, what)

    def lock_table(self) -> dict[str, Any]:
        return self.locks.listing()

    def _sweep_locks(self) -> None:
        """Release the session locks of gateway processes that went (lost with their node,
        restarted by Ray): each live gateway says which process it is now; one that does not
        answer keeps its sessions' locks until the next sweep."""
        self._lock_sweep_due = False
        if not self.locks.table.locks:
            return
        handles = {info["gateway"]: self.gateways[k] for k, info in enumerate(self.gateway_info)
                   if not info.get("lost") and info.get("gateway") and k < len(self.gateways)}
        live: dict[str, str | None] = dict.fromkeys(handles)
        live.update(_gather({base: g.gateway_id.remote() for base, g in handles.items()}, STATUS_TIMEOUT))
        try:
            self.locks.sweep(live)
        except Exception as e:  # not committed: the next check tries again
            self._lock_sweep_due = True
            log.warning("could not release the session locks of lost gateways: %s", e)

    def update_security(self, commands: list[Any], change: str | None = None) -> int:
        """Apply security commands, commit the new store to the configuration log (it is
        not applied when that fails), push it to every gateway; return the new version.

        ``change``: the caller's id for this change, stored with the store, so that a
        caller cut off by a crash of this actor learns from its successor whether the
        change was made (:meth:`security_change`)."""
        store = self.security.apply(commands)
        changes = self.security_changes
        self.security_changes = [*changes, change] if change else changes
        try:
            configuration.commit_sync(self.config_log, "security", self._security_document(store))
        except BaseException:
            self.security_changes = changes
            raise
        self.security = store
        wire = store.to_dict()
        ray.get([g.set_security.remote(wire) for g in self._live_gateways()] + [self.views.set_security.remote(wire)],
                timeout=60)
        return store.version

    def security_change(self, change: str) -> int | None:
        """The store's version if the change with id ``change`` was made (it is among the
        last :data:`CHANGES_KEPT`), else ``None``: it was not, and never will be."""
        return self.security.version if change in self.security_changes else None

    def take_generated_password(self) -> str | None:
        """The admin password generated at first start, handed out once."""
        password, self.generated_admin_password = self.generated_admin_password, None
        return password

    def describe(self) -> dict[str, Any]:
        return {
            "namespace": self.config.namespace,
            "partitions": self.replicas.count,
            "gateways": self.gateway_info,
            # a gateway lost with its node (a restarted controller's, until it is made again) has none
            "urls": [g["url"] for g in self.gateway_info if g.get("url")],
            "mqtt_urls": [g["mqtt"] for g in self.gateway_info if g.get("mqtt") and g.get("url")],
            "nodes": sorted(self.replicas.nodes),
            "started_at": self.started_at,
            "controller_host": socket.gethostname(),
            "controller_pid": os.getpid(),
            "instance_id": self.config.instance_id,
            #: seconds since canopy serve last called check (None: not since this process started)
            "supervised_ago": None if self._checked_at is None else time.monotonic() - self._checked_at,
        }

    def started(self, name: str) -> None:
        """Called by every serving actor's constructor: after the instance started,
        a start is a restart (counted, to tell a crash loop)."""
        if self.started_at is not None:
            self._liveness.restarted(name)

    def route(self, index: int) -> tuple[int, Any, str]:
        """Partition ``index``'s primary: (the epoch since which it is, its handle, its node).
        Links ask this when their stream to the partition broke or was told ``MOVED``."""
        return tuple(self.replicas.route(index))

    def node_action(self, action: str, name: str | None, seconds: float = 0.0, force: bool = False,
                    options: dict[str, Any] | None = None) -> dict[str, Any]:
        """Crash, pause, add or cut off a node (see :mod:`actors.node_control`)."""
        return self.node_control.act(action, name, seconds, force, from_ray(ray.nodes()), options)

    def check(self) -> list[dict[str, str]]:
        """What happened to the serving actors and the nodes since the last call:
        ``[{"name", "actor" (its class), "event", "reason"}]`` with event ``crashed``
        (Ray restarts it), ``recovered`` (it is back and serving), ``dead`` (for good),
        ``failed`` (it came back but could not be brought into the instance),
        ``cluster`` (a node was lost or joined, a partition failed over, moved or got a
        new backup: ``reason`` says what), ``add_node`` (serve is to start the
        simulated node named by ``reason``), ``restart_gcs`` (serve is to kill Ray's
        GCS and start it again ``reason`` seconds later) or ``kill_head`` (the same with the
        whole head node).

        Cheap and never blocks on a busy actor (see :class:`Liveness`), except to carry
        out a change; canopy serve calls it about every second."""
        self._checked_at = time.monotonic()
        serving = self._serving()
        report: list[dict[str, str]] = [{"name": "cluster", "actor": "", "event": "cluster", "reason": line}
                                        for line in self._adopted]
        self._adopted = []
        step = functools.partial(self._isolated, report)
        events = self._events_due + step(
            "liveness", lambda: self._liveness.poll({n: h for n, (_, h) in serving.items()}), [])
        self._events_due = []
        nodes = step("nodes", self._nodes, None)
        if nodes is None:  # Ray did not say which nodes are alive: what Liveness saw waits for that
            self._events_due = events
            return report
        alive = {n.name: n for n in nodes}
        report += [e._asdict() for e in self.partition_manager.follow_nodes(alive)]
        step("configuration copies", lambda: self._agents_follow_nodes(alive), None)
        step("gateways", lambda: self._gateways_follow_nodes(alive, report), None)
        moved = step("services", lambda: self._services_follow_nodes(alive, report), None)
        from actors import partition  # when needed: see the note on imports above
        if moved is None:  # which services went with their node is not known: their events wait
            self._events_due = [e for e in events if serving.get(e[0], ("",))[0] != partition.PartitionActor.__name__]
            events = [e for e in events if e not in self._events_due]
            moved = set()

        def ensure() -> None:
            for handle in self.fanouts.values():  # starts one Ray restarted; a no-op otherwise
                handle.ensure.remote()

        step("fan-out links", ensure, None)
        for name, event, reason in events:
            if name in moved or name not in serving:
                continue  # went with its node, made again (said above); or no longer serving
            kind, handle = serving[name]
            if kind == partition.PartitionActor.__name__:
                report += [e._asdict() for e in self.partition_manager.replica_event(name, event, reason)]
                continue
            if event == "dead" and handle is self.config_log:
                # given up by Ray (its label's node unknown when Ray retried, or killed for good):
                # the copies keep the log; a new writer recovers it, on this controller's node
                try:
                    self._liveness.forget(name)
                    self._new_config_log(self._nodes()[0])
                    report.append({"name": "cluster", "actor": "", "event": "cluster",
                                   "reason": f"{name} (ConfigLogActor) was given up by Ray ({reason}); made again"})
                except Exception as e:
                    report.append({"name": name, "actor": kind, "event": "failed",
                                   "reason": f"given up by Ray and could not be made again: {type(e).__name__}: {e}"})
                continue
            if event == "dead" and handle in self.gateways:
                k = self.gateways.index(handle)
                if self.gateway_nodes[k] not in alive:
                    continue  # went with its node (said above)
            if event == "restarted":
                try:
                    self._recover(name, handle)
                    event, reason = "recovered", ""
                except ray.exceptions.ActorUnavailableError as e:  # down again: Ray restarts it or gives up
                    event, reason = "crashed", f"down again while coming back: {e}"
                except Exception as e:
                    event, reason = "failed", f"{type(e).__name__}: {e}"
            report.append({"name": name, "actor": kind, "event": event, "reason": reason})
        from actors import gateway  # when needed: see the note on imports above
        if any(r["actor"] == gateway.GatewayActor.__name__ and r["event"] in ("recovered", "dead") for r in report):
            self._lock_sweep_due = True  # a gateway process went, and its sessions with it
        if self._lock_sweep_due and self.started_at is not None:
            step("lock sweep", self._sweep_locks, None)
        if self.started_at is not None:
            report += [e._asdict() for e in self.partition_manager.settle(quiet=not report)]
        step("routes", self._push_routes, None)
        report += [
            {"name": "cluster", "actor": "", "event": "add_node", "reason": name}
            for name in self.node_control.take_requests()
        ]
        outage = self.node_control.take_gcs_restart()
        if outage is not None:
            report.append({"name": "cluster", "actor": "", "event": "restart_gcs", "reason": repr(outage)})
        outage = self.node_control.take_head_kill()
        if outage is not None:
            report.append({"name": "cluster", "actor": "", "event": "kill_head", "reason": repr(outage)})
        report += [{"name": "cluster", "actor": "", "event": "partition", "reason": json.dumps(cut)}
                   for cut in self.node_control.take_partitions()]
        return report

    def _isolated(self, report: list[dict[str, str]], step: str, run: Callable[[], Any], default: Any) -> Any:
        """``run()``, or, when it raises, ``default`` and a ``cluster`` line in ``report`` naming
        the step (once while it keeps failing alike): one step of a check that fails is done again
        at the next check, never fatal to serve."""
        try:
            found = run()
        except Exception as e:
            said = f"the {step} step failed ({type(e).__name__}: {e}); it is done again at the next check"
            if self._failing.get(step) != said:
                self._failing[step] = said
                log.exception("the %s step of a check failed", step)
                report.append(ControlEvent.cluster(said)._asdict())
            return default
        self._failing.pop(step, None)
        return found

    def _agents_follow_nodes(self, alive: dict[str, Any]) -> None:
        """Each alive node keeps a copy of the configuration log; a lost node's copy leaves the count."""
        if self.config_log is None or self.started_at is None:
            return
        # a node back under a new Ray id between two checks (the head after kill-head): its copy went
        moved = {name for name, node in alive.items() if self.agent_nodes.get(name, node.id) != node.id}
        if set(self.agents) == set(alive) and not moved:
            if time.monotonic() - self._tended_at >= TEND_EVERY:  # a copy that missed a change is caught
                self._tended_at = time.monotonic()                # up; a writer not recovered recovers
                self.config_log.tend.remote(self.agents)
            return
        self.agents = self._copies_on(alive.values())
        self.config_log.set_agents.remote(self.agents)

    def _aside(self, nodes: list[Any]) -> Any:
        """Where the view evaluator and the session tree actor go: not the controller's node
        when there is another."""
        return nodes[1] if len(nodes) > 1 else nodes[0]

    def _services_follow_nodes(self, alive: dict[str, Any], report: list[dict[str, str]]) -> set[str]:
        """The view evaluator or the session tree actor went with its node: made again on
        a living one, from the replicated configuration (the views rebuild their reference
        topics from the partitions), and the gateways are given the new one; return which."""
        moved: set[str] = set()
        if self.started_at is None:
            return moved
        ids = {n.id for n in alive.values()}
        from actors import session_trees, views  # when needed: see the note on imports above
        for name in (names.VIEWS, names.SESSION_TREES):
            node = self._liveness.node(name)
            if node is None or node in ids:
                continue
            kind = (views.ViewEvaluatorActor if name == names.VIEWS else session_trees.SessionTreeActor).__name__
            target = self._aside(self._nodes())
            try:
                self._make_service(name, target)
            except Exception as e:
                report.append({"name": name, "actor": kind, "event": "failed",
                               "reason": f"its node was lost and it could not be made again: {type(e).__name__}: {e}"})
                continue
            moved.add(name)
            report.append({"name": "cluster", "actor": "", "event": "cluster",
                           "reason": f"{name} ({kind}) went with its node; made again on {target.name}"})
        for connection in list(self.fanouts):
            name = f"fanout-{connection}"
            node = self._liveness.node(name)
            if node is None or node in ids:
                continue
            target = self._aside(self._nodes())
            try:
                self._move_fanout(connection, target)
            except Exception as e:
                report.append({"name": name, "actor": "FanoutLinkActor", "event": "failed",
                               "reason": f"its node was lost and it could not be made again: {type(e).__name__}: {e}"})
                continue
            moved.add(name)
            report.append({"name": "cluster", "actor": "", "event": "cluster",
                           "reason": f"{name} (FanoutLinkActor) went with its node; made again on {target.name}"})
        return moved

    def _move_fanout(self, connection: str, node: Any) -> None:
        """A fan-out link went with its node: the same connection on a living one (its
        replicas are claimed again as its new session announces them)."""
        name = f"fanout-{connection}"
        strategy = NodeAffinitySchedulingStrategy(node.id, soft=False)
        handle = _replace(self.fanouts[connection],
                          lambda: self._fanout_actor(connection, self.replicas.routes(), strategy))
        ray.get(handle.ensure.remote(), timeout=RECOVER_TIMEOUT)
        self.fanouts[connection] = handle
        self._liveness.forget(name)
        self._liveness.baseline({name: handle}, RECOVER_TIMEOUT)
        self._push_fanouts()

    def _make_service(self, name: str, node: Any) -> None:
        old = self.views if name == names.VIEWS else self.session_trees
        strategy = NodeAffinitySchedulingStrategy(node.id, soft=False)

        def make() -> Any:
            if name == names.VIEWS:
                from actors import views  # when needed: see the note on imports above
                return views.remote_class().options(name=name, lifetime="detached", scheduling_strategy=strategy
                                                    ).remote(self.replicas.routes(), self.config,
                                                             self.security.to_dict(), self.config_log)
            from actors import session_trees  # when needed: see the note on imports above
            return session_trees.remote_class().options(
                name=name, lifetime="detached", scheduling_strategy=strategy).remote(self.config_log)

        handle = _replace(old, make)
        live = self._live_gateways()
        if name == names.VIEWS:
            ray.get(handle.start.remote(), timeout=RECOVER_TIMEOUT)
            self.views = handle
        else:
            ray.get(handle.set_gateways.remote(live), timeout=RECOVER_TIMEOUT)
            self.session_trees = handle
        self._liveness.forget(name)
        self._liveness.baseline({name: handle}, RECOVER_TIMEOUT)
        ray.get([g.set_services.remote(self.views, self.session_trees) for g in live], timeout=RECOVER_TIMEOUT)

    def _gateways_follow_nodes(self, alive: dict[str, Any], report: list[dict[str, str]]) -> None:
        """A gateway went with its node; a node that joined gets one."""
        lost = False
        for k, node in enumerate(self.gateway_nodes):
            if node not in alive and self.gateway_info[k].get("lost") is None:
                self.gateway_info[k] = {**self.gateway_info[k], "lost": True}
                lost = True
        if lost and self.started_at is not None:  # session-wide operations and table pushes skip it from now on
            live = self._live_gateways()
            for g in live:
                g.set_peers.remote(live)
            if self.session_trees is not None:
                self.session_trees.set_gateways.remote(live)
            self._lock_sweep_due = True
        have = {n for k, n in enumerate(self.gateway_nodes) if not self.gateway_info[k].get("lost")}
        for name, node in alive.items():
            if name in have or self.started_at is None:
                continue
            k = len(self.gateways)
            try:
                from actors import gateway  # when needed: see the note on imports above
                handle = gateway.remote_class().options(
                    name=names.gateway(k), lifetime="detached",
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node.id, soft=False),
                ).remote(
                    f"gw{k}-{uuid.uuid4().hex[:8]}", self.replicas.routes(), self.config, self._gateway_host(node),
                    gateway_port(
                        self.config.port, self.gateway_info, self.gateway_nodes, name,
                        same=self.config.gateway_ports == "same",
                    ),
                    self.security.to_dict(),
                    ray.get(self.session_trees.snapshot.remote(), timeout=RECOVER_TIMEOUT), self.session_trees,
                )
                info = ray.get(handle.start.remote(), timeout=START_TIMEOUT)
            except Exception as e:
                report.append({"name": names.gateway(k), "actor": gateway.GatewayActor.__name__, "event": "cluster",
                               "reason": f"no gateway on node {name}: {type(e).__name__}: {e}"})
                continue
            self.gateways.append(handle)
            self.gateway_nodes.append(name)
            self.gateway_info.append(info)
            self._liveness.baseline({names.gateway(k): handle}, START_TIMEOUT)
            live = self._live_gateways()
            ray.get([g.set_peers.remote(live) for g in live] + [self.session_trees.set_gateways.remote(live)],
                    timeout=RECOVER_TIMEOUT)
            report.append({"name": names.gateway(k), "actor": gateway.GatewayActor.__name__, "event": "cluster",
                           "reason": f"gateway on node {name} serving {info['url']}"})

    def _gateway_host(self, node: Any) -> str:
        """Where a gateway on ``node`` listens: the configured host, or the node's own address when
        each simulated node has a network namespace of its own (``node_namespaces``)."""
        return str(node.address) if self.config.node_namespaces else self.config.host

    def _live_gateways(self) -> list[Any]:
        return [g for k, g in enumerate(self.gateways) if not self.gateway_info[k].get("lost")]

    def _push_routes(self) -> None:
        """Tell every link holder where the primaries are now (no waiting: a link that
        misses it asks :meth:`route` when its stream breaks or is told MOVED)."""
        if not self.replicas.placements:
            return
        routes = self.replicas.routes()
        now = [(r.epoch, r.node) for r in routes]
        if now == self._routes_pushed:
            return
        self._routes_pushed = now
        for holder in [*self._live_gateways(), *([self.views] if self.views is not None else []),
                       *self.fanouts.values()]:
            holder.set_routes.remote(routes)

    def _recover(self, name: str, handle: Any) -> None:
        """Bring a restarted actor back into the instance: it started afresh from
        its creation arguments, so it is started again and told what changed since.
        (A partition replica is placed again by :class:`~actors.replicas.ReplicaSet`.)"""
        security = self.security.to_dict()
        if handle in self.gateways:
            k = self.gateways.index(handle)
            trees = ray.get(self.session_trees.snapshot.remote(), timeout=RECOVER_TIMEOUT)
            ray.get(handle.set_security.remote(security), timeout=RECOVER_TIMEOUT)
            ray.get(handle.set_session_trees.remote(trees), timeout=RECOVER_TIMEOUT)
            ray.get(handle.set_routes.remote(self.replicas.routes()), timeout=RECOVER_TIMEOUT)
            self.gateway_info[k] = ray.get(handle.start.remote(), timeout=RECOVER_TIMEOUT)
            live = self._live_gateways()  # every gateway: the restarted one is another process now
            ray.get([g.set_peers.remote(live) for g in live], timeout=RECOVER_TIMEOUT)
        elif handle is self.views:
            ray.get(handle.set_security.remote(security), timeout=RECOVER_TIMEOUT)
            ray.get(handle.set_routes.remote(self.replicas.routes()), timeout=RECOVER_TIMEOUT)
            ray.get(handle.start.remote(), timeout=RECOVER_TIMEOUT)
        elif handle is self.session_trees:
            ray.get(handle.set_gateways.remote(self._live_gateways()), timeout=RECOVER_TIMEOUT)
        elif handle is self.config_log:
            self._start_config_log(RECOVER_TIMEOUT)
        elif handle in self.fanouts.values():
            ray.get(handle.set_routes.remote(self.replicas.routes()), timeout=RECOVER_TIMEOUT)
            ray.get(handle.ensure.remote(), timeout=RECOVER_TIMEOUT)

    def _serving(self) -> dict[str, tuple[str, Any]]:
        from actors import gateway, partition, session_trees, views  # see the note on imports above
        actors = {name: (partition.PartitionActor.__name__, h) for name, h in self.replicas.serving().items()}
        actors.update({
            names.gateway(k): (gateway.GatewayActor.__name__, g)
            for k, g in enumerate(self.gateways) if k >= len(self.gateway_info) or not self.gateway_info[k].get("lost")
        })
        if self.views is not None:
            actors[names.VIEWS] = (views.ViewEvaluatorActor.__name__, self.views)
        if self.session_trees is not None:
            actors[names.SESSION_TREES] = (session_trees.SessionTreeActor.__name__, self.session_trees)
        if self.config_log is not None:
            actors[names.CONFIG_LOG] = (configuration.ConfigLogActor.__name__, self.config_log)
        for name, handle in self.fanouts.items():
            actors[f"fanout-{name}"] = ("FanoutLinkActor", handle)
        return actors

    def stats(self) -> dict[str, Any]:
        return {
            "partitions": ray.get([p.stats.remote() for p in self.partitions], timeout=30),
            "gateways": ray.get([g.stats.remote() for g in self._live_gateways()], timeout=30),
            "views": ray.get(self.views.stats.remote(), timeout=30) if self.views is not None else None,
        }

    def status(self, wait: float = STATUS_TIMEOUT) -> dict[str, Any]:
        """The cluster as ``canopy cluster status`` shows it: nodes, partitions
        (primary, backup, epoch, topics, registered selectors, journal position, replication
        lag, failovers since this controller started), gateways and their sessions. A replica
        or gateway that does not answer within ``wait`` seconds is shown as such, never
        waited for longer (a scrape of /metrics asks with a shorter wait)."""
        nodes = from_ray(ray.nodes())
        by_id = {n.id: n.name for n in nodes}
        seen: set[str] = set()
        node_rows = []
        for n in nodes:
            if n.name in seen:
                continue
            seen.add(n.name)
            node_rows.append({"name": n.name, "address": n.address, "alive": n.alive,
                              "home": n.id == self.home_node, "head": n.head})
        replicas = {key: handle for key, (name, handle) in self.replicas.replicas.items()
                    if name not in self.replicas.dead}
        refs = {key: h.stats.remote() for key, h in replicas.items()}
        answers = _gather(refs, wait)
        partitions = []
        for row in self.replicas.describe():
            i = row["partition"]
            primary = answers.get((i, row["primary"]))
            backup = answers.get((i, row["backup"])) if row["backup"] is not None else None
            lag = (primary or {}).get("backup") or {}
            partitions.append({
                **row,
                "topics": primary.get("topics") if primary else None,
                # selectors registered with the primary by links (gateways, views, fan-out)
                "registrations": primary.get("registrations") if primary else None,
                "sequence": (primary.get("journal") or {}).get("sequence") if primary else None,
                "backup_sequence": (backup.get("journal") or {}).get("sequence") if backup else None,
                "caught_up": lag.get("caught_up"),
                "lag": lag.get("lag"),
                "healthy": primary is not None and primary.get("role") == "primary"
                and (row["backup"] is None or bool(lag.get("caught_up"))),
            })
        live = {k: g for k, g in enumerate(self.gateways) if not self.gateway_info[k].get("lost")}
        gateway_stats = _gather({k: g.stats.remote() for k, g in live.items()}, wait)
        gateways = []
        for k, info in enumerate(self.gateway_info):
            st = gateway_stats.get(k)
            gateways.append({
                "gateway": names.gateway(k), "node": self.gateway_nodes[k] if k < len(self.gateway_nodes) else None,
                "url": info.get("url"), "lost": bool(info.get("lost")),
                "sessions": st.get("sessions") if st else None, "answering": st is not None,
                "connections": st.get("connections") if st else None,
                "mqtt": info.get("mqtt") or None,
                "mqtt_connections": st.get("mqtt_connections") if st else None,
                "mqtt_kept_sessions": st.get("mqtt_kept_sessions") if st else None,
                # MQTT sessions taken up from their records, and those that missed messages no
                # partition kept any more (since the gateway started)
                "mqtt_sessions_replayed": st.get("mqtt_sessions_replayed") if st else None,
                "mqtt_replay_gaps": st.get("mqtt_replay_gaps") if st else None,
                # sessions whose gateway was lost, held here since (MQTTServer.adopt)
                "mqtt_sessions_adopted": st.get("mqtt_sessions_adopted") if st else None,
                # what clients attempted: logins (sessions/logins.py) and requests that failed unexpectedly
                "guard": {k: v for k, v in st.items() if k.startswith(GUARD_STATS)} if st else None,
            })
        return {
            "namespace": self.config.namespace,
            "nodes": node_rows,
            "partitions": partitions,
            "gateways": gateways,
            "balanced": self.replicas.balanced(),
            "services": {  # where the instance's single actors run now
                name: by_id.get(self._liveness.node(name) or "")
                for name in (names.CONFIG_LOG, names.VIEWS, names.SESSION_TREES, *(f"fanout-{n}" for n in self.fanouts))
            },
            "configuration": {"security_version": self.security.version, **self._log_position(wait)},
            "healthy": all(p["healthy"] for p in partitions),
        }

    def _log_position(self, wait: float) -> dict[str, Any]:
        if self.config_log is None:
            return {}
        try:
            position: dict[str, Any] = ray.get(self.config_log.position.remote(), timeout=wait)
        except Exception as e:
            return {"log": f"not answering: {type(e).__name__}"}
        return {"log_term": position["term"], "log_committed": position["committed"],
                "log_copies": position["copies"], "log_majority": position["majority"]}

    def shutdown(self) -> None:
        if self.gateways:
            try:
                ray.get([g.stop.remote() for g in self._live_gateways()], timeout=STOP_TIMEOUT)
            except Exception:  # best effort: the actors are killed next anyway
                pass
        if self.views is not None:
            try:
                ray.get(self.views.stop.remote(), timeout=STOP_TIMEOUT)
            except Exception:
                pass
        if self.fanouts:
            try:
                ray.get([h.stop.remote() for h in self.fanouts.values()], timeout=STOP_TIMEOUT)
            except Exception:
                pass
        self.replicas.stop(STOP_TIMEOUT)
        self._kill_all()

    def _kill_all(self) -> None:
        extra = [h for h in (self.session_trees, self.views, self.config_log, *self.agents.values(),
                             *self.fanouts.values()) if h is not None]
        for handle in [*self.gateways, *extra]:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:
                pass
        self.replicas.kill_all()
        self.gateways, self.gateway_info, self.gateway_nodes, self.session_trees, self.views = [], [], [], None, None
        self.config_log, self.agents, self.fanouts = None, {}, {}


def _stored_collectors(document: Any) -> Collectors:
    """The metric collectors of the configuration log (one that no longer reads is left out, said)."""
    collectors = Collectors()
    for entry in document or []:
        try:
            collectors, _ = collectors.put(from_dict(entry))
        except CollectorError as e:
            log.error("a stored metric collector is left out: %s", e)
    return collectors


def _replace(old: Any, make: Callable[[], Any]) -> Any:
    """Kill a named detached actor that went with its node and make its successor under the
    same name (the dead one's name is released shortly after: retried for a while)."""
    try:
        ray.kill(old, no_restart=True)
    except Exception:
        pass
    deadline = time.monotonic() + RECOVER_TIMEOUT
    while True:
        try:
            return make()
        except ValueError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _gather(refs: dict[Any, Any], timeout: float) -> dict[Any, Any]:
    """The answers that came within ``timeout`` (a failed or late one is left out)."""
    if not refs:
        return {}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
    done = set(ready)
    out = {}
    for key, ref in refs.items():
        if ref in done:
            try:
                out[key] = ray.get(ref, timeout=0)
            except Exception:
                pass
    return out


def _explain(error: BaseException, config: InstanceSettings) -> str:
    if isinstance(error, OSError) and error.errno in (98, 48):  # EADDRINUSE
        return (
            f"cannot listen on {config.host}:{config.port}: the address is already in use "
            "(is another canopy or another server running there?)"
        )
    return f"canopy failed to start: {type(error).__name__}: {error}"


def remote_class() -> Any:
    """Restarted by Ray when its process dies (see :meth:`ControllerActor._adopt`); a call
    in flight then fails, and the caller asks again."""
    return ray.remote(num_cpus=0, max_restarts=-1)(ControllerActor)
