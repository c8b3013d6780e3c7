"""Time series append throughput: one topic, and 1,000 topics round robin.

Starts a real ``canopy serve`` (embedded Ray) and appends DOUBLE events from
one asyncio client with up to ``WINDOW`` appends outstanding (each append
completes when its partition has applied it). The baseline in the same run
is ``set`` on plain DOUBLE topics with the same client and window, so the
cost of the event log shows as the ratio.

    .venv/bin/python bench/timeseries.py [--events 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from broker import ADMIN, start_server, stop_server  # noqa: E402
from peers import free_port  # noqa: E402

import canopy  # noqa: E402

WINDOW = 2000


async def pump(n: int, call: Callable[[int], Awaitable[object]]) -> float:
    """Run ``call(i)`` for i < n with up to WINDOW outstanding; return calls per second."""
    outstanding: deque[asyncio.Future[object]] = deque()
    started = time.perf_counter()
    for i in range(n):
        outstanding.append(asyncio.ensure_future(call(i)))
        if len(outstanding) >= WINDOW:
            await outstanding.popleft()
    while outstanding:
        await outstanding.popleft()
    return n / (time.perf_counter() - started)


async def run(url: str, events: int) -> list[tuple[str, float]]:
    out = []
    async with canopy.connect(url, *ADMIN) as s:
        ts_props = {"TIME_SERIES_EVENT_VALUE_TYPE": "DOUBLE", "TIME_SERIES_RETAINED_RANGE": "limit 1000"}
        await s.topics.add("bench/ts/one", "TIME_SERIES", ts_props)
        await s.topics.add("bench/plain/one", "DOUBLE")
        many_ts = [f"bench/ts/many/{i}" for i in range(1000)]
        many_plain = [f"bench/plain/many/{i}" for i in range(1000)]
        await asyncio.gather(*(s.topics.add(p, "TIME_SERIES", ts_props) for p in many_ts))
        await asyncio.gather(*(s.topics.add(p, "DOUBLE") for p in many_plain))
        await pump(2000, lambda i: s.time_series.append("bench/ts/one", float(i)))  # warm-up
        out.append(("append, 1 topic", await pump(events, lambda i: s.time_series.append("bench/ts/one", float(i)))))
        out.append(("set (baseline), 1 topic", await pump(events, lambda i: s.topics.set("bench/plain/one", float(i)))))
        out.append(("append, 1,000 topics", await pump(events, lambda i: s.time_series.append(many_ts[i % 1000], float(i)))))
        out.append(("set (baseline), 1,000 topics", await pump(events, lambda i: s.topics.set(many_plain[i % 1000], float(i)))))
        check = await s.time_series.range_query("bench/ts/one", from_last=1)
        assert check.events[0].value == float(events - 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--serve-args", default="", help="extra `canopy serve` options")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="canopy-ts-bench-") as data:
        port = free_port()
        proc = start_server(data, port, args.serve_args.split())
        try:
            rows = asyncio.run(run(f"ws://127.0.0.1:{port}", args.events))
        finally:
            stop_server(proc)
    print(f"time series append throughput: {args.events:,} events per row, one asyncio client, "
          f"{WINDOW} in flight, DOUBLE events, retained range limit 1000")
    for name, rate in rows:
        print(f"  {name:32} {rate:10,.0f} /s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
