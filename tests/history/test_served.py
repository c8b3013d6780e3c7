"""A real `canopy serve` exports its journal to Parquet while it runs; the replayed view
equals the live one, and the CLI queries what was exported."""

from __future__ import annotations

import asyncio
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import canopy
from history.jobs import History
from tests.conftest import wait_for
from tests.e2e.conftest import ADMIN, Server, cli

VIEW = "map ?src// to ref/<scalar(/k)>/<path(1)>"


def exported(location: Path) -> list[dict[str, Any]]:
    out = []
    for f in sorted((location / "updates").glob("date=*/[!.]*.parquet")):  # as Spark: no .tmp-*
        out += pq.read_table(f, columns=["partition", "sequence", "path", "op", "value_json"]).to_pylist()
    return out


@pytest.mark.timeout(300)
def test_a_served_history_replays_the_live_view_exactly(tmp_path: Path, spark: Any) -> None:
    srv = Server(tmp_path / "data", "--partitions", "2", "--history-export-ms", "300").wait_ready()
    location = tmp_path / "data" / "history"
    live: dict[str, list[Any]] = defaultdict(list)
    changes = 0
    try:
        async def run() -> None:
            nonlocal changes
            rng = random.Random(15)
            async with canopy.connect(srv.url, *ADMIN) as s:
                await s.views.create("live", VIEW)
                sub = await s.topics.subscribe("?ref//")

                async def heard(path: str, value: Any) -> None:
                    """Each update is heard before the next is made: nothing is conflated on the way."""
                    while True:
                        event = await sub.next(timeout=20)
                        live[event.path].append(None if event.kind == "unsubscribed" else event.value)
                        if event.path == path and (event.value == value or event.kind == value == "unsubscribed"):
                            return

                for i in range(6):
                    await s.topics.add_and_set(f"src/{i}", {"k": "a", "v": 0})
                    await heard(f"ref/a/{i}", {"k": "a", "v": 0})
                    changes += 1
                for n in range(1, 200):
                    source, key = rng.randrange(5), rng.choice("abc")
                    await s.topics.set(f"src/{source}", {"k": key, "v": n})
                    await heard(f"ref/{key}/{source}", {"k": key, "v": n})
                    changes += 1
                await s.topics.remove("src/5")
                await heard("ref/a/5", "unsubscribed")
                changes += 1

        asyncio.run(run())
        # the server exports on its own (every 300 ms): every source change reaches Parquet
        wait_for(lambda: len([r for r in exported(location) if r["path"].startswith("src/")]) >= changes, 60,
                 "the history to hold every source change", describe=lambda: len(exported(location)))
        rows = exported(location)
        for partition in {r["partition"] for r in rows}:
            sequences = sorted(r["sequence"] for r in rows if r["partition"] == partition)
            assert sequences == list(range(1, len(sequences) + 1)), f"partition {partition}: duplicates or gaps"
        assert len([r for r in rows if r["path"].startswith("src/")]) == changes

        replayed: dict[str, list[Any]] = defaultdict(list)
        for r in History(spark, location).replay_view(VIEW).orderBy("timestamp", "source_partition",
                                                                    "source_sequence").collect():
            replayed[r["path"]].append(None if r["op"] == "remove" else json.loads(r["value_json"]))
        assert set(replayed) == set(live)
        for path in live:
            assert replayed[path] == live[path], path
        assert sum(map(len, live.values())) > 250

        got = cli("history", "query", "?src//", "--history-dir", str(location), "--json", "--to",
                  "2100-01-01T00:00:00Z")
        assert got.returncode == 0, got.stderr
        lines = [json.loads(line) for line in got.stdout.splitlines()]
        assert len(lines) == changes and lines[-1]["path"] == "src/5" and lines[-1]["op"] == "remove", lines[-3:]
        assert {"path", "timestamp", "sequence", "op", "type", "value"} <= set(lines[0])
    finally:
        assert srv.stop() == 0, srv.output


def test_a_clean_stop_exports_what_the_history_lacks(tmp_path: Path) -> None:
    """With the default interval (a minute) nothing is exported yet when serve stops: the
    partitions export on their way out, so the history holds every change."""
    srv = Server(tmp_path / "data", "--partitions", "2").wait_ready()
    try:
        async def publish() -> None:
            async with canopy.connect(srv.url, *ADMIN) as s:
                for i in range(20):
                    await s.topics.add_and_set(f"quiet/{i}", i)

        asyncio.run(publish())
        assert exported(tmp_path / "data" / "history") == []
    finally:
        assert srv.stop() == 0, srv.output
    rows = [r for r in exported(tmp_path / "data" / "history") if r["path"].startswith("quiet/")]
    assert sorted((r["path"], r["op"]) for r in rows if r["op"] == "add") == sorted(
        (f"quiet/{i}", "add") for i in range(20)), srv.output
    assert {r["path"]: json.loads(r["value_json"]) for r in rows if r["value_json"]} == {
        f"quiet/{i}": i for i in range(20)}
