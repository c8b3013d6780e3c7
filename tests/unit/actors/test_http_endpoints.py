"""The plain HTTP side of a gateway without a gateway: the exposition format as Prometheus's
parser reads it, /readyz over partition streams up and down, anonymous scrapes, a controller
that does not answer, and the families made of the cluster's, the fan-out links' and the
collectors' figures (actors/metrics.py)."""

from __future__ import annotations

import asyncio
import types
from typing import Any
from unittest import mock

import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.datastructures import Headers
from websockets.http11 import Request

from actors import http_endpoints
from actors.http_endpoints import Endpoints, Family, _basic, render
from actors.metrics import fanout_families, session_collector_families, status_families, topic_collector_families
from sessions.collectors import Collectors, SessionCollector, SessionMetrics, TopicCollector, from_dict
from sessions.queue import OutboundQueue


def test_the_exposition_escapes_labels_and_help_and_prometheus_parses_it() -> None:
    text = render([
        Family("canopy_x_total", "counter", 'odd "help"\\ with\nnewline', [({"path": 'a"b\\c\nd'}, 3)]),
        Family("canopy_y", "gauge", "a gauge", [({}, 2.5), ({"k": "v"}, float("nan"))]),
    ])
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (sample,) = families["canopy_x"].samples  # the parser names a counter without _total
    assert sample.labels == {"path": 'a"b\\c\nd'} and sample.value == 3
    assert families["canopy_y"].type == "gauge" and families["canopy_y"].samples[0].value == 2.5


def test_basic_credentials_are_parsed_strictly() -> None:
    assert _basic("Basic YWRtaW46cGFzczp3b3Jk") == ("admin", "pass:word")
    for header in ("", "Basic", "Basic ###", "Bearer YWRtaW46eA==", "Basic Om5vLW5hbWU=", "Basic " + "A" * 5000):
        assert _basic(header) is None, header


def _gateway(up: list[bool]) -> Any:
    channels = [types.SimpleNamespace(index=i, stream=object() if ok else None, broken=None, moving=False,
                                      batches=i, operations=2 * i, position=100 + i) for i, ok in enumerate(up)]
    session = types.SimpleNamespace(properties={"$Transport": "MQTT", "Tier": "1"}, roles=frozenset({"CLIENT"}),
                                    queue=OutboundQueue())
    registry = types.SimpleNamespace(sessions={"s1": session}, cache=[], groups={}, interest={}, updates_delivered=9,
                                     subscriptions=lambda selector: {"STRING": 3})
    connections = types.SimpleNamespace(internal=set(), opened=5, closed_count=4, streams=set(), bytes_received=10,
                                        bytes_sent=20, session_metrics=SessionMetrics(),
                                        delta_cache=types.SimpleNamespace(saved=11, deltas=3, made=2, compressed=4,
                                                                         compressed_saved=5),
                                        logins=types.SimpleNamespace(stats=lambda: {"login_failures": 1,
                                                                                    "login_refused": 2}))
    mqtt = types.SimpleNamespace(stats=lambda: {"mqtt_connections": 1, "mqtt_publishes_received": 7}, bytes_received=30,
                                 bytes_sent=40)
    missing = types.SimpleNamespace(stats=lambda: {"missing_topic_handlers": 2, "missing_topic_notifications": 6})
    ctx = types.SimpleNamespace(updates_received=8, controller=None, views=None)
    link = types.SimpleNamespace(channels=channels, count=0)
    return types.SimpleNamespace(gateway_id="gw0", connections=connections, registry=registry, mqtt=mqtt,
                                 missing=missing, ctx=ctx, link=link, collectors=Collectors())


def _get(path: str) -> Request:
    return Request(path, Headers([("Host", "x")]))


def parse(text: str) -> dict[str, list[Any]]:
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


async def scrape(endpoints: Endpoints) -> dict[str, list[Any]]:
    answer = endpoints.handle(_get("/metrics?x=1"), "127.0.0.1", lambda: True)
    assert isinstance(answer, asyncio.Future)  # the scrape awaits the other actors
    response = await answer
    assert response.status_code == 200 and response.body is not None
    return parse(response.body.decode())


async def test_readiness_follows_the_partition_streams_and_anonymous_scrapes_when_configured() -> None:
    endpoints = Endpoints(_gateway([True, False, True]), anonymous=True)
    ready = endpoints.handle(_get("/readyz"), "127.0.0.1", lambda: True)
    assert ready.status_code == 503 and b"partitions 1 unreachable" in ready.body  # type: ignore[union-attr]
    endpoints.gateway.link.channels[1].stream = object()
    assert endpoints.handle(_get("/readyz"), "127.0.0.1", lambda: True).status_code == 200  # type: ignore[union-attr]
    samples = await scrape(endpoints)
    assert samples["canopy_sessions"][0].labels == {"transport": "MQTT"}
    assert samples["canopy_mqtt_publishes_received_total"][0].value == 7
    assert samples["canopy_login_refused_total"][0].value == 2 and samples["canopy_login_failures"][0].value == 1
    assert samples["canopy_updates_received_total"][0].value == 8 and samples["canopy_updates_delivered_total"][0].value == 9
    assert {s.labels["transport"]: s.value for s in samples["canopy_sent_bytes_total"]} == {"WEBSOCKET": 20, "MQTT": 40}
    assert samples["canopy_missing_topic_notifications_total"][0].value == 6
    assert samples["canopy_delta_saved_bytes_total"][0].value == 11 and samples["canopy_deltas_sent_total"][0].value == 3
    assert samples["canopy_cluster_status_up"][0].value == 0  # no controller to ask
    assert endpoints.handle(_get("/elsewhere"), "127.0.0.1", lambda: True).status_code == 404  # type: ignore[union-attr]
    for method in ("POST", "HEAD", "DELETE"):  # the handshake parser passes any method on
        refused = endpoints.handle(Request("/metrics", Headers([("Host", "x")]), method), "127.0.0.1", lambda: True)
        assert refused.status_code == 405 and refused.headers["Allow"] == "GET"  # type: ignore[union-attr]


class _Never:
    """An actor method whose calls never answer (a controller stuck in a long change)."""

    def remote(self, *args: Any) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()


class _Answers:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def _call(self) -> Any:
        return self.answer

    def remote(self, *args: Any) -> Any:
        return self._call()


@pytest.mark.timeout(60)  # without the bound on the controller's answer, the scrape never ends
async def test_a_controller_that_does_not_answer_in_time_leaves_the_cluster_out_and_the_scrape_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the bound is the one the endpoints were given: were the module's default used instead, the
    # scrape would wait an hour and the test's timeout would end it
    monkeypatch.setattr(http_endpoints, "GATHER_TIMEOUT", 3600.0)
    gateway = _gateway([True])
    gateway.ctx.controller = types.SimpleNamespace(status=_Never(), fanout_status=_Never())
    gateway.ctx.views = types.SimpleNamespace(stats=_Answers({"views": 2, "evaluations": 11, "evaluation_errors": 1}))
    endpoints = Endpoints(gateway, anonymous=True, timeout=0.05)
    samples = await scrape(endpoints)
    assert samples["canopy_cluster_status_up"][0].value == 0 and "canopy_partition_epoch" not in samples
    assert samples["canopy_views"][0].value == 2 and samples["canopy_view_evaluations_total"][0].value == 11
    assert samples["canopy_sessions_opened_total"][0].value == 5  # the gateway's own figures are all there


class _Counting(_Answers):
    def __init__(self, answer: Any) -> None:
        super().__init__(answer)
        self.calls = 0

    async def _call(self) -> Any:
        self.calls += 1
        await asyncio.sleep(0.05)
        return self.answer


async def test_scrapes_at_once_share_one_gathering_and_a_bad_answer_costs_only_the_cluster_figures(
    caplog: Any,
) -> None:
    gateway = _gateway([True])
    status = _Counting(STATUS)
    gateway.ctx.controller = types.SimpleNamespace(status=status, fanout_status=_Answers([]))
    endpoints = Endpoints(gateway, anonymous=True)
    scraped = await asyncio.gather(*(scrape(endpoints) for _ in range(5)))
    assert status.calls == 1 and all(s["canopy_cluster_status_up"][0].value == 1 for s in scraped)
    await scrape(endpoints)
    assert status.calls == 2  # the next scrape asks again: nothing is kept between scrapes
    gateway.ctx.views = types.SimpleNamespace(stats=_Answers({"views": "not a number"}))
    samples = await scrape(endpoints)
    assert samples["canopy_cluster_status_up"][0].value == 0 and samples["canopy_sessions_opened_total"][0].value == 5
    assert "gathering the cluster's figures for /metrics failed" in caplog.text


STATUS = {
    "nodes": [{"name": "n1", "alive": True}, {"name": "n2", "alive": False}],
    "partitions": [
        {"partition": 0, "primary": "n1", "backup": None, "epoch": 3, "topics": 12, "registrations": 4,
         "sequence": 40, "backup_sequence": None, "caught_up": None, "lag": None, "healthy": True, "failovers": 1},
        {"partition": 1, "primary": "n1", "backup": "n3", "epoch": 2, "topics": None, "registrations": None,
         "sequence": None, "backup_sequence": 7, "caught_up": False, "lag": 5, "healthy": False, "failovers": 0},
    ],
    "gateways": [{"gateway": "gateway-0", "sessions": 3, "answering": True, "lost": False},
                 {"gateway": "gateway-1", "sessions": None, "answering": False, "lost": True}],
    "healthy": False, "balanced": True, "configuration": {"security_version": 9, "log_committed": 17},
}


def test_the_cluster_status_becomes_labelled_families() -> None:
    samples = parse(render(status_families(STATUS)))
    assert samples["canopy_cluster_status_up"][0].value == 1 and samples["canopy_cluster_healthy"][0].value == 0
    assert {s.labels["state"]: s.value for s in samples["canopy_nodes"]} == {"alive": 1, "dead": 1}
    assert [s.labels for s in samples["canopy_partition_info"]] == [
        {"partition": "0", "primary": "n1", "backup": ""}, {"partition": "1", "primary": "n1", "backup": "n3"}]
    assert [(s.labels["partition"], s.value) for s in samples["canopy_partition_topics"]] == [("0", 12)]  # 1: unknown
    assert [(s.labels["partition"], s.value) for s in samples["canopy_partition_replication_lag_batches"]] == [("1", 5)]
    assert [s.value for s in samples["canopy_partition_failovers_total"]] == [1, 0]
    assert {s.labels["state"]: s.value for s in samples["canopy_gateways"]} == {"serving": 1, "not_answering": 0, "lost": 1}
    assert samples["canopy_configuration_log_committed_position"][0].value == 17
    assert parse(render(status_families(None))) == {"canopy_cluster_status_up": [mock.ANY]}


def test_fan_out_connections_become_labelled_families() -> None:
    listed = [{"name": "prices", "state": "connected", "sessions": 2, "forwarded": 1, "lag_ms": 12.5, "rtt_ms": 3.0,
               "last_update_s": 0.5, "links": [{"selector": "?p//", "topics": 4, "updates": 9, "contested": ["p/x"]}]},
              {"name": "rates", "state": "retrying", "sessions": 0, "forwarded": 0, "lag_ms": None, "rtt_ms": None,
               "last_update_s": None, "links": []}]
    samples = parse(render(fanout_families(listed)))
    assert {s.labels["connection"]: s.value for s in samples["canopy_fanout_connected"]} == {"prices": 1, "rates": 0}
    assert [(s.labels, s.value) for s in samples["canopy_fanout_lag_seconds"]] == [({"connection": "prices"}, 0.0125)]
    assert samples["canopy_fanout_link_topics"][0].labels == {"connection": "prices", "link": "?p//"}
    assert samples["canopy_fanout_link_contested_paths"][0].value == 1
    assert fanout_families(None) == [] and fanout_families([]) == []


def test_collectors_become_labelled_families() -> None:
    collectors = Collectors((TopicCollector("all", "?t//"), TopicCollector("typed", "?t//", True)))
    samples = parse(render(topic_collector_families(collectors, [{"STRING": 2, "JSON": 1}] * 2,
                                                    [{"STRING": 5}, {"STRING": 5}])))
    assert [(s.labels, s.value) for s in samples["canopy_topic_collector_topics"]] == [
        ({"collector": "all"}, 3), ({"collector": "typed", "type": "JSON"}, 1),
        ({"collector": "typed", "type": "STRING"}, 2)]
    assert [(s.labels, s.value) for s in samples["canopy_topic_collector_subscriptions"]] == [
        ({"collector": "all"}, 5), ({"collector": "typed", "type": "JSON"}, 0),
        ({"collector": "typed", "type": "STRING"}, 5)]
    unanswered = parse(render(topic_collector_families(collectors, None, [{}, {}])))
    assert "canopy_topic_collector_topics" not in unanswered  # not every partition answered: no figure
    metrics = SessionMetrics()
    by_principal = from_dict({"kind": "session", "name": "who", "filter": "all", "group_by": ["$Principal"]})
    assert isinstance(by_principal, SessionCollector)
    metrics.set([by_principal])
    metrics.opened({"$Principal": "ann"}, frozenset())
    samples = parse(render(session_collector_families(metrics.figures([({"$Principal": "ann"}, frozenset())]))))
    (row,) = samples["canopy_session_collector_sessions"]
    assert row.labels == {"collector": "who", "_Principal": "ann"} and row.value == 1
    assert samples["canopy_session_collector_opened_total"][0].value == 1
