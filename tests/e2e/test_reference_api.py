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
from canopy.client import ALL_FIXED_PROPERTIES
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
            canopy.connect(server.url, deltas=False, compression=False) as without, \
            canopy.connect(server.url, deltas=False) as compressed:
        await publisher.topics.add_and_set("deltas/doc", document(0), "JSON")
        await publisher.topics.add("deltas/whole", "JSON", {"PUBLISH_VALUES_ONLY": "true"})
        seen: dict[str, list[Any]] = {"with": [], "without": [], "compressed": []}
        for name, session in (("with", with_deltas), ("without", without), ("compressed", compressed)):
            await session.topics.subscribe(
                "?deltas//", callback=lambda e, name=name: seen[name].append((e.path, e.value)) if e.value else None)
        await until(lambda: len(seen["with"]) == len(seen["without"]) == 1, "the first values", lambda: seen)
        before = (with_deltas.bytes_received, without.bytes_received, compressed.bytes_received)
        for n in range(1, 21):
            await publisher.topics.set("deltas/doc", document(n))
        await until(lambda: len(seen["with"]) == len(seen["without"]) == len(seen["compressed"]) == 21, "20 updates",
                    lambda: seen)
        assert seen["with"] == seen["without"] == seen["compressed"] == [("deltas/doc", document(n)) for n in range(21)]
        got = (with_deltas.bytes_received - before[0], without.bytes_received - before[1],
               compressed.bytes_received - before[2])
        assert got[0] < got[1] * 0.2, f"with deltas {got[0]} bytes, whole values {got[1]}"
        assert got[2] < got[1] * 0.5 and compressed.compression_bytes_saved > 20 * 1000, got  # COMPRESSION low
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


async def test_topic_properties_are_honoured_or_refused_at_creation(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as s:
        # VALIDATE_VALUES: a value the type's codec reads but that is not plain CBOR of the type
        await s.topics.add("props/strict", "INT64", {"VALIDATE_VALUES": "true"})
        await s.topics.add("props/lax", "INT64")
        bignum_one = b"\xc2\x41\x01"  # CBOR tag 2 around the integer 1
        await s.topics.set("props/strict", 7)
        with pytest.raises(errors.InvalidValueError, match="tag 2"):
            await s._call("set", "props/strict", bignum_one, False)
        await s._call("set", "props/lax", bignum_one, False)  # without it, as before
        assert [r.value for r in await s.topics.fetch("?props/(strict|lax)")] == [1, 7]
        # what canopy would not act on is refused, never ignored; the session goes on
        for properties, why in (({"SCHEMA": "{}"}, "not supported"),
                                ({"OWNER": "$Principal is 'fred' or $Roles has 'X'"}, "end of the value at column 22")):
            with pytest.raises(errors.InvalidSpecificationError, match=why):
                await s.topics.add("props/refused", "JSON", properties)
        with pytest.raises(errors.InvalidTypeError, match="RECORD_V2 topics are not supported"):
            await s._call("add", "props/refused", "RECORD_V2", {})
        assert await s.topics.fetch("props/refused") == []
        assert (await s.topics.add("props/quiet", "JSON", {"COMPRESSION": "off", "PRIORITY": "high"})).value == "CREATED"


async def test_a_topics_owner_reads_updates_and_removes_it_without_its_roles_permissions(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as admin:
        await admin.security.update(
            ["set_path_permissions", "ANONYMOUS", "owned", ["SELECT_TOPIC"]],  # select, nothing more
            ["set_path_permissions", "OWNED_ONLY", "owned", ["SELECT_TOPIC"]],
            ["add_principal", "fred", "fred-secret-words", ["OWNED_ONLY"]],
            ["add_principal", "ann", "ann-secret-words", ["OWNED_ONLY"]],
        )
        await admin.topics.add("owned/fred", "JSON", {"OWNER": "$Principal is 'fred'"})
        await admin.topics.add_and_set("owned/other", {"n": 0}, "JSON")
        async with canopy.connect(server.url, "fred", "fred-secret-words") as fred, \
                canopy.connect(server.url, "ann", "ann-secret-words") as ann:
            seen: list[tuple[str, str, Any]] = []
            await fred.topics.subscribe("?owned//", callback=lambda e: seen.append((e.kind, e.path, e.value)))
            await fred.topics.set("owned/fred", {"n": 1})
            await fred.topics.apply_json_patch("owned/fred", [{"op": "replace", "path": "/n", "value": 2}])
            await until(lambda: ("value", "owned/fred", {"n": 2}) in seen, "the owner's updates", lambda: seen)
            assert {path for _, path, _ in seen} == {"owned/fred"}  # never the topic it does not own
            assert [r.path for r in await fred.topics.fetch("?owned//")] == ["owned/fred"]
            for session in (fred, ann):
                with pytest.raises(errors.PermissionDeniedError, match="UPDATE_TOPIC is needed on 'owned/other'"):
                    await session.topics.set("owned/other", {"n": 1})
            with pytest.raises(errors.PermissionDeniedError, match="UPDATE_TOPIC is needed on 'owned/fred'"):
                await ann.topics.set("owned/fred", {"n": 3})
            with pytest.raises(errors.PermissionDeniedError, match="MODIFY_TOPIC"):
                await ann.topics.remove("owned/fred")
            assert await ann.topics.fetch("?owned//") == []
            assert await fred.topics.remove("owned/fred") == 1
            await until(lambda: seen[-1][0] == "unsubscribed", "the removal", lambda: seen[-1])
        assert [r.path for r in await admin.topics.fetch("?owned//")] == ["owned/other"]


# -- client control: other sessions' properties, roles, subscriptions, events ----------------------


async def test_client_control_lists_reads_changes_roles_and_closes(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as admin, \
            canopy.connect(server.url, properties={"cc": "roles"}) as target:
        await admin.security.update(["set_path_permissions", "ANONYMOUS", "cc/secret", []],
                                    ["set_path_permissions", "CC_READER", "cc/secret", ["READ_TOPIC", "SELECT_TOPIC"]])
        await admin.topics.add_and_set("cc/secret/a", "hidden", "STRING")
        sid = target.session_id
        listed = await admin.clients.list("cc is 'roles'")
        assert list(listed) == [sid] and listed[sid]["$Principal"] == ""
        assert sid in await admin.clients.list()
        props = await admin.clients.get_properties(sid, ["cc", ALL_FIXED_PROPERTIES])
        assert props["cc"] == "roles" and props["$SessionId"] == sid and "$Roles" in props
        assert await admin.clients.get_properties(sid, ["cc"]) == {"cc": "roles"}
        with pytest.raises(errors.NoSuchSessionError):
            await admin.clients.get_properties("no-such-session")

        with pytest.raises(errors.PermissionDeniedError):  # no role gives it the branch yet
            await target.topics.subscribe("?cc/secret//")
        assert await admin.clients.change_roles(sid, add=["CC_READER"]) == 1
        assert '"CC_READER"' in (await admin.clients.get_properties(sid, ["$Roles"]))["$Roles"]
        events: list[Any] = []
        await target.topics.subscribe("?cc/secret//", callback=lambda e: events.append((e.kind, e.path, e.reason)))
        await until(lambda: ("subscribed", "cc/secret/a", None) in events, "the topic", lambda: events)
        assert await admin.clients.change_roles(filter="cc is 'roles'", remove=["CC_READER"]) == 1
        await until(lambda: ("unsubscribed", "cc/secret/a", "AUTHORIZATION") in events, "losing it", lambda: events)
        with pytest.raises(errors.PermissionDeniedError):
            await target.topics.fetch("?cc/secret//")

        # bad input is typed, and so is an unknown session
        with pytest.raises(errors.InvalidRequestError, match="both removed and added"):
            await admin.clients.change_roles(sid, remove=["A"], add=["A"])
        with pytest.raises(errors.InvalidRequestError, match="name roles"):
            await admin.clients.change_roles(sid)
        with pytest.raises(errors.NoSuchSessionError):
            await admin.clients.change_roles("no-such-session", add=["A"])
        with pytest.raises(errors.InvalidFilterError):
            await admin.clients.list("cc is")
        with pytest.raises(errors.InvalidFilterError):
            await admin.clients.listen(lambda e: None, "x is '" + "y" * 5000 + "'")
        with pytest.raises(errors.InvalidSelectorError):
            await admin.clients.subscribe(sid, "?cc/(")

        assert await admin.clients.close(sid) == 1
        await until(lambda: target.closed, "the target closed", lambda: target.close_reason)
        assert target.close_reason is not None and target.close_reason.code == "CLOSED_BY_CLIENT_CONTROL"


async def test_client_control_subscribes_other_sessions_by_id_and_filter(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as admin, \
            canopy.connect(server.url, properties={"cc": "sub"}) as one, \
            canopy.connect(server.url, properties={"cc": "sub"}) as two:
        await admin.topics.add_and_set("cc/feed/a", 1, "INT64")
        got: dict[str, list[Any]] = {"one": [], "two": []}
        one.clients.unrequested(lambda e: got["one"].append((e.kind, e.path, e.value)))
        caught = two.clients.unrequested()
        assert await admin.clients.subscribe(one.session_id, "?cc/feed//") == 1
        await until(lambda: ("subscribed", "cc/feed/a", 1) in got["one"], "one's first value", lambda: got)
        assert await admin.clients.subscribe(filter="cc is 'sub'", selector="?cc/feed//") == 2
        event = await caught.next(15)
        assert (event.kind, event.path, event.value) == ("subscribed", "cc/feed/a", 1)
        await admin.topics.set("cc/feed/a", 2)
        await admin.topics.add_and_set("cc/feed/b", 3, "INT64")  # the selector is theirs: later topics come too
        await until(lambda: ("value", "cc/feed/a", 2) in got["one"] and ("subscribed", "cc/feed/b", 3) in got["one"],
                    "new values and topics", lambda: got)
        assert (await caught.next(15)).value == 2
        # a subscription of its own takes the topics from the catch-all
        own = await two.topics.subscribe("?cc/feed//")
        await admin.topics.set("cc/feed/a", 4)
        while (e := await own.next(15)).kind != "value" or e.path != "cc/feed/a" or e.value != 4:
            pass
        assert await admin.clients.unsubscribe(one.session_id, "?cc/feed//") == 1
        await until(lambda: ("unsubscribed", "cc/feed/a", None) in got["one"], "unsubscribed", lambda: got)
        assert await admin.clients.subscribe(filter="cc is 'nobody'", selector="?cc/feed//") == 0
        with pytest.raises(errors.NoSuchSessionError):
            await admin.clients.subscribe("no-such-session", "?cc/feed//")


async def test_client_control_needs_its_permissions(server: Server) -> None:
    async with canopy.connect(server.url) as anonymous, canopy.connect(server.url) as other:
        for call in (
            anonymous.clients.list(),
            anonymous.clients.change_roles(other.session_id, add=["ADMINISTRATOR"]),
            anonymous.clients.subscribe(other.session_id, "?cc//"),
            anonymous.clients.unsubscribe(other.session_id, "?cc//"),
            anonymous.clients.listen(lambda e: None),
        ):
            with pytest.raises(errors.PermissionDeniedError):
                await call
        assert "ADMINISTRATOR" not in other.properties["$Roles"]


async def test_session_events_reach_a_listener(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as admin, canopy.connect(server.url, properties={"cc": "ev"}) as old:
        events: list[Any] = []
        listener = await admin.clients.listen(events.append, "cc is 'ev'", ["cc", "mood"])
        await until(lambda: any(e.is_open and e.session_id == old.session_id for e in events), "the open session",
                    lambda: events)
        assert events[0].properties == {"cc": "ev"}
        async with canopy.connect(server.url, properties={"cc": "ev"}) as new:
            await until(lambda: any(e.is_open and e.session_id == new.session_id for e in events), "the new session",
                        lambda: events)
            await admin.clients.set_properties({"mood": "good"}, new.session_id)
            await until(lambda: any(e.type == "PROPERTIES" for e in events), "the change", lambda: events)
            change = next(e for e in events if e.type == "PROPERTIES")
            assert change.properties == {"cc": "ev", "mood": "good"} and change.changed == {"mood": None}
            new_id = new.session_id
        await until(lambda: any(e.state == "CLOSED" and e.session_id == new_id for e in events), "the close",
                    lambda: events)
        closed = next(e for e in events if e.state == "CLOSED")
        assert closed.reason == "CLOSED_BY_CLIENT" and closed.properties == {}
        await listener.close()
        count = len(events)
        async with canopy.connect(server.url, properties={"cc": "ev"}):
            await admin.clients.list()  # a round trip: an event would have come by now
        assert len(events) == count


def test_cli_client_control(server: Server) -> None:
    import subprocess

    from tests.e2e.conftest import BIN

    def run(*args: str, admin: bool = True) -> Any:
        return cli(*args, url=server.url, admin=admin)

    with canopy.connect_sync(server.url, properties={"cc": "cli"}) as target:
        caught = target.clients.unrequested()
        sid = target.session_id
        listed = run("session", "list", "--filter", "cc is 'cli'", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [json.loads(line)["session"] for line in listed.stdout.splitlines()] == [sid]
        roles = run("session", "roles", sid, "--add", "CC_CLI", "--json")
        assert roles.returncode == 0 and json.loads(roles.stdout) == {"sessions": 1}, roles.stderr
        assert run("topic", "add", "cc/cli/a", "--type", "STRING").returncode == 0
        assert run("topic", "set", "cc/cli/a", "x").returncode == 0
        subscribed = run("session", "subscribe", "--filter", "cc is 'cli'", "?cc/cli//")
        assert subscribed.returncode == 0 and subscribed.stdout.strip() == "1", subscribed.stderr
        assert caught.next(15).path == "cc/cli/a"
        assert run("session", "unsubscribe", sid, "?cc/cli//").stdout.strip() == "1"
        refused = run("session", "roles", sid, "--add", "X", admin=False)
        assert refused.returncode == 1 and "PERMISSION_DENIED" in refused.stderr, refused.stderr
        bad = run("session", "roles", sid, "--add", "X", "--remove", "X")
        assert bad.returncode == 1 and "INVALID_REQUEST" in bad.stderr, bad.stderr
        # watch: the open session first, then the one closed below
        watch = subprocess.Popen(
            [str(BIN / "canopy"), "session", "watch", "--filter", "cc is 'cli'", "--count", "2", "--json",
             "--seconds", "30", "--url", server.url, "--principal", ADMIN[0], "--password", ADMIN[1]],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert watch.stdout is not None
        first = json.loads(watch.stdout.readline())
        assert first["session"] == sid and first["state"] == "ACTIVE"
        closed = run("session", "close", sid, "--json")
        assert json.loads(closed.stdout) == {"closed": 1}, closed.stderr
        out, err = watch.communicate(timeout=30)
        last = json.loads(out.splitlines()[-1])
        assert (last["session"], last["state"], last["reason"]) == (sid, "CLOSED", "CLOSED_BY_CLIENT_CONTROL"), err


# -- request/response messaging (session.messaging, canopy message) -------------------------------


async def test_requests_reach_the_most_specific_handler_with_typed_values(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN, properties={"DESK": "fx"}) as sender, \
            canopy.connect(server.url, *ADMIN) as broad, canopy.connect(server.url, *ADMIN) as deep:
        heard: list[tuple[str, Any, str, dict[str, str]]] = []

        async def echo(request: Any, context: canopy.client.RequestContext) -> Any:
            heard.append(("broad", request, context.path, context.properties))
            return request

        def shout(request: Any, context: canopy.client.RequestContext) -> Any:
            heard.append(("deep", request, context.path, context.properties))
            return f"{request}!".upper()

        await broad.messaging.add_request_handler("msg", echo, session_properties=["DESK", "$Principal"])
        async with await deep.messaging.add_request_handler("msg/deep", shout, request_type="STRING",
                                                            response_type="STRING"):
            for value, kind in (("text", "STRING"), (42, "INT64"), (2.5, "DOUBLE"), ({"a": [1, None]}, "JSON"),
                                (b"\x00\xff", "BINARY")):
                assert await sender.messaging.send_request("msg/x/y", value, kind, kind) == value
            assert await sender.messaging.send_request("msg", 7) == 7  # types inferred from the values
            assert await sender.messaging.send_request("msg/deep/er", "hi") == "HI!"
            with pytest.raises(errors.IncompatibleDatatypeError):  # the deep handler takes strings only
                await sender.messaging.send_request("msg/deep", 1)
            with pytest.raises(errors.IncompatibleDatatypeError):  # the response is a STRING
                await sender.messaging.send_request("msg/deep", "x", response_type="INT64")
            with pytest.raises(errors.HandlerConflictError):  # one handler per path per session
                await deep.messaging.add_request_handler("msg/deep", shout)
        assert heard[0] == ("broad", "text", "msg/x/y", {"DESK": "fx", "$Principal": "admin"})
        assert [h[0] for h in heard] == ["broad"] * 6 + ["deep", "deep"]
        # the deep registration closed: its branch falls back to the broad handler
        assert await sender.messaging.send_request("msg/deep/er", "hi") == "hi"


async def test_requests_to_a_session_and_to_a_filter(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as sender, \
            canopy.connect(server.url, properties={"POOL": "m1"}) as one, \
            canopy.connect(server.url, properties={"POOL": "m1"}) as two, \
            canopy.connect(server.url, properties={"POOL": "m1"}) as silent:
        one.messaging.set_request_stream("work", lambda request, context: {"by": "one", "n": request["n"] + 1})
        two.messaging.set_request_stream("work", lambda request, context: {"by": "two", "n": request["n"] + 2})
        direct = await sender.messaging.send_request_to_session(one.session_id, "work/a", {"n": 1})
        assert direct == {"by": "one", "n": 2}
        with pytest.raises(errors.NoSuchSessionError):
            await sender.messaging.send_request_to_session("gateway-0-nope", "work", {"n": 1})
        with pytest.raises(errors.UnhandledMessageError):  # no request stream for the path
            await sender.messaging.send_request_to_session(silent.session_id, "work", {"n": 1})

        answers: dict[str, Any] = {}
        count = await sender.messaging.send_request_to_filter(
            "POOL is 'm1'", "work", {"n": 10}, lambda sid, response, error: answers.__setitem__(sid, response or error),
            timeout=5)
        assert count == 3
        await until(lambda: len(answers) == 3, "an answer from each session", lambda: answers)
        assert answers[one.session_id] == {"by": "one", "n": 11} and answers[two.session_id] == {"by": "two", "n": 12}
        assert isinstance(answers[silent.session_id], errors.UnhandledMessageError)
        assert await sender.messaging.send_request_to_filter("POOL is 'none'", "work", 1, lambda *a: None) == 0
        with pytest.raises(errors.InvalidFilterError):
            await sender.messaging.send_request_to_filter("POOL is", "work", 1, lambda *a: None)
        one.messaging.remove_request_stream("work")
        with pytest.raises(errors.UnhandledMessageError):
            await sender.messaging.send_request_to_session(one.session_id, "work", {"n": 1})


async def test_requests_fail_typed_and_the_session_goes_on(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as sender, canopy.connect(server.url, *ADMIN) as handler, \
            canopy.connect(server.url) as anonymous:
        release = asyncio.Event()

        async def slow(request: Any, context: Any) -> Any:
            await release.wait()
            return request

        def refuse(request: Any, context: Any) -> Any:
            raise ValueError(f"no {request} today")

        await handler.messaging.add_request_handler("fail/slow", slow)
        await handler.messaging.add_request_handler("fail/refuse", refuse)
        started = time.monotonic()
        with pytest.raises(errors.RequestTimeoutError):
            await sender.messaging.send_request("fail/slow", 1, timeout=0.3)
        assert time.monotonic() - started < 5
        release.set()
        with pytest.raises(errors.RejectedRequestError, match="no pasta today"):
            await sender.messaging.send_request("fail/refuse", "pasta")
        with pytest.raises(errors.UnhandledMessageError):
            await sender.messaging.send_request("nobody/handles/this", 1)
        # the shipped store gives anonymous sessions neither SEND_TO_MESSAGE_HANDLER, SEND_TO_SESSION
        # nor REGISTER_HANDLER (receiving on a request stream needs nothing)
        with pytest.raises(errors.PermissionDeniedError, match="SEND_TO_MESSAGE_HANDLER"):
            await anonymous.messaging.send_request("fail/refuse", "x")
        with pytest.raises(errors.PermissionDeniedError, match="SEND_TO_SESSION"):
            await anonymous.messaging.send_request_to_session(handler.session_id, "fail", "x")
        with pytest.raises(errors.PermissionDeniedError, match="REGISTER_HANDLER"):
            await anonymous.messaging.add_request_handler("anon", refuse)
        # bad input: each refused with its own error, the session going on
        with pytest.raises(errors.InvalidTypeError):
            await sender.messaging.send_request("fail/refuse", "x", request_type="TIME_SERIES")
        with pytest.raises(errors.InvalidTypeError):
            await sender._call("message_send", "fail/refuse", "NOPE", b"\x61")
        with pytest.raises(errors.InvalidValueError):  # not a CBOR INT64
            await sender._call("message_send", "fail/refuse", "INT64", b"\x61")
        with pytest.raises(errors.InvalidValueError, match="at most"):  # within the frame, over the value limit
            await sender.messaging.send_request("fail/slow", b"x" * (4 * 1024 * 1024 - 32 * 1024))
        with pytest.raises(errors.FrameTooLargeError):  # over the frame: refused before it is sent
            await sender.messaging.send_request("fail/slow", b"x" * (5 * 1024 * 1024))
        with pytest.raises(errors.InvalidPathError):
            await sender.messaging.send_request("//", 1)
        assert await sender.messaging.send_request("fail/slow", "still here") == "still here"
        # a handler's session that closes: its handlers are gone, what it owed fails
        release.clear()
        pending = asyncio.ensure_future(sender.messaging.send_request("fail/slow", 2, timeout=20))
        await until(lambda: bool(handler.messaging._tasks), "the request to reach the handler",
                    lambda: handler.messaging._tasks)
        await handler.close()
        with pytest.raises(errors.RecipientClosedError):
            await pending
        with pytest.raises(errors.UnhandledMessageError):
            await sender.messaging.send_request("fail/slow", 3)


def test_cli_sends_and_handles_requests(server: Server) -> None:
    import subprocess

    from tests.e2e.conftest import BIN

    def run(*args: str, admin: bool = True) -> Any:
        return cli(*args, url=server.url, admin=admin)

    handle = subprocess.Popen(
        [str(BIN / "canopy"), "message", "handle", "cli/msg", "--count", "2", "--json", "--url", server.url,
         "--principal", ADMIN[0], "--password", ADMIN[1]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert handle.stderr is not None
        assert "handling requests on cli/msg" in handle.stderr.readline()
        sent = run("message", "send", "cli/msg/a", '{"q": 1}', "--json")
        assert sent.returncode == 0 and json.loads(sent.stdout) == {"path": "cli/msg/a", "response": {"q": 1}}, \
            sent.stderr
        typed = run("message", "send", "cli/msg", "12", "--type", "INT64", "--response-type", "INT64")
        assert typed.returncode == 0 and typed.stdout.strip() == "12", typed.stderr
        out, err = handle.communicate(timeout=30)
        assert handle.returncode == 0, err
        records = [json.loads(line) for line in out.splitlines()]
        assert [(r["path"], r["request"], r["response"]) for r in records] == [
            ("cli/msg/a", {"q": 1}, {"q": 1}), ("cli/msg", 12, 12)]
    finally:
        if handle.poll() is None:
            handle.kill()
    unhandled = run("message", "send", "cli/msg", "x")
    assert unhandled.returncode == 1 and "UNHANDLED_MESSAGE" in unhandled.stderr, unhandled.stderr
    denied = run("message", "send", "cli/msg", "x", admin=False)
    assert denied.returncode == 1 and "PERMISSION_DENIED" in denied.stderr, denied.stderr
    with canopy.connect_sync(server.url, properties={"CLI_MSG": "yes"}) as target:
        target.messaging.set_request_stream("cli/ask", lambda request, context: f"{request} back")
        one = run("message", "send", "cli/ask", "hello", "--session", target.session_id)
        assert one.returncode == 0 and one.stdout.strip() == "hello back", one.stderr
        many = run("message", "send", "cli/ask", "hey", "--filter", "CLI_MSG is 'yes'", "--json", "--timeout", "5")
        assert many.returncode == 0, many.stderr
        assert [json.loads(line) for line in many.stdout.splitlines()] == [
            {"session": target.session_id, "response": "hey back"}]
        assert "sent to 1 session" in many.stderr


# -- session locks ---------------------------------------------------------------------------


async def listed(session: canopy.Session, name: str) -> dict[str, Any] | None:
    return next((lock for lock in await session.locks.list() if lock["name"] == name), None)


async def until_listed(session: canopy.Session, name: str, what: Callable[[dict[str, Any] | None], bool],
                       said: str) -> None:
    deadline = time.monotonic() + 15
    while not what(last := await listed(session, name)):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for lock {name} {said}; last listed: {last!r}")
        await asyncio.sleep(0.05)


async def test_a_held_lock_is_waited_for_and_passes_on_with_a_higher_sequence(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as a, canopy.connect(server.url, *ADMIN) as b:
        first = await a.locks.lock("locks/one")
        assert first.owned and first.name == "locks/one" and first.scope is canopy.UNLOCK_ON_SESSION_LOSS
        assert await a.locks.lock("/locks//one") == first  # held already: the same lock
        waiting = asyncio.ensure_future(b.locks.lock("locks/one"))
        await until_listed(a, "locks/one", lambda lock: lock is not None and lock["waiting"] == 1, "to have a waiter")
        assert not waiting.done() and (await listed(a, "locks/one"))["session_id"] == a.session_id  # type: ignore[index]
        assert await first.unlock() and not first.owned
        second = await asyncio.wait_for(waiting, 15)
        assert second.sequence > first.sequence and second.owned
        assert not await first.unlock()  # a's no more

        # the owner's session closes: the lock passes to the waiter
        again = asyncio.ensure_future(a.locks.lock("locks/one"))
        await until_listed(a, "locks/one", lambda lock: lock is not None and lock["waiting"] == 1, "to have a waiter")
        await b.close()
        third = await asyncio.wait_for(again, 15)
        assert third.sequence > second.sequence and not second.owned

        # a cancelled wait is withdrawn
        async with canopy.connect(server.url, *ADMIN) as c_:
            cancelled = asyncio.ensure_future(c_.locks.lock("locks/one"))
            await until_listed(a, "locks/one", lambda lock: lock is not None and lock["waiting"] == 1, "a waiter")
            cancelled.cancel()
            await until_listed(a, "locks/one", lambda lock: lock is not None and lock["waiting"] == 0, "no waiter")
        assert await third.unlock()
        await until_listed(a, "locks/one", lambda lock: lock is None, "to be free")


async def test_a_dropped_connection_releases_only_connection_scoped_locks(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as a, canopy.connect(server.url, *ADMIN) as b:
        kept = await a.locks.lock("locks/kept")
        dropped = await a.locks.lock("locks/dropped", canopy.UNLOCK_ON_CONNECTION_LOSS)
        assert dropped.scope is canopy.UNLOCK_ON_CONNECTION_LOSS
        waiting = asyncio.ensure_future(b.locks.lock("locks/dropped"))
        await until_listed(b, "locks/dropped", lambda lock: lock is not None and lock["waiting"] == 1, "a waiter")
        stream = a._stream
        assert stream is not None
        stream.abort()  # dropped without a close: the gateway keeps the session for its client
        taken = await asyncio.wait_for(waiting, 15)
        assert taken.sequence > dropped.sequence
        await until(lambda: a.connected and a.reconnects == 1, "a to resume", lambda: (a.connected, a.reconnects))
        assert a.session_id == kept._session_id, "resumed, not a new session"
        assert kept.owned and not dropped.owned
        held = await listed(b, "locks/kept")
        assert held is not None and held["session_id"] == a.session_id and held["sequence"] == kept.sequence
        await a.topics.add("locks/fenced", "STRING")
        await a.topics.set("locks/fenced", "still mine", constraint=c.locked(kept))
        with pytest.raises(errors.UnsatisfiedConstraintError, match="locks/dropped"):
            await a.topics.set("locks/fenced", "not mine", constraint=c.locked(dropped))
        assert await kept.unlock() and await taken.unlock()


async def test_a_locked_constraint_lets_only_the_owner_at_that_sequence_update(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as a, canopy.connect(server.url, *ADMIN) as b:
        await a.topics.add_and_set("locks/guarded", {"n": 0}, "JSON")
        lock = await a.locks.lock("locks/guard")
        await a.topics.set("locks/guarded", {"n": 1}, constraint=c.locked(lock))
        await a.topics.apply_json_patch("locks/guarded", [{"op": "replace", "path": "/n", "value": 2}],
                                        c.locked(lock) & c.json_with_value("/n", 1))
        with pytest.raises(errors.UnsatisfiedConstraintError, match="does not hold lock 'locks/guard'"):
            await b.topics.set("locks/guarded", {"n": 9}, constraint=c.locked(lock))  # another session
        await b.topics.set("locks/guarded", {"n": 3}, constraint=c.locked(lock) | c.json_with_value("/n", 2))
        assert await lock.unlock()
        renewed = await a.locks.lock("locks/guard")
        assert renewed.sequence > lock.sequence
        with pytest.raises(errors.UnsatisfiedConstraintError):  # a stale sequence: a fenced-off update
            await a.topics.set("locks/guarded", {"n": 9}, constraint=c.locked(lock))
        await a.topics.set("locks/guarded", {"n": 4}, constraint=c.locked(renewed))
        assert (await b.topics.fetch("locks/guarded"))[0].value == {"n": 4}
        assert await renewed.unlock()


async def test_locks_need_their_permission_and_well_formed_names(server: Server) -> None:
    async with canopy.connect(server.url) as anonymous, canopy.connect(server.url, *ADMIN) as admin:
        with pytest.raises(errors.PermissionDeniedError, match="ACQUIRE_LOCK"):
            await anonymous.locks.lock("locks/anyone")
        with pytest.raises(errors.PermissionDeniedError, match="VIEW_SERVER"):
            await anonymous.locks.list()
        assert not await anonymous._call("unlock", "locks/anyone")  # its own locks only: none
        for bad in ("", "/", "x" * 300, "a\x00b"):
            with pytest.raises(errors.InvalidPathError):
                await admin.locks.lock(bad)
        with pytest.raises(errors.InvalidRequestError):
            await admin.locks.lock("locks/x", "SOMETIMES")
        with pytest.raises(errors.InvalidRequestError, match="scope"):
            await admin._call("lock", "locks/x", "SOMETIMES")
        with pytest.raises(errors.InvalidRequestError):
            await admin._call("unlock", "locks/x", "not a sequence")
        with pytest.raises(errors.InvalidRequestError):
            await admin._call("lock", "locks/x", None, "extra")
        lock = await admin.locks.lock("locks/x")  # the session goes on
        assert await lock.unlock()


def test_cli_holds_and_lists_locks(server: Server) -> None:
    held = cli("lock", "hold", "cli/lock", "--seconds", "0", "--scope", "connection", url=server.url)
    assert held.returncode == 0 and "cli/lock: locked, sequence " in held.stdout, held.stderr
    first = int(held.stdout.split("sequence ")[1])
    with canopy.connect_sync(server.url, *ADMIN) as session:
        lock = session.locks.lock("cli/lock")
        assert lock.sequence > first and lock.owned
        listing = cli("lock", "list", "--json", url=server.url)
        assert listing.returncode == 0, listing.stderr
        rows = [json.loads(line) for line in listing.stdout.splitlines()]
        assert {"name": "cli/lock", "sequence": lock.sequence, "session_id": session.session_id,
                "scope": "UNLOCK_ON_SESSION_LOSS", "waiting": 0} in rows
        busy = cli("lock", "hold", "cli/lock", "--seconds", "0", "--wait", "0.5", url=server.url)
        assert busy.returncode == 1 and "TIMEOUT" in busy.stderr, busy.stderr
        assert lock.unlock()
    denied = cli("lock", "list", url=server.url, admin=False)
    assert denied.returncode == 1 and "PERMISSION_DENIED" in denied.stderr


# -- automatic topic removal (REMOVAL) ---------------------------------------------------


async def removal_until(session: canopy.Session, selector: str, count: int, what: str, seconds: float = 15) -> float:
    """Poll until ``selector`` matches ``count`` topics; the monotonic time it did."""
    deadline = time.monotonic() + seconds
    while True:
        rows = await session.topics.fetch(selector)
        if len(rows) == count:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}; last seen: {[r.path for r in rows]}")
        await asyncio.sleep(0.05)


async def test_removal_when_no_updates_removes_only_the_idle_topic(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as s:
        policy = {"REMOVAL": "when no updates for 1s"}
        added = time.monotonic()
        await s.topics.add("removal/idle/a", "STRING", policy)
        await s.topics.add("removal/idle/b", "STRING", policy)
        while (await s.topics.fetch(">removal/idle/a")):
            await s.topics.set("removal/idle/b", str(time.monotonic()))
            await asyncio.sleep(0.2)
            assert time.monotonic() - added < 15, "the idle topic was never removed"
        assert time.monotonic() - added >= 1.0
        assert [r.path for r in await s.topics.fetch("?removal/idle//")] == ["removal/idle/b"]
        await removal_until(s, ">removal/idle/b", 0, "the other once idle")


async def test_removal_when_fewer_subscriptions_waits_for_the_unsubscribe(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as s, canopy.connect(server.url) as subscriber:
        await subscriber.topics.subscribe(">removal/subs/a")
        await s.topics.add("removal/subs/a", "STRING", {"REMOVAL": "when subscriptions < 1 for 1s"})
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert await s.topics.fetch(">removal/subs/a"), "removed while subscribed"
            await asyncio.sleep(0.2)
        await subscriber.topics.unsubscribe(">removal/subs/a")
        left = time.monotonic()
        gone = await removal_until(s, ">removal/subs/a", 0, "removal after the unsubscribe")
        assert gone - left >= 1.0


async def test_removal_when_this_session_closes(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as s:
        async with canopy.connect(server.url, *ADMIN) as creator:
            await creator.topics.add("removal/mine/a", "STRING", {"REMOVAL": "when this session closes"})
            await creator.topics.add("removal/mine/b", "STRING")
        await removal_until(s, "?removal/mine//", 1, "the creator's topic removed")
        assert [r.path for r in await s.topics.fetch("?removal/mine//")] == ["removal/mine/b"]


async def test_removal_when_no_session_has_a_property(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as s:
        async with canopy.connect(server.url, properties={"Department": "removal-e2e"}):
            await s.topics.add("removal/dept/a", "STRING", {"REMOVAL": "when no session has 'Department is \"removal-e2e\"'"})
            deadline = time.monotonic() + 2.5
            while time.monotonic() < deadline:
                assert await s.topics.fetch(">removal/dept/a"), "removed while a session matches"
                await asyncio.sleep(0.2)
        await removal_until(s, ">removal/dept/a", 0, "removal once no session matches")


async def test_removal_with_a_remove_clause_and_a_time(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as s:
        for path in ("removal/branch/x/1", "removal/branch/x/2", "removal/branch/y", "removal/other"):
            await s.topics.add(path, "STRING")
        at = int(time.time() * 1000) + 1000
        await s.topics.add("removal/branch/policy", "STRING", {"REMOVAL": f"when time after {at} remove '?removal/branch/x//'"})
        await removal_until(s, "?removal/branch/x//", 0, "the branch removed")
        assert time.time() * 1000 >= at
        left = sorted(r.path for r in await s.topics.fetch("?removal//"))
        assert {"removal/branch/policy", "removal/branch/y", "removal/other"} <= set(left)


async def test_removal_refuses_a_bad_policy_with_its_position(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as s:
        with pytest.raises(errors.InvalidSpecificationError, match="column 17"):
            await s.topics.add("removal/bad", "STRING", {"REMOVAL": "when no updates 1s"})
        with pytest.raises(errors.InvalidSpecificationError, match="session filter"):
            await s.topics.add("removal/bad", "STRING", {"REMOVAL": "when no session has 'Department is'"})
        assert not await s.topics.fetch(">removal/bad")


# -- topic notifications (session.topics.notifications, canopy topic watch) ------------------------


class Heard:
    """What a notification listener's callbacks were told, as (type, path, topic type) triples."""

    def __init__(self) -> None:
        self.topics: list[tuple[str, str, str | None]] = []
        self.descendants: list[tuple[str, str]] = []
        self.raw: list[Any] = []

    def topic(self, n: Any) -> None:
        self.raw.append(n)
        self.topics.append((n.type.value, n.path, n.topic_type))

    def descendant(self, n: Any) -> None:
        self.raw.append(n)
        self.descendants.append((n.type.value, n.path))


async def test_topic_notifications_tell_of_topics_coming_and_going_without_values(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as admin, canopy.connect(server.url) as watcher:
        await admin.topics.add_and_set("notif/a/x", "a value", "STRING")
        await admin.topics.add("notif/a/n", "INT64")
        heard = Heard()
        listener = await watcher.topics.notifications("?notif/a/", heard.topic)
        assert sorted(heard.topics) == [("SELECTED", "notif/a/n", "INT64"), ("SELECTED", "notif/a/x", "STRING")]
        received = watcher.bytes_received
        for n in range(50):  # values: nothing for a listener, not even bytes on the wire
            await admin.topics.set("notif/a/x", f"value {n} " * 20)
        await admin.topics.add("notif/a/y", "JSON", {"PERSISTENT": "false"})
        await until(lambda: len(heard.topics) == 3, "ADDED", lambda: heard.topics)
        assert heard.topics[2] == ("ADDED", "notif/a/y", "JSON")
        assert heard.raw[2].specification.properties == {"PERSISTENT": "false"}
        assert watcher.bytes_received - received < 1000, "values travelled to a notification listener"
        await admin.topics.remove(">notif/a/x")
        await until(lambda: len(heard.topics) == 4, "REMOVED", lambda: heard.topics)
        assert heard.topics[3] == ("REMOVED", "notif/a/x", "STRING")
        await listener.select(">notif/b")  # a selector matching nothing yet
        await admin.topics.add("notif/b", "STRING")
        await until(lambda: len(heard.topics) == 5, "ADDED by the second selector", lambda: heard.topics)
        await listener.deselect("?notif/a/")
        assert sorted(heard.topics[5:]) == [("DESELECTED", "notif/a/n", "INT64"), ("DESELECTED", "notif/a/y", "JSON")]
        assert listener.topics.keys() == {"notif/b"}
        await listener.close()
        await admin.topics.add("notif/b/after", "STRING")
        await admin.topics.remove(">notif/b")
        assert await watcher._call("notify_close", 99) is None  # an unknown listener: nothing to do
        assert len(heard.topics) == 5 + 2


async def test_descendant_notifications_follow_the_reference_example(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as admin, canopy.connect(server.url) as watcher:
        for path in ("desc/a/b", "desc/a/c", "desc/a/c/d", "desc/a/e/f/g"):
            await admin.topics.add(path, "STRING")
        heard = Heard()
        listener = await watcher.topics.notifications(">desc/a", heard.topic, descendants=heard.descendant)
        assert heard.topics == []  # nothing is bound at desc/a itself
        assert heard.descendants == [("SELECTED", "desc/a/b"), ("SELECTED", "desc/a/c"), ("SELECTED", "desc/a/e/f/g")]
        await admin.topics.add("desc/a/b/c", "STRING")  # below desc/a/b: not an immediate descendant
        await admin.topics.add("desc/a/h", "STRING")
        await until(lambda: len(heard.descendants) == 4, "a descendant ADDED", lambda: heard.descendants)
        assert heard.descendants[3] == ("ADDED", "desc/a/h")
        await listener.select(">desc/a/b")
        assert heard.topics == [("SELECTED", "desc/a/b", "STRING")]
        assert heard.descendants[4:] == [("DESELECTED", "desc/a/b"), ("SELECTED", "desc/a/b/c")]
        await admin.topics.remove(">desc/a/c")
        await until(lambda: len(heard.descendants) == 8, "REMOVED and the next one down", lambda: heard.descendants)
        assert heard.descendants[6:] == [("REMOVED", "desc/a/c"), ("ADDED", "desc/a/c/d")]
        assert listener.descendants == ["desc/a/b/c", "desc/a/c/d", "desc/a/e/f/g", "desc/a/h"]


async def test_topic_notifications_need_select_topic_and_tell_only_what_may_be_read(server: Server) -> None:
    async with canopy.connect(server.url, *ADMIN) as admin, canopy.connect(server.url) as anonymous:
        await admin.security.update(["set_path_permissions", "ANONYMOUS", "nperm/secret", ["SELECT_TOPIC"]])
        for path in ("nperm/open", "nperm/secret", "nperm/secret/deeper", "nperm/x/y"):
            await admin.topics.add(path, "STRING")
        with pytest.raises(errors.PermissionDeniedError):
            await anonymous.topics.notifications(">$MQTT/sessions", lambda n: None)
        with pytest.raises(errors.InvalidSelectorError):
            await anonymous.topics.notifications("?nperm/[", lambda n: None)
        heard = Heard()
        await anonymous.topics.notifications(">nperm", heard.topic, descendants=heard.descendant)
        assert heard.descendants == [("SELECTED", "nperm/open"), ("SELECTED", "nperm/x/y")]
        listener = await anonymous.topics.notifications("?nperm//", heard.topic)
        assert sorted(heard.topics) == [("SELECTED", "nperm/open", "STRING"), ("SELECTED", "nperm/x/y", "STRING")]
        await admin.topics.add("nperm/secret/new", "STRING")
        await admin.topics.add("nperm/open2", "STRING")
        await until(lambda: ("ADDED", "nperm/open2", "STRING") in heard.topics, "the readable topic", lambda: heard.topics)
        told = [t[1] for t in heard.topics] + [d[1] for d in heard.descendants]
        assert ("ADDED", "nperm/open2") in heard.descendants and not any("secret" in path for path in told), told
        with pytest.raises(errors.InvalidRequestError):  # a listener keeps its kind
            await anonymous._call("notify_select", listener.id, ">nperm/z", True)


def test_cli_watches_topic_notifications(server: Server) -> None:
    import subprocess

    from tests.e2e.conftest import BIN

    assert cli("topic", "add", "cliwatch/a/b", "--type", "STRING", url=server.url).returncode == 0
    assert cli("topic", "add", "cliwatch/a/c/d", "--type", "INT64", url=server.url).returncode == 0
    once = cli("topic", "watch", ">cliwatch/a", "--descendants", "--count", "2", url=server.url)
    assert once.returncode == 0, once.stderr
    assert sorted(once.stdout.splitlines()) == ["SELECTED cliwatch/a/b descendant", "SELECTED cliwatch/a/c/d descendant"]
    watch = subprocess.Popen(
        [str(BIN / "canopy"), "topic", "watch", "?cliwatch//", "--count", "3", "--json", "--url", server.url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert watch.stdout is not None
    first = [json.loads(watch.stdout.readline()) for _ in range(2)]
    assert sorted((r["notification"], r["path"], r["type"]) for r in first) == [
        ("SELECTED", "cliwatch/a/b", "STRING"), ("SELECTED", "cliwatch/a/c/d", "INT64")]
    assert cli("topic", "remove", ">cliwatch/a/b", url=server.url).returncode == 0
    out, err = watch.communicate(timeout=30)
    assert json.loads(out) == {"notification": "REMOVED", "path": "cliwatch/a/b", "type": "STRING",
                               "descendant": False}, err
