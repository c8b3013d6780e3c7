"""Remote topic views: ``map ?a// from Server1 to b/<path(1)>`` between two
`canopy serve` processes, with the remote server definitions of the local one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import canopy
from canopy import errors
from tests.conftest import wait_for
from tests.e2e.conftest import ADMIN, ADMIN_PASSWORD, Server, cli


def fetched(url: str, selector: str) -> dict[str, Any]:
    async def fetch() -> dict[str, Any]:
        async with canopy.connect(url) as s:
            return {t.path: t.value for t in await s.topics.fetch(selector)}

    return asyncio.run(fetch())


def states(url: str) -> dict[str, str]:
    async def listed() -> dict[str, str]:
        async with canopy.connect(url, *ADMIN) as s:
            return {v.name: v.state for v in await s.views.list()}

    return asyncio.run(listed())


async def on(url: str, *changes: tuple[str, str, Any]) -> None:
    async with canopy.connect(url, *ADMIN) as s:
        for verb, path, value in changes:
            if verb == "set":
                await s.topics.add_and_set(path, value, "JSON")
            else:
                await s.topics.remove(path)


def test_remote_views_follow_their_server_through_its_whole_lifecycle(tmp_path: Path) -> None:
    remote = Server(tmp_path / "remote", "--partitions", "1", "--server-name", "R")
    local = Server(tmp_path / "local", "--partitions", "2", "--server-name", "L")
    try:
        remote.wait_ready()
        local.wait_ready()
        asyncio.run(on(remote.url, ("set", "a/1", {"v": 1}), ("set", "a/2", {"v": 2}), ("set", "a/info", "remote")))
        asyncio.run(on(local.url, ("set", "loc/info", "local"), ("set", "ins/k", {"k": "local"})))

        async def views() -> None:
            async with canopy.connect(local.url, *ADMIN) as admin:
                # the remote view first (older), then a younger local view that wants the same path
                await admin.views.create("remote", "map ?a// from Server1 to b/<path(1)>")
                await admin.views.create("local", "map ?loc// to b/<path(1)>")
                await admin.views.create("also", "map ?a// from Server1 to c/<path(1)> insert ins/k at /local")

        asyncio.run(views())
        assert states(local.url)["remote"] == "inactive: no remote server 'Server1' is defined"
        assert fetched(local.url, "?b//") == {"b/info": "local"}  # the local view holds it meanwhile
        added = cli("server", "add", "Server1", "--url", remote.url, "--principal", "admin", "--password",
                    ADMIN_PASSWORD, "--retry-delay", "0.2", "--reconnect-timeout", "1",
                    "--missing-topic-filter", "?b//", url=local.url)
        assert added.returncode == 0 and f"Server1: {remote.url}" in added.stdout, added
        want_b = {"b/1": {"v": 1}, "b/2": {"v": 2}, "b/info": "remote"}  # the older remote view takes b/info over
        wait_for(lambda: fetched(local.url, "?b//") == want_b, 30, "the remote view's reference topics",
                 describe=lambda: fetched(local.url, "?b//"))
        assert states(local.url) == {"remote": "active", "local": "active", "also": "active"}
        wait_for(lambda: fetched(local.url, "?c//").get("c/1") == {"v": 1, "local": {"k": "local"}}, 30,
                 "the insert from the local tree", describe=lambda: fetched(local.url, "?c//"))

        # one session serves both views; checked, listed
        listing = cli("server", "list", url=local.url)
        assert listing.returncode == 0 and "Server1\tconnected" in listing.stdout and "remote, also" in listing.stdout
        checked = cli("server", "check", "Server1", url=local.url)
        assert checked.returncode == 0 and "connected in" in checked.stdout, checked

        async def one_session() -> int:
            async with canopy.connect(remote.url, *ADMIN) as s:
                found = await s.sessions.get_properties(filter="$Principal is 'admin'")
                return len(found) - 1  # less this one

        assert asyncio.run(one_session()) == 1

        # a subscription here that matches nothing and intersects the definition's missing-topic
        # filter is passed on to the remote server, whose handler makes the source topic
        async def missing_on_the_remote() -> None:
            async with canopy.connect(remote.url, *ADMIN) as control, canopy.connect(local.url) as user:
                heard: list[Any] = []

                async def make_source(notification: Any) -> bool:
                    heard.append(notification)
                    await control.topics.add_and_set("a/9", {"v": 9}, "JSON")
                    return True

                await control.missing_topics.add_handler("b", make_source)
                sub = await user.topics.subscribe("b/9")
                event = await sub.next(timeout=20)
                assert (event.kind, event.path, event.value) == ("subscribed", "b/9", {"v": 9})
                [n] = heard
                assert (n.selector, n.servers, n.session_id) == (">b/9", ("L", "R"), user.session_id)

        asyncio.run(missing_on_the_remote())
        asyncio.run(on(remote.url, ("remove", "a/9", None)))

        # changes on the remote server
        asyncio.run(on(remote.url, ("set", "a/1", {"v": 10}), ("remove", "a/2", None), ("set", "a/3", {"v": 3})))
        want_b = {"b/1": {"v": 10}, "b/3": {"v": 3}, "b/info": "remote"}
        wait_for(lambda: fetched(local.url, "?b//") == want_b, 30, "the remote changes",
                 describe=lambda: fetched(local.url, "?b//"))

        # the remote server goes: its views' reference topics go (the local view has b/info back)
        assert remote.stop() == 0
        wait_for(lambda: fetched(local.url, "?b//") == {"b/info": "local"}, 60, "the remote topics to go",
                 describe=lambda: fetched(local.url, "?b//"))
        assert states(local.url)["remote"].startswith("inactive: connecting to remote server 'Server1'")
        remote = Server(remote.data_dir, "--partitions", "1", "--server-name", "R", port=remote.port)
        remote.wait_ready()
        wait_for(lambda: fetched(local.url, "?b//") == want_b, 60, "the remote topics to come back",
                 describe=lambda: fetched(local.url, "?b//"))

        # removing the definition deactivates its views
        removed = cli("server", "remove", "Server1", url=local.url)
        assert removed.returncode == 0 and "Server1: removed" in removed.stdout, removed
        wait_for(lambda: fetched(local.url, "?b//") == {"b/info": "local"} and fetched(local.url, "?c//") == {}, 30,
                 "the views to go inactive")
        assert states(local.url)["also"] == "inactive: no remote server 'Server1' is defined"

        async def refusals() -> None:
            async with canopy.connect(local.url, *ADMIN) as admin, canopy.connect(local.url) as anonymous:
                await admin.remote_servers.add("Nowhere", "ws://127.0.0.1:9", retry_delay=5)
                checked = await admin.remote_servers.check("Nowhere")
                assert checked["ok"] is False and checked["error"], checked
                with pytest.raises(errors.InvalidRemoteServerError, match="exists already"):
                    await admin.remote_servers.add("Nowhere", "ws://127.0.0.1:9")
                with pytest.raises(errors.InvalidRemoteServerError, match="not a ws://"):
                    await admin.remote_servers.add("Bad", "http://x")
                with pytest.raises(errors.InvalidRemoteServerError, match="no remote server"):
                    await admin.remote_servers.check("Unknown")
                with pytest.raises(errors.PermissionDeniedError, match="CONTROL_SERVER"):
                    await anonymous.remote_servers.add("Mine", remote.url)
                with pytest.raises(errors.PermissionDeniedError, match="VIEW_SERVER"):
                    await anonymous.remote_servers.list()
                listed = {s["name"]: s for s in await admin.remote_servers.list()}
                assert listed["Nowhere"]["state"] == "not in use" and "password" not in listed["Nowhere"]

        asyncio.run(refusals())
        failed = cli("server", "check", "Nowhere", url=local.url)
        assert failed.returncode == 1 and "Nowhere" in failed.stderr, failed

        # definitions are kept in the replicated configuration, over a restart
        assert local.stop() == 0, local.output
        local = Server(local.data_dir, "--partitions", "2", "--server-name", "L", port=local.port)
        local.wait_ready()
        listed = cli("server", "list", "--json", url=local.url)
        assert listed.returncode == 0 and [json.loads(line)["name"] for line in listed.stdout.splitlines()] == [
            "Nowhere"], listed
        assert states(local.url)["also"] == "inactive: no remote server 'Server1' is defined"
    finally:
        remote.stop()
        code = local.stop()
    assert code == 0, local.output
