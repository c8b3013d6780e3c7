"""The reference system's client API beyond topics, between real sessions of a real `canopy serve`:
delta streaming, conditional updates, JSON patches and update streams."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

import canopy
from canopy import constraints as c
from canopy import errors
from tests.e2e.conftest import ADMIN, Server, cli


def document(n: int) -> dict[str, Any]:
    return {f"field{i:02d}": f"text of field {i:02d} " * 3 + (str(n) if i == 20 else "") for i in range(40)}


async def until(condition: Callable[[], bool], what: str, seen: Callable[[], Any], seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}; last seen: {seen()!r}")
        await asyncio.sleep(0.02)


async def test_large_values_travel_as_deltas_and_subscribers_see_whole_values(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as publisher, canopy.connect(server.url) as with_deltas, \
            canopy.connect(server.url, deltas=False) as without:
        await publisher.topics.add_and_set("deltas/doc", document(0), "JSON")
        await publisher.topics.add("deltas/whole", "JSON", {"PUBLISH_VALUES_ONLY": "true"})
        seen: dict[str, list[Any]] = {"with": [], "without": []}
        for name, session in (("with", with_deltas), ("without", without)):
            await session.topics.subscribe(
                "?deltas//", callback=lambda e, name=name: seen[name].append((e.path, e.value)) if e.value else None)
        await until(lambda: len(seen["with"]) == len(seen["without"]) == 1, "the first values", lambda: seen)
        before = (with_deltas.bytes_received, without.bytes_received)
        for n in range(1, 21):
            await publisher.topics.set("deltas/doc", document(n))
        await until(lambda: len(seen["with"]) == len(seen["without"]) == 21, "20 updates", lambda: seen)
        assert seen["with"] == seen["without"] == [("deltas/doc", document(n)) for n in range(21)]
        got = with_deltas.bytes_received - before[0], without.bytes_received - before[1]
        assert got[0] < got[1] * 0.2, f"with deltas {got[0]} bytes, whole values {got[1]}"
        assert with_deltas.delta_bytes_saved > 20 * 1000 and without.delta_bytes_saved == 0

        saved = with_deltas.delta_bytes_saved
        for n in (1, 2):
            await publisher.topics.set("deltas/whole", document(n))
        await until(lambda: len(seen["with"]) == 23, "the values-only topic", lambda: seen["with"][-1])
        assert with_deltas.delta_bytes_saved == saved, "PUBLISH_VALUES_ONLY topics go whole"

        # a basis out of step (as if a delta were damaged): the next delta fails its checks and
        # the value is fetched instead: subscribers never see a wrong value
        topic = next(t for t in with_deltas._aliases.values() if t.path == "deltas/doc")
        topic.basis = topic.basis[:-1] + b"?"
        await publisher.topics.set("deltas/doc", document(99))
        await until(lambda: len(seen["with"]) == 24, "the refetched value", lambda: seen["with"][-1])
        assert seen["with"][-1] == ("deltas/doc", document(99)) and with_deltas.deltas_failed == 1
        assert any("did not apply" in str(e) for e in with_deltas.errors)
        await publisher.topics.set("deltas/doc", document(100))
        await until(lambda: len(seen["with"]) == 25, "the next delta", lambda: seen["with"][-1])
        assert seen["with"][-1] == ("deltas/doc", document(100)) and with_deltas.delta_bytes_saved > saved


async def test_constraints_decide_whether_an_update_happens(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as s:
        await s.topics.add_and_set("cond/a", "first", "STRING", constraint=c.no_topic())
        with pytest.raises(errors.UnsatisfiedConstraintError):  # it exists now
            await s.topics.add_and_set("cond/a", "again", "STRING", constraint=c.no_topic())
        await s.topics.set("cond/a", "second", constraint=c.value_equals("first"))
        with pytest.raises(errors.UnsatisfiedConstraintError, match="value"):
            await s.topics.set("cond/a", "third", constraint=c.value_equals("first"))
        assert (await s.topics.fetch("cond/a"))[0].value == "second"
        await s.topics.add("cond/empty", "INT64")
        await s.topics.set("cond/empty", 1, constraint=c.no_value() | c.value_equals(7))
        with pytest.raises(errors.UnsatisfiedConstraintError):
            await s.topics.set("cond/empty", 2, constraint=c.no_value() | c.value_equals(7))

        await s.topics.add_and_set("cond/j", {"owner": "ann", "n": 1}, "JSON")
        await s.topics.set("cond/j", {"owner": "ann", "n": 2},
                           constraint=c.json_with_value("/owner", "ann") & c.json_without_value("/closed"))
        with pytest.raises(errors.UnsatisfiedConstraintError):
            await s.topics.set("cond/j", {"owner": "bob"}, constraint=c.json_with_value("/owner", "bob"))
        await s.topics.apply_json_patch("cond/j", [{"op": "test", "path": "/n", "value": 2},
                                                   {"op": "replace", "path": "/n", "value": 3}])
        with pytest.raises(errors.PatchFailedError):  # all or nothing: the add is not applied
            await s.topics.apply_json_patch("cond/j", [{"op": "add", "path": "/x", "value": 1},
                                                       {"op": "test", "path": "/n", "value": 99}])
        with pytest.raises(errors.UnsatisfiedConstraintError):
            await s.topics.apply_json_patch("cond/j", '[{"op": "remove", "path": "/n"}]', c.json_without_value("/n"))
        assert (await s.topics.fetch("cond/j"))[0].value == {"owner": "ann", "n": 3}

        stream = s.topics.update_stream("cond/stream", "INT64", c.no_topic(), add_if_missing=True)
        await asyncio.gather(*(stream.set(n) for n in range(5)))  # the later sets wait for the first
        assert stream.validated and stream.get() == 4
        assert (await s.topics.fetch("cond/stream"))[0].value == 4
        again = s.topics.update_stream("cond/stream", "INT64", c.no_topic(), add_if_missing=True)
        with pytest.raises(errors.UnsatisfiedConstraintError):
            await again.set(1)
        with pytest.raises(errors.UnsatisfiedConstraintError):  # an invalid stream stays invalid
            await again.set(2)

        # bad input: typed errors, and the session goes on
        with pytest.raises(errors.InvalidConstraintError):
            c.json_with_value("no-slash", 1)
        with pytest.raises(errors.InvalidConstraintError):
            await s.topics.set("cond/a", "x", constraint="no_topic")  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidConstraintError, match="and takes a non-empty list"):
            await s._call("set", "cond/a", b"\x61x", False, None, False, True, b"", ["and", "not a list"])
        with pytest.raises(errors.InvalidValueError):
            await s.topics.apply_json_patch("cond/j", "{not json")
        with pytest.raises(errors.InvalidValueError):
            await s.topics.apply_json_patch("cond/a", [{"op": "remove", "path": "/n"}])  # not a JSON topic
        assert (await s.topics.fetch("cond/a"))[0].value == "second"


async def test_a_session_without_update_permission_cannot_patch(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as admin, canopy.connect(server.url) as anonymous:
        await admin.topics.add_and_set("cond/guarded", {"n": 1}, "JSON")
        with pytest.raises(errors.PermissionDeniedError, match="UPDATE_TOPIC"):
            await anonymous.topics.apply_json_patch("cond/guarded", [{"op": "replace", "path": "/n", "value": 2}])
        assert (await admin.topics.fetch("cond/guarded"))[0].value == {"n": 1}


def test_cli_sets_under_a_constraint_and_patches(server: Server) -> None:
    def run(*args: str) -> Any:
        return cli(*args, url=server.url)

    assert run("topic", "add", "cli/cond", "--type", "STRING").returncode == 0
    done = run("topic", "set", "cli/cond", "a", "--if-no-value")
    assert done.returncode == 0, done.stderr
    refused = run("topic", "set", "cli/cond", "b", "--if-value", "zzz")
    assert refused.returncode == 1 and "UNSATISFIED_CONSTRAINT" in refused.stderr, refused.stderr
    assert run("topic", "set", "cli/cond", "b", "--if-value", "a").returncode == 0
    assert run("topic", "add", "cli/doc", "--type", "JSON").returncode == 0
    assert run("topic", "set", "cli/doc", '{"n": 1}').returncode == 0
    patched = run("topic", "patch", "cli/doc", '[{"op": "replace", "path": "/n", "value": 2}]', "--json",
                  "--if-json", "/n=1")
    assert patched.returncode == 0 and json.loads(patched.stdout) == {"patched": "cli/doc"}, patched.stderr
    failed = run("topic", "patch", "cli/doc", '[{"op": "test", "path": "/n", "value": 5}]')
    assert failed.returncode == 1 and "PATCH_FAILED" in failed.stderr, failed.stderr
    fetched = run("topic", "fetch", "cli/doc", "--json")
    assert json.loads(fetched.stdout)["value"] == {"n": 2}, fetched.stdout
