"""Topic views: expand throughput and mirror materialisation.

Starts a real ``canopy serve`` (embedded Ray) and measures, each beside a
baseline from the same run:

* *Expand throughput.* A JSON source topic holds
  ``{"items": [{"id": i, "v": <counter>} for i in range(1000)]}`` and the
  view ``map bench/expand/source to expand/<expand(/items, /id)>`` makes
  1,000 reference topics. The source is set ``--updates`` times (each set
  changes every element's ``v``; one set awaited at a time) and the clock
  stops when a subscriber to ``?expand//`` (another session) sees the last
  counter on every reference topic. Printed: reference-topic updates/s
  (1,000 x updates / elapsed) and source updates/s. Baseline: the same
  1,000 x updates ``set`` calls on 1,000 plain JSON topics from the client
  (up to 2,000 outstanding), until a subscriber sees the last counter
  on every one of them.
* *Mirror materialisation.* ``--topics`` INT64 source topics under ``src/``
  (``add_and_set``, pipelined in chunks of ``CHUNK``), then
  ``views.create("mirror", "map ?src// to mirror/<path(1)>")`` timed until
  ``fetch("?mirror//")`` finds every reference topic (polled every
  ``POLL`` seconds, so the figure is late by up to one poll). Baseline: the
  time the client took to create the source topics themselves.

Reference topics keep the sources' CONFLATION (the default, ``conflate``),
so a subscriber may see fewer value events than were produced; the clock
stops on the last value, not on an event count. The resident set sizes of
the server's processes (``canopy serve`` and its Ray processes, from
``/proc``) are printed after each part.

    .venv/bin/python bench/views.py [--updates 50] [--topics 100000] [--partitions 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from broker import ADMIN, start_server, stop_server  # noqa: E402
from peers import free_port  # noqa: E402
from timeseries import pump  # noqa: E402  (up to 2,000 calls outstanding)

import canopy  # noqa: E402

ITEMS = 1000
CHUNK = 2000  # add_and_set calls gathered at once
POLL = 0.5  # seconds between fetches while waiting for reference topics
SOURCE = "bench/expand/source"


def doc(counter: int) -> dict[str, Any]:
    return {"items": [{"id": i, "v": counter} for i in range(ITEMS)]}


class ServerLog:
    """Drains the server's output (so a chatty server never blocks on a full
    pipe) and keeps the tail for when something goes wrong."""

    def __init__(self, stream: Any) -> None:
        self.lines: deque[str] = deque(maxlen=200)
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream: Any) -> None:
        try:
            for line in stream:
                self.lines.append(line.rstrip("\n"))
        except (ValueError, OSError):  # closed under us by stop_server
            pass


def rss_by_process(root_pid: int) -> list[tuple[str, int]]:
    """(name, RSS bytes) of ``root_pid`` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out = []
    todo = [root_pid]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/status") as f:
                rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
        name = argv[0].decode(errors="replace")
        if not name.startswith("ray::"):
            name = " ".join(Path(a.decode(errors="replace")).name for a in argv[:2] if a)
        out.append((name.strip()[:48], rss))
    return sorted(out, key=lambda item: -item[1])


class Latest:
    """Follows one subscription: the last ``v`` seen per path, and when every
    expected path shows ``target``."""

    def __init__(self, want: int) -> None:
        self.want = want
        self.target: int | None = None
        self.subscribed: set[str] = set()
        self.reached: set[str] = set()
        self.values = 0
        self.all_subscribed = asyncio.Event()
        self.all_reached = asyncio.Event()

    def aim(self, target: int) -> None:
        self.target = target
        self.reached.clear()
        self.values = 0
        self.all_reached.clear()

    def follow(self, sub: Any) -> asyncio.Task[None]:
        async def read() -> None:
            async for event in sub:
                if event.kind == "subscribed":
                    self.subscribed.add(event.path)
                    if len(self.subscribed) >= self.want:
                        self.all_subscribed.set()
                elif event.kind == "value":
                    self.values += 1
                else:
                    continue
                if self.target is not None and isinstance(event.value, dict) and event.value.get("v") == self.target:
                    self.reached.add(event.path)
                    if len(self.reached) >= self.want:
                        self.all_reached.set()

        return asyncio.ensure_future(read())


async def wait_for_count(s: Any, selector: str, want: int, deadline: float) -> int:
    """Poll ``fetch(selector)`` until it finds ``want`` topics; return how many polls it took."""
    polls = 0
    while True:
        polls += 1
        found = len(await s.topics.fetch(selector, with_values=False))
        if found >= want:
            return polls
        if time.monotonic() > deadline:
            raise TimeoutError(f"{selector}: {found:,} of {want:,} topics after the deadline")
        await asyncio.sleep(POLL)


async def subscribed(watcher: Any, selector: str, latest: Latest, tasks: list[asyncio.Task[None]]) -> None:
    tasks.append(latest.follow(await watcher.topics.subscribe(selector)))
    await asyncio.wait_for(latest.all_subscribed.wait(), 120)


async def expand(url: str, admin: Any, updates: int, results: dict[str, float]) -> None:
    readers: list[asyncio.Task[None]] = []
    async with canopy.connect(url, *ADMIN) as watcher:
        try:
            # the view and its 1,000 reference topics
            await admin.topics.add_and_set(SOURCE, doc(-1), "JSON")
            started = time.perf_counter()
            await admin.views.create("expand", f"map {SOURCE} to expand/<expand(/items, /id)>")
            await wait_for_count(admin, "?expand//", ITEMS, time.monotonic() + 120)
            results["expand_create_s"] = time.perf_counter() - started
            view_side = Latest(ITEMS)
            await subscribed(watcher, "?expand//", view_side, readers)

            view_side.aim(updates - 1)
            started = time.perf_counter()
            for counter in range(updates):
                await admin.topics.set(SOURCE, doc(counter))
            results["expand_sets_s"] = time.perf_counter() - started
            await asyncio.wait_for(view_side.all_reached.wait(), 60 + updates * 10)
            results["expand_s"] = time.perf_counter() - started
            results["expand_events"] = view_side.values

            # baseline: the same number of reference-topic updates as plain sets
            plain = [f"bench/plain/{i}" for i in range(ITEMS)]
            await asyncio.gather(*(admin.topics.add_and_set(p, {"id": i, "v": -1}, "JSON") for i, p in enumerate(plain)))
            client_side = Latest(ITEMS)
            await subscribed(watcher, "?bench/plain//", client_side, readers)
            client_side.aim(updates - 1)
            started = time.perf_counter()
            await pump(
                ITEMS * updates,
                lambda n: admin.topics.set(plain[n % ITEMS], {"id": n % ITEMS, "v": n // ITEMS}, "JSON"),
            )
            results["plain_sets_s"] = time.perf_counter() - started
            await asyncio.wait_for(client_side.all_reached.wait(), 60 + updates * 10)
            results["plain_s"] = time.perf_counter() - started
            results["plain_events"] = client_side.values

            # the reference topics hold exactly what the view says
            rows = await admin.topics.fetch("?expand//")
            wrong = [r.path for r in rows if r.value != {"id": int(r.path.rsplit("/", 1)[1]), "v": updates - 1}]
            if len(rows) != ITEMS or wrong:
                raise AssertionError(f"expand: {len(rows)} reference topics, wrong values at {wrong[:5]}")
        finally:
            for task in readers:
                task.cancel()


async def mirror(admin: Any, topics: int, results: dict[str, float], rss: Callable[[str], None]) -> None:
    started = time.perf_counter()
    for start in range(0, topics, CHUNK):
        await asyncio.gather(
            *(admin.topics.add_and_set(f"src/{i}", i, "INT64") for i in range(start, min(start + CHUNK, topics)))
        )
    results["sources_s"] = time.perf_counter() - started
    rss("after the source topics")

    started = time.perf_counter()
    await admin.views.create("mirror", "map ?src// to mirror/<path(1)>")
    results["mirror_call_s"] = time.perf_counter() - started
    polls = await wait_for_count(admin, "?mirror//", topics, time.monotonic() + max(600, topics / 50))
    results["mirror_s"] = time.perf_counter() - started
    results["mirror_polls"] = polls
    rss("after the mirror view")

    rows = await admin.topics.fetch("?mirror//")
    wrong = [r.path for r in rows if r.value != int(r.path.split("/", 1)[1])]
    if len(rows) != topics or wrong:
        raise AssertionError(f"mirror: {len(rows):,} reference topics, wrong values at {wrong[:5]}")


async def run(url: str, updates: int, topics: int, rss: Callable[[str], None]) -> dict[str, float]:
    results: dict[str, float] = {}
    async with canopy.connect(url, *ADMIN) as admin:
        await expand(url, admin, updates, results)
        rss("after the expand part")
        await mirror(admin, topics, results, rss)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--updates", type=int, default=50)
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    memory: list[tuple[str, list[tuple[str, int]]]] = []
    with tempfile.TemporaryDirectory(prefix="canopy-views-bench-") as data:
        port = free_port()
        proc = start_server(data, port, ["--partitions", str(args.partitions)])
        log = ServerLog(proc.stdout)
        try:
            results = asyncio.run(
                run(f"ws://127.0.0.1:{port}", args.updates, args.topics,
                    lambda label: memory.append((label, rss_by_process(proc.pid))))
            )
        except BaseException:
            print("canopy serve output (tail):", *log.lines, sep="\n  ", file=sys.stderr)
            raise
        finally:
            stop_server(proc)
    n, m = args.updates, args.topics

    def row(label: str, figure: str, note: str = "") -> None:
        print(f"    {label:44} {figure:>14}" + (f"   ({note})" if note else ""))

    print(f"topic views: canopy serve with {args.partitions} partitions, one asyncio client")
    print(f"  expand: 1 JSON source of {ITEMS:,} elements -> {ITEMS:,} reference topics, {n} source updates")
    row(f"view created, {ITEMS:,} reference topics exist", f"{results['expand_create_s'] * 1000:,.1f} ms",
        f"polled every {POLL} s")
    row("reference-topic updates (view)", f"{ITEMS * n / results['expand_s']:,.0f} /s",
        f"{results['expand_s']:.2f} s until the last update is on every reference topic")
    row("source updates (view)", f"{n / results['expand_s']:,.1f} /s",
        f"the {n} sets returned after {results['expand_sets_s']:.2f} s")
    row(f"plain set on {ITEMS:,} topics (baseline)", f"{ITEMS * n / results['plain_s']:,.0f} /s",
        f"{results['plain_s']:.2f} s until all visible; the sets returned after {results['plain_sets_s']:.2f} s")
    print(f"    value events seen by the subscriber: view {results['expand_events']:,.0f}, "
          f"baseline {results['plain_events']:,.0f} (of {ITEMS * n:,}; CONFLATION conflate)")
    print(f"  mirror: {m:,} INT64 sources under src/ -> map ?src// to mirror/<path(1)>")
    row(f"create {m:,} source topics (baseline)", f"{results['sources_s']:,.2f} s",
        f"{m / results['sources_s']:,.0f} topics/s")
    row("views.create returned after", f"{results['mirror_call_s'] * 1000:,.1f} ms")
    row(f"all {m:,} reference topics exist after", f"{results['mirror_s']:,.2f} s",
        f"{m / results['mirror_s']:,.0f} topics/s; polled every {POLL} s, {results['mirror_polls']:.0f} polls")
    for label, processes in memory:
        total = sum(rss for _, rss in processes)
        print(f"  RSS {label}: {total / 2**20:,.0f} MiB in {len(processes)} processes; largest:")
        for name, rss in processes[:6]:
            print(f"    {name:44} {rss / 2**20:10,.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
