"""`canopy serve` watches what serves, dies whole, and keeps its embedded Ray on loopback with token auth.

The processes of one embedded Ray are found here independently of `cluster.serve`: the
descendants of the `canopy serve` process, and anything that names that Ray's session directory
(taken from the GCS's command line) in its arguments or open files.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.liveness import CRASH_LOOP, death_reason
from actors.processes import alive as _alive
from actors.processes import arguments as _args
from actors.processes import descendants as _descendants
from cluster.serve import ensure_token_file
from tests.conftest import wait_for
from tests.e2e.conftest import ADMIN, Server, cli, serving

EXIT_DEADLINE = 30.0  # a dead actor found, reported, everything shut down
SWEEP_DEADLINE = 30.0  # every Ray process gone after `kill -9` of canopy serve


def _pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def _actor_pid(serve_pid: int, actor: str) -> int:
    for pid in sorted(_descendants(serve_pid)):
        args = _args(pid)
        if args and args[0].startswith(f"ray::{actor}"):
            return pid
    raise AssertionError(f"no ray::{actor} process under canopy serve pid {serve_pid}")


def _session_dir(serve_pid: int) -> str:
    for pid in _descendants(serve_pid):
        args = _args(pid)
        if args and Path(args[0]).name == "gcs_server":
            for arg in args:
                found = re.search(r"(/\S*/session_[^/\s]+)", arg)
                if found:
                    return found.group(1)
    raise AssertionError(f"no gcs_server with a session directory under canopy serve pid {serve_pid}")


def _names_session(pid: int, session: str) -> bool:
    if any(session in a for a in _args(pid)):
        return True
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(session + "/"):
                return True
        except OSError:
            continue
    return False


def _instance_gone(known: set[int], session: str) -> bool:
    """True once no process of ``known`` lives and none names ``session``; else fail saying which."""
    left = {pid for pid in known if _alive(pid)}
    left |= {pid for pid in _pids() if pid != os.getpid() and _alive(pid) and _names_session(pid, session)}
    if left:
        running = ", ".join(f"{pid} {' '.join(_args(pid))[:60]}" for pid in sorted(left))
        raise AssertionError(f"still running: {running}")
    return True


def _listening(pids: set[int]) -> list[tuple[int, str, ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    """(pid, process title, address, port) of every listening TCP socket that ``pids`` hold."""
    inodes: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if link.startswith("socket:["):
                    inodes[link[8:-1]] = pid
        except OSError:
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            host, port = local.split(":")
            raw = bytes.fromhex(host)
            # the kernel prints each 32-bit word in host (little-endian) order
            packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(packed)
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
                address = address.ipv4_mapped
            pid = inodes[inode]
            found.append((pid, " ".join(_args(pid))[:40], address, int(port, 16)))
    return found


def _server_json(data: Path) -> dict[str, object]:
    info = json.loads((data / "server.json").read_text())
    assert isinstance(info, dict)
    return info


def test_embedded_ray_is_on_loopback_with_token_auth_and_dies_with_a_killed_serve(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = Server(data, "--partitions", "2")
    try:
        first.wait_ready()
        serve_pid = first.proc.pid
        session = _session_dir(serve_pid)
        known = _descendants(serve_pid)
        titles = {" ".join(_args(pid)) for pid in known}
        assert any(t.startswith("ray::GatewayActor") for t in titles) and any("raylet" in t for t in titles), titles

        sockets = _listening(known | {serve_pid})
        assert {port for *_, port in sockets} >= {first.port}
        assert len(sockets) >= 6, sockets  # GCS, raylet, the driver, the actors' servers, the streams
        wide = [s for s in sockets if not s[2].is_loopback]
        assert not wide, f"listening beyond loopback: {wide}"

        gcs = next(pid for pid in known if _args(pid) and Path(_args(pid)[0]).name == "gcs_server")
        environment = Path(f"/proc/{gcs}/environ").read_bytes().split(b"\0")
        assert b"RAY_AUTH_MODE=token" in environment

        first.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: _instance_gone(known, session), SWEEP_DEADLINE, "the embedded Ray's processes to go", 0.25)
        swept = time.monotonic() - killed
        wait_for(lambda: _server_json(data)["state"] == "failed", 10, "the watchdog to mark server.json failed")
        assert "ended without stopping" in str(_server_json(data)["reason"])
    finally:
        first.stop()
    assert swept < SWEEP_DEADLINE
    assert f"canopy serve (pid {serve_pid}) ended without stopping" in first.output

    second = Server(data, "--partitions", "1")
    try:
        second.wait_ready()
        assert f"found a stale server.json from pid {serve_pid}" in second.output
        assert "was first served with 2 partitions" in second.output and "serving 2, not 1" in second.output
        info = _server_json(data)
        assert info["pid"] == second.proc.pid and info["state"] == "serving"
    finally:
        assert second.stop() == 0, second.output
    assert not (data / "server.json").exists()


def _mqtt_session(srv: Server, subscribe: bool = True) -> Any:
    """An MQTT 5 client of the gateway with a session expiry (one client identifier throughout)."""
    from tests.actors.mqtt_client import MQTT

    client = MQTT(("127.0.0.1", srv.mqtt_port), 5, username=ADMIN[0], password=ADMIN[1], client_id="kept-session",
                  clean_start=False, session_expiry=300)
    if subscribe:
        client.subscribe("mqtt-kept/#", qos=1)
    return client


def _drain(client: Any) -> list[Any]:
    import queue

    got = []
    try:
        while True:
            got.append(client.messages.get_nowait())
    except queue.Empty:
        return got


class _Handler:
    """A session (its own client loop, in a thread) with a missing-topic handler on ``regs``."""

    def __init__(self, url: str) -> None:
        from canopy.sync import connect_sync

        self.url = url
        self.heard: list[str] = []
        self.session = connect_sync(url, *ADMIN)
        self.session.missing_topics.add_handler("regs", lambda n: self.heard.append(n.selector) or True)

    def heard_again(self) -> bool:
        """Fetch a missing topic under ``regs`` from another session; whether the handler heard of it."""
        from canopy.sync import connect_sync

        with connect_sync(self.url) as other:
            other.topics.fetch("regs/after-the-crash")
        return ">regs/after-the-crash" in self.heard

    def close(self) -> None:
        self.session.close()


def test_an_actor_crashing_in_a_loop_stops_serve_with_a_reason(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = Server(data, "--partitions", "1")
    try:
        srv.wait_ready()
        known = _descendants(srv.proc.pid)
        session = _session_dir(srv.proc.pid)
        killed = 0
        def stopping() -> bool:  # serve said it stops: its shutdown may take a while on a busy machine
            return srv.proc.poll() is not None or any("canopy stops" in line for line in srv.lines)

        while not stopping() and killed <= CRASH_LOOP + 2:
            pid = wait_for(lambda: stopping() or _current_actor_pid(srv.proc.pid, "PartitionActor"), EXIT_DEADLINE,
                           "the partition to be running again, or serve to stop")
            if pid is True:
                break
            os.kill(pid, signal.SIGKILL)
            killed += 1
            wait_for(lambda: srv.proc.poll() is not None or _current_actor_pid(srv.proc.pid, "PartitionActor") != pid,
                     EXIT_DEADLINE, "the partition to be restarted or serve to stop")
        wait_for(lambda: srv.proc.poll() is not None, EXIT_DEADLINE, "canopy serve to exit")
        wait_for(lambda: _instance_gone(known, session), SWEEP_DEADLINE, "the embedded Ray's processes to go", 0.25)
    finally:
        code = srv.stop()
    assert code == 3, srv.output
    said = [line for line in srv.lines if "(PartitionActor) died" in line]
    assert len(said) == 1 and "times in a minute" in said[0] and "canopy stops" in said[0], srv.output
    info = _server_json(data)
    assert info["state"] == "failed" and "(PartitionActor) died" in str(info["reason"])


def _current_actor_pid(serve_pid: int, actor: str) -> int | None:
    try:
        return _actor_pid(serve_pid, actor)
    except AssertionError:
        return None


def test_ray_token_file_is_created_whole_and_private(tmp_path: Path) -> None:
    token = tmp_path / "home" / ".ray" / "auth_token"
    assert "created" in (ensure_token_file(token) or "")
    content = token.read_text()
    assert re.fullmatch(r"[0-9a-f]{64}", content)
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert ensure_token_file(token) is None and token.read_text() == content  # kept
    token.chmod(0o644)
    assert "readable by its owner only" in (ensure_token_file(token) or "")
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and token.read_text() == content
    assert [p.name for p in token.parent.iterdir()] == ["auth_token"]  # nothing left aside


def test_death_reason_is_one_line() -> None:
    told = RuntimeError(
        "The actor died unexpectedly before finishing this task.\n\tclass_name: PartitionActor\n"
        "\tactor_id: 24bf3418\n\tpid: 22823\n\tname: partition-1\n\tnamespace: canopy\n\tip: 127.0.0.1\n"
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
        "detail: Worker unexpectedly exits with a connection error code 2. End of file."
    )
    assert death_reason(told) == "its worker process has died (pid 22823, SYSTEM_ERROR)"
    assert death_reason(TimeoutError("no detail")) == "TimeoutError"


# one serve, its actors crashed one after the other (kept last: the serve lives until the module ends)

@pytest.fixture(scope="module")
def crashing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One serve for the tests that crash one of its actors each: it serves through every crash,
    one after the other, and still stops cleanly (status 0)."""
    yield from serving(tmp_path_factory, "crashing", "--partitions", "2")


@pytest.mark.parametrize("actor", ["PartitionActor", "GatewayActor", "ViewEvaluatorActor"])
def test_a_crashed_actor_is_restarted_and_serve_says_so(crashing: Server, actor: str) -> None:
    srv = crashing
    handler = None
    mqtt = None
    crashed = sum(f"({actor}) crashed" in line for line in srv.lines)
    back = sum(f"({actor}) is back and serving" in line for line in srv.lines)
    try:
        if actor == "GatewayActor":  # a missing-topic handler registered before the crash
            handler = _Handler(srv.url)
            mqtt = _mqtt_session(srv)  # and an MQTT session with an expiry, subscribed
            from canopy.sync import connect_sync

            with connect_sync(srv.url, *ADMIN) as writer:
                writer.topics.add("mqtt-kept/n", "INT64", {"CONFLATION": "off"})
                for n in range(1, 4):
                    writer.topics.set("mqtt-kept/n", n)
            wait_for(lambda: [int(m.payload) for m in _drain(mqtt) if m.topic == "mqtt-kept/n"][-1:] == [3], 30,
                     "the session to have the values before the crash")
        before = _actor_pid(srv.proc.pid, actor)
        os.kill(before, signal.SIGKILL)
        wait_for(lambda: sum(f"({actor}) is back and serving" in line for line in srv.lines) > back, EXIT_DEADLINE,
                 f"serve to say the {actor} is back")
        if handler is not None:  # its client opened a new session and registered it again
            wait_for(handler.heard_again, 60, "the handler to be registered again and notified")
        assert sum(f"({actor}) crashed" in line for line in srv.lines) > crashed, srv.output
        assert srv.proc.poll() is None, srv.output  # still serving
        assert _actor_pid(srv.proc.pid, actor) != before
        result = cli("topic", "add", f"after/crash-{actor}", "--type", "STRING", url=srv.url)
        assert result.returncode == 0, result.stderr
        assert _server_json(srv.data_dir)["state"] == "serving"
        if mqtt is not None:  # the gateway restarted: the session is taken up from its record
            mqtt.drop()
            from canopy.sync import connect_sync

            with connect_sync(srv.url, *ADMIN) as writer:  # while no gateway holds the session
                for n in range(4, 21):
                    writer.topics.set("mqtt-kept/n", n)
            again = _mqtt_session(srv, subscribe=False)
            try:
                assert again.session_present is True
                missed: list[int] = []

                def every_missed_value() -> bool:  # from the partition's recent messages, in order
                    missed.extend(int(m.payload) for m in _drain(again) if m.topic == "mqtt-kept/n")
                    return missed[-1:] == [20]

                wait_for(every_missed_value, 30, "the values published while no gateway held the session",
                         describe=lambda: missed)
                assert missed == list(range(min(missed), 21)) and min(missed) <= 4, missed
                cli("topic", "add", "mqtt-kept/x", "--type", "STRING", url=srv.url)
                cli("topic", "set", "mqtt-kept/x", "after", url=srv.url)
                wait_for(lambda: any(m.payload == b"after" for m in _drain(again)), 30,
                         "the resumed session's subscription to deliver")
            finally:
                again.close()
    finally:
        if handler is not None:
            handler.close()
        if mqtt is not None:
            mqtt.drop()
