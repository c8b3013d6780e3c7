"""Fan-out between two canopy servers: mirror lag, and resync after a primary restart.

Two real ``canopy serve --partitions 2`` processes on this machine (each with
its embedded Ray): a *primary*, and a *secondary* whose ``[fanout.main]``
connection mirrors the primary's ``?bench//`` branch.

1. **Mirror lag.** 100 STRING topics ``bench/lag/<k>`` on the primary; once the
   secondary mirrors them, one session on the secondary and one on the primary
   (the baseline) subscribe to ``?bench/lag//``. A publisher on the primary
   sets them in round robin at a paced rate (default 1,000 updates/s, sent in
   batches every ~10 ms) for the duration; each value carries
   ``time.perf_counter_ns()`` of its send, and each delivery's lag is its
   receive time minus that (one process, one clock). p50/p90/p99/max per
   subscriber, with the counts sent and received.
2. **Resync.** N topics ``bench/big/<k>`` made on the primary with
   ``add_and_set`` (chunks of 2,000 gathered), timed until the secondary
   mirrors all of them (``fanout.list`` count and a fetch of the secondary's
   tree). Then the primary is stopped (SIGINT) and started again on the same
   data directory and port (its topics are persistent); right after it serves,
   100 of the topics get new values. Resynced = the secondary's connection is
   ``connected``, it mirrors all N topics and shows the 100 new values. Timed
   from "canopy serving" of the restarted primary, and from the SIGINT.

    .venv/bin/python bench/fanout.py [--quick] [--duration 20] [--rate 1000] [--topics 100000]
                                     [--log-dir DIR]

``--quick``: 10 s and 10,000 topics. ``--log-dir`` keeps both servers' output.
The clients (publisher and both subscribers) share one event loop in this
process, so the lag includes this process's scheduling, equally for both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import canopy  # noqa: E402

PASSWORD = "some-password-123"
ADMIN = ("admin", PASSWORD)
CANOPY = str(Path(sys.executable).parent / "canopy")
LAG_TOPICS = 100
CHANGED = 100  # topics given a new value right after the primary restarts
CHUNK = 2_000
DEADLINE = 600.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A ``canopy serve`` subprocess; its merged output is kept in ``lines`` with receive times."""

    def __init__(self, name: str, data_dir: Path, port: int, *extra: str) -> None:
        self.name = name
        self.port = port
        self.url = f"ws://127.0.0.1:{port}"
        self.data_dir = data_dir
        self.lines: list[tuple[float, str]] = []  # (time.monotonic() when read, line)
        self.serving_at: float | None = None
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [CANOPY, "serve", "--port", str(port), "--data-dir", str(data_dir), "--partitions", "2", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={
                **{k: v for k, v in os.environ.items() if k not in ("CANOPY_ADMIN_PASSWORD", "RAY_AUTH_MODE")},
                "CANOPY_ADMIN_PASSWORD": PASSWORD,
            },
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # always drained: serve goes on printing
            now = time.monotonic()
            if self.serving_at is None and "canopy serving" in line:
                self.serving_at = now
            self.lines.append((now, line.rstrip("\n")))

    def wait_ready(self, timeout: float = 180.0) -> float:
        """Wait for "canopy serving"; the time it was read."""
        deadline = time.monotonic() + timeout
        while self.serving_at is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name}: canopy serve exited with {self.proc.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: canopy serve did not report serving in {timeout} s:\n"
                                   f"{self.output()}")
            time.sleep(0.02)
        return self.serving_at

    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def stop(self, timeout: float = 90.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"  {self.name}: still running {timeout:.0f} s after SIGINT: killed", flush=True)
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(5)
        if self.proc.stdout is not None:
            with contextlib.suppress(Exception):
                self.proc.stdout.close()
        return self.proc.returncode


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    k = min(len(values) - 1, max(0, int(round(q / 100 * len(values) + 0.5)) - 1))
    return values[k]


def lag_line(lags_ns: array[int], sent: int) -> str:
    if not lags_ns:
        return f"received 0 of {sent} sent"
    ms = sorted(x / 1e6 for x in lags_ns)
    return (f"p50 {pct(ms, 50):.2f} ms, p90 {pct(ms, 90):.2f} ms, p99 {pct(ms, 99):.2f} ms, "
            f"max {ms[-1]:.2f} ms (mean {statistics.fmean(ms):.2f}); received {len(ms)} of {sent} sent")


async def wait_until(check: Callable[[], Any], timeout: float, interval: float = 0.25) -> tuple[bool, float, Any]:
    """Poll ``check`` (async; truthy = done) until it holds: (done, seconds taken, last observation)."""
    t0 = time.monotonic()
    last: Any = None
    while True:
        try:
            last = await check()
            if last and (not isinstance(last, tuple) or last[0]):
                return True, time.monotonic() - t0, last
        except Exception as e:  # noqa: BLE001 - report it as the last observation
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() - t0 > timeout:
            return False, time.monotonic() - t0, last
        await asyncio.sleep(interval)


async def link_stats(sec_admin: Any) -> dict[str, Any]:
    listed = await sec_admin.fanout.list()
    c = listed[0]
    return {"state": c["state"], "topics": c["links"][0]["topics"], "updates": c["links"][0]["updates"],
            "sessions": c["sessions"], "error": c["error"]}


async def count_fetched(session: Any, selector: str) -> int:
    return len(await session.topics.fetch(selector, with_values=False))


async def count_big(session: Any) -> int:
    """Topics under bench/big on a server, fetched in ten slices (by last digit) to keep answers small."""
    counts = await asyncio.gather(*(count_fetched(session, f"?bench/big/.*{d}") for d in range(10)))
    return sum(counts)


# ---------------------------------------------------------------------------------------------------------------
# 1. mirror lag


async def measure_lag(primary: Server, secondary: Server, sec_admin: Any, duration: float, rate: int,
                      figures: list[str]) -> None:
    print(f"[lag] {LAG_TOPICS} topics, {rate} updates/s for {duration:g} s", flush=True)
    paths = [f"bench/lag/{k}" for k in range(LAG_TOPICS)]
    async with canopy.connect(primary.url, *ADMIN) as pub, \
            canopy.connect(primary.url, *ADMIN) as base_session, \
            canopy.connect(secondary.url, *ADMIN) as sec_session:
        await asyncio.gather(*(pub.topics.add(p, "STRING") for p in paths))
        ok, took, last = await wait_until(lambda: _lag_mirrored(sec_session), 120)
        print(f"[lag] secondary mirrors the {LAG_TOPICS} topics: {ok} after {took:.2f} s (last: {last})", flush=True)
        if not ok:
            figures.append(f"mirror lag: NOT MEASURED, the secondary never mirrored bench/lag (last: {last})")
            return

        tallies: dict[str, dict[str, Any]] = {}

        def tally(name: str) -> Callable[[Any], None]:
            t = tallies[name] = {"lags": array("q"), "sent_ns": array("q"), "other": 0, "kinds": {}}
            lags, sent_ns = t["lags"], t["sent_ns"]

            def on_event(event: Any) -> None:
                now = time.perf_counter_ns()
                t["kinds"][event.kind] = t["kinds"].get(event.kind, 0) + 1
                if event.kind == "value" and isinstance(event.value, str) and ":" in event.value:
                    ns = int(event.value.split(":", 1)[1])
                    lags.append(now - ns)
                    sent_ns.append(ns)
                else:
                    t["other"] += 1
            return on_event

        await sec_session.topics.subscribe("?bench/lag//", callback=tally("secondary"))
        await base_session.topics.subscribe("?bench/lag//", callback=tally("primary"))
        await asyncio.sleep(1.0)  # the initial "subscribed" events
        before = await link_stats(sec_admin)

        futures: list[asyncio.Future[None]] = []
        sent = 0
        tick = 0.010
        start = time.perf_counter()
        next_tick = start
        max_batch = 0
        while True:
            elapsed = time.perf_counter() - start
            due = min(int(elapsed * rate) + 1, int(duration * rate)) - sent
            max_batch = max(max_batch, due)
            for _ in range(due):
                k = sent % LAG_TOPICS
                futures.append(pub.topics.set(paths[k], f"{k}:{time.perf_counter_ns()}"))
                sent += 1
            if elapsed >= duration:
                break
            next_tick += tick
            delay = next_tick - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                next_tick = time.perf_counter()
                await asyncio.sleep(0)
        send_time = time.perf_counter() - start
        results = await asyncio.gather(*futures, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        acked_at = time.perf_counter() - start
        # wait for stragglers: until neither subscriber received anything for 2 s (at most 30 s)
        quiet_since, counts, t_end = time.monotonic(), None, time.monotonic() + 30
        while time.monotonic() < t_end and time.monotonic() - quiet_since < 2:
            now_counts = tuple(len(t["lags"]) for t in tallies.values())
            if now_counts != counts:
                counts, quiet_since = now_counts, time.monotonic()
            await asyncio.sleep(0.1)
        after = await link_stats(sec_admin)

    print(f"[lag] sent {sent} in {send_time:.2f} s ({sent / send_time:.0f}/s, largest batch {max_batch}); "
          f"all acknowledged after {acked_at:.2f} s; {len(errors)} failed"
          + (f" (first: {errors[0]!r})" if errors else ""), flush=True)
    start_ns = min((t["sent_ns"][0] for t in tallies.values() if t["sent_ns"]), default=0)
    for name, t in tallies.items():
        print(f"[lag] {name} subscriber events by kind: {t['kinds']}", flush=True)
        worst: dict[int, int] = {}
        for lag, ns in zip(t["lags"], t["sent_ns"]):
            second = (ns - start_ns) // 1_000_000_000
            worst[second] = max(worst.get(second, 0), lag)
        top = sorted(worst.items(), key=lambda kv: -kv[1])[:5]
        print(f"[lag] {name}: worst seconds of the run (second: max lag ms): "
              + ", ".join(f"{sec}: {lag / 1e6:.0f}" for sec, lag in top), flush=True)
    print(f"[lag] fan-out link updates during the run: {after['updates'] - before['updates']} "
          f"(state {after['state']}, sessions {after['sessions']})", flush=True)
    figures.append(f"publish rate achieved: {sent / send_time:.0f} updates/s ({sent} sets, {len(errors)} failed)")
    figures.append(f"mirror lag, subscriber on the SECONDARY: {lag_line(tallies['secondary']['lags'], sent)}")
    figures.append(f"baseline lag, subscriber on the PRIMARY: {lag_line(tallies['primary']['lags'], sent)}")


async def _lag_mirrored(sec_session: Any) -> tuple[bool, int]:
    n = await count_fetched(sec_session, "?bench/lag//")
    return n == LAG_TOPICS, n


# ---------------------------------------------------------------------------------------------------------------
# 2. resync after a primary restart


async def measure_resync(primary: Server, secondary: Server, sec_admin: Any, n: int, figures: list[str],
                         servers: dict[str, Server]) -> None:
    print(f"[resync] creating {n} topics bench/big/<k>", flush=True)
    expected_link = n + LAG_TOPICS  # the link (?bench//) mirrors bench/lag too
    t0 = time.monotonic()
    async with canopy.connect(primary.url, *ADMIN) as pub:
        for lo in range(0, n, CHUNK):
            await asyncio.gather(*(pub.topics.add_and_set(f"bench/big/{k}", f"v0-{k}")
                                   for k in range(lo, min(n, lo + CHUNK))))
        created = time.monotonic() - t0
        print(f"[resync] created {n} topics in {created:.2f} s ({n / created:.0f}/s); "
              f"primary counts {await count_big(pub)}", flush=True)
    figures.append(f"create {n} topics on the primary: {created:.2f} s ({n / created:.0f} topics/s)")

    async def mirrored_all() -> tuple[bool, Any]:
        s = await link_stats(sec_admin)
        if s["topics"] < expected_link:
            return False, s
        fetched = await count_big(sec_admin)
        return fetched == n, {**s, "fetched": fetched}

    ok, _, last = await wait_until(mirrored_all, DEADLINE, 0.25)
    mirror_time = time.monotonic() - t0
    if not ok:
        figures.append(f"initial mirror of {n} topics: TIMED OUT after {mirror_time:.0f} s; last: {last}")
        print(f"[resync] initial mirror timed out; last observation: {last}", flush=True)
        return
    print(f"[resync] secondary mirrors {n} topics {mirror_time:.2f} s after the first add ({last})", flush=True)
    figures.append(f"initial mirror of {n} topics: {mirror_time:.2f} s from the first add, "
                   f"{mirror_time - created:.2f} s after the last add was acknowledged")

    # watch the secondary's connection through the restart
    history: list[tuple[float, dict[str, Any]]] = []
    watching = True
    t_kill = time.monotonic()

    async def watch() -> None:
        seen = None
        while watching:
            try:
                s = await link_stats(sec_admin)
                key = (s["state"], s["topics"], s["sessions"], s["error"])
                if key != seen:
                    seen = key
                    history.append((time.monotonic() - t_kill, s))
            except Exception as e:  # noqa: BLE001
                history.append((time.monotonic() - t_kill, {"error": repr(e)}))
            await asyncio.sleep(0.1)

    watcher = asyncio.ensure_future(watch())
    try:
        print("[resync] stopping the primary (SIGINT)", flush=True)
        t_kill = time.monotonic()
        code = primary.stop()
        t_stopped = time.monotonic()
        print(f"[resync] primary exited with {code} after {t_stopped - t_kill:.2f} s; starting it again", flush=True)
        restarted = Server("primary (restarted)", primary.data_dir, primary.port)
        servers["primary-restarted"] = restarted
        t_serving = await asyncio.to_thread(restarted.wait_ready, 300)
        print(f"[resync] restarted primary serving {t_serving - t_stopped:.2f} s after its start", flush=True)

        changed = list(range(CHANGED))
        async with canopy.connect(restarted.url, *ADMIN) as pub:
            primary_count = None
            pending = set(changed)
            t_set0 = time.monotonic()
            while pending and time.monotonic() - t_set0 < 120:
                ks = sorted(pending)
                results = await asyncio.gather(*(pub.topics.set(f"bench/big/{k}", f"v1-{k}") for k in ks),
                                               return_exceptions=True)
                bad = [(k, r) for k, r in zip(ks, results) if isinstance(r, BaseException)]
                pending = {k for k, _ in bad}
                if bad:
                    print(f"[resync] {len(bad)} sets on the restarted primary failed (first: {bad[0][1]!r}); "
                          f"again", flush=True)
                    await asyncio.sleep(0.2)
            t_set = time.monotonic()
            print(f"[resync] {CHANGED} new values set {t_set - t_serving:.2f} s after serving", flush=True)

            cheap_at: list[float] = []  # when state, count and new values first held (before the full fetch)

            async def resynced() -> tuple[bool, Any]:
                t_seen = time.monotonic()
                s = await link_stats(sec_admin)
                rows = await sec_admin.topics.fetch("?bench/big/[0-9]{1,2}")
                fresh = sum(1 for r in rows if r.value == f"v1-{r.path.rsplit('/', 1)[1]}")
                obs = {**s, "new values seen": fresh}
                if s["state"] != "connected" or s["topics"] != expected_link or fresh != CHANGED:
                    cheap_at.clear()
                    return False, obs
                if not cheap_at:
                    cheap_at.append(t_seen)
                fetched = await count_big(sec_admin)
                obs["fetched"] = fetched
                return fetched == n, obs

            ok, _, last = await wait_until(resynced, DEADLINE, 0.1)
            t_done = time.monotonic()
            primary_count = await count_big(pub)
    finally:
        watching = False
        with contextlib.suppress(BaseException):
            await watcher

    print("[resync] the secondary's fan-out connection, by seconds after SIGINT to the primary:", flush=True)
    for t, s in history:
        print(f"    {t:8.2f} s  {s}", flush=True)
    if not ok:
        figures.append(f"resync of {n} topics: TIMED OUT {t_done - t_serving:.0f} s after serving; last: {last}")
        return
    # all values right? (outside the timing)
    wrong = 0
    for d in range(10):
        rows = await sec_admin.topics.fetch(f"?bench/big/.*{d}")
        for r in rows:
            k = int(r.path.rsplit("/", 1)[1])
            if r.value != (f"v1-{k}" if k < CHANGED else f"v0-{k}"):
                wrong += 1
    print(f"[resync] resynced: {last}; primary has {primary_count} topics; wrong values on the secondary: {wrong}",
          flush=True)
    figures.append(f"primary stop (SIGINT to exit): {t_stopped - t_kill:.2f} s; "
                   f"restart (spawn to 'canopy serving'): {t_serving - t_stopped:.2f} s")
    t_res = cheap_at[0] if cheap_at else t_done
    figures.append(f"resync of {n} topics, from the restarted primary's 'canopy serving': {t_res - t_serving:.2f} s "
                   f"(confirmed by a full fetch of the secondary at {t_done - t_serving:.2f} s)")
    figures.append(f"resync of {n} topics, from SIGINT to the primary: {t_res - t_kill:.2f} s")
    figures.append(f"values checked on the secondary after resync: {n - wrong} right, {wrong} wrong")


# ---------------------------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, tmp: Path, servers: dict[str, Server], figures: list[str]) -> None:
    pport = free_port()
    sport = free_port()
    while sport == pport:
        sport = free_port()
    config = tmp / "secondary.toml"
    config.write_text(
        "[fanout.main]\n"
        f'primaries = ["ws://127.0.0.1:{pport}"]\n'
        'links = ["?bench//"]\n'
        f'principal = "admin"\npassword = "{PASSWORD}"\n'
        "retry_delay = 0.2\nreconnect_timeout = 30\n"
    )
    t0 = time.monotonic()
    primary = servers["primary"] = Server("primary", tmp / "primary", pport)
    await asyncio.to_thread(primary.wait_ready)
    secondary = servers["secondary"] = Server("secondary", tmp / "secondary", sport, "--config", str(config))
    await asyncio.to_thread(secondary.wait_ready)
    print(f"primary on {primary.url}, secondary on {secondary.url}; both serving after "
          f"{time.monotonic() - t0:.1f} s", flush=True)
    async with canopy.connect(secondary.url, *ADMIN) as sec_admin:
        ok, took, last = await wait_until(lambda: _connected(sec_admin), 60)
        print(f"secondary's fan-out connection: {last} after {took:.2f} s", flush=True)
        if not args.skip_lag:
            await measure_lag(primary, secondary, sec_admin, args.duration, args.rate, figures)
        if not args.skip_resync:
            await measure_resync(primary, secondary, sec_admin, args.topics, figures, servers)


async def _connected(sec_admin: Any) -> tuple[bool, Any]:
    s = await link_stats(sec_admin)
    return s["state"] == "connected", s


SUSPICIOUS = ("Traceback", "Error", "ERROR", "WARNING", "Exception", "exception")


def report_logs(servers: dict[str, Server], log_dir: Path | None) -> None:
    for name, srv in servers.items():
        bad = [line for _, line in srv.lines if any(s in line for s in SUSPICIOUS)]
        print(f"[log] {name}: {len(srv.lines)} lines, exit {srv.proc.returncode}, {len(bad)} suspicious", flush=True)
        for line in bad[:15]:
            print(f"    {line[:300]}", flush=True)
        if len(bad) > 15:
            print(f"    ... {len(bad) - 15} more", flush=True)
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            t0 = srv.started_at
            (log_dir / f"{name.replace(' ', '_').replace('(', '').replace(')', '')}.log").write_text(
                "".join(f"{t - t0:9.3f} {line}\n" for t, line in srv.lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 s of updates and 10,000 topics")
    parser.add_argument("--duration", type=float, default=None, help="seconds of paced updates (20)")
    parser.add_argument("--rate", type=int, default=1000, help="updates per second (1000)")
    parser.add_argument("--topics", type=int, default=None, help="topics mirrored for the resync (100000)")
    parser.add_argument("--skip-lag", action="store_true")
    parser.add_argument("--skip-resync", action="store_true")
    parser.add_argument("--log-dir", type=Path, default=None, help="write both servers' output here")
    args = parser.parse_args()
    if args.duration is None:
        args.duration = 10.0 if args.quick else 20.0
    if args.topics is None:
        args.topics = 10_000 if args.quick else 100_000

    tmp = Path(tempfile.mkdtemp(prefix="canopy-fanout-bench-"))
    servers: dict[str, Server] = {}
    figures: list[str] = []
    failed: BaseException | None = None
    try:
        asyncio.run(run(args, tmp, servers, figures))
    except BaseException as e:  # noqa: BLE001 - reported after the servers are stopped
        failed = e
    finally:
        for name, srv in reversed(list(servers.items())):
            code = srv.stop()
            print(f"stopped {name}: exit {code}", flush=True)
        report_logs(servers, args.log_dir)
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n=== fan-out figures ===")
    for line in figures:
        print(line)
    if failed is not None:
        print(f"\nFAILED: {type(failed).__name__}: {failed}")
        if not isinstance(failed, KeyboardInterrupt):
            import traceback

            traceback.print_exception(failed)
        sys.exit(1)


if __name__ == "__main__":
    main()
