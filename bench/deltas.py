"""Delta streaming: bytes on the wire and delivered/s, deltas against whole values, in the same run.

Workload: one publisher sets 100 JSON topics in round robin; each value is a ~2 KB JSON document
(40 text fields and a sequence number in the middle) of which one field, the sequence number,
changes per update. Ten subscriber sessions each subscribe to every topic. The same server runs
it twice per round, with subscribers that take deltas (the client's default) and with
subscribers that ask for whole values (``connect(..., deltas=False, compression=False)``, what a
client without delta support gets), alternating which goes first. The publisher keeps ``WINDOW`` sets
outstanding and goes as fast as it can for ``--duration`` seconds.

For each mode it reports delivered updates/s (summed over subscribers, counted inside the window),
the bytes the subscribers' connections received per delivered update (every WebSocket message's
payload, counted by the client), the server's CPU time per delivered update (utime + stime of the
``canopy serve`` process and every process under it, from ``/proc``, over the window) and, at the
end, how many fewer bytes deltas needed. Subscribers
check every eighth value they are handed against the document the publisher set, so a delta that applied
wrongly would be caught, not counted.

    .venv/bin/python bench/deltas.py [--duration 5] [--rounds 3] [--subscribers 10] [--topics 100]

Like ``bench/broker.py``, publisher and subscribers share one asyncio loop in this process, so
delivered/s is bounded by this Python process as much as by the server; both modes pay the same
client costs except applying the deltas. As the gateway diffs once for every session in step, the
client applies a delta once per process for its sessions in step (the same delta for an equal
basis: ``canopy/client/session.py``'s ``_APPLIED``); one session alone pays the whole apply, about
3 µs for these documents on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import peers  # noqa: E402
from broker import ADMIN, start_server, stop_server  # noqa: E402

import canopy  # noqa: E402

WINDOW = 1000
FIELDS = 40
def document(seq: int) -> dict[str, Any]:
    """The document's value at ``seq``: ~2 KB of JSON whose only changing field is ``seq``."""
    doc: dict[str, Any] = {}
    for i in range(FIELDS):
        if i == FIELDS // 2:
            doc["seq"] = seq
        doc[f"field{i:02d}"] = f"static text of field {i:02d}, the same in every update"
    return doc


class Subscriber:
    def __init__(self) -> None:
        self.counting = False
        self.delivered = self.seen = 0
        self.wrong = 0
        self.session: Any = None

    def on_event(self, event: Any) -> None:
        if event.kind != "value" or event.value is None:
            return
        self.seen += 1
        value = event.value
        if self.seen % 8 == 0 and value != document(value.get("seq", -1)):  # every 8th: checking costs too
            self.wrong += 1
        if self.counting:
            self.delivered += 1


async def run_mode(
    url: str, server_pid: int, deltas: bool, duration: float, subscribers: int, topics: int, seq0: int
) -> dict[str, Any]:
    publisher = await canopy.connect(url, *ADMIN)
    subs = [Subscriber() for _ in range(subscribers)]
    try:
        paths = [f"deltas/t{i}" for i in range(topics)]
        for path in paths:
            await publisher.topics.add_and_set(path, document(seq0), "JSON")
        for sub in subs:
            sub.session = await canopy.connect(url, deltas=deltas, compression=False)  # whole values: whole
            await sub.session.topics.subscribe("?deltas/", callback=sub.on_event)
        base = document(0)
        outstanding: deque[asyncio.Future[Any]] = deque()
        seq = seq0

        async def publish_for(seconds: float) -> None:
            nonlocal seq
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                for _ in range(100):
                    seq += 1
                    value = copy.copy(base)
                    value["seq"] = seq
                    outstanding.append(publisher.topics.set(paths[seq % topics], value))
                    if len(outstanding) >= WINDOW:
                        await outstanding.popleft()
                await asyncio.sleep(0)

        await publish_for(1.0)  # warm up
        for sub in subs:
            sub.counting = True
        bytes_before = sum(s.session.bytes_received for s in subs)
        cpu_before = peers.process_tree_cpu_s(server_pid)
        started = time.monotonic()
        await publish_for(duration)
        elapsed = time.monotonic() - started
        server_cpu = peers.process_tree_cpu_s(server_pid) - cpu_before
        for sub in subs:
            sub.counting = False
        received = sum(s.session.bytes_received for s in subs) - bytes_before
        delivered = sum(s.delivered for s in subs)
        while outstanding:
            await outstanding.popleft()
        saved = sum(s.session.delta_bytes_saved for s in subs)
        return {
            "mode": "deltas" if deltas else "whole values",
            "delivered_per_s": delivered / elapsed,
            "bytes_per_update": received / max(delivered, 1),
            "server_us_per_update": server_cpu / max(delivered, 1) * 1e6,
            "value_bytes": len(json.dumps(document(seq))),
            "wrong": sum(s.wrong for s in subs),
            "failed_deltas": sum(s.session.deltas_failed for s in subs),
            "saved": saved,
            "seq": seq,
        }
    finally:
        for sub in subs:
            if sub.session is not None:
                await sub.session.close()
        await publisher.close()


async def run(url: str, server_pid: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    seq = 0
    for round_ in range(args.rounds):
        order = (True, False) if round_ % 2 == 0 else (False, True)
        for deltas in order:
            row = await run_mode(url, server_pid, deltas, args.duration, args.subscribers, args.topics, seq)
            seq = row["seq"] + 1
            row["round"] = round_ + 1
            rows.append(row)
            print(f"[bench] round {row['round']} {row['mode']}: {row['delivered_per_s']:,.0f} delivered/s, "
                  f"{row['bytes_per_update']:,.0f} B/update", file=sys.stderr, flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--subscribers", type=int, default=10)
    parser.add_argument("--topics", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="canopy-bench-") as data:
        port = peers.free_port()
        proc = start_server(data, port)
        try:
            rows = asyncio.run(run(f"ws://127.0.0.1:{port}", proc.pid, args))
        finally:
            stop_server(proc)
    print(f"\nworkload: 1 publisher -> {args.topics} JSON topics (~{rows[0]['value_bytes']:,} B documents, one field "
          f"changing per update), {args.subscribers} subscribers x all topics, {args.duration:g} s windows\n")
    print(f"{'round':>5}  {'mode':<13} {'delivered/s':>12} {'B/update':>9} {'server µs/update':>17} {'wrong':>6} "
          f"{'failed':>7}")
    for r in rows:
        print(f"{r['round']:>5}  {r['mode']:<13} {r['delivered_per_s']:>12,.0f} {r['bytes_per_update']:>9,.0f} "
              f"{r['server_us_per_update']:>17.1f} {r['wrong']:>6} {r['failed_deltas']:>7}")
    for round_ in range(1, args.rounds + 1):
        d = next(r for r in rows if r["round"] == round_ and r["mode"] == "deltas")
        w = next(r for r in rows if r["round"] == round_ and r["mode"] == "whole values")
        print(f"round {round_}: deltas need {1 - d['bytes_per_update'] / w['bytes_per_update']:.1%} fewer bytes per "
              f"update; delivered/s {d['delivered_per_s'] / w['delivered_per_s']:.2f}x whole values'; server CPU "
              f"per delivered update {d['server_us_per_update'] / w['server_us_per_update']:.2f}x")
    bad = sum(r["wrong"] for r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
