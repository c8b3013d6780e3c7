"""Plain HTTP on a gateway's port: /healthz, /readyz and /metrics (actors/http_endpoints.py,
actors/metrics.py), read the way a probe and Prometheus read them (urllib; prometheus_client's
own parser), and the metric collectors (sessions/collectors.py) through the real broker."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import canopy
from sessions.collectors import MAX_COLLECTORS
from tests.actors.conftest import ADMIN
from tests.actors.mqtt_client import MQTT
from tests.conftest import wait_for


def http(broker: str, path: str, credentials: tuple[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    url = broker.replace("ws://", "http://").rstrip("/") + path
    request = urllib.request.Request(url)
    if credentials is not None:
        token = base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, dict(e.headers), e.read().decode()


def scrape(broker: str) -> dict[str, list[Any]]:
    """Every sample of /metrics, by metric name (as prometheus_client parses the exposition)."""
    status, headers, body = http(broker, "/metrics", ADMIN)
    assert status == 200, (status, body)
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
    return sum(s.value for s in samples[name] if all(s.labels.get(k) == v for k, v in labels.items()))


def test_health_and_readiness_are_plain_http_on_the_gateway_port(broker: str) -> None:
    assert http(broker, "/healthz")[::2] == (200, "ok\n")
    assert http(broker, "/readyz")[::2] == (200, "ready\n")
    status, headers, body = http(broker, "/nothing-here")
    assert status == 404 and "/metrics" in body and headers["Connection"] == "close"
    with canopy.connect_sync(broker, *ADMIN) as session:  # the WebSocket side is as it was
        assert session.topics.fetch("?nothing-here//") == []


def test_metrics_need_a_principal_with_view_server(broker: str) -> None:
    status, headers, _ = http(broker, "/metrics")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic realm=")
    assert http(broker, "/metrics", (ADMIN[0], "wrong"))[0] == 401
    with canopy.connect_sync(broker, *ADMIN) as admin:
        admin.security.update(["add_principal", "metrics-reader", "reader-secret", ["CLIENT"]])
    status, _, body = http(broker, "/metrics", ("metrics-reader", "reader-secret"))
    assert status == 403 and "VIEW_SERVER" in body
    assert http(broker, "/metrics", ADMIN)[0] == 200


def test_metrics_parse_and_move_as_clients_act(broker: str, mqtt_address: tuple[str, int], prefix: str) -> None:
    before = scrape(broker)
    assert value(before, "canopy_gateway_info") == 1
    assert all(s.value == 1 for s in before["canopy_partition_stream_up"]), before["canopy_partition_stream_up"]
    with canopy.connect_sync(broker, *ADMIN) as native, MQTT(mqtt_address, 5, username=ADMIN[0],
                                                             password=ADMIN[1]) as client:
        native.topics.add(f"{prefix}/x", "STRING")
        client.publish(f"{prefix}/x", "hello", qos=1, retain=True)
        during = scrape(broker)
        assert value(during, "canopy_sessions", transport="MQTT") >= 1
        assert value(during, "canopy_sessions_opened_total") >= value(before, "canopy_sessions_opened_total") + 2
        assert value(during, "canopy_mqtt_publishes_received_total") >= \
            value(before, "canopy_mqtt_publishes_received_total") + 1
        assert sum(s.value for s in during["canopy_partition_operations_total"]) > \
            sum(s.value for s in before["canopy_partition_operations_total"])
    after = wait_for(lambda: (s := scrape(broker)) and value(s, "canopy_sessions_closed_total")
                     >= value(during, "canopy_sessions_closed_total") + 2 and s, 20, "the sessions to close")
    assert value(after, "canopy_http_requests_total", path="/metrics") > value(before, "canopy_http_requests_total",
                                                                                path="/metrics")


@pytest.mark.parametrize("header", ["Basic", "Basic !!!", "Bearer abc", "Basic " + "A" * 5000,
                                    "Basic " + base64.b64encode(b"no-colon").decode()])
def test_malformed_credentials_are_refused_and_the_gateway_goes_on(broker: str, header: str) -> None:
    url = broker.replace("ws://", "http://") + "/metrics"
    request = urllib.request.Request(url, headers={"Authorization": header})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=20)
    with refused.value:
        assert refused.value.code in (400, 401), refused.value.code
    assert http(broker, "/healthz")[0] == 200


def test_the_cluster_figures_are_there_and_move_as_clients_act(broker: str, prefix: str) -> None:
    before = scrape(broker)
    assert value(before, "canopy_cluster_status_up") == 1 and value(before, "canopy_cluster_healthy") == 1
    assert value(before, "canopy_nodes", state="alive") >= 1 and value(before, "canopy_nodes", state="dead") == 0
    assert sorted(s.labels["partition"] for s in before["canopy_partition_info"]) == ["0", "1"]
    assert all(s.labels["primary"] for s in before["canopy_partition_info"])
    assert value(before, "canopy_gateways", state="serving") >= 1
    assert {s.labels["partition"] for s in before["canopy_partition_failovers_total"]} == {"0", "1"}
    with canopy.connect_sync(broker, *ADMIN) as admin, canopy.connect_sync(broker, *ADMIN) as reader:
        admin.views.create(f"metrics-{prefix.replace('/', '-')}", f"map ?{prefix}/source// to {prefix}/view/<path(2)>")
        subscription = reader.topics.subscribe(f"?{prefix}//")
        for value_now in (0, 1):  # made, then updated: the reader sees every reference topic's each time
            for i in range(5):
                admin.topics.add_and_set(f"{prefix}/source/{i}", i + value_now * 10)
            views: set[str] = set()
            while len(views) < 5:  # each event comes within the deadline, or next() fails saying so
                event = subscription.next(20)
                if event.path.startswith(f"{prefix}/view/") and event.value == value_now * 10 + int(event.path[-1]):
                    views.add(event.path)
        after = wait_for(lambda: (s := scrape(broker)) and sum(x.value for x in s["canopy_partition_topics"])
                         >= sum(x.value for x in before["canopy_partition_topics"]) + 10 and s, 20,
                         "the partitions to count the new topics")
        admin.views.remove(f"metrics-{prefix.replace('/', '-')}")
    assert value(after, "canopy_updates_received_total") >= value(before, "canopy_updates_received_total") + 10
    assert value(after, "canopy_updates_delivered_total") >= value(before, "canopy_updates_delivered_total") + 10
    assert value(after, "canopy_view_evaluations_total") >= value(before, "canopy_view_evaluations_total") + 10
    assert value(after, "canopy_views") >= 1
    for direction in ("received", "sent"):
        assert value(after, f"canopy_{direction}_bytes_total", transport="WEBSOCKET") > \
            value(before, f"canopy_{direction}_bytes_total", transport="WEBSOCKET")


def test_missing_topic_notifications_are_counted(broker: str, prefix: str) -> None:
    before = scrape(broker)
    with canopy.connect_sync(broker, *ADMIN) as handler, canopy.connect_sync(broker, *ADMIN) as asker:
        handler.missing_topics.add_handler(f"{prefix}/missing", lambda notification: False)  # cancel
        with pytest.raises(canopy.errors.RequestCancelledError):
            asker.topics.fetch(f">{prefix}/missing/x")
    after = scrape(broker)
    assert value(after, "canopy_missing_topic_notifications_total") >= \
        value(before, "canopy_missing_topic_notifications_total") + 1
    assert value(after, "canopy_missing_topic_requests_cancelled_total") >= \
        value(before, "canopy_missing_topic_requests_cancelled_total") + 1


def series(samples: dict[str, list[Any]], name: str, collector: str) -> dict[tuple[tuple[str, str], ...], float]:
    """A collector's samples of ``name``, by their other labels."""
    return {tuple(sorted((k, v) for k, v in s.labels.items() if k != "collector")): s.value
            for s in samples.get(name, []) if s.labels.get("collector") == collector}


def test_metric_collectors_are_kept_listed_and_exported(broker: str, prefix: str) -> None:
    tag = prefix.rsplit("-", 1)[-1]
    topics, typed, people = f"topics-{tag}", f"typed-{tag}", f"people-{tag}"
    with canopy.connect_sync(broker, *ADMIN) as admin:
        try:
            assert admin.metrics.put_topic_collector(topics, f"?{prefix}//")["replaced"] is False
            admin.metrics.put_topic_collector(typed, f"?{prefix}//", group_by_type=True)
            put = admin.metrics.put_session_collector(people, f"Team is '{tag}'", group_by=["Role", "$Transport"])
            assert put == {"kind": "session", "name": people, "filter": f"Team is '{tag}'",
                           "group_by": ["Role", "$Transport"], "remove_metrics_with_no_matches": False,
                           "replaced": False}
            names = [c["name"] for c in admin.metrics.list_collectors()]
            assert names.index(topics) < names.index(typed) < names.index(people)
            admin.topics.add_and_set(f"{prefix}/a", "x")
            admin.topics.add_and_set(f"{prefix}/b", "y")
            admin.topics.add_and_set(f"{prefix}/n", 1)
            with canopy.connect_sync(broker, properties={"Team": tag, "Role": "dev"}) as dev, \
                    canopy.connect_sync(broker, properties={"Team": tag, "Role": "ops"}) as ops, \
                    canopy.connect_sync(broker, properties={"Team": "other", "Role": "dev"}):
                dev.topics.subscribe(f"?{prefix}//")  # answered once the subscription is in place
                ops.topics.subscribe(f">{prefix}/a")
                during = scrape(broker)
            assert series(during, "canopy_topic_collector_topics", topics) == {(): 3}
            assert series(during, "canopy_topic_collector_topics", typed) == {(("type", "INT64"),): 1,
                                                                           (("type", "STRING"),): 2}
            assert series(during, "canopy_topic_collector_subscriptions", topics) == {(): 4}
            assert series(during, "canopy_topic_collector_subscriptions", typed) == {(("type", "INT64"),): 1,
                                                                                  (("type", "STRING"),): 3}
            dev_group = (("Role", "dev"), ("_Transport", "WEBSOCKET"))
            ops_group = (("Role", "ops"), ("_Transport", "WEBSOCKET"))
            assert series(during, "canopy_session_collector_sessions", people) == {dev_group: 1, ops_group: 1}
            assert series(during, "canopy_session_collector_opened_total", people) == {dev_group: 1, ops_group: 1}
            after = wait_for(lambda: (s := scrape(broker)) and series(s, "canopy_session_collector_closed_total",
                                                                      people) == {dev_group: 1, ops_group: 1} and s,
                             20, "the sessions' closes to be counted")
            # the groups keep their series (at 0) until the collector removes empty ones
            assert series(after, "canopy_session_collector_sessions", people) == {dev_group: 0, ops_group: 0}
            replaced = admin.metrics.put_session_collector(people, f"Team is '{tag}'", group_by=["Role"],
                                                           remove_metrics_with_no_matches=True)
            assert replaced["replaced"] is True
            assert series(scrape(broker), "canopy_session_collector_sessions", people) == {}
        finally:
            removed = [admin.metrics.remove_collector(n) for n in (topics, typed, people)]
        assert removed == [True, True, True] and admin.metrics.remove_collector(topics) is False
        gone = scrape(broker)
        assert not any(s.labels.get("collector") in (topics, typed, people) for name in gone for s in gone[name])


@pytest.mark.parametrize("put, says", [
    (lambda m: m.put_topic_collector("bad name!", ">a"), "a name is 1-64"),
    (lambda m: m.put_topic_collector("c", "?a//b"), "is not a topic selector"),
    (lambda m: m.put_session_collector("c", "Team is"), "invalid session filter"),
    (lambda m: m.put_session_collector("c", "all", group_by=["a-b", "a.b"]), "both exported as label 'a_b'"),
])
def test_bad_collectors_are_refused_with_a_typed_error_naming_what_is_wrong(broker: str, put: Any, says: str) -> None:
    with canopy.connect_sync(broker, *ADMIN) as admin:
        with pytest.raises(canopy.errors.InvalidCollectorError) as refused:
            put(admin.metrics)
        assert says in str(refused.value)
        assert all(c["name"] != "c" for c in admin.metrics.list_collectors())


def test_the_number_of_collectors_is_bounded(broker: str, prefix: str) -> None:
    tag = prefix.rsplit("-", 1)[-1]
    with canopy.connect_sync(broker, *ADMIN) as admin:
        have = len(admin.metrics.list_collectors())
        made = [f"bound-{tag}-{i}" for i in range(MAX_COLLECTORS - have)]
        try:
            for name in made:
                admin.metrics.put_topic_collector(name, ">a")
            with pytest.raises(canopy.errors.InvalidCollectorError, match=f"at most {MAX_COLLECTORS}"):
                admin.metrics.put_topic_collector(f"bound-{tag}-one-more", ">a")
            admin.metrics.put_topic_collector(made[0], ">b")  # replacing one is no addition
        finally:
            for name in made:
                admin.metrics.remove_collector(name)
