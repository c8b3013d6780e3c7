"""The authorization matrix, checked against a real gateway: every request type,
sent as an anonymous session, as a CLIENT principal and as the administrator,
is refused with PERMISSION_DENIED exactly when the matrix says it needs a
permission the session lacks there."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

import canopy
from canopy import errors
from canopy import protocol as wire
from actors.requests import HANDLERS
from sessions.authorization import MATRIX, Where
from sessions.security import default_store
from topics.selectors import parse_selector

from tests.actors.conftest import ADMIN

#: request type -> its arguments, for a test branch ``p``: well formed, so that only the
#: permissions decide between PERMISSION_DENIED and any other outcome; none harms the broker
SAMPLES: dict[str, Callable[[str], list[Any]]] = {
    "add": lambda p: [f"{p}/added", "STRING"],
    "set": lambda p: [f"{p}/t", b"\x61", True],
    "json_patch": lambda p: [f"{p}/t", "[]", ["no_topic"]],
    "remove": lambda p: [f">{p}/gone"],
    "fetch": lambda p: [f"?{p}//"],
    "subscribe": lambda p: [f"?{p}//"],
    "unsubscribe": lambda p: [f"?{p}//"],
    "append": lambda p: [f"{p}/series", b"\x61", True],
    "edit": lambda p: [f"{p}/series", 1, b"\x61", True],
    "range_query": lambda p: [f"{p}/series", "start", 0, "end", 0, "values"],
    "security_get": lambda p: [],
    "security_update": lambda p: [[]],
    "tree_put": lambda p: [f"{p}/tree", [["all", f"{p}/source"]]],
    "tree_get": lambda p: [f"{p}/tree"],
    "tree_remove": lambda p: [f"{p}/tree"],
    "tree_list": lambda p: [],
    "session_get": lambda p: [["id", "no-such-session"]],
    "session_set": lambda p: [["id", "no-such-session"], {"K": "v"}],
    "session_close": lambda p: [["id", "no-such-session"]],
    "session_roles": lambda p: [["id", "no-such-session"], [], ["R"]],
    "session_subscribe": lambda p: [["id", "no-such-session"], f"?{p}//"],
    "session_unsubscribe": lambda p: [["id", "no-such-session"], f"?{p}//"],
    "session_listen": lambda p: [1, "all"],
    "session_unlisten": lambda p: ["no-such-registration"],
    "view_create": lambda p: [f"view-{p}", f"map ?{p}/source// to {p}/view/<path(0)>"],
    "view_list": lambda p: [],
    "view_remove": lambda p: [f"view-{p}"],
    "trace": lambda p: [0, 0],
    "cluster_status": lambda p: [],
    "cluster_node": lambda p: ["pause", "no-such-node", 1.0, False],
    "fanout_list": lambda p: [],
    "fanout_add": lambda p: [{"name": ""}],
    "fanout_remove": lambda p: ["no-such-connection"],
    "server_add": lambda p: [{"name": ""}],
    "server_remove": lambda p: ["no-such-server"],
    "server_list": lambda p: [],
    "server_check": lambda p: ["no-such-server"],
    "collector_put": lambda p: [{"kind": "topic", "name": ""}],
    "collector_remove": lambda p: ["no-such-collector"],
    "collector_list": lambda p: [],
    "missing_topic_add": lambda p: [f"{p}/handled"],
    "missing_topic_rm": lambda p: ["no-such-registration"],
    "missing_topic_ans": lambda p: ["no-such-notification", "proceed"],
    "missing_topic_list": lambda p: [],
    "missing_topic_fwd": lambda p: [
        f">{p}/forwarded", "a-session-of-another-server", {"$Principal": "admin", "$Roles": "ADMINISTRATOR"},
        ["another-server"],
    ],
    "message_handler_add": lambda p: [f"{p}/messages"],
    "message_handler_rm": lambda p: ["no-such-registration"],
    "message_send": lambda p: [f"{p}/messages", "STRING", b"\x61a", None, 50],
    "message_send_session": lambda p: ["no-such-session", f"{p}/messages", "STRING", b"\x61a"],
    "message_send_filter": lambda p: ["NOBODY is 'here'", f"{p}/messages", "STRING", b"\x61a", 1],
    "message_respond": lambda p: ["no-such-request", "STRING", b"\x61a"],
    "message_reject": lambda p: ["no-such-request", "no"],
    "notify_select": lambda p: [1, f">{p}/notified"],
    "notify_deselect": lambda p: [1, f">{p}/notified"],
    "notify_close": lambda p: [1],
    "lock": lambda p: [f"{p}/lock"],
    "unlock": lambda p: [f"{p}/lock"],
    "lock_cancel": lambda p: [f"{p}/lock"],
    "lock_list": lambda p: [],
}

#: the roles of each kind of session under the store a new installation starts with
ROLES = {"anonymous": frozenset({"ANONYMOUS"}), "client": frozenset({"CLIENT"}), "admin": frozenset({"ADMINISTRATOR"})}


def expected_denied(op: str, roles: frozenset[str], args: list[Any]) -> bool:
    """What the matrix says: whether some need of the request is not met by ``roles``."""
    evaluator = default_store("any-password").evaluator()
    for need in MATRIX[op].needs:
        path: str | None = None
        if need.where is Where.PATH:
            path = args[need.argument]
        elif need.where is not Where.SERVER:
            selector = parse_selector(args[need.argument])
            path = selector.path_prefix if need.where is Where.SELECTOR_PREFIX else selector.literal_path
            assert path is not None, f"{op}: give a sample naming one path"
        if not any(evaluator.has(roles, p, path) for p in need.permissions):
            return True
    return False


def test_every_request_type_is_in_the_matrix_and_sampled() -> None:
    assert set(MATRIX) == set(wire.OPERATIONS) == set(HANDLERS)
    assert set(SAMPLES) == set(MATRIX)


async def test_outcomes_follow_the_matrix(broker: str) -> None:
    branch = f"matrix-{uuid.uuid4().hex[:8]}"
    client_name = f"{branch}-client"
    async with canopy.connect(broker, *ADMIN) as admin:
        await admin.security.update(["add_principal", client_name, "client-password", ["CLIENT"]])
        await admin.topics.add_and_set(f"{branch}/t", "x")
        sessions = {
            "anonymous": await canopy.connect(broker),
            "client": await canopy.connect(broker, client_name, "client-password"),
            "admin": admin,
        }
        try:
            mismatches = []
            denied_count = {kind: 0 for kind in sessions}
            for op in sorted(MATRIX):
                for kind, session in sessions.items():
                    args = SAMPLES[op](branch)
                    try:
                        await session._call(op, *args)
                        outcome = "ok"
                    except errors.PermissionDeniedError:
                        outcome = "PERMISSION_DENIED"
                    except errors.CanopyError as e:
                        outcome = e.code
                    assert outcome != "INTERNAL", f"{op} as {kind}: {outcome}"
                    denied = outcome == "PERMISSION_DENIED"
                    denied_count[kind] += denied
                    if denied != expected_denied(op, ROLES[kind], args):
                        mismatches.append((op, kind, outcome))
            assert not mismatches, mismatches
            # the defaults: the administrator may do everything, the others read and select only
            assert denied_count["admin"] == 0
            assert denied_count["anonymous"] == denied_count["client"] > len(MATRIX) // 2, denied_count
        finally:
            await sessions["anonymous"].close()
            await sessions["client"].close()
            await admin._call("view_remove", f"view-{branch}")
            await admin._call("tree_remove", f"{branch}/tree")
            await admin.security.update(["remove_principal", client_name])


async def test_forged_forwarded_notifications_are_refused(broker: str, prefix: str) -> None:
    """An ordinary session cannot pass itself off as another server's fan-out link: a
    forwarded missing-topic request needs SERVER_LINK, and the properties a link does
    forward reach the handler marked with the link's principal."""
    async with canopy.connect(broker, *ADMIN) as admin:
        heard: list[canopy.MissingTopicNotification] = []
        await admin.missing_topics.add_handler(prefix, lambda n: heard.append(n) or True)
        forged = [f">{prefix}/x", "invented-session", {"$Principal": "admin", "$Roles": "ADMINISTRATOR"}, ["elsewhere"]]
        async with canopy.connect(broker) as anonymous:
            for _ in range(20):
                with pytest.raises(errors.PermissionDeniedError, match="SERVER_LINK"):
                    await anonymous._call("missing_topic_fwd", *forged)
        assert heard == []
        # a principal that holds SERVER_LINK is heard, and its word is marked as forwarded
        link = f"{prefix}-link"
        await admin.security.update(
            ["set_global_permissions", link, ["SERVER_LINK"]],
            ["set_default_path_permissions", link, ["READ_TOPIC", "SELECT_TOPIC"]],
            ["add_principal", link, "link-password", [link]],
        )
        try:
            async with canopy.connect(broker, link, "link-password") as linked:
                assert await linked._call("missing_topic_fwd", *forged) == "proceed"
            assert len(heard) == 1, heard
            notification = heard[0]
            assert notification.properties["$ForwardedBy"] == link
            assert notification.servers[0] == "elsewhere" and notification.session_id == "invented-session"
        finally:
            await admin.security.update(["remove_principal", link])
