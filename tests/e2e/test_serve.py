"""`canopy serve` starts whole or not at all, refuses clearly, and stops cleanly."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import canopy
from actors import processes
from replication.config_log import ConfigLogStore
from tests.conftest import free_port, wait_for
from tests.e2e.conftest import ADMIN, BIN, Server, cli


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT leftovers do not count
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_config_file_start_serve_refusals_and_clean_stop(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "canopy.toml"
    config.write_text(f'port = {port}\npartitions = 3\nhub_root = "apps"\n')
    data = tmp_path / "data"
    first = Server(data, "--config", str(config), port=port)
    try:
        first.wait_ready()
        info = json.loads((data / "server.json").read_text())
        assert info["partitions"] == 3 and info["urls"] == [f"ws://127.0.0.1:{port}"]
        with canopy.connect_sync(first.url, *ADMIN) as session:
            assert session.hub.root == "apps"
            session.topics.add_and_set("serve/x", 1)
            assert [t.value for t in session.topics.fetch(">serve/x")] == [1]

        # the same data directory: refused at once
        started = time.monotonic()
        same_dir = Server(data, port=free_port())
        same_dir.proc.wait(60)
        assert same_dir.stop() == 1
        assert "is in use by canopy serve pid" in same_dir.output

        # the same port: refused before Ray starts
        same_port = Server(tmp_path / "other", port=port)
        same_port.proc.wait(60)
        same_port.stop()
        assert same_port.proc.returncode == 1
        assert "already in use" in same_port.output
        assert time.monotonic() - started < 60

        # joining the same Ray cluster in the same namespace: refused, naming the running instance
        joined = Server(tmp_path / "joined", "--address", info["ray_address"], port=free_port())
        joined.proc.wait(120)
        joined.stop()
        assert joined.proc.returncode == 1, joined.output
        assert "already running in namespace 'canopy'" in joined.output and first.url in joined.output

        # ...and accepted in another namespace, sharing the Ray cluster
        other = Server(tmp_path / "ns", "--address", info["ray_address"], "--namespace", "second", port=free_port())
        try:
            other.wait_ready()
            with canopy.connect_sync(other.url, *ADMIN) as session:
                assert session.topics.fetch(">serve/x") == []  # a separate instance
        finally:
            assert other.stop() == 0, other.output
        # the first instance is untouched by the second one's shutdown
        with canopy.connect_sync(first.url) as session:  # anonymous: read-only
            assert [t.value for t in session.topics.fetch(">serve/x")] == [1]
    finally:
        code = first.stop()
    assert code == 0, first.output
    assert "shutting down" in first.output
    assert not (data / "server.json").exists()
    wait_for(lambda: port_is_free(port), 30, f"port {port} to be released")


def test_bad_configuration_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("port = 'eighty'\n")
    result = cli("serve", "--config", str(config))
    assert result.returncode == 1
    assert "port must be an integer" in result.stderr and str(config) in result.stderr
    result = cli("serve", "--partitions", "0", "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 1 and "partitions must be at least 1" in result.stderr


def test_a_new_serve_supervises_the_instance_a_killed_serve_left_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """canopy serve joined to a Ray cluster of its own (``--address``) is SIGKILLed: the instance
    (its detached controller, gateways and partitions) goes on in that Ray. A new serve on the same
    data directory and namespace takes it over instead of refusing (nothing checks the controller
    any more): the same gateway, the same topics, and it stops the instance cleanly."""
    monkeypatch.setenv("RAY_AUTH_TOKEN", secrets.token_hex(32))
    ray_port, port = free_port(), free_port()
    head = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", "--port", str(ray_port), "--node-ip-address", "127.0.0.1",
         "--num-cpus", "2", "--include-dashboard=false", "--disable-usage-stats"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "RAY_AUTH_MODE": "token", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
    data = tmp_path / "data"
    first = second = None
    try:
        first = Server(data, "--address", f"127.0.0.1:{ray_port}", port=port).wait_ready(180)
        with canopy.connect_sync(first.url, *ADMIN) as session:
            session.topics.add_and_set("kept/x", 1)
        first.proc.kill()
        first.proc.wait(30)
        second = Server(data, "--address", f"127.0.0.1:{ray_port}", port=port).wait_ready(180)
        assert any("outlived its canopy serve; supervising it" in line for line in second.lines), second.output
        with canopy.connect_sync(second.url, *ADMIN) as session:
            assert [t.value for t in session.topics.fetch(">kept/x")] == [1]
            session.topics.add_and_set("kept/y", 2)
        # a third serve is refused while the second one checks the controller
        third = Server(data.parent / "third", "--address", f"127.0.0.1:{ray_port}", port=free_port())
        third.proc.wait(180)
        third.stop()
        assert third.proc.returncode == 1 and "already running in namespace 'canopy'" in third.output, third.output
        assert second.stop() == 0, second.output
        second = None
    finally:
        for server in (first, second):
            if server is not None:
                server.stop()
        below = processes.descendants(head.pid)
        head.terminate()
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            head.kill()
        for pid in below:
            if processes.alive(pid):
                os.kill(pid, signal.SIGKILL)


# -- one restart for the tests of what a restart keeps (kept last: its serve is not idle beside the others)

VIEW_SPEC = "map ?src// to mirror/<path(1)> type STRING"


@dataclass
class Restart:
    """A data directory a first serve configured (a principal, a session tree, views) and
    stopped, what its configuration copy held then, and a second serve running on it."""

    data: Path
    #: the administrator's password, made up and printed by the first serve
    password: str
    #: the node's copy of the replicated configuration log, read after the first serve stopped
    documents: dict[str, Any]
    mode: str
    password_stored: bool
    second: Server


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restart]:
    data = tmp_path_factory.mktemp("restart") / "data"
    first = Server(data, admin_password=False)
    try:
        first.wait_ready()
        shown = re.search(r"principal 'admin', password '([^']+)'", first.output)
        assert shown is not None, first.output
        password = shown.group(1)
        with canopy.connect_sync(first.url, "admin", password) as admin:
            admin.security.add_principal("kept", "kept-password", ["CLIENT"])
            admin.session_trees.put_table("virtual", [("all", "real")])
            admin.views.create("early", VIEW_SPEC)
            admin.views.create("late", "map ?src// to mirror/<path(1)>")
            admin.views.create("remote", "map ?a/ from Server1 to b/<path(1)>")
    finally:
        assert first.stop() == 0, first.output
    stored = data / "configuration.sqlite"  # the node's copy of the replicated configuration log
    mode = oct(stored.stat().st_mode)[-3:]
    password_stored = any(password.encode() in f.read_bytes() for f in data.glob("configuration.sqlite*"))
    documents = ConfigLogStore(data).documents()
    second = Server(data, admin_password=False)
    try:
        yield Restart(data, password, documents, mode, password_stored, second.wait_ready())
    finally:
        assert second.stop() == 0, second.output


def test_security_and_session_trees_survive_a_restart(restarted: Restart) -> None:
    assert restarted.mode == "600" and not restarted.password_stored
    assert "kept" in restarted.documents["security"]["principals"]
    second = restarted.second
    assert "password" not in second.output  # printed once, at the first start only
    with canopy.connect_sync(second.url, "admin", restarted.password) as admin:
        assert admin.session_trees.get_table("virtual") == [("all", "real")]
        admin.topics.add_and_set("real/x", "through the tree")
    with canopy.connect_sync(second.url, "kept", "kept-password") as kept:
        assert [(t.path, t.value) for t in kept.topics.fetch(">virtual/x")] == [("virtual/x", "through the tree")]


def test_views_survive_a_restart_and_rebuild(restarted: Restart) -> None:
    assert [v["name"] for v in restarted.documents["views"]] == ["early", "late", "remote"]
    with canopy.connect_sync(restarted.second.url, "admin", restarted.password) as admin:
        views = admin.views.list()
        assert [(v.name, v.specification) for v in views][:1] == [("early", VIEW_SPEC)]
        assert views[2].state.startswith("inactive")
        admin.topics.add_and_set("src/x", 5)  # recovered sources are re-added by their publisher
        wait_for(lambda: [(t.path, t.value) for t in admin.topics.fetch("?mirror//")] == [("mirror/x", "5")],
                 30, "the restored view (still first in precedence) to rebuild its reference topic")
