"""The plain HTTP side of a gateway without a gateway: the exposition format as Prometheus's
parser reads it, /readyz over partition streams up and down, anonymous scrapes."""

from __future__ import annotations

import types
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from websockets.datastructures import Headers
from websockets.http11 import Request

from actors.http_endpoints import Endpoints, Family, _basic, render
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
    session = types.SimpleNamespace(properties={"$Transport": "MQTT"}, queue=OutboundQueue())
    registry = types.SimpleNamespace(sessions={"s1": session}, cache=[], groups={}, interest={})
    connections = types.SimpleNamespace(internal=set(), opened=5, closed_count=4, streams=set(),
                                        logins=types.SimpleNamespace(stats=lambda: {"login_failures": 1,
                                                                                    "login_refused": 2}))
    mqtt = types.SimpleNamespace(stats=lambda: {"mqtt_connections": 1, "mqtt_publishes_received": 7})
    return types.SimpleNamespace(gateway_id="gw0", connections=connections, registry=registry, mqtt=mqtt,
                                 link=types.SimpleNamespace(channels=channels))


def _get(path: str) -> Request:
    return Request(path, Headers([("Host", "x")]))


def test_readiness_follows_the_partition_streams_and_anonymous_scrapes_when_configured() -> None:
    endpoints = Endpoints(_gateway([True, False, True]), anonymous=True)
    ready = endpoints.handle(_get("/readyz"), "127.0.0.1", lambda: True)
    assert ready.status_code == 503 and b"partitions 1 unreachable" in ready.body  # type: ignore[union-attr]
    endpoints.gateway.link.channels[1].stream = object()
    assert endpoints.handle(_get("/readyz"), "127.0.0.1", lambda: True).status_code == 200  # type: ignore[union-attr]
    scraped = endpoints.handle(_get("/metrics?x=1"), "127.0.0.1", lambda: True)
    assert scraped.status_code == 200  # type: ignore[union-attr]
    samples = {s.name: s for f in text_string_to_metric_families(scraped.body.decode())  # type: ignore[union-attr]
               for s in f.samples}
    assert samples["canopy_sessions"].labels == {"transport": "MQTT"}
    assert samples["canopy_mqtt_publishes_received_total"].value == 7
    assert samples["canopy_login_refused_total"].value == 2 and samples["canopy_login_failures"].value == 1
    assert endpoints.handle(_get("/elsewhere"), "127.0.0.1", lambda: True).status_code == 404  # type: ignore[union-attr]
