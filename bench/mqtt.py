"""MQTT benchmark: canopy's MQTT front door beside Mosquitto and NATS's MQTT listener.

Every broker gets the same client (paho-mqtt, MQTT 3.1.1, QoS 0, username
``admin`` and canopy's admin password: canopy's anonymous sessions may not set
topics, the peers ignore the credentials) and the same load, the workload of
``bench/broker.py`` (rules and constants from ``bench/peers.py``):

* 1 publisher, 100 topics ``bench/t<k>`` in round robin, ~50-byte payloads
  carrying the send time (``peers.make_payload``);
* 10 subscribers, each subscribed to all the topics with one filter ``bench/#``;
* the publisher in a process of its own, the subscribers spread over
  ``--sub-procs`` processes (each drives its paho clients on one asyncio loop
  through paho's external-loop callbacks, ``peers._PahoOnLoop``), so that one
  Python process is not the whole load generator. Send and receive times are
  ``time.perf_counter_ns()`` (CLOCK_MONOTONIC, one clock for every process on
  the machine).

Figures per broker:

(a) **throughput**: the publisher publishes unpaced (batches of 100, each
    handed to the kernel before the next) for ``--duration`` s after a 1 s
    warm-up, but at most ``--lead`` messages (default 1,000) ahead of the
    slowest subscriber (the subscribers put the highest sequence number they
    received in shared memory), as bench/broker.py's canopy publisher keeps at
    most 2,000 sets outstanding and bench/peers.py's shares one loop with its
    subscribers. Without that bound (``--lead 0``) a publisher in a process of
    its own measures how much each broker buffers instead: canopy queues the
    backlog in its sessions (drained for many seconds after the window),
    Mosquitto drops QoS 0 messages past its per-client queue, and nats-server
    cuts subscribers 10 s behind off as slow consumers. delivered/s = messages
    the subscribers received inside the window, summed over subscribers, /
    window. Then the harness drains and counts what is missing.
(b) **latency** p50/p99 (receive - send, over every subscriber's samples) of
    the messages sent inside a ``--duration`` s window at a paced ``--rate``
    (default 5,000 updates/s, so 50,000 deliveries/s).
(c) **server CPU per delivered update**: utime+stime (``/proc/<pid>/stat``) of
    every server process over each window, / the deliveries received inside it,
    in µs; for canopy all processes of the ``canopy serve`` process tree (the
    serve process, Ray's GCS, raylet, dashboard and workers: gateway,
    partitions, the other actors). "cores" = CPU seconds / window seconds. The
    load generator's own processes (publisher and subscriber processes) are
    reported apart.
(e) **latency with compiled subscribers** (``--c-subscribers``, on when Debian's
    ``mosquitto_sub`` is installed): the same 10 subscriptions made by
    ``mosquitto_sub`` processes (C, libmosquitto; each prints ``%U %p``: the wall
    clock when a message arrived and its payload, into a file) and the paced
    publisher a raw socket in this process (pre-built PUBLISH packets, the send
    time by ``time.time_ns()``), so that neither paho nor Python paces what is
    measured: p50/p99 over the ``--duration`` s window, with the server's and the
    load generator's cores. This is the figure for the "p99 at 5,000/s" target;
    the paho rows beside it show what a Python client adds.
(d) **memory per idle MQTT connection**: ``--idle N`` (default 10,000) raw TCP
    connections, each sending a minimal MQTT 3.1.1 CONNECT (anonymous, clean
    session, keep-alive 0) and reading its CONNACK (asyncio, in this process),
    held open; (RSS after - RSS before) / N in KiB. For canopy the gateway
    process (``GatewayActor`` in its command line); the whole serve tree's
    delta is in the notes. "before" is taken after a warm-up batch of
    connections was opened and closed. Runs first, on the freshly started
    broker, so the load phases have not grown its heap yet.

canopy runs as ``canopy serve --port P --mqtt-port Q --data-dir TMP`` with
``CANOPY_ADMIN_PASSWORD`` set, ``--queue-limit 500000`` (as bench/broker.py;
with CONFLATION off nothing is conflated away, like QoS 0 in the peers) and
``--max-connections 20000 --max-connections-per-address 20000`` (all clients
come from 127.0.0.1; the default per address is 1000). Its 100 topics are
added beforehand with the native client as BINARY with CONFLATION off, as
bench/broker.py does (an MQTT publish to a missing path would add a BINARY
topic with the default CONFLATION). Mosquitto gets the configuration of
bench/peers.py; nats-server ``jetstream { store_dir }`` and ``mqtt { port }``
(NATS's MQTT speaks 3.1.1 only, which is what every client here uses).

The load clients log in one at a time, so that connecting is not part of what is
measured (canopy's login guard lets parallel logins of one principal from one
address take turns, and after the first they cost no scrypt; sessions/logins.py).
A subscriber a broker cut off is
connected again before the next phase (and reported). Each phase counts only
messages sent after it began, so a backlog of the previous one cannot pass for
its deliveries (reported as "stale"). The "other cores" column is what the rest
of the machine (other people's work included) kept busy during the window:
figures taken while it is high say more about the machine than the brokers.

    .venv/bin/python bench/mqtt.py [--duration 5] [--rate 5000] [--idle 10000] [--runs 1]
                                   [--brokers canopy,mosquitto,nats] [--sub-procs 2] [--lead 1000]
                                   [--skip-load] [--serve-args '...'] [--keep-logs DIR]

A run takes about 90 s with the defaults (canopy's start-up is most of its
share).

Ratios between brokers swing by ±30% from run to run on a small VM: use
``--runs K`` and look at every run. The table lists each run; with K > 1 a
last table gives the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.metadata
import multiprocessing as mp
import os
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
BENCH = str(ROOT / "bench")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

import peers  # noqa: E402  (stdlib only: light enough for every client process)

ADMIN_USER = "admin"
ADMIN_PASSWORD = "bench-admin-password"  # = bench/broker.py's ADMIN
TOPIC_FILTER = "bench/#"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
PHASE_MARGIN_S = 0.3  # between telling the clients about a window and its warm-up starting
LEAD = 1000  # messages the unpaced publisher may be ahead of the slowest subscriber (--lead)
LEAD_STALL_S = 1.0  # a subscriber that received nothing for this long no longer holds the publisher back
DRAIN_IDLE_S = 3.0  # the drain after a window gives up after this long without progress ...
DRAIN_MAX_S = 60.0  # ... or after this long in all
IDLE_CONCURRENCY = 200  # CONNECTs in flight at once in the idle test
IDLE_WARMUP = 200  # connections opened and closed before "before" is taken


# --------------------------------------------------------------------------
# /proc: process trees, CPU and RSS
# --------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (by parent pid, /proc walked once)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def all_pids() -> list[int]:
    return [int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit()]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def cpu_ticks(pids: list[int]) -> dict[int, int]:
    """utime + stime of each process, in clock ticks."""
    out = {}
    for pid in pids:
        fields = _stat(pid)
        if fields is not None:
            out[pid] = int(fields[11]) + int(fields[12])
    return out


def cpu_seconds(before: dict[int, int], after: dict[int, int]) -> float:
    """CPU time the processes spent between the two samples (a process born in between: all of it)."""
    return sum(t - before.get(pid, 0) for pid, t in after.items()) / CLK_TCK


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError):
            pass
    return total


def busy_ticks() -> tuple[int, int]:
    """Clock ticks every core of the machine spent busy (not idle, not waiting for I/O), and of
    those in interrupts and softirqs (loopback TCP's receive side mostly): /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return user + nice + system + irq + softirq + steal, irq + softirq


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# --------------------------------------------------------------------------
# Brokers
# --------------------------------------------------------------------------


@dataclass
class Broker:
    """A running broker: where its MQTT listener is and which processes are it."""

    name: str  # the row label
    mqtt_port: int
    server_pids: Callable[[], list[int]]  # every process of the server, for CPU
    memory_pids: Callable[[], list[int]]  # the process(es) whose RSS the idle test reports
    breakdown: Callable[[], dict[str, list[int]]] | None = None  # role -> pids, for the notes
    problems: Callable[[], list[str]] = lambda: []  # noteworthy lines of the server's output
    notes: list[str] = field(default_factory=list)


def _child_running(binary: str) -> int:
    """The pid of this process's child running ``binary`` (started by peers.broker_process)."""
    for pid in descendants(os.getpid())[1:]:
        try:
            if os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(binary):
                return pid
        except OSError:
            continue
    raise RuntimeError(f"no child process runs {binary}")


def _log_problems(log: Path, pattern: tuple[str, ...]) -> list[str]:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if any(p in line for p in pattern)]


def _unexpected_lines(log: Path) -> list[str]:
    """Every line of canopy serve's output but the start-up and shutdown ones (its actors' log
    records reach it through Ray's log_to_driver, often without a level name)."""
    usual = ("canopy serving", "canopy: MQTT", "canopy: shutting down")
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if line.strip() and not line.startswith(usual)]


@contextlib.contextmanager
def run_mosquitto(tmp: Path) -> Iterator[Broker]:
    binary = peers.ensure_binary("mosquitto", "mosquitto")
    version = peers._version_of([binary, "-h"], r"mosquitto version (\S+)")
    port = peers.free_port()
    conf = tmp / "mosquitto.conf"
    conf.write_text(  # bench/peers.py's configuration
        f"listener {port} 127.0.0.1\n"
        "allow_anonymous true\n"
        "persistence false\n"
        "log_dest stdout\n"
        "log_type error\n"
        "log_type warning\n"
    )
    log = tmp / "mosquitto.log"
    with peers.broker_process("mosquitto", [binary, "-c", str(conf)], port, log):
        pid = _child_running(binary)
        yield Broker(
            f"mosquitto {version}", port, lambda: [pid], lambda: [pid],
            problems=lambda: _log_problems(log, ("rror", "arning")),
        )


@contextlib.contextmanager
def run_nats(tmp: Path) -> Iterator[Broker]:
    binary = peers.ensure_binary("nats-server", "nats-server")
    version = peers._version_of([binary, "--version"], r"v?(\d+\.\d+\.\d+\S*)")
    port, mqtt_port = peers.free_port(), peers.free_port()
    conf = tmp / "nats.conf"
    conf.write_text(
        f'listen: "127.0.0.1:{port}"\n'
        'server_name: "bench"\n'
        f'jetstream {{ store_dir: "{tmp / "jetstream"}" }}\n'
        f'mqtt {{ host: "127.0.0.1", port: {mqtt_port} }}\n'
    )
    log = tmp / "nats.log"
    # nats-server opens its MQTT listener after JetStream is up: wait for that port
    with peers.broker_process("nats-server", [binary, "-c", str(conf)], mqtt_port, log, timeout=30):
        pid = _child_running(binary)
        yield Broker(
            f"nats-server {version} (MQTT listener)", mqtt_port, lambda: [pid], lambda: [pid],
            problems=lambda: _log_problems(log, ("[ERR]", "[WRN]")),
        )


@contextlib.contextmanager
def run_canopy(tmp: Path, serve_args: list[str], topics: int = 100) -> Iterator[Broker]:
    import broker as canopy_bench  # bench/broker.py: stop_server, QUEUE_LIMIT (imports canopy: not in the clients)

    import canopy

    port, mqtt_port = peers.free_port(), peers.free_port()
    data = tmp / "data"
    log = tmp / "canopy-serve.log"
    argv = [
        str(Path(sys.executable).parent / "canopy"), "serve", "--port", str(port), "--mqtt-port", str(mqtt_port),
        "--data-dir", str(data), "--queue-limit", str(canopy_bench.QUEUE_LIMIT),
        "--max-connections", "20000", "--max-connections-per-address", "20000", *serve_args,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CANOPY_", "RAY_"))}  # never join another Ray
    env["CANOPY_ADMIN_PASSWORD"] = ADMIN_PASSWORD
    # this checkout first: an editable install made before a top-level package (mqtt) was added
    # to pyproject.toml does not map it, and `canopy serve` would not find it
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 180
        while "canopy serving" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"canopy serve did not start:\n{peers._log_tail(log, 40)}")
            time.sleep(0.1)
        asyncio.run(_add_topics(canopy, f"ws://127.0.0.1:{port}", topics))

        def tree() -> list[int]:
            return descendants(proc.pid)

        def gateway() -> list[int]:
            return [pid for pid in tree() if "GatewayActor" in cmdline(pid)]

        def breakdown() -> dict[str, list[int]]:
            roles: dict[str, list[int]] = {"gateway": [], "partitions": [], "rest": []}
            for pid in tree():
                title = cmdline(pid)
                role = "gateway" if "GatewayActor" in title else "partitions" if "PartitionActor" in title else "rest"
                roles[role].append(pid)
            return roles

        if not gateway():
            raise RuntimeError("no GatewayActor process under canopy serve")
        shown = " ".join(shlex.quote(a) for a in ["canopy", *argv[1:]])
        yield Broker(
            f"canopy {canopy.__version__} (MQTT front door)", mqtt_port, tree, gateway, breakdown,
            problems=lambda: _unexpected_lines(log),
            notes=[f"`{shown}`"],
        )
    finally:
        canopy_bench.stop_server(proc)  # type: ignore[arg-type]  # SIGINT, then kill after 60 s


async def _add_topics(canopy: Any, url: str, topics: int) -> None:
    """The topics as bench/broker.py adds them: BINARY (the payload bytes untouched), CONFLATION off."""
    session = await canopy.connect(url, ADMIN_USER, ADMIN_PASSWORD)
    try:
        await asyncio.gather(
            *(session.topics.add(f"bench/t{i}", "BINARY", {"CONFLATION": "off"}) for i in range(topics))
        )
    finally:
        await session.close()


BROKERS = ("canopy", "mosquitto", "nats")


# --------------------------------------------------------------------------
# Client processes (paho-mqtt on an asyncio loop, one loop per process)
# --------------------------------------------------------------------------


def _paho() -> Any:
    peers.ensure_module("paho.mqtt.client", "paho-mqtt>=2,<3")
    import paho.mqtt.client as paho

    return paho


def _new_client(paho: Any, client_id: str, userdata: Any = None) -> Any:
    client = paho.Client(
        paho.CallbackAPIVersion.VERSION2, client_id=client_id, userdata=userdata, protocol=paho.MQTTv311
    )
    client.username_pw_set(ADMIN_USER, ADMIN_PASSWORD)
    return client


_SEQ_OFFSET = len(peers.make_payload(0, 0).split(b'"seq":')[0]) + len('"seq":')


def payload_seq(data: bytes) -> int:
    """The sequence number :func:`peers.make_payload` put into ``data``."""
    return int(data[_SEQ_OFFSET : data.index(b",", _SEQ_OFFSET)])


class Tally(peers.Tally):
    """peers.Tally, except that messages sent before the phase opened are left out (``stale``: a
    broker may still be delivering the previous phase's backlog), and that the highest sequence
    number received goes to ``seen[slot]``, shared with the publisher (its lead, see
    :func:`_publisher`)."""

    __slots__ = ("opened_ns", "stale", "seen", "slot")

    def __init__(self, phase: peers.Phase, seen: Any, slot: int) -> None:
        super().__init__(phase)
        self.opened_ns = 0
        self.stale = 0
        self.seen = seen
        self.slot = slot

    def reset(self) -> None:
        super().reset()
        self.stale = 0

    def on_message(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        sent = peers.payload_sent_ns(data)
        seq = payload_seq(data)
        if seq > self.seen[self.slot]:
            self.seen[self.slot] = seq
        if sent < self.opened_ns:
            self.stale += 1
            return
        self.received += 1
        phase = self.phase
        if phase.start_ns <= now < phase.end_ns:
            self.in_window += 1
        if phase.record_latency and phase.start_ns <= sent < phase.end_ns:
            self.latencies_ns.append(now - sent)


def subscriber_process(conn: Connection, port: int, first: int, count: int, seen: Any) -> None:
    try:
        asyncio.run(_subscriber(conn, port, first, count, seen))
    except BaseException as e:  # tell the coordinator instead of dying silently
        with contextlib.suppress(Exception):
            conn.send(("error", f"{type(e).__name__}: {e}"))
        raise


class _Subscriber:
    """One paho subscriber on this process's loop; it subscribes to TOPIC_FILTER on every
    (re)connect."""

    def __init__(self, paho: Any, index: int, tally: Tally, port: int, events: list[str]) -> None:
        self.index = index
        self.tally = tally
        self.port = port
        self.events = events  # disconnects and refusals, for the report
        self.subscribed = asyncio.Event()
        self.stopping = False
        self.client = client = _new_client(paho, f"bench-sub-{index}", tally)
        client.on_message = self._on_message
        client.on_connect = self._on_connect
        client.on_subscribe = peers._set_on_callback(self.subscribed)
        client.on_disconnect = self._on_disconnect
        self.driver = peers._PahoOnLoop(client, progress=lambda: tally.received + tally.stale)
        self.connects = 0

    @staticmethod
    def _on_message(_client: Any, tally: Tally, message: Any) -> None:
        tally.on_message(message.payload)

    def _on_connect(self, client: Any, _userdata: Any, _flags: Any, reason: Any, _properties: Any) -> None:
        if reason.is_failure:
            self.events.append(f"subscriber {self.index}: CONNACK {reason}")
        else:
            client.subscribe(TOPIC_FILTER, qos=0)

    def _on_disconnect(self, _client: Any, _userdata: Any, _flags: Any, reason: Any, _properties: Any) -> None:
        self.subscribed.clear()
        if not self.stopping:
            self.events.append(f"subscriber {self.index} disconnected at {time.strftime('%H:%M:%S')}: {reason}")

    async def connect(self) -> None:
        """Connect (again) and wait until subscribed; one login at a time, so that connecting
        stays out of what is measured."""
        self.subscribed.clear()
        if self.connects == 0:
            self.client.connect("127.0.0.1", self.port, keepalive=60)
        else:
            self.client.reconnect()
        self.connects += 1
        try:
            await asyncio.wait_for(self.subscribed.wait(), 20)
        except TimeoutError:
            raise RuntimeError(f"subscriber {self.index} not subscribed within 20 s ({self.events})") from None


async def _subscriber(conn: Connection, port: int, first: int, count: int, seen: Any) -> None:
    paho = _paho()
    loop = asyncio.get_running_loop()
    phase = peers.Phase()
    events: list[str] = []
    subscribers = [_Subscriber(paho, first + i, Tally(phase, seen, first + i), port, events) for i in range(count)]
    tallies = [s.tally for s in subscribers]
    for subscriber in subscribers:
        await subscriber.connect()

    commands: asyncio.Queue[Any] = asyncio.Queue()
    loop.add_reader(conn.fileno(), lambda: commands.put_nowait(conn.recv()))
    conn.send(("ready",))
    while True:
        command = await commands.get()
        kind = command[0]
        if kind == "prepare":
            reconnected = 0
            for subscriber in subscribers:  # one the broker cut off (a slow consumer) joins in again
                if not subscriber.subscribed.is_set():
                    await subscriber.connect()
                    reconnected += 1
            conn.send(("prepared", reconnected))
        elif kind == "phase":
            _, opened_ns, start_ns, end_ns, latency = command
            for tally in tallies:
                tally.reset()
                tally.opened_ns = opened_ns
            phase.record_latency = latency
            phase.start_ns, phase.end_ns = start_ns, end_ns
            gc.collect()
            gc.freeze()
            conn.send(("ok",))
        elif kind == "count":
            conn.send(("count", sum(t.received for t in tallies)))
        elif kind == "results":
            latencies = array("q")
            for tally in tallies:
                latencies.extend(tally.latencies_ns)
            conn.send(("results", [t.in_window for t in tallies], [t.received for t in tallies],
                       latencies.tobytes(), list(events), sum(t.stale for t in tallies)))
            events.clear()
        elif kind == "stop":
            for subscriber in subscribers:
                subscriber.stopping = True
            loop.remove_reader(conn.fileno())
            await asyncio.gather(*(s.driver.close() for s in subscribers), return_exceptions=True)
            conn.send(("stopped",))
            return


def publisher_process(conn: Connection, port: int, topics: int, seen: Any, lead: int) -> None:
    try:
        asyncio.run(_publisher(conn, port, topics, seen, lead))
    except BaseException as e:
        with contextlib.suppress(Exception):
            conn.send(("error", f"{type(e).__name__}: {e}"))
        raise


async def _publisher(conn: Connection, port: int, topics: int, seen: Any, lead: int) -> None:
    """The publisher. Unpaced, it publishes batches of peers.BATCH as fast as paho hands them to
    the kernel, but at most ``lead`` messages ahead of the slowest subscriber (the highest
    sequence number each received, in ``seen``), as bench/broker.py's canopy publisher keeps at
    most WINDOW sets outstanding and bench/peers.py's shares its loop with the subscribers: a
    publisher in a process of its own would otherwise measure how much a broker buffers (or drops,
    or how soon it cuts off slow consumers) rather than what it delivers. A subscriber that
    received nothing for LEAD_STALL_S no longer holds it back."""
    paho = _paho()
    loop = asyncio.get_running_loop()
    client = _new_client(paho, "bench-pub")
    connected = asyncio.Event()
    disconnects: list[str] = []
    client.on_connect = peers._set_on_callback(connected)
    client.on_disconnect = lambda _c, _u, _f, reason, _p: disconnects.append(str(reason))
    driver = peers._PahoOnLoop(client)
    client.connect("127.0.0.1", port, keepalive=60)
    try:
        await asyncio.wait_for(connected.wait(), 20)
    except TimeoutError:
        raise RuntimeError("publisher not connected within 20 s") from None
    publish = peers.paho_publisher(client, driver, topics)  # as bench/peers.py's publisher

    commands: asyncio.Queue[Any] = asyncio.Queue()
    loop.add_reader(conn.fileno(), lambda: commands.put_nowait(conn.recv()))
    conn.send(("ready",))
    seq = 0
    while True:
        command = await commands.get()
        if command[0] == "stop":
            loop.remove_reader(conn.fileno())
            await driver.close()
            conn.send(("stopped",))
            return
        _, mode, start_ns, end_ns, rate = command
        gc.collect()
        gc.freeze()
        sent = in_window = 0
        stalled: set[int] = set()  # subscribers that stopped holding the publisher back
        if mode == "throughput":  # unpaced, as peers._throughput_phase, within the lead
            last_seen = list(seen)
            moved_at = [time.monotonic()] * len(last_seen)

            def slowest() -> int | None:
                """The highest sequence number the slowest subscriber still moving has seen."""
                now_s = time.monotonic()
                low = None
                for k, value in enumerate(seen):
                    if value != last_seen[k]:
                        last_seen[k], moved_at[k] = value, now_s
                    elif now_s - moved_at[k] > LEAD_STALL_S:
                        stalled.add(k)
                        continue
                    low = value if low is None else min(low, value)
                return low

            while True:
                now = time.perf_counter_ns()
                if now >= end_ns:
                    break
                while lead and now < end_ns:
                    low = slowest()
                    if low is None or seq - 1 - low <= lead:
                        break
                    await asyncio.sleep(0.0005)
                    now = time.perf_counter_ns()
                if now >= end_ns:
                    break
                for _ in range(peers.BATCH):
                    await publish(seq % topics, peers.make_payload(seq, time.perf_counter_ns()))
                    seq += 1
                    sent += 1
                if now >= start_ns:
                    in_window += peers.BATCH
                await asyncio.sleep(0)
        else:  # paced, as peers.run_async_workload's latency phase
            origin = time.perf_counter_ns()
            tick = 0
            while True:
                now = time.perf_counter_ns()
                if now >= end_ns:
                    break
                due = (now - origin) * rate // 1_000_000_000
                while sent < due:
                    ts = time.perf_counter_ns()
                    await publish(seq % topics, peers.make_payload(seq, ts))
                    seq += 1
                    if ts >= start_ns:
                        in_window += 1
                    sent += 1
                tick += 1
                delay = (origin + int(tick * peers.TICK_S * 1e9) - time.perf_counter_ns()) / 1e9
                await asyncio.sleep(max(0.0, delay))
        await driver.drained()
        conn.send(("done", sent, in_window, list(disconnects), sorted(stalled)))
        disconnects.clear()


class Clients:
    """The publisher process and the subscriber processes, driven over pipes."""

    def __init__(self, port: int, subscribers: int, sub_procs: int, topics: int, lead: int) -> None:
        ctx = mp.get_context("spawn")
        self.procs: list[Any] = []
        self.subs: list[Connection] = []
        self.subscribers = subscribers
        seen = ctx.RawArray("q", [-1] * subscribers)  # per subscriber: the highest sequence number received
        sub_procs = max(1, min(sub_procs, subscribers))
        first = 0
        for k in range(sub_procs):
            count = subscribers // sub_procs + (1 if k < subscribers % sub_procs else 0)
            here, there = ctx.Pipe()
            proc = ctx.Process(target=subscriber_process, args=(there, port, first, count, seen), daemon=True)
            proc.start()
            self.procs.append(proc)
            self.subs.append(here)
            first += count
            self._expect(here, "ready", 120)  # one process logging in at a time (see _Subscriber.connect)
        here, there = ctx.Pipe()
        proc = ctx.Process(target=publisher_process, args=(there, port, topics, seen, lead), daemon=True)
        proc.start()
        self.procs.append(proc)
        self.pub = here
        self._expect(self.pub, "ready", 60)

    @staticmethod
    def _expect(conn: Connection, kind: str, timeout: float) -> tuple[Any, ...]:
        if not conn.poll(timeout):
            raise RuntimeError(f"a client process did not answer {kind!r} within {timeout} s")
        reply = conn.recv()
        if reply[0] == "error":
            raise RuntimeError(f"client process failed: {reply[1]}")
        if reply[0] != kind:
            raise RuntimeError(f"client process answered {reply!r}, expected {kind!r}")
        return tuple(reply)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def received(self) -> int:
        for conn in self.subs:
            conn.send(("count",))
        return sum(self._expect(conn, "count", 30)[1] for conn in self.subs)

    def close(self) -> None:
        for conn in [*self.subs, self.pub]:
            with contextlib.suppress(Exception):
                conn.send(("stop",))
        for conn in [*self.subs, self.pub]:
            with contextlib.suppress(Exception):
                if conn.poll(10):
                    conn.recv()
        for proc in self.procs:
            proc.join(5)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)


@dataclass
class PhaseResult:
    published_per_s: float
    delivered_per_s: float
    sent: int
    expected: int
    received: int
    server_cpu_s: float
    loadgen_cpu_s: float
    delivered_in_window: int
    window_s: float
    latencies_ns: list[int]
    disconnects: list[str]
    breakdown_cpu_s: dict[str, float]
    machine_cpu_s: float  # every process on the machine, this harness and other people's work included
    irq_cpu_s: float  # of which interrupts and softirqs (charged to whichever process they interrupted)
    drain_s: float  # from the end of the window until everything arrived (or the drain gave up)
    stale: int  # deliveries of messages sent before this phase (the previous phase's backlog)
    reconnected: int  # subscribers connected again before the phase (the broker had cut them off)
    stalled: list[int]  # subscribers that received nothing for LEAD_STALL_S while holding the publisher back
    busiest_others: list[str]  # the processes outside the benchmark that took the most CPU (cores)

    @property
    def others_cores(self) -> float:
        """Cores busy with neither the server nor the load generator during the window."""
        return max(0.0, self.machine_cpu_s - self.server_cpu_s - self.loadgen_cpu_s) / self.window_s

    @property
    def server_us_per_delivery(self) -> float | None:
        return 1e6 * self.server_cpu_s / self.delivered_in_window if self.delivered_in_window else None

    @property
    def loadgen_us_per_delivery(self) -> float | None:
        return 1e6 * self.loadgen_cpu_s / self.delivered_in_window if self.delivered_in_window else None


def _sleep_until(ns: int) -> None:
    delay = (ns - time.perf_counter_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)


def run_phase(clients: Clients, broker: Broker, *, paced: bool, duration: float, rate: int) -> PhaseResult:
    reconnected = 0
    for conn in clients.subs:  # one at a time: see _Subscriber.connect
        conn.send(("prepare",))
        reconnected += clients._expect(conn, "prepared", 120)[1]
    warmup = peers.LATENCY_WARMUP_S if paced else peers.WARMUP_S
    opened_ns = time.perf_counter_ns()
    start_ns = opened_ns + int((PHASE_MARGIN_S + warmup) * 1e9)
    end_ns = start_ns + int(duration * 1e9)
    for conn in clients.subs:
        conn.send(("phase", opened_ns, start_ns, end_ns, paced))
    for conn in clients.subs:
        clients._expect(conn, "ok", 30)
    clients.pub.send(("run", "paced" if paced else "throughput", start_ns, end_ns, rate))
    _sleep_until(start_ns)
    server_pids = broker.server_pids()
    roles = broker.breakdown() if broker.breakdown else {}
    everyone0 = cpu_ticks(all_pids())
    server0, load0, busy0 = cpu_ticks(server_pids), cpu_ticks(clients.pids()), busy_ticks()
    roles0 = {role: cpu_ticks(pids) for role, pids in roles.items()}
    _sleep_until(end_ns)
    server1, load1, busy1 = cpu_ticks(server_pids), cpu_ticks(clients.pids()), busy_ticks()
    roles1 = {role: cpu_ticks(pids) for role, pids in roles.items()}
    everyone1 = cpu_ticks(all_pids())
    ours = {*server_pids, *clients.pids(), os.getpid()}
    others = sorted(
        ((t - everyone0.get(pid, 0), pid) for pid, t in everyone1.items() if pid not in ours), reverse=True
    )[:3]
    busiest_others = [f"{cmdline(pid)[:60] or pid} {ticks / CLK_TCK / duration:.2f}" for ticks, pid in others if ticks]
    _, sent, in_window, pub_disconnects, stalled = clients._expect(clients.pub, "done", 120)
    expected = sent * clients.subscribers
    # drain: until everything arrived, or no progress for DRAIN_IDLE_S, or DRAIN_MAX_S in all; longer
    # than peers' bounds, since an unpaced publisher in a process of its own can leave a broker
    # that queues (rather than drops) a backlog of many seconds, which must not spill into the
    # next phase
    drain_started = time.monotonic()
    last, last_at = -1, drain_started
    while time.monotonic() - drain_started < DRAIN_MAX_S:
        got = clients.received()
        if got >= expected:
            break
        if got != last:
            last, last_at = got, time.monotonic()
        elif time.monotonic() - last_at >= DRAIN_IDLE_S:
            break
        time.sleep(0.05)
    drain_s = time.monotonic() - drain_started
    in_windows, received, stale, latencies = 0, 0, 0, array("q")
    disconnects = [f"publisher: {d}" for d in pub_disconnects]
    for k, conn in enumerate(clients.subs):
        conn.send(("results",))
        _, counts, totals, raw, lost, old = clients._expect(conn, "results", 60)
        in_windows += sum(counts)
        received += sum(totals)
        stale += old
        latencies.frombytes(raw)
        disconnects += [f"subscriber process {k}: {d}" for d in lost]
    return PhaseResult(
        published_per_s=in_window / duration, delivered_per_s=in_windows / duration, sent=sent, expected=expected,
        received=received, server_cpu_s=cpu_seconds(server0, server1), loadgen_cpu_s=cpu_seconds(load0, load1),
        delivered_in_window=in_windows, window_s=duration, latencies_ns=list(latencies), disconnects=disconnects,
        breakdown_cpu_s={role: cpu_seconds(roles0[role], roles1[role]) for role in roles},
        machine_cpu_s=(busy1[0] - busy0[0]) / CLK_TCK, irq_cpu_s=(busy1[1] - busy0[1]) / CLK_TCK, drain_s=drain_s, stale=stale, reconnected=reconnected,
        stalled=stalled, busiest_others=busiest_others,
    )


# --------------------------------------------------------------------------
# Idle connections
# --------------------------------------------------------------------------


def _connect_packet(client_id: str) -> bytes:
    """A minimal MQTT 3.1.1 CONNECT: clean session, keep-alive 0 (none), no credentials."""
    cid = client_id.encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x00" + len(cid).to_bytes(2, "big") + cid
    assert len(body) < 128
    return bytes([0x10, len(body)]) + body


# --------------------------------------------------------------------------
# Latency with compiled subscribers (mosquitto_sub) and a raw-socket publisher
# --------------------------------------------------------------------------


@dataclass
class CLatency:
    sent: int  # messages published inside the window
    received: int  # deliveries of those, summed over subscribers
    latencies_ns: list[int]
    server_cpu_s: float
    loadgen_cpu_s: float
    window_s: float

    @property
    def expected(self) -> int:
        return self.sent * C_SUBSCRIBERS


C_SUBSCRIBERS = 10


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _publish_packet(topic: bytes, payload: bytes) -> bytes:
    """An MQTT PUBLISH, QoS 0, RETAIN 0 (the same bytes in 3.1.1 and 5.0 but for properties)."""
    body = len(topic).to_bytes(2, "big") + topic + payload
    return b"\x30" + _varint(len(body)) + body


def _login_packet(client_id: str) -> bytes:
    """An MQTT 3.1.1 CONNECT with the admin credentials, clean session, keep-alive 0."""
    def field(text: str) -> bytes:
        raw = text.encode()
        return len(raw).to_bytes(2, "big") + raw

    body = b"\x00\x04MQTT\x04\xc2\x00\x00" + field(client_id) + field(ADMIN_USER) + field(ADMIN_PASSWORD)
    return b"\x10" + _varint(len(body)) + body


def _read_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def c_latency_phase(broker: Broker, *, rate: int, duration: float, topics: int) -> CLatency:
    """See (e) in the module docstring."""
    binary = shutil.which("mosquitto_sub")
    assert binary is not None
    with tempfile.TemporaryDirectory(prefix="bench-mqtt-csub-") as tmp_name:
        outputs = [Path(tmp_name) / f"sub-{k}.txt" for k in range(C_SUBSCRIBERS)]
        subs = []
        for k, out in enumerate(outputs):
            with out.open("wb") as sink:
                subs.append(subprocess.Popen(
                    [binary, "-h", "127.0.0.1", "-p", str(broker.mqtt_port), "-V", "mqttv311", "-q", "0",
                     "-t", TOPIC_FILTER, "-F", "%U %p", "-u", ADMIN_USER, "-P", ADMIN_PASSWORD, "-i", f"csub-{k}",
                     "-k", "60"],
                    stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.DEVNULL,
                ))
        pub = socket.create_connection(("127.0.0.1", broker.mqtt_port), timeout=30)
        try:
            pub.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pub.sendall(_login_packet("cpub"))
            connack = pub.recv(4)
            if len(connack) < 4 or connack[0] != 0x20 or connack[3] != 0:
                raise RuntimeError(f"the raw publisher was refused: {connack!r}")
            names = [f"bench/t{i}".encode() for i in range(topics)]
            # every subscriber hears before the window opens: probes until each has a line
            deadline = time.monotonic() + 60
            while not all(_read_lines(out) for out in outputs):
                if time.monotonic() > deadline or any(p.poll() is not None for p in subs):
                    raise RuntimeError("the mosquitto_sub subscribers did not all start receiving")
                pub.sendall(_publish_packet(names[0], b"probe"))
                time.sleep(0.05)
            start_ns = time.time_ns() + int(peers.LATENCY_WARMUP_S * 1e9)
            end_ns = start_ns + int(duration * 1e9)
            server_pids = broker.server_pids()
            load_pids = [p.pid for p in subs] + [os.getpid()]
            first_ns = time.time_ns()
            sent_total = in_window = 0
            server0 = load0 = None
            while True:
                now = time.time_ns()
                if server0 is None and now >= start_ns:
                    server0, load0 = cpu_ticks(server_pids), cpu_ticks(load_pids)
                if now >= end_ns:
                    break
                due = (now - first_ns) * rate // 1_000_000_000 - sent_total
                if due > 0:
                    batch = []
                    for _ in range(due):
                        sent_total += 1
                        sent_ns = time.time_ns()
                        if start_ns <= sent_ns < end_ns:
                            in_window += 1
                        batch.append(_publish_packet(names[sent_total % topics],
                                                     peers.make_payload(sent_total, sent_ns)))
                    pub.sendall(b"".join(batch))
                time.sleep(0.0005)
            server1, load1 = cpu_ticks(server_pids), cpu_ticks(load_pids)
            assert server0 is not None and load0 is not None
            # drain: until the files stop growing for a second (at most 15 s)
            last, still_since, drain_end = -1, time.monotonic(), time.monotonic() + 15
            while time.monotonic() < drain_end:
                lines = sum(_read_lines(out) for out in outputs)
                if lines != last:
                    last, still_since = lines, time.monotonic()
                elif time.monotonic() - still_since >= 1.0:
                    break
                time.sleep(0.1)
        finally:
            pub.close()
            for proc in subs:
                proc.terminate()
            for proc in subs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        latencies: list[int] = []
        for out in outputs:
            with out.open("rb") as f:
                for line in f:
                    when, _, payload = line.partition(b" ")
                    if not payload.startswith(b'{"ts"'):
                        continue
                    seconds, _, nanos = when.partition(b".")
                    sent_ns = peers.payload_sent_ns(payload)
                    if start_ns <= sent_ns < end_ns:
                        latencies.append(int(seconds) * 1_000_000_000 + int(nanos.ljust(9, b"0")[:9]) - sent_ns)
    return CLatency(in_window, len(latencies), latencies, cpu_seconds(server0, server1), cpu_seconds(load0, load1),
                    (end_ns - start_ns) / 1e9)


@dataclass
class IdleResult:
    n: int
    opened: int
    seconds_to_open: float
    before: int
    after: int
    tree_before: int
    tree_after: int
    dropped: int
    errors: dict[str, int]

    @property
    def kib_per_connection(self) -> float | None:
        return (self.after - self.before) / self.opened / 1024 if self.opened else None


async def _open_idle(port: int, n: int, prefix: str) -> tuple[list[tuple[Any, Any]], dict[str, int]]:
    semaphore = asyncio.Semaphore(IDLE_CONCURRENCY)
    errors: dict[str, int] = {}

    async def one(i: int) -> tuple[Any, Any] | None:
        async with semaphore:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
            except (OSError, TimeoutError) as e:
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                return None
            try:
                writer.write(_connect_packet(f"{prefix}{i}"))
                ack = await asyncio.wait_for(reader.readexactly(4), 60)
                if ack[0] != 0x20 or ack[3] != 0:
                    raise ConnectionError(f"CONNACK {ack.hex()}")
                return reader, writer
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ConnectionError) as e:
                key = str(e) if isinstance(e, ConnectionError) and str(e).startswith("CONNACK") else type(e).__name__
                errors[key] = errors.get(key, 0) + 1
                writer.close()
                return None

    opened = await asyncio.gather(*(one(i) for i in range(n)))
    return [c for c in opened if c is not None], errors


async def _close_idle(connections: list[tuple[Any, Any]]) -> None:
    for _, writer in connections:
        writer.close()
    await asyncio.gather(*(w.wait_closed() for _, w in connections), return_exceptions=True)


def _settled_rss(pids: Callable[[], list[int]], at_most: float = 10.0) -> int:
    """RSS once it stopped moving (two samples 0.5 s apart within 1%), or after ``at_most`` s."""
    deadline = time.monotonic() + at_most
    last = rss_bytes(pids())
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_bytes(pids())
        if abs(now - last) <= 0.01 * max(last, 1):
            return now
        last = now
    return last


async def measure_idle(broker: Broker, n: int) -> IdleResult:
    warm, warm_errors = await _open_idle(broker.mqtt_port, min(IDLE_WARMUP, n), "warm-")
    await _close_idle(warm)
    await asyncio.sleep(1.0)
    before = _settled_rss(broker.memory_pids)
    tree_before = rss_bytes(broker.server_pids())
    started = time.monotonic()
    held, errors = await _open_idle(broker.mqtt_port, n, "idle-")
    took = time.monotonic() - started
    for key, count in warm_errors.items():
        errors[f"warm-up {key}"] = count
    await asyncio.sleep(1.0)
    after = _settled_rss(broker.memory_pids)
    tree_after = rss_bytes(broker.server_pids())
    await asyncio.sleep(0)
    dropped = sum(1 for reader, _ in held if reader.at_eof() or reader.exception() is not None)
    await _close_idle(held)
    return IdleResult(n, len(held), took, before, after, tree_before, tree_after, dropped, errors)


# --------------------------------------------------------------------------
# One broker, one run
# --------------------------------------------------------------------------


@dataclass
class Row:
    broker: str
    throughput: PhaseResult | None = None
    latency: PhaseResult | None = None
    idle: IdleResult | None = None
    compiled: CLatency | None = None
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def bench_one(name: str, args: argparse.Namespace) -> Row:
    with tempfile.TemporaryDirectory(prefix=f"bench-mqtt-{name}-") as tmp_name:
        tmp = Path(tmp_name)
        context = (
            run_canopy(tmp, shlex.split(args.serve_args), args.topics) if name == "canopy"
            else run_mosquitto(tmp) if name == "mosquitto" else run_nats(tmp)
        )
        print(f"[mqtt] starting {name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        with context as broker:
            row = Row(broker.name, notes=list(broker.notes))
            print(f"[mqtt] {name} up in {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
            try:
                if args.idle:
                    print(f"[mqtt] {name}: {args.idle:,} idle connections ...", file=sys.stderr, flush=True)
                    row.idle = asyncio.run(measure_idle(broker, args.idle))
                    print(f"[mqtt] {name}: idle done ({row.idle.opened:,} opened in "
                          f"{row.idle.seconds_to_open:.1f}s)", file=sys.stderr, flush=True)
                    time.sleep(1.0)  # let the server close them before the load starts
                if not args.skip_load:
                    clients = Clients(broker.mqtt_port, args.subscribers, args.sub_procs, args.topics, args.lead)
                    try:
                        print(f"[mqtt] {name}: throughput ...", file=sys.stderr, flush=True)
                        row.throughput = run_phase(clients, broker, paced=False, duration=args.duration, rate=args.rate)
                        print(f"[mqtt] {name}: latency at {args.rate:,}/s ...", file=sys.stderr, flush=True)
                        row.latency = run_phase(clients, broker, paced=True, duration=args.duration, rate=args.rate)
                    finally:
                        clients.close()
                    if args.c_subscribers:
                        print(f"[mqtt] {name}: latency at {args.rate:,}/s, mosquitto_sub subscribers ...",
                              file=sys.stderr, flush=True)
                        row.compiled = c_latency_phase(broker, rate=args.rate, duration=args.duration,
                                                       topics=args.topics)
            finally:
                row.problems = broker.problems()
        row.problems = broker.problems()  # with what the server said while stopping
        if args.keep_logs:
            keep = Path(args.keep_logs)
            keep.mkdir(parents=True, exist_ok=True)
            for log in tmp.glob("*.log"):
                (keep / f"{time.strftime('%H%M%S')}-{log.name}").write_bytes(log.read_bytes())
        print(f"[mqtt] {name} done in {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    return row


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


HEADERS = [
    "broker", "published/s", "delivered/s", "p50 ms", "p99 ms", "max ms", "p50 / p99 ms (C subscribers)",
    "server µs/delivery (unpaced)", "server cores (unpaced)", "server µs/delivery (paced)", "server cores (paced)",
    "load gen cores (unpaced / paced)", "other cores (unpaced / paced)", "idle KiB/conn", "idle conns/s",
]


def cells(row: Row) -> list[str]:
    t, lat, idle = row.throughput, row.latency, row.idle
    p50 = p99 = top = None
    if lat is not None and lat.latencies_ns:
        p50, p99 = peers.percentiles_ms(lat.latencies_ns)
        top = max(lat.latencies_ns) / 1e6
    compiled = "-"
    if row.compiled is not None and row.compiled.latencies_ns:
        c50, c99 = peers.percentiles_ms(row.compiled.latencies_ns)
        compiled = f"{_f(c50, '.2f')} / {_f(c99, '.2f')}"
    return [
        row.broker,
        _f(t.published_per_s if t else None, ",.0f"),
        _f(t.delivered_per_s if t else None, ",.0f"),
        _f(p50, ".2f"), _f(p99, ".2f"), _f(top, ".1f"),
        compiled,
        _f(t.server_us_per_delivery if t else None, ".1f"),
        _f(t.server_cpu_s / t.window_s if t else None, ".2f"),
        _f(lat.server_us_per_delivery if lat else None, ".1f"),
        _f(lat.server_cpu_s / lat.window_s if lat else None, ".2f"),
        "-" if t is None or lat is None else f"{t.loadgen_cpu_s / t.window_s:.2f} / {lat.loadgen_cpu_s / lat.window_s:.2f}",
        "-" if t is None or lat is None else f"{t.others_cores:.2f} / {lat.others_cores:.2f}",
        _f(idle.kib_per_connection if idle else None, ".2f"),
        _f(idle.opened / idle.seconds_to_open if idle is not None and idle.seconds_to_open else None, ",.0f"),
    ]


def row_notes(row: Row, rate: int, subscribers: int) -> list[str]:
    notes = list(row.notes)
    for label, phase in (("unpaced", row.throughput), (f"paced {rate:,}/s", row.latency)):
        if phase is None:
            continue
        lost = phase.expected - phase.received
        if lost > 0:
            notes.append(f"{label}: {lost:,} of {phase.expected:,} deliveries ({100 * lost / phase.expected:.2f}%) "
                         "missing after drain")
        if phase.drain_s >= 1.0:
            notes.append(f"{label}: {phase.drain_s:.1f}s after the window until the subscribers had everything "
                         "(or the drain gave up)")
        if phase.stale:
            notes.append(f"{label}: {phase.stale:,} deliveries of the previous phase's messages arrived in this one")
        if phase.reconnected:
            notes.append(f"{label}: {phase.reconnected} subscriber(s) cut off before had to connect again")
        if phase.stalled:
            notes.append(f"{label}: subscriber(s) {phase.stalled} received nothing for {LEAD_STALL_S:g}s and "
                         "stopped holding the publisher back")
        if phase.disconnects:
            notes.append(f"{label}: disconnects: {'; '.join(phase.disconnects[:6])}")
        if phase.breakdown_cpu_s:
            parts = ", ".join(f"{role} {cpu / phase.window_s:.2f}" for role, cpu in phase.breakdown_cpu_s.items())
            notes.append(f"{label}: server cores by process: {parts}")
        notes.append(f"{label}: load generator {_f(phase.loadgen_us_per_delivery, '.1f')} µs CPU/delivery; "
                     f"machine busy {phase.machine_cpu_s / phase.window_s:.2f} cores, of which irq+softirq "
                     f"{phase.irq_cpu_s / phase.window_s:.2f}"
                     + (f"; busiest other processes (cores): {'; '.join(phase.busiest_others)}"
                        if phase.others_cores >= 0.2 else ""))
    if row.latency is not None and row.latency.published_per_s < 0.98 * rate:
        notes.append(f"paced phase published only {row.latency.published_per_s:,.0f}/s of {rate:,}/s")
    if row.throughput is not None and row.throughput.delivered_per_s < rate * subscribers:
        notes.append(f"the paced phase asks {rate * subscribers:,} deliveries/s, more than the unpaced phase "
                     f"delivered ({row.throughput.delivered_per_s:,.0f}/s): its latencies are mostly queueing")
    compiled = row.compiled
    if compiled is not None:
        p50, p99 = peers.percentiles_ms(compiled.latencies_ns)
        top = max(compiled.latencies_ns) / 1e6 if compiled.latencies_ns else None
        notes.append(
            f"mosquitto_sub subscribers, raw publisher at {rate:,}/s: p50 {_f(p50, '.2f')} ms, p99 {_f(p99, '.2f')} ms, "
            f"max {_f(top, '.1f')} ms over {compiled.received:,} of {compiled.expected:,} deliveries; server "
            f"{compiled.server_cpu_s / compiled.window_s:.2f} cores, load generator "
            f"{compiled.loadgen_cpu_s / compiled.window_s:.2f} cores")
    idle = row.idle
    if idle is not None:
        notes.append(
            f"idle: {idle.opened:,} of {idle.n:,} connections opened in {idle.seconds_to_open:.1f}s; measured RSS "
            f"{idle.before / 2**20:.1f} -> {idle.after / 2**20:.1f} MiB; whole server "
            f"{idle.tree_before / 2**20:.1f} -> {idle.tree_after / 2**20:.1f} MiB "
            f"({(idle.tree_after - idle.tree_before) / max(idle.opened, 1) / 1024:.2f} KiB/conn)"
            + (f"; {idle.dropped:,} closed by the server before the end" if idle.dropped else "")
            + (f"; errors: {idle.errors}" if idle.errors else "")
        )
    return notes


def print_markdown(rows: list[Row]) -> None:
    print("| " + " | ".join(HEADERS) + " |")
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(HEADERS))) + "|")
    for row in rows:
        print("| " + " | ".join(cells(row)) + " |")


def _median_cell(values: list[str]) -> str:
    """The median of one column's cells ("a / b" pairs: per part); "-" cells left out."""
    parts = [v.split(" / ") for v in values if v != "-"]
    if not parts:
        return "-"
    out = []
    for i in range(len(parts[0])):
        numbers = [float(p[i].replace(",", "")) for p in parts if len(p) > i]
        median = statistics.median(numbers)
        out.append(f"{median:,.0f}" if median >= 1000 else f"{median:.2f}")
    return " / ".join(out)


def print_medians(runs: list[list[Row]]) -> None:
    by_broker: dict[str, list[list[str]]] = {}
    for rows in runs:
        for row in rows:
            by_broker.setdefault(row.broker, []).append(cells(row))
    print("| " + " | ".join(HEADERS) + " |")
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(HEADERS))) + "|")
    for broker, all_cells in by_broker.items():
        out = [broker] + [_median_cell([c[col] for c in all_cells]) for col in range(1, len(HEADERS))]
        print("| " + " | ".join(out) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measurement window (default 5)")
    parser.add_argument("--rate", type=int, default=5000, help="paced publish rate of the latency phase")
    parser.add_argument("--subscribers", type=int, default=10)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--sub-procs", type=int, default=2, help="processes the subscribers are spread over")
    parser.add_argument("--lead", type=int, default=LEAD,
                        help="messages the unpaced publisher may run ahead of the slowest subscriber (0: no bound)")
    parser.add_argument("--idle", type=int, default=10_000, help="idle MQTT connections to hold (0: skip)")
    parser.add_argument("--skip-load", action="store_true", help="only the idle-connection test")
    parser.add_argument("--runs", type=int, default=1, help="repeat everything K times, every run reported")
    parser.add_argument("--brokers", default="canopy,mosquitto,nats")
    parser.add_argument("--serve-args", default="", help="extra `canopy serve` options, e.g. '--partitions 1'")
    parser.add_argument("--keep-logs", metavar="DIR", help="copy the brokers' output to DIR")
    parser.add_argument("--c-subscribers", action=argparse.BooleanOptionalAction,
                        default=shutil.which("mosquitto_sub") is not None,
                        help="also measure latency with mosquitto_sub subscribers and a raw-socket publisher "
                             "(default: when mosquitto_sub is installed)")
    args = parser.parse_args()
    names = [n.strip() for n in args.brokers.split(",") if n.strip()]
    for name in names:
        if name not in BROKERS:
            parser.error(f"unknown broker {name!r} (known: {', '.join(BROKERS)})")
    nofile = raise_nofile()  # before any broker starts: they inherit it
    if args.idle and nofile < args.idle + 1000:
        print(f"[mqtt] RLIMIT_NOFILE is {nofile}: fewer than {args.idle:,} idle connections may open",
              file=sys.stderr)
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/mqtt.py", *sys.argv[1:]])
    _paho()  # installed before any client process needs it
    paho_version = importlib.metadata.version("paho-mqtt")
    started = time.monotonic()
    runs: list[list[Row]] = []
    for k in range(args.runs):
        rows = []
        for name in names:
            rows.append(bench_one(name, args))
        runs.append(rows)
        print(f"\n### run {k + 1} of {args.runs} (load average {os.getloadavg()[0]:.2f})\n")
        print_markdown(rows)
        print()
        for row in rows:
            for note in row_notes(row, args.rate, args.subscribers):
                print(f"* {row.broker}: {note}")
            if row.problems:
                shown = row.problems[:15]
                print(f"* {row.broker}: {len(row.problems)} noteworthy server output line(s)"
                      + (", the first 15" if len(row.problems) > 15 else "") + ":")
                for line in shown:
                    print(f"    {line[:300]}")
        sys.stdout.flush()
    if args.runs > 1:
        print(f"\n### medians over {args.runs} runs\n")
        print_medians(runs)
    print(
        f"\nworkload: paho-mqtt {paho_version} (MQTT 3.1.1, QoS 0) for every broker; 1 publisher process -> "
        f"{args.topics} topics (round robin, ~50-byte payloads), {args.subscribers} subscribers x `{TOPIC_FILTER}` "
        f"in {min(args.sub_procs, args.subscribers)} process(es); windows of {args.duration:g}s; paced phase at "
        f"{args.rate:,} updates/s; idle test {args.idle:,} anonymous connections; {os.cpu_count()} cores; "
        f"total {time.monotonic() - started:.0f}s"
    )
    print(f"command: `{command}`")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main())
