"""`canopy serve --tls-cert/--tls-key` serves wss://; the client and the CLI verify it.

The certificates are made here: a CA, a server certificate for localhost and
127.0.0.1, and one for another host. One server runs for the module.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import canopy
from actors import tls
from canopy import transport
from canopy.errors import ConnectError
from tests.certificates import CertificateAuthority, Issued
from tests.e2e.conftest import ADMIN, BIN, Server, cli


@dataclass(frozen=True)
class Files:
    ca: CertificateAuthority
    server: Issued
    other_host: Issued


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    directory = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority.make(directory)
    return Files(
        ca,
        ca.issue(directory, "server", ["DNS:localhost", "IP:127.0.0.1"]),
        ca.issue(directory, "other", ["DNS:other.example"]),
    )


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, files: Files) -> Iterator[Server]:
    srv = Server(
        tmp_path_factory.mktemp("data"), "--partitions", "1",
        "--tls-cert", str(files.server.cert), "--tls-key", str(files.server.key),
    )
    srv.url = f"wss://127.0.0.1:{srv.port}"
    try:
        yield srv.wait_ready()
    finally:
        code = srv.stop()
        assert code == 0, f"canopy serve exited with {code}:\n{srv.output}"


def test_serve_reports_a_wss_url(secure: Server) -> None:
    assert f"canopy serving {secure.url} " in secure.output
    info = json.loads((secure.data_dir / "server.json").read_text())
    assert info["urls"] == [secure.url]


async def test_a_session_over_wss_receives_what_is_set(secure: Server, files: Files) -> None:
    async with canopy.connect(secure.url, *ADMIN, ca_file=files.ca.cert) as session:
        await session.topics.add("tls/a", "STRING")
        subscription = await session.topics.subscribe(">tls/a")
        assert (await subscription.next(10)).kind == "subscribed"
        await session.topics.set("tls/a", "over TLS")
        event = await subscription.next(10)
        assert (event.kind, event.path, event.value) == ("value", "tls/a", "over TLS")


def test_the_blocking_client_by_host_name(secure: Server, files: Files) -> None:
    with canopy.connect_sync(f"wss://localhost:{secure.port}", *ADMIN, ca_file=str(files.ca.cert)) as session:
        session.topics.add_and_set("tls/sync", 7)
        assert [t.value for t in session.topics.fetch(">tls/sync")] == [7]


async def test_the_system_trust_store_does_not_know_the_test_ca(secure: Server) -> None:
    with pytest.raises(ConnectError) as caught:
        await canopy.connect(secure.url, *ADMIN, timeout=10)
    assert "certificate problem: the server's certificate is not trusted" in str(caught.value)
    assert "--ca-file" in str(caught.value)


async def test_a_certificate_for_another_host_is_refused(files: Files) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    context = tls.server_context(str(files.other_host.cert), str(files.other_host.key))
    server = await asyncio.start_server(hang_up, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(ConnectError) as caught:
            await canopy.connect(f"wss://127.0.0.1:{port}", ca_file=files.ca.cert, timeout=10)
    finally:
        server.close()
        await server.wait_closed()
    assert "certificate problem: the server's certificate is not valid for this host" in str(caught.value)
    assert "127.0.0.1" in str(caught.value)


async def test_plain_ws_to_the_tls_port_fails_cleanly(secure: Server, files: Files) -> None:
    with pytest.raises(ConnectError) as caught:
        await canopy.connect(f"ws://127.0.0.1:{secure.port}", *ADMIN, timeout=10)
    assert "use wss://" in str(caught.value)
    async with canopy.connect(secure.url, *ADMIN, ca_file=files.ca.cert) as session:  # still serving
        assert session.session_id


async def test_wss_to_a_plain_server_fails_cleanly(files: Files) -> None:
    server = await asyncio.get_running_loop().create_server(
        transport.serve_stream(transport.Handler, max_size=None), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(ConnectError, match="does the server serve wss://"):
            await canopy.connect(f"wss://127.0.0.1:{port}", ca_file=files.ca.cert, timeout=10)
    finally:
        server.close()
        await server.wait_closed()


async def test_an_unusable_ca_file_is_named(tmp_path: Path, files: Files) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(ConnectError, match=f"cannot use the CA file {missing}: No such file or directory"):
        await canopy.connect("wss://127.0.0.1:1", ca_file=missing)
    with pytest.raises(ConnectError, match="it holds no PEM certificate"):
        await canopy.connect("wss://127.0.0.1:1", ca_file=files.server.key)


def test_the_cli_with_a_ca_file(secure: Server, files: Files) -> None:
    ca = str(files.ca.cert)
    done = cli("topic", "set", "tls/cli", "from the CLI", "--type", "STRING", "--ca-file", ca, url=secure.url)
    assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [str(BIN / "canopy"), "topic", "fetch", ">tls/cli", "--json", "--url", secure.url],
        capture_output=True, text=True, timeout=60, env={**os.environ, "CANOPY_CA_FILE": ca},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"path": "tls/cli", "type": "STRING", "value": "from the CLI"}


def test_the_cli_without_the_ca_says_why_in_one_line(secure: Server) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CANOPY_CA_FILE"}
    done = subprocess.run(
        [str(BIN / "canopy"), "topic", "fetch", "?tls//", "--url", secure.url],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("canopy: CONNECT_FAILED: cannot connect to wss://")
    assert "certificate problem" in done.stderr and len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize("transport_name", ["tcp", "websockets"])
def test_mqtt_over_tls_and_secure_websocket(secure: Server, files: Files, transport_name: str) -> None:
    """With TLS configured MQTT is served over TLS only (mqtt_tls_port), and over wss:// at /mqtt."""
    from tests.actors.mqtt_client import MQTT

    address = ("localhost", secure.mqtt_port if transport_name == "tcp" else secure.port)
    with canopy.connect_sync(secure.url, *ADMIN, ca_file=str(files.ca.cert)) as session, MQTT(
        address, 5, username=ADMIN[0], password=ADMIN[1], transport=transport_name, tls_ca=str(files.ca.cert)
    ) as client:
        client.subscribe(f"tls/mqtt-{transport_name}", qos=1)
        session.topics.add_and_set(f"tls/mqtt-{transport_name}", "secret")
        assert client.next().payload == b"secret"
    info = json.loads((secure.data_dir / "server.json").read_text())
    assert info.get("mqtt_urls") == [f"mqtts://127.0.0.1:{secure.mqtt_port}"], info
