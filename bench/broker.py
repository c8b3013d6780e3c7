"""Fan-out benchmark: canopy against Mosquitto and NATS, in the same run.

Workload (see ``bench/peers.py`` for the exact measurement rules, shared by
every broker): one publisher, 100 topics in round robin with ~50-byte
payloads, 10 subscriber sessions each subscribed to all topics; first as
fast as the publisher can (delivered updates/s summed over subscribers),
then at a fixed 5,000 updates/s (publish→receive latency p50/p99, and the CPU time per delivered
update of the server's processes — ``canopy serve`` and every process under it, Mosquitto's,
nats-server's — and of this load generator, from ``/proc`` over that window).

canopy runs as a real ``canopy serve`` subprocess (embedded Ray, default
partitions) on a free port; its clients are the asyncio ``canopy`` client,
all in this process on one event loop, as the peers' clients are. The topics
are BINARY with CONFLATION off, so the payload bytes travel untouched and no
update is conflated away (the peers drop nothing either). A canopy ``set``
completes when the partition has applied it, so the publisher keeps up to
``WINDOW`` sets outstanding instead of awaiting each one (MQTT QoS 0 and
NATS publishes are fire-and-forget).

    .venv/bin/python bench/broker.py [--duration 5] [--skip-peers] [--latency-only]
                                     [--profile DIR] [--nodes 1,2,3] [--js]

``--js`` runs the same workload against the same server with canopy's JavaScript client
(``clients/js``, under Node: ``bench/js_client.mjs``, publisher and subscribers in one Node
process as the Python client's are in one asyncio loop), beside the Python client's row.

``--nodes 1,2,3`` measures canopy once per node count: 1 is the embedded single
node; N > 1 is ``canopy serve --local-nodes N`` (N Ray nodes on this machine, every
update applied on a primary and its backup before it is acknowledged). On a
2-core machine that shows the cost of replication, not scaling.

``--profile DIR`` records the latency phase with py-spy (installed on first
use) in the gateway, the partitions and this client process, writes each
profile's collapsed stacks to DIR and prints the functions that took the
most samples in each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from collections import deque
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import peers  # noqa: E402
import profiling  # noqa: E402

import canopy  # noqa: E402

WINDOW = 2000  # outstanding sets
ADMIN = ("admin", "bench-admin-password")  # the publisher; subscribers are anonymous
# Every delivery counts, as with QoS 0: the topics have CONFLATION off, and the
# session queues may hold a few seconds of backlog before a session is cut.
QUEUE_LIMIT = 500_000


def start_server(data_dir: str, port: int, extra: list[str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "canopy"), "serve", "--port", str(port), "--data-dir", data_dir,
            "--queue-limit", str(QUEUE_LIMIT), *(extra or []),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={
            **os.environ,
            "CANOPY_ADMIN_PASSWORD": ADMIN[1],
        },
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if "canopy serving" in line:
            # serve goes on printing (cluster events, Ray's worker logs): never let its pipe fill
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("canopy serve did not start")


def stop_server(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


async def bench_canopy(
    url: str, duration: float, subscribers: int, topics: int, rate: int,
    *, throughput: bool = True, on_latency_phase: Any = None, hops: list[Hop] | None = None,
    label: str = "1 gateway, embedded Ray", server_pid: int | None = None,
) -> peers.Result:
    """Run the workload; with ``hops``, fill it with the latency phase's per-hop breakdown."""
    phase = peers.Phase()
    tallies = [peers.Tally(phase) for _ in range(subscribers)]
    # per subscriber: (send time carried by the value, receive time) of each latency-phase delivery
    arrivals = [(array("q"), array("q")) for _ in range(subscribers)]
    paths = [f"bench/t{i}" for i in range(topics)]
    sessions: list[Any] = []
    try:
        publisher = await canopy.connect(url, *ADMIN)
        sessions.append(publisher)
        for path in paths:
            await publisher.topics.add(path, "BINARY", {"CONFLATION": "off"})
        for tally, arrived in zip(tallies, arrivals):
            session = await canopy.connect(url)
            sessions.append(session)

            # the client's callback form, as the NATS half uses nats-py's cb=
            def on_event(event: Any, tally: peers.Tally = tally, arrived: Any = arrived) -> None:
                if event.kind == "value":
                    now = time.perf_counter_ns()
                    tally.on_message(event.value)
                    if phase.record_latency:
                        arrived[0].append(peers.payload_sent_ns(event.value))
                        arrived[1].append(now)

            await session.topics.subscribe("?bench/", callback=on_event)
        if hops is not None:
            await publisher.server.trace(TRACE_EVERY)
        outstanding: deque[asyncio.Future[None]] = deque()

        async def publish(topic: int, payload: bytes) -> None:
            outstanding.append(asyncio.ensure_future(publisher.topics.set(paths[topic], payload)))
            if len(outstanding) >= WINDOW:
                await outstanding.popleft()

        async def flush() -> None:
            while outstanding:
                await outstanding.popleft()

        measurement = await peers.run_async_workload(
            publish, flush, phase, tallies, duration=duration, topics=topics, rate=rate,
            throughput=throughput, on_latency_phase=on_latency_phase, server_pid=server_pid,
        )
        if hops is not None:
            hops += breakdown(await publisher.server.trace(0), arrivals, phase)
    finally:
        for session in sessions:
            await session.close()
    return measurement.result(f"canopy {canopy.__version__} ({label}, asyncio client)", rate)


def bench_js(url: str, duration: float, subscribers: int, topics: int, rate: int) -> peers.Result:
    """The workload with the JavaScript client: ``bench/js_client.mjs`` under Node."""
    node = peers.ensure_binary("node", "nodejs")
    if not (ROOT / "clients/js/node_modules/ws").exists():  # Node before 22 has no WebSocket of its own
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--no-package-lock"], cwd=ROOT / "clients/js",
                       check=True, capture_output=True, timeout=300)
    done = subprocess.run(
        [node, str(ROOT / "bench/js_client.mjs"), url, *ADMIN, str(duration), str(subscribers), str(topics), str(rate)],
        capture_output=True, text=True, timeout=duration * 4 + 120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench/js_client.mjs failed ({done.returncode}): {done.stderr[-2000:]}")
    m = peers.Measurement(**json.loads(done.stdout))
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    return m.result(f"canopy {canopy.__version__} (1 gateway, embedded Ray, JavaScript client, Node {version})", rate)


TRACE_EVERY = 10  # the gateway times every 10th set


class Hop(NamedTuple):
    name: str
    samples: list[int]  # ns


def breakdown(records: list[Any], arrivals: list[tuple[array[int], array[int]]], phase: peers.Phase) -> list[Hop]:
    """Per-hop latencies of the traced updates sent inside the latency window."""
    traced = {peers.payload_sent_ns(r.value): r for r in records}
    traced = {sent: r for sent, r in traced.items() if phase.start_ns <= sent < phase.end_ns}
    hops = {name: [] for name in HOPS}  # type: dict[str, list[int]]
    for sent, r in traced.items():
        hops["client -> gateway"].append(r.received_ns - sent)
        hops["gateway -> partition applied"].append(r.applied_ns - r.received_ns)
        hops["  of which gateway inbound"].append(r.forwarded_ns - r.received_ns)
        hops["partition -> gateway"].append(r.returned_ns - r.applied_ns)
        hops["  of which gateway fan-out"].append(r.written_ns - r.returned_ns)
    for sent_times, receive_times in arrivals:
        for sent, at in zip(sent_times, receive_times):
            r = traced.get(sent)
            if r is not None:
                hops["gateway -> client"].append(at - r.returned_ns)
                hops["total (publish -> receive)"].append(at - sent)
    return [Hop(name, hops[name]) for name in HOPS]


HOPS = (
    "client -> gateway",
    "gateway -> partition applied",
    "  of which gateway inbound",
    "partition -> gateway",
    "gateway -> client",
    "  of which gateway fan-out",
    "total (publish -> receive)",
)


def print_hops(hops: list[Hop], rate: int) -> None:
    print(f"\ncanopy per hop at {rate:,} updates/s (every {TRACE_EVERY}th update traced; ms):")
    print(f"  {'hop':<30} {'p50':>7} {'p99':>7} {'samples':>8}")
    for hop in hops:
        p50, p99 = peers.percentiles_ms(hop.samples)
        show = (lambda v: "-" if v is None else f"{v:.2f}")
        print(f"  {hop.name:<30} {show(p50):>7} {show(p99):>7} {len(hop.samples):>8}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--subscribers", type=int, default=10)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--skip-peers", action="store_true", help="measure canopy only")
    parser.add_argument("--serve-args", default="", help="extra `canopy serve` options, e.g. '--partitions 1'")
    parser.add_argument("--latency-only", action="store_true", help="skip the throughput phase")
    parser.add_argument(
        "--nodes", default="1",
        help="canopy with each of these node counts, e.g. 1,2,3 (more than 1: `--local-nodes N`, every "
             "partition replicated; clients on node-0's gateway)",
    )
    parser.add_argument("--profile", metavar="DIR", help="py-spy the latency phase into DIR")
    parser.add_argument("--js", action="store_true", help="also measure the JavaScript client (Node) on 1 node")
    args = parser.parse_args()
    results = []
    hops: list[Hop] = []
    for nodes in [int(n) for n in args.nodes.split(",")]:
        with tempfile.TemporaryDirectory(prefix="canopy-bench-") as data:
            port = peers.free_port()
            while nodes > 1 and any(peers.free_port() == port + k for k in range(1, nodes)):
                port = peers.free_port()
            print(f"[bench] starting canopy serve ({nodes} node(s)) ...", file=sys.stderr, flush=True)
            extra = args.serve_args.split() + (["--local-nodes", str(nodes)] if nodes > 1 else [])
            proc = start_server(data, port, extra)
            profiler = profiling.Profiler(Path(args.profile), proc.pid) if args.profile else None
            label = "1 gateway, embedded Ray" if nodes == 1 else (
                f"{nodes} simulated nodes, every update on 2, clients on 1 gateway")
            try:
                results.append(
                    asyncio.run(
                        bench_canopy(
                            f"ws://127.0.0.1:{port}", args.duration, args.subscribers, args.topics, args.rate,
                            throughput=not args.latency_only,
                            on_latency_phase=profiler.start if profiler else None,
                            hops=hops if nodes == 1 else None, label=label, server_pid=proc.pid,
                        )
                    )
                )
                if args.js and nodes == 1:
                    print("[bench] the JavaScript client ...", file=sys.stderr, flush=True)
                    results.append(bench_js(f"ws://127.0.0.1:{port}", args.duration, args.subscribers, args.topics,
                                            args.rate))
            finally:
                if profiler is not None:
                    profiler.finish()
                stop_server(proc)
    if not args.skip_peers:
        for runner in (peers.run_mosquitto, peers.run_nats):
            results.append(runner(args.duration, args.subscribers, args.topics, args.rate))
    print(
        f"\nworkload: 1 publisher -> {args.topics} topics (round robin, ~50-byte payloads), "
        f"{args.subscribers} subscribers x all topics; windows of {args.duration:g}s; latency at {args.rate:,} updates/s\n"
    )
    peers.print_table(results)
    print_hops(hops, args.rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
