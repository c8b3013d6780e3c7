"""One Ray node for the actor tests (package scope: it stops after the last of them), with one canopy instance on it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from actors import names
from cluster.config import InstanceConfig

BROKER_SETTINGS = {
    "port": 0, "partitions": 2, "queue_limit": 5000, "backpressure_threshold": 500, "max_frame_size": 262_144,
    # small per-session limits, so that the tests reach them
    "session_buffer": 4 * 1024 * 1024, "max_requests_in_flight": 64, "max_messages_per_frame": 500,
    "max_protocol_errors": 20, "session_grace_ms": 3000, "missing_topic_timeout_ms": 2000,
    # small connection limits (their tests connect from addresses of their own, 127.0.0.N)
    "hello_timeout_ms": 2000, "max_connections_per_address": 40,
}
ADMIN_PASSWORD = "test-admin-password"
#: what the broker fixture's controller said when it started (its gateways' URLs, MQTT's too)
BROKER_INFO: dict[str, Any] = {}
#: connect(...) arguments of the administrator
ADMIN = ("admin", ADMIN_PASSWORD)


@pytest.fixture(scope="package")
def ray_node() -> Iterator[Any]:
    import ray

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        namespace=f"canopy-test-{uuid.uuid4().hex[:8]}",
        logging_level="WARNING",
        log_to_driver=False,
    )
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="package")
def broker(ray_node: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a canopy gateway backed by two partitions; ``ADMIN`` may do everything. Package
    scope (and so the Ray node under it): it stops after the last actor test, not at the end of the
    run the other tests go on in (idle, its processes took a tenth of a core)."""
    from actors import controller as controller_module

    ray = ray_node
    config = InstanceConfig(
        **BROKER_SETTINGS,  # type: ignore[arg-type]
        data_dir=str(tmp_path_factory.mktemp("broker-data")),
        admin_password=ADMIN_PASSWORD,
        countries={"10.0.0.0/8": "DE", "127.0.0.0/8": "LO"},
    )
    controller = controller_module.remote_class().options(name=names.CONTROLLER).remote(
        config, ray.get_runtime_context().get_node_id()
    )
    info = ray.get(controller.start.remote(), timeout=120)
    BROKER_INFO.update(info)
    try:
        yield info["urls"][0]
    finally:
        ray.get(controller.shutdown.remote(), timeout=60)
        ray.kill(controller)


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """A topic branch of this test's own."""
    return f"t/{request.node.name.replace('[', '_').replace(']', '_')}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="package")
def mqtt_address(broker: str) -> tuple[str, int]:
    """(host, port) of the broker's MQTT listener (MQTT over TCP)."""
    url = BROKER_INFO["mqtt_urls"][0]
    host, port = url.removeprefix("mqtt://").rsplit(":", 1)
    return host, int(port)
