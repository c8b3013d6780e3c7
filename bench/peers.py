"""Peer brokers for the fan-out benchmark: Mosquitto (MQTT) and NATS.

This module measures two established brokers on this machine with exactly the
workload that canopy's half of the benchmark runs, so that a later script can
print canopy's figures beside theirs, taken in the same run on the same cores.

Workload (identical for every broker)
-------------------------------------
* One publisher connection publishes to ``topics`` topics (default 100) in
  round robin.  Each payload is a ~50-byte JSON object carrying the send time
  (``time.perf_counter_ns()``, zero padded so it sits at a fixed offset) and a
  sequence number, see :func:`make_payload`.
* ``subscribers`` subscriber sessions (default 10), each on its own connection
  and each subscribed to every topic through one wildcard subscription
  (``bench/#`` in MQTT, ``bench.>`` in NATS).
* Publisher and subscribers live in *this* process, on one asyncio loop in
  one thread, so a single monotonic clock (``perf_counter_ns``) stamps both
  the send and the receive.  nats-py is asyncio-native; paho-mqtt clients are
  attached to the same loop through paho's external-event-loop callbacks
  (see :class:`_PahoOnLoop` for why not one thread per client).

Phase 1, throughput
    After a short warm-up the publisher publishes as fast as its client lets it,
    in batches of ``BATCH`` messages, for ``duration`` seconds, and yields to
    the event loop after every batch, so the subscribers drain concurrently the
    whole time and the publisher cannot run ahead of them unboundedly.  A message
    counts as *delivered* only if a subscriber received it inside the
    measurement window; ``delivered_per_s`` is the sum over all subscribers of
    those messages divided by the window length.  ``published_per_s`` counts
    the batches that began inside the window.  After the window the publisher
    stops, flushes, and the harness waits (bounded) until every subscriber has
    drained, so that the loss figure in ``notes`` is exact.

Phase 2, latency
    The publisher publishes at a fixed ``rate`` (default 5,000 updates/s), paced
    against the monotonic clock in small bursts every millisecond (the burst
    catches up to ``rate * elapsed``, so oversleeping does not lower the rate).
    Every subscriber records receive time minus the send time carried in the
    payload for each message *sent* inside the ``duration`` window (after a
    warm-up); ``latency_p50_ms`` and ``latency_p99_ms`` are taken over all
    subscribers' samples together.

Each broker is a subprocess of this script, started with a minimal
configuration written to a temporary directory, listening on 127.0.0.1 on a
port chosen at run time, never daemonised, and always terminated at the end.
The broker binaries (Debian packages) and the Python client libraries are
installed on first use; they are benchmark-only and not dependencies of canopy.

    .venv/bin/python bench/peers.py [--duration 5]

Everything here (the client libraries included) is Python on one interpreter,
so the figures describe broker *plus* Python client, and with two cores the
client side is usually what saturates first.  Canopy's half should be measured
the same way, reusing :class:`Phase`, :class:`Tally`, :func:`make_payload`,
:func:`run_async_workload` and :func:`print_table`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib
import importlib.metadata
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------
# Result and table
# --------------------------------------------------------------------------


@dataclass
class Result:
    """One broker's figures for the workload described in the module docstring."""

    broker: str
    published_per_s: float
    delivered_per_s: float
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    notes: str = ""
    #: CPU time per delivered update in the latency phase's window: the server's processes
    #: (the broker and every process under it) and this load generator's, in µs
    server_us: float | None = None
    client_us: float | None = None


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}"


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or base is None or base == 0:
        return "-"
    return f"{value / base:.2f}x"


def print_table(results: list[Result]) -> None:
    """Print an aligned table of ``results`` and their ratios to the first row.

    For throughput columns a ratio above 1 means more updates per second than
    the first row; for latency columns it means slower (higher) latency.
    """
    if not results:
        print("(no results)")
        return
    headers = ["broker", "published/s", "delivered/s", "p50 ms", "p99 ms", "server µs/upd", "client µs/upd"]
    rows = [
        [
            r.broker,
            _fmt_rate(r.published_per_s),
            _fmt_rate(r.delivered_per_s),
            _fmt_ms(r.latency_p50_ms),
            _fmt_ms(r.latency_p99_ms),
            _fmt_ms(r.server_us),
            _fmt_ms(r.client_us),
        ]
        for r in results
    ]
    base = results[0]
    ratio_rows = [
        [
            r.broker,
            _ratio(r.published_per_s, base.published_per_s),
            _ratio(r.delivered_per_s, base.delivered_per_s),
            _ratio(r.latency_p50_ms, base.latency_p50_ms),
            _ratio(r.latency_p99_ms, base.latency_p99_ms),
            _ratio(r.server_us, base.server_us),
            _ratio(r.client_us, base.client_us),
        ]
        for r in results
    ]
    widths = [max(len(row[i]) for row in [headers, *rows, *ratio_rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:]))
        return "  ".join([first, *rest])

    rule = "  ".join("-" * w for w in widths)
    print(line(headers))
    print(rule)
    for row in rows:
        print(line(row))
    if len(results) > 1:
        print()
        print(f"relative to {base.broker}:")
        print(rule)
        for row in ratio_rows:
            print(line(row))
    notes = [(r.broker, r.notes) for r in results if r.notes]
    if notes:
        print()
        for broker, note in notes:
            print(f"* {broker}: {note}")


# --------------------------------------------------------------------------
# Payload, phases and per-subscriber tallies (shared with canopy's half)
# --------------------------------------------------------------------------

_TS_OFFSET = len('{"ts":"')
_TS_DIGITS = 19
_PAD = "x" * 4


def make_payload(seq: int, sent_ns: int) -> bytes:
    """A ~50-byte JSON payload with the send time at a fixed offset."""
    return f'{{"ts":"{sent_ns:0{_TS_DIGITS}d}","seq":{seq},"pad":"{_PAD}"}}'.encode()


def payload_sent_ns(data: bytes) -> int:
    """The send time that :func:`make_payload` put into ``data``."""
    return int(data[_TS_OFFSET : _TS_OFFSET + _TS_DIGITS])


@dataclass
class Phase:
    """The current measurement window, shared by the driver and all tallies.

    Only the driver writes it, and only while no message is in flight.
    """

    start_ns: int = 0
    end_ns: int = 0
    record_latency: bool = False


class Tally:
    """What one subscriber received; only that subscriber's callback writes it."""

    __slots__ = ("in_window", "latencies_ns", "phase", "received")

    def __init__(self, phase: Phase) -> None:
        self.phase = phase
        self.received = 0
        self.in_window = 0
        self.latencies_ns = array("q")

    def reset(self) -> None:
        self.received = 0
        self.in_window = 0
        self.latencies_ns = array("q")  # not a GC-tracked list: the harness must not cause collector pauses

    def on_message(self, data: bytes) -> None:
        """Account one delivered payload; call it first thing in the callback."""
        now = time.perf_counter_ns()
        self.received += 1
        phase = self.phase
        if phase.start_ns <= now < phase.end_ns:
            self.in_window += 1
        if phase.record_latency:
            sent = payload_sent_ns(data)
            if phase.start_ns <= sent < phase.end_ns:
                self.latencies_ns.append(now - sent)


@dataclass
class Measurement:
    """Raw outcome of both phases, turned into a :class:`Result` by :meth:`result`."""

    published_per_s: float = 0.0
    delivered_per_s: float = 0.0
    throughput_published: int = 0
    throughput_expected: int = 0
    throughput_received: int = 0
    latency_rate_achieved: float = 0.0
    latency_expected: int = 0
    latency_received: int = 0
    latencies_ns: list[int] = field(default_factory=list)
    subscribers: int = 0
    #: CPU seconds over the latency phase's window, of the server's processes and of this one,
    #: and the deliveries that window asked for
    server_cpu_s: float | None = None
    client_cpu_s: float | None = None
    window_deliveries: int = 0

    def result(self, broker: str, rate: int, extra_notes: Sequence[str] = ()) -> Result:
        notes = list(extra_notes)
        lost = self.throughput_expected - self.throughput_received
        if lost > 0:
            notes.append(
                f"throughput phase: {lost:,} of {self.throughput_expected:,} deliveries "
                f"({100 * lost / self.throughput_expected:.1f}%) missing after drain"
            )
        lost = self.latency_expected - self.latency_received
        if lost > 0:
            notes.append(f"latency phase: {lost:,} of {self.latency_expected:,} deliveries missing after drain")
        if self.latency_rate_achieved < 0.98 * rate:
            notes.append(f"latency phase published only {self.latency_rate_achieved:,.0f}/s of {rate:,}/s")
        offered = rate * self.subscribers
        if offered > self.delivered_per_s:
            notes.append(
                f"latency phase asks for {offered:,} deliveries/s, more than the {self.delivered_per_s:,.0f}/s "
                "of the throughput phase: its latencies are mostly queueing delay"
            )
        p50, p99 = percentiles_ms(self.latencies_ns)
        per = max(self.window_deliveries, 1) / 1e6
        return Result(
            broker=broker,
            published_per_s=self.published_per_s,
            delivered_per_s=self.delivered_per_s,
            latency_p50_ms=p50,
            latency_p99_ms=p99,
            notes="; ".join(notes),
            server_us=None if self.server_cpu_s is None else self.server_cpu_s / per,
            client_us=None if self.client_cpu_s is None else self.client_cpu_s / per,
        )


def percentiles_ms(samples_ns: list[int]) -> tuple[float | None, float | None]:
    """p50 and p99 (nearest rank) of ``samples_ns``, in milliseconds."""
    if not samples_ns:
        return None, None
    ordered = sorted(samples_ns)
    n = len(ordered)

    def rank(q: float) -> float:
        return ordered[min(n - 1, max(0, round(q * n) - 1))] / 1e6

    return rank(0.50), rank(0.99)


# Workload constants; the same for every broker.
WARMUP_S = 1.0  # before the throughput window
LATENCY_WARMUP_S = 0.5  # before the latency window
BATCH = 100  # messages per publish batch in the throughput phase
TICK_S = 0.001  # pacing tick of the latency phase
DRAIN_IDLE_S = 0.5  # drain gives up after this long without progress ...
DRAIN_MAX_S = 15.0  # ... or after this long in total


def _received(tallies: Sequence[Tally]) -> int:
    return sum(t.received for t in tallies)


def _start_phase(phase: Phase, tallies: Sequence[Tally], warmup_s: float, duration: float, latency: bool) -> None:
    for tally in tallies:
        tally.reset()
    # what exists now (clients, connections, the harness) lives through the phase: keep the
    # collector from walking it during the measurement, for every broker alike
    gc.collect()
    gc.freeze()
    start = time.perf_counter_ns() + int(warmup_s * 1e9)
    phase.record_latency = latency
    phase.start_ns = start
    phase.end_ns = start + int(duration * 1e9)


def _drain_state(tallies: Sequence[Tally], expected: int, last: tuple[int, float]) -> tuple[bool, tuple[int, float]]:
    """One drain poll: (done, new progress marker)."""
    got = _received(tallies)
    now = time.monotonic()
    if got >= expected:
        return True, (got, now)
    if got != last[0]:
        return False, (got, now)
    return now - last[1] >= DRAIN_IDLE_S, last


async def _drain_async(tallies: Sequence[Tally], expected: int) -> int:
    deadline = time.monotonic() + DRAIN_MAX_S
    marker = (-1, time.monotonic())
    while time.monotonic() < deadline:
        done, marker = _drain_state(tallies, expected, marker)
        if done:
            break
        await asyncio.sleep(0.01)
    return _received(tallies)


async def run_async_workload(
    publish: Callable[[int, bytes], Awaitable[None]],
    flush: Callable[[], Awaitable[None]],
    phase: Phase,
    tallies: Sequence[Tally],
    *,
    duration: float,
    topics: int,
    rate: int,
    throughput: bool = True,
    on_latency_phase: Callable[[float], None] | None = None,
    server_pid: int | None = None,
) -> Measurement:
    """Both phases for a client whose publisher and subscribers share this loop.

    ``publish(topic_index, payload)`` publishes one message; ``flush()`` waits
    until everything published so far has reached the broker.  The
    subscribers must already be subscribed and call ``Tally.on_message``.
    Without ``throughput`` only the latency phase runs; ``on_latency_phase``
    is told when that phase's window starts (its argument: the window in s).
    With ``server_pid`` the CPU time of that process and every process under
    it (a server, or a broker) is sampled at the window's start and end, and
    so is this process's own (the load generator's), for the CPU per delivery.
    """
    n_subs = len(tallies)
    m = Measurement(subscribers=n_subs)
    if throughput:
        await _throughput_phase(publish, flush, phase, tallies, m, duration=duration, topics=topics)

    # Phase 2: latency at a fixed rate.
    _start_phase(phase, tallies, LATENCY_WARMUP_S, duration, latency=True)
    origin = time.perf_counter_ns()
    sent = 0
    in_window = 0
    tick = 0
    announced = False
    cpu_before: tuple[float, float] | None = None
    while True:
        now = time.perf_counter_ns()
        if now >= phase.end_ns:
            break
        if not announced and now >= phase.start_ns:
            announced = True
            if on_latency_phase is not None:
                on_latency_phase(duration)
            cpu_before = _cpu_now(server_pid)
        due = (now - origin) * rate // 1_000_000_000
        while sent < due:
            ts = time.perf_counter_ns()
            await publish(sent % topics, make_payload(sent, ts))
            if ts >= phase.start_ns:
                in_window += 1
            sent += 1
        tick += 1
        delay = (origin + int(tick * TICK_S * 1e9) - time.perf_counter_ns()) / 1e9
        await asyncio.sleep(max(0.0, delay))
    if cpu_before is not None:
        server_after, client_after = _cpu_now(server_pid)
        m.server_cpu_s = server_after - cpu_before[0] if server_pid is not None else None
        m.client_cpu_s = client_after - cpu_before[1]
    await flush()
    m.window_deliveries = in_window * n_subs
    m.latency_rate_achieved = in_window / duration
    m.latency_expected = sent * n_subs
    m.latency_received = await _drain_async(tallies, m.latency_expected)
    m.latencies_ns = [x for t in tallies for x in t.latencies_ns]
    return m


CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_tree_cpu_s(root: int) -> float:
    """utime + stime, in s, of ``root`` and every live process below it (by parent pid)."""
    stats: dict[int, list[str]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                pass
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    ticks, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            ticks += int(stats[pid][11]) + int(stats[pid][12])
        todo += children.get(pid, [])
    return ticks / CLK_TCK


def _cpu_now(server_pid: int | None) -> tuple[float, float]:
    own = os.times()
    return (process_tree_cpu_s(server_pid) if server_pid is not None else 0.0), own.user + own.system


async def _throughput_phase(
    publish: Callable[[int, bytes], Awaitable[None]],
    flush: Callable[[], Awaitable[None]],
    phase: Phase,
    tallies: Sequence[Tally],
    m: Measurement,
    *,
    duration: float,
    topics: int,
) -> None:
    n_subs = len(tallies)
    _start_phase(phase, tallies, WARMUP_S, duration, latency=False)
    seq = 0
    in_window = 0
    while True:
        now = time.perf_counter_ns()
        if now >= phase.end_ns:
            break
        for _ in range(BATCH):
            await publish(seq % topics, make_payload(seq, time.perf_counter_ns()))
            seq += 1
        if now >= phase.start_ns:
            in_window += BATCH
        await asyncio.sleep(0)  # let the subscribers drain
    await flush()
    m.published_per_s = in_window / duration
    m.delivered_per_s = sum(t.in_window for t in tallies) / duration
    m.throughput_published = seq
    m.throughput_expected = seq * n_subs
    m.throughput_received = await _drain_async(tallies, m.throughput_expected)


# --------------------------------------------------------------------------
# Provisioning: binaries, client libraries, broker subprocesses
# --------------------------------------------------------------------------


def _which(binary: str) -> str | None:
    found = shutil.which(binary)
    if found:
        return found
    for directory in ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"):
        candidate = Path(directory) / binary
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def ensure_binary(binary: str, package: str) -> str:
    """Path of ``binary``, installing Debian ``package`` with apt-get if needed."""
    found = _which(binary)
    if found:
        return found
    print(f"[peers] {binary} not found: apt-get install -y {package}", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", package]
    if subprocess.run(install, env=env, stdout=subprocess.DEVNULL, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, stdout=subprocess.DEVNULL, check=True)
        subprocess.run(install, env=env, stdout=subprocess.DEVNULL, check=True)
    found = _which(binary)
    if not found:
        raise RuntimeError(f"{package} installed but {binary} is still not on PATH")
    return found


def ensure_module(module: str, requirement: str) -> None:
    """Import ``module``, pip-installing ``requirement`` into this interpreter first if needed."""
    try:
        importlib.import_module(module)
        return
    except ImportError:
        pass
    print(f"[peers] {module} not importable: pip install {requirement}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", requirement], check=True)
    importlib.invalidate_caches()
    importlib.import_module(module)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@contextlib.contextmanager
def broker_process(name: str, argv: list[str], port: int, log: Path, timeout: float = 10.0) -> Iterator[int]:
    """Run a broker in the foreground; yield its pid once it accepts TCP on ``port``; always stop it."""
    with log.open("wb") as log_file:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} during start-up:\n{_log_tail(log)}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} not listening on 127.0.0.1:{port} after {timeout}s:\n{_log_tail(log)}")
                time.sleep(0.02)
        yield proc.pid
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _version_of(argv: list[str], pattern: str) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    match = re.search(pattern, out.stdout + out.stderr)
    return match.group(1) if match else "?"


# --------------------------------------------------------------------------
# Mosquitto over paho-mqtt
# --------------------------------------------------------------------------


def run_mosquitto(duration: float = 5.0, subscribers: int = 10, topics: int = 100, rate: int = 5000) -> Result:
    """Measure Mosquitto (MQTT 3.1.1, QoS 0) with paho-mqtt clients."""
    binary = ensure_binary("mosquitto", "mosquitto")
    ensure_module("paho.mqtt.client", "paho-mqtt>=2,<3")
    import paho.mqtt.client as mqtt

    version = _version_of([binary, "-h"], r"mosquitto version (\S+)")
    paho_version = importlib.metadata.version("paho-mqtt")
    broker = f"mosquitto {version} (MQTT QoS 0, paho-mqtt {paho_version})"

    with tempfile.TemporaryDirectory(prefix="peers-mosquitto-") as tmp:
        port = free_port()
        conf = Path(tmp) / "mosquitto.conf"
        conf.write_text(
            f"listener {port} 127.0.0.1\n"
            "allow_anonymous true\n"
            "persistence false\n"
            "log_dest stdout\n"
            "log_type error\n"
            "log_type warning\n"
        )
        with broker_process("mosquitto", [binary, "-c", str(conf)], port, Path(tmp) / "mosquitto.log") as pid:
            return asyncio.run(_bench_mosquitto(mqtt, port, broker, duration, subscribers, topics, rate, pid))


class _PahoOnLoop:
    """Drives one paho-mqtt client from the running asyncio loop.

    This is paho's documented external-event-loop interface (``on_socket_*``
    callbacks plus ``loop_read``/``loop_write``/``loop_misc``) instead of one
    network thread per client: eleven paho threads in one interpreter spend
    most of their time handing the GIL to each other, which would measure
    Python thread switching rather than the broker.

    ``loop_read`` handles at most one MQTT packet per call, so on each
    readiness event :meth:`_readable` keeps reading while calls still deliver a
    message (``progress`` grows), up to ``MAX_READS``; nats-py likewise parses
    a whole 32 KiB read per wake-up.
    """

    MAX_READS = 512

    def __init__(self, client: Any, progress: Callable[[], int] | None = None) -> None:
        self.client = client
        self.loop = asyncio.get_running_loop()
        self.progress = progress
        self.writable = asyncio.Event()
        self.writable.set()
        self.closed = asyncio.Event()
        self._misc: asyncio.Task[None] | None = None
        client.on_socket_open = self._on_open
        client.on_socket_close = self._on_close
        client.on_socket_register_write = self._on_register_write
        client.on_socket_unregister_write = self._on_unregister_write

    def _on_open(self, _client: Any, _userdata: Any, sock: Any) -> None:
        self.closed.clear()
        self.loop.add_reader(sock, self._readable)
        self._misc = self.loop.create_task(self._misc_loop())

    def _on_close(self, _client: Any, _userdata: Any, sock: Any) -> None:
        self.loop.remove_reader(sock)
        self.loop.remove_writer(sock)
        self.writable.set()
        self.closed.set()
        if self._misc is not None:
            self._misc.cancel()

    def _on_register_write(self, _client: Any, _userdata: Any, sock: Any) -> None:
        self.writable.clear()
        self.loop.add_writer(sock, self.client.loop_write)

    def _on_unregister_write(self, _client: Any, _userdata: Any, sock: Any) -> None:
        self.loop.remove_writer(sock)
        self.writable.set()

    def _readable(self) -> None:
        if self.progress is None:
            self.client.loop_read()
            return
        for _ in range(self.MAX_READS):
            before = self.progress()
            if self.client.loop_read() != 0 or self.progress() == before:
                break

    async def _misc_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.client.loop_misc()

    async def drained(self) -> None:
        """Wait until paho has handed every queued packet to the kernel."""
        await self.writable.wait()

    async def close(self, timeout: float = 2.0) -> None:
        if self.client.socket() is None:
            return
        self.client.disconnect()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.closed.wait(), timeout)
        if self._misc is not None:
            self._misc.cancel()


def _subscribe_on_connect(client: Any, _userdata: Any, _flags: Any, reason: Any, _properties: Any) -> None:
    if not reason.is_failure:
        client.subscribe("bench/#", qos=0)


def _set_on_callback(event: asyncio.Event) -> Callable[..., None]:
    """A paho on_connect/on_subscribe callback that sets ``event`` on success."""

    def callback(_client: Any, _userdata: Any, *args: Any) -> None:
        reasons = args[1] if len(args) > 1 else []
        reasons = reasons if isinstance(reasons, list) else [reasons]
        if not any(reason.is_failure for reason in reasons):
            event.set()

    return callback


def _received_of(tally: Tally) -> Callable[[], int]:
    return lambda: tally.received


async def _bench_mosquitto(
    mqtt: Any, port: int, broker: str, duration: float, subscribers: int, topics: int, rate: int,
    server_pid: int | None = None,
) -> Result:
    phase = Phase()
    tallies = [Tally(phase) for _ in range(subscribers)]
    drivers: list[_PahoOnLoop] = []

    def on_message(_client: Any, tally: Tally, message: Any) -> None:
        tally.on_message(message.payload)

    def new_client(client_id: str, userdata: Any = None) -> Any:
        return mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, userdata=userdata, protocol=mqtt.MQTTv311
        )

    try:
        subscribed: list[asyncio.Event] = []
        for i, tally in enumerate(tallies):
            sub = new_client(f"peers-sub-{i}", tally)
            done = asyncio.Event()
            subscribed.append(done)
            sub.on_message = on_message
            sub.on_connect = _subscribe_on_connect
            sub.on_subscribe = _set_on_callback(done)
            drivers.append(_PahoOnLoop(sub, progress=_received_of(tally)))
            sub.connect("127.0.0.1", port, keepalive=60)
        try:
            await asyncio.wait_for(asyncio.gather(*(done.wait() for done in subscribed)), 10)
        except TimeoutError:
            raise RuntimeError("mosquitto subscribers not all subscribed within 10 s") from None

        pub = new_client("peers-pub")
        connected = asyncio.Event()
        pub.on_connect = _set_on_callback(connected)
        pub_driver = _PahoOnLoop(pub)
        drivers.append(pub_driver)
        pub.connect("127.0.0.1", port, keepalive=60)
        try:
            await asyncio.wait_for(connected.wait(), 10)
        except TimeoutError:
            raise RuntimeError("mosquitto publisher not connected within 10 s") from None

        publish = paho_publisher(pub, pub_driver, topics)
        measurement = await run_async_workload(
            publish, pub_driver.drained, phase, tallies, duration=duration, topics=topics, rate=rate,
            server_pid=server_pid,
        )
    finally:
        await asyncio.gather(*(driver.close() for driver in drivers), return_exceptions=True)
    return measurement.result(broker, rate)


def paho_publisher(client: Any, driver: _PahoOnLoop, topics: int) -> Callable[[int, bytes], Awaitable[None]]:
    """``publish(topic index, payload)`` at QoS 0 to ``bench/t<index>`` through a paho client
    driven by ``driver``. paho's publish() only queues the packet (the loop's writer callback
    sends it); waiting for the queue to empty every BATCH messages bounds what the publisher
    holds in user space, like nats-py's buffer."""
    import paho.mqtt.client as mqtt

    names = [f"bench/t{i}" for i in range(topics)]
    queued = 0

    async def publish(topic: int, payload: bytes) -> None:
        nonlocal queued
        info = client.publish(names[topic], payload, qos=0)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            raise RuntimeError(f"paho publish failed: {mqtt.error_string(info.rc)}")
        queued += 1
        if queued >= BATCH:
            queued = 0
            await driver.drained()

    return publish


# --------------------------------------------------------------------------
# NATS over nats-py
# --------------------------------------------------------------------------


def run_nats(duration: float = 5.0, subscribers: int = 10, topics: int = 100, rate: int = 5000) -> Result:
    """Measure nats-server (core NATS, no JetStream) with nats-py clients on one asyncio loop."""
    binary = ensure_binary("nats-server", "nats-server")
    ensure_module("nats", "nats-py>=2,<3")
    import nats

    version = _version_of([binary, "--version"], r"v?(\d+\.\d+\.\d+\S*)")
    client_version = importlib.metadata.version("nats-py")
    broker = f"nats-server {version} (core NATS, nats-py {client_version})"

    with tempfile.TemporaryDirectory(prefix="peers-nats-") as tmp:
        port = free_port()
        conf = Path(tmp) / "nats.conf"
        conf.write_text(f'listen: "127.0.0.1:{port}"\n')
        with broker_process("nats-server", [binary, "-c", str(conf)], port, Path(tmp) / "nats.log") as pid:
            return asyncio.run(_bench_nats(nats, port, broker, duration, subscribers, topics, rate, pid))


async def _bench_nats(
    nats: Any, port: int, broker: str, duration: float, subscribers: int, topics: int, rate: int,
    server_pid: int | None = None,
) -> Result:
    phase = Phase()
    tallies = [Tally(phase) for _ in range(subscribers)]
    errors: list[str] = []
    url = f"nats://127.0.0.1:{port}"
    connections: list[Any] = []

    async def error_cb(exc: Exception) -> None:
        errors.append(type(exc).__name__)

    async def connect(name: str) -> Any:
        nc = await nats.connect(url, name=name, allow_reconnect=False, error_cb=error_cb, connect_timeout=5)
        connections.append(nc)
        return nc

    try:
        for i, tally in enumerate(tallies):
            nc = await connect(f"peers-sub-{i}")

            async def on_msg(msg: Any, tally: Tally = tally) -> None:
                tally.on_message(msg.data)

            await nc.subscribe("bench.>", cb=on_msg)
            await nc.flush()  # the server has registered the subscription

        pub = await connect("peers-pub")
        names = [f"bench.t{i}" for i in range(topics)]

        async def publish(topic: int, payload: bytes) -> None:
            await pub.publish(names[topic], payload)

        measurement = await run_async_workload(
            publish, pub.flush, phase, tallies, duration=duration, topics=topics, rate=rate,
            server_pid=server_pid,
        )
    finally:
        for nc in connections:
            with contextlib.suppress(Exception):
                await nc.close()
    notes = []
    if errors:
        counts = {name: errors.count(name) for name in sorted(set(errors))}
        notes.append("client errors: " + ", ".join(f"{k} x{v}" for k, v in counts.items()))
    return measurement.result(broker, rate, notes)


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measurement window (default 5)")
    parser.add_argument("--subscribers", type=int, default=10)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--rate", type=int, default=5000, help="publish rate of the latency phase (updates/s)")
    args = parser.parse_args(argv)

    results: list[Result] = []
    for label, runner in (("mosquitto", run_mosquitto), ("nats", run_nats)):
        print(f"[peers] measuring {label} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        results.append(runner(duration=args.duration, subscribers=args.subscribers, topics=args.topics, rate=args.rate))
        print(f"[peers] {label} done in {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    print()
    print(
        f"workload: 1 publisher -> {args.topics} topics (round robin, ~50-byte payloads), "
        f"{args.subscribers} subscribers x all topics; windows of {args.duration:g}s; "
        f"latency at {args.rate:,} updates/s"
    )
    print()
    print_table(results)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
