"""Fan-out between two `canopy serve` processes: a secondary mirrors a branch of its primary."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import canopy
from canopy import errors
from tests.conftest import free_port, wait_for
from tests.e2e.conftest import ADMIN, ADMIN_PASSWORD, Server, cli


@pytest.fixture(scope="module")
def primary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One primary for the module's tests, each on a branch of its own; the last test stops it
    and serves its data directory again."""
    srv = Server(tmp_path_factory.mktemp("fanout") / "primary", "--partitions", "2")
    try:
        yield srv.wait_ready()
    finally:
        srv.stop()


def secondary_of(tmp_path: Path, primary: Server, links: list[str], name: str = "secondary") -> Server:
    config = tmp_path / f"{name}.toml"
    config.write_text(
        "[fanout.main]\n"
        f"primaries = [{json.dumps(primary.url)}]\n"
        f"links = {json.dumps(links)}\n"
        f'principal = "admin"\npassword = "{ADMIN_PASSWORD}"\n'
        "retry_delay = 0.2\nreconnect_timeout = 30\n"
    )
    return Server(tmp_path / name, "--partitions", "2", "--config", str(config))


def mirrored(url: str, selector: str) -> dict[str, object]:
    async def fetch() -> dict[str, object]:
        async with canopy.connect(url) as s:
            return {t.path: t.value for t in await s.topics.fetch(selector)}

    return asyncio.run(fetch())


async def fetched(url: str, selector: str) -> list[Any]:
    async with canopy.connect(url) as s:
        return await s.topics.fetch(selector)


async def publish(url: str, *changes: tuple[str, str, object]) -> None:
    async with canopy.connect(url, *ADMIN) as s:
        for verb, path, value in changes:
            if verb == "add":
                await s.topics.add_and_set(path, value)
            elif verb == "pass":  # delivered, not kept (an MQTT publish without RETAIN)
                await s.topics.set(path, value, retain=False)
            elif verb == "add-volatile":
                await s.topics.add(path, "STRING", {"PERSISTENT": "false"})
                await s.topics.set(path, value)
            else:
                await s.topics.remove(path)


def test_a_bad_fanout_table_is_refused_at_start(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[fanout.main]\nprimaries = ["http://nowhere"]\nlinks = ["?A//"]\n')
    srv = Server(tmp_path / "data", "--config", str(config), port=free_port())
    code = srv.proc.wait(60)
    srv.stop()
    assert code == 1 and "not a ws:// or wss:// URL" in srv.output, srv.output


def test_connections_are_added_and_removed_at_run_time_and_kept_over_a_restart(
    tmp_path: Path, primary: Server
) -> None:
    asyncio.run(publish(primary.url, ("add", "R/one", "1"), ("add", "R/two", "2")))
    secondary = Server(tmp_path / "secondary", "--partitions", "2")
    try:
        secondary.wait_ready()
        added = cli("fanout", "add", "live", "--primary", primary.url, "--link", "?R//", "--principal", "admin",
                    "--password", ADMIN_PASSWORD, "--retry-delay", "0.2", url=secondary.url)
        assert added.returncode == 0 and "live: mirroring ?R//" in added.stdout, added
        wait_for(lambda: mirrored(secondary.url, "?R//") == {"R/one": "1", "R/two": "2"}, 30, "the live link",
                 describe=lambda: mirrored(secondary.url, "?R//"))

        async def refusals() -> None:
            async with canopy.connect(secondary.url, *ADMIN) as admin, canopy.connect(secondary.url) as anonymous:
                with pytest.raises(errors.InvalidFanoutError, match="exists already"):
                    await admin.fanout.add("live", primary.url, "?R//")
                with pytest.raises(errors.InvalidFanoutError, match="not a ws://"):
                    await admin.fanout.add("bad", "http://x", "?R//")
                with pytest.raises(errors.InvalidFanoutError, match="no path prefix"):
                    await admin.fanout.add("bad", primary.url, "*.*")
                with pytest.raises(errors.PermissionDeniedError, match="CONTROL_SERVER"):
                    await anonymous.fanout.add("mine", primary.url, "?R//")
                with pytest.raises(errors.PermissionDeniedError, match="VIEW_SERVER"):
                    await anonymous.fanout.list()
                [shown] = await admin.fanout.list()
                assert shown["name"] == "live" and "password" not in json.dumps(shown)

        asyncio.run(refusals())
        assert secondary.stop() == 0, secondary.output
        secondary = Server(tmp_path / "secondary", "--partitions", "2", port=secondary.port)
        secondary.wait_ready()
        wait_for(lambda: mirrored(secondary.url, "?R//") == {"R/one": "1", "R/two": "2"}, 30,
                 "the live link to come back with the secondary")
        removed = cli("fanout", "remove", "live", url=secondary.url)
        assert removed.returncode == 0 and "live: removed" in removed.stdout, removed
        wait_for(lambda: mirrored(secondary.url, "?R//") == {}, 30, "the replicas to go with their connection")
        again = cli("fanout", "remove", "live", url=secondary.url)
        assert again.returncode == 0 and "no such connection" in again.stdout, again
    finally:
        code = secondary.stop()
    assert code == 0, secondary.output


# last: it stops the module's primary and serves its data directory again
def test_a_secondary_mirrors_adds_updates_and_removals_and_resyncs_after_a_primary_restart(
    tmp_path: Path, primary: Server
) -> None:
    asyncio.run(publish(primary.url, ("add", "A", "a"), ("add", "A/B", "b"), ("add", "A/C", "c"),
                        ("add", "other/x", "not mirrored")))
    secondary = secondary_of(tmp_path, primary, ["?A//"])
    try:
        secondary.wait_ready()
        wait_for(lambda: mirrored(secondary.url, "?A//") == {"A": "a", "A/B": "b", "A/C": "c"}, 30,
                 "the branch to be mirrored", describe=lambda: mirrored(secondary.url, "?A//"))
        assert mirrored(secondary.url, "?other//") == {}

        async def follow_changes() -> None:
            async with canopy.connect(secondary.url) as s:
                sub = await s.topics.subscribe("?A//")
                seen = {(await sub.next(timeout=10)).path for _ in range(3)}
                assert seen == {"A", "A/B", "A/C"}
                await publish(primary.url, ("add", "A/B", "b2"), ("remove", "A/C", None), ("add", "A/D", "d"))
                events = [await sub.next(timeout=10) for _ in range(3)]
                assert [(e.kind, e.path, e.value) for e in events] == [
                    ("value", "A/B", "b2"), ("unsubscribed", "A/C", None), ("subscribed", "A/D", "d")]
                # a value not retained is passed on as one: the replica keeps the value it had
                await publish(primary.url, ("pass", "A/B", "passing"))
                passing = await sub.next(timeout=10)
                assert (passing.path, passing.value, passing.retained) == ("A/B", "passing", False)
                for url in (secondary.url, primary.url):
                    [kept] = await s.topics.fetch("A/B") if url == secondary.url else await fetched(url, "A/B")
                    assert kept.value == "b2", (url, kept)
                # replicas are read-only here
            async with canopy.connect(secondary.url, *ADMIN) as admin:
                with pytest.raises(errors.ReferenceTopicError, match="fan-out main"):
                    await admin.topics.set("A/B", "local write")
                listed = await admin.fanout.list()
                assert [(c["name"], c["state"]) for c in listed] == [("main", "connected")], listed
                assert listed[0]["links"][0]["topics"] == 3, listed
                with pytest.raises(errors.InvalidFanoutError, match="configuration file"):
                    await admin.fanout.remove("main")

        asyncio.run(follow_changes())

        def lag() -> Any:
            async def listed() -> list[dict[str, Any]]:
                async with canopy.connect(secondary.url, *ADMIN) as admin:
                    return await admin.fanout.list()

            [connection] = asyncio.run(listed())
            return connection if connection["lag_ms"] is not None and connection["apply_ms"] is not None else False

        figures = wait_for(lag, 30, "the connection's lag figures")
        assert 0 < figures["rtt_ms"] < 5000 and 0 <= figures["apply_ms"] < 5000, figures
        assert figures["last_update_s"] is not None and figures["last_update_s"] >= 0, figures
        shown = cli("fanout", "list", url=secondary.url)
        assert shown.returncode == 0 and "main\tconnected" in shown.stdout and "?A//\t3 topics" in shown.stdout, shown
        assert "\tlag " in shown.stdout, shown
        # the same figures on the secondary's /metrics, labelled by connection and link
        token = base64.b64encode(f"{ADMIN[0]}:{ADMIN[1]}".encode()).decode()
        scrape = urllib.request.Request(secondary.url.replace("ws://", "http://") + "/metrics",
                                        headers={"Authorization": f"Basic {token}"})
        with urllib.request.urlopen(scrape, timeout=30) as answer:
            body = answer.read().decode()
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(body) for s in f.samples}
        assert samples[("canopy_fanout_connected", (("connection", "main"),))] == 1
        assert samples[("canopy_fanout_link_topics", (("connection", "main"), ("link", "?A//")))] == 3
        assert samples[("canopy_fanout_link_updates_total", (("connection", "main"), ("link", "?A//")))] >= 4
        assert 0 < samples[("canopy_fanout_round_trip_seconds", (("connection", "main"),))] < 5

        # a primary restart: its volatile topic is gone afterwards, and so must its replica be
        asyncio.run(publish(primary.url, ("add-volatile", "A/V", "v")))
        wait_for(lambda: "A/V" in mirrored(secondary.url, "?A//"), 30, "the volatile topic to be mirrored")
        assert primary.stop() == 0
        restarted = Server(primary.data_dir, "--partitions", "2", port=primary.port)
        try:
            restarted.wait_ready()
            asyncio.run(publish(restarted.url, ("add", "A/E", "e")))
            want = {"A": "a", "A/B": "b2", "A/D": "d", "A/E": "e"}
            wait_for(lambda: mirrored(secondary.url, "?A//") == want, 60, "the mirror to resync",
                     describe=lambda: mirrored(secondary.url, "?A//"))
        finally:
            assert restarted.stop() == 0, restarted.output
    finally:
        code = secondary.stop()
    assert code == 0, secondary.output
