"""What a gateway's ``/metrics`` adds to the gateway's own figures: the cluster's, the view
evaluator's, the fan-out links' and the metric collectors', as Prometheus families.

:func:`gather` asks the other actors, all at once and within one time-out (a scrape
never waits longer, however slow the controller): the controller's status (what ``canopy
cluster status`` shows), its fan-out connections' figures, the view evaluator's statistics
and, for the topic metric collectors, every partition's topic counts. What does not answer
in time is left out: ``canopy_cluster_status_up`` is 0 and the cluster's families are
absent when the controller's status is; the others' families are absent when theirs is.

Cluster-wide figures are the same on every gateway: aggregate them with ``max`` (or read
one gateway), not ``sum``. The figures of a gateway's own sessions (its families, the
subscriptions of topic collectors, the session collectors) add up over the gateways.

The ``_families`` functions are pure: they turn the actors' answers into families.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import Any, NamedTuple

from sessions.collectors import Collectors, SessionCollector, SessionMetrics
from topics.protocol import CountTopics, Failed, Result
from topics.selectors import parse_selector

#: the status's own wait for each replica and gateway, asked by a scrape (see ControllerActor.status)
STATUS_WAIT = 1.0
Sample = tuple[dict[str, str], float]


class Family(NamedTuple):
    """One metric: its name, ``counter`` or ``gauge``, what it measures, and its samples
    (label values by label name, and the value)."""

    name: str
    kind: str
    help: str
    samples: list[Sample]


def _known(rows: Iterable[dict[str, Any]], key: str, labels: Any) -> list[Sample]:
    """A sample per row whose ``key`` is known (not None), labelled by ``labels(row)``."""
    return [(labels(row), float(row[key])) for row in rows if row.get(key) is not None]


def _flag(value: Any) -> float:
    return 1.0 if value else 0.0


def status_families(status: dict[str, Any] | None) -> list[Family]:
    """The cluster as the controller's status says (``None``: it did not answer)."""
    out = [Family("canopy_cluster_status_up", "gauge",
                  "whether the controller answered this scrape's cluster status in time (1); 0: the cluster's "
                  "figures are left out", [({}, _flag(status is not None))])]
    if status is None:
        return out
    nodes = status.get("nodes") or []
    partitions = status.get("partitions") or []
    gateways = status.get("gateways") or []

    def part(row: dict[str, Any]) -> dict[str, str]:
        return {"partition": str(row["partition"])}

    gateway_states = {"serving": 0, "not_answering": 0, "lost": 0}
    for g in gateways:
        gateway_states["lost" if g.get("lost") else "serving" if g.get("answering") else "not_answering"] += 1
    configuration = status.get("configuration") or {}
    out += [
        Family("canopy_cluster_healthy", "gauge",
               "whether every partition has an answering primary and a caught-up backup (or needs none)",
               [({}, _flag(status.get("healthy")))]),
        Family("canopy_cluster_balanced", "gauge", "whether the partitions are spread evenly over the nodes",
               [({}, _flag(status.get("balanced")))]),
        Family("canopy_nodes", "gauge", "the cluster's nodes, alive or dead",
               [({"state": "alive"}, float(sum(1 for n in nodes if n.get("alive")))),
                ({"state": "dead"}, float(sum(1 for n in nodes if not n.get("alive"))))]),
        Family("canopy_node_up", "gauge", "whether the node is alive (1) or dead (0)",
               [({"node": str(n["name"])}, _flag(n.get("alive"))) for n in nodes]),
        Family("canopy_partition_info", "gauge", "each partition's primary and backup node (backup \"\": none)",
               [({**part(p), "primary": str(p.get("primary") or ""), "backup": str(p.get("backup") or "")}, 1.0)
                for p in partitions]),
        Family("canopy_partition_epoch", "gauge", "the partition's placement epoch (it grows at every failover or move)",
               _known(partitions, "epoch", part)),
        Family("canopy_partition_healthy", "gauge",
               "whether the partition's primary answers and its backup (if it needs one) is caught up",
               [(part(p), _flag(p.get("healthy"))) for p in partitions]),
        Family("canopy_partition_topics", "gauge", "topics the partition holds", _known(partitions, "topics", part)),
        Family("canopy_partition_registered_selectors", "gauge",
               "selectors registered with the partition by the links (gateways, the view evaluator, fan-out links)",
               _known(partitions, "registrations", part)),
        Family("canopy_partition_journal_sequence", "gauge", "the primary's newest journal record",
               _known(partitions, "sequence", part)),
        Family("canopy_partition_backup_journal_sequence", "gauge", "the backup's newest journal record",
               _known(partitions, "backup_sequence", part)),
        Family("canopy_partition_replication_lag_batches", "gauge",
               "replication batches the primary sent its backup that the backup has not acknowledged",
               _known(partitions, "lag", part)),
        Family("canopy_partition_backup_caught_up", "gauge", "whether the backup holds everything the primary does",
               [(part(p), _flag(p["caught_up"])) for p in partitions if p.get("caught_up") is not None]),
        Family("canopy_partition_failovers_total", "counter",
               "times the partition's backup took over, since the controller started", _known(partitions, "failovers", part)),
        Family("canopy_gateways", "gauge", "the instance's gateways: serving, not answering, lost with their node",
               [({"state": state}, float(n)) for state, n in gateway_states.items()]),
        Family("canopy_cluster_gateway_sessions", "gauge", "sessions open on each gateway of the instance",
               _known(gateways, "sessions", lambda g: {"gateway": str(g["gateway"])})),
        Family("canopy_configuration_log_committed_position", "gauge",
               "the replicated configuration log's committed position",
               [({}, float(configuration["log_committed"]))] if "log_committed" in configuration else []),
        Family("canopy_security_store_version", "gauge", "the security store's version",
               [({}, float(configuration["security_version"]))] if "security_version" in configuration else []),
    ]
    return [f for f in out if f.samples]


def views_families(stats: dict[str, Any] | None) -> list[Family]:
    """The view evaluator's figures (``None``: it did not answer)."""
    if stats is None:
        return []
    figures = [
        ("canopy_views", "gauge", "topic views defined", "views"),
        ("canopy_view_source_topics", "gauge", "topics the views read (sources and inserted topics)", "topics"),
        ("canopy_view_reference_topics", "gauge", "reference topics the views make", "references"),
        ("canopy_view_delayed_updates", "gauge", "updates of delayed views waiting for their time", "delayed"),
        ("canopy_view_evaluations_total", "counter", "sources the views evaluated, since the view evaluator started",
         "evaluations"),
        ("canopy_view_evaluation_errors_total", "counter",
         "evaluations that failed unexpectedly (their source made no reference topics; the evaluator's log says "
         "which)", "evaluation_errors"),
    ]
    return [Family(name, kind, text, [({}, float(stats[key]))]) for name, kind, text, key in figures
            if stats.get(key) is not None]


def fanout_families(connections: list[dict[str, Any]] | None) -> list[Family]:
    """Each fan-out connection of this (secondary) server, as ``fanout_list`` describes it."""
    if not connections:
        return []

    def name(c: dict[str, Any]) -> dict[str, str]:
        return {"connection": str(c["name"])}

    def seconds(key: str) -> list[Sample]:
        return [(name(c), c[key] / 1000) for c in connections if c.get(key) is not None]

    links = [({**name(c), "link": str(link["selector"])}, link) for c in connections for link in c.get("links") or []]
    out = [
        Family("canopy_fanout_connected", "gauge", "whether the connection's session to its primary is connected",
               [(name(c), _flag(c.get("state") == "connected")) for c in connections]),
        Family("canopy_fanout_lag_seconds", "gauge",
               "half the primary's round trip plus the time from an update's arrival to its application here",
               seconds("lag_ms")),
        Family("canopy_fanout_round_trip_seconds", "gauge", "the primary's round trip", seconds("rtt_ms")),
        Family("canopy_fanout_last_update_age_seconds", "gauge", "seconds since the last update from the primary",
               [(name(c), float(c["last_update_s"])) for c in connections if c.get("last_update_s") is not None]),
        Family("canopy_fanout_sessions_opened_total", "counter", "sessions the connection opened to its primaries",
               _known(connections, "sessions", name)),
        Family("canopy_fanout_missing_topic_notifications_total", "counter",
               "missing-topic notifications the connection passed on to its primary", _known(connections, "forwarded", name)),
        Family("canopy_fanout_link_topics", "gauge", "topics the link mirrors",
               [(labels, float(link.get("topics") or 0)) for labels, link in links]),
        Family("canopy_fanout_link_updates_total", "counter", "updates the link applied",
               [(labels, float(link.get("updates") or 0)) for labels, link in links]),
        Family("canopy_fanout_link_contested_paths", "gauge", "paths another connection configured earlier holds",
               [(labels, float(len(link.get("contested") or []))) for labels, link in links]),
    ]
    return [f for f in out if f.samples]


def topic_collector_families(collectors: Collectors, topics: list[dict[str, int]] | None,
                             subscriptions: list[dict[str, int]]) -> list[Family]:
    """The topic metric collectors: per collector (in order) the topics of every partition
    by type (``None``: not every partition answered, so no topic figure) and this gateway's
    subscriptions by type."""
    counted: list[Sample] = []
    subscribed: list[Sample] = []
    for i, collector in enumerate(collectors.topics):
        by_type = subscriptions[i]
        label = {"collector": collector.name}
        if collector.group_by_type:
            types = sorted(set(by_type) | set(topics[i] if topics is not None else {}))
            subscribed += [({**label, "type": t}, float(by_type.get(t, 0))) for t in types]
            if topics is not None:
                counted += [({**label, "type": t}, float(topics[i].get(t, 0))) for t in types]
        else:
            subscribed.append((label, float(sum(by_type.values()))))
            if topics is not None:
                counted.append((label, float(sum(topics[i].values()))))
    out = [
        Family("canopy_topic_collector_topics", "gauge",
               "topics the collector's selector selects in the whole instance (the same on every gateway)", counted),
        Family("canopy_topic_collector_subscriptions", "gauge",
               "subscriptions of this gateway's sessions to the topics the collector's selector selects", subscribed),
    ]
    return [f for f in out if f.samples]


def session_collector_families(figures: list[tuple[SessionCollector, list[tuple[tuple[str, ...], int, int, int]]]]
                               ) -> list[Family]:
    """The session metric collectors over this gateway's sessions (:meth:`SessionMetrics.figures`)."""
    open_now: list[Sample] = []
    opened: list[Sample] = []
    closed: list[Sample] = []
    for collector, rows in figures:
        for group, sessions, was_opened, was_closed in rows:
            labels = {"collector": collector.name, **dict(zip(collector.labels, group))}
            open_now.append((labels, float(sessions)))
            opened.append((labels, float(was_opened)))
            closed.append((labels, float(was_closed)))
    out = [
        Family("canopy_session_collector_sessions", "gauge",
               "this gateway's sessions the collector's filter matches, by the collector's group-by properties",
               open_now),
        Family("canopy_session_collector_opened_total", "counter",
               "sessions the collector's filter matched when they opened here, since the gateway started", opened),
        Family("canopy_session_collector_closed_total", "counter",
               "sessions the collector's filter matched when they closed here, since the gateway started", closed),
    ]
    return [f for f in out if f.samples]


async def _answer(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


async def _counted(futures: list[asyncio.Future[Result]]) -> list[dict[str, int]] | None:
    """Every partition's topic counts added up, per selector; None when one failed."""
    totals: list[dict[str, int]] | None = None
    for result in await asyncio.gather(*futures):
        if isinstance(result, Failed):
            return None
        if totals is None:
            totals = [dict() for _ in result.value]
        for total, counts in zip(totals, result.value):
            for type_name, n in counts.items():
                total[type_name] = total.get(type_name, 0) + n
    return totals


async def gather(gateway: Any, timeout: float) -> list[Family]:
    """The families a scrape adds to the gateway's own: the other actors' figures, asked at
    once and waited for ``timeout`` seconds at most (see the module), and the collectors'."""
    ctx = gateway.ctx
    asks: dict[str, Awaitable[Any]] = {}
    if ctx.controller is not None:
        asks["status"] = ctx.controller.status.remote(STATUS_WAIT)
        asks["fanout"] = ctx.controller.fanout_status.remote(False)
    if ctx.views is not None:
        asks["views"] = ctx.views.stats.remote()
    collectors: Collectors = gateway.collectors
    selectors = [c.selector for c in collectors.topics]
    link = gateway.link
    if selectors and link.count:
        asks["topics"] = _counted([link.request(i, CountTopics(selectors)) for i in range(link.count)])
    tasks = {key: asyncio.ensure_future(_answer(awaitable)) for key, awaitable in asks.items()}
    if tasks:
        await asyncio.wait(tasks.values(), timeout=timeout)
    answers: dict[str, Any] = {}
    for key, task in tasks.items():
        if not task.done():
            task.cancel()
        elif not task.cancelled() and task.exception() is None:
            answers[key] = task.result()
    registry = gateway.registry
    subscriptions = [registry.subscriptions(parse_selector(s)) for s in selectors]
    internal = gateway.connections.internal
    metrics: SessionMetrics = gateway.connections.session_metrics
    sessions = ((s.properties, s.roles) for sid, s in registry.sessions.items() if sid not in internal)
    return [
        *status_families(answers.get("status")),
        *views_families(answers.get("views")),
        *fanout_families(answers.get("fanout")),
        *topic_collector_families(collectors, answers.get("topics"), subscriptions),
        *session_collector_families(metrics.figures(sessions)),
    ]
