"""Plain HTTP on a gateway's port: /healthz, /readyz and /metrics (actors/http_endpoints.py),
read the way a probe and Prometheus read them (urllib; prometheus_client's own parser)."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import canopy
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
