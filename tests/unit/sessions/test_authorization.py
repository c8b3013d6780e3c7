"""The authorization matrix in the pure core: its coverage, its argument checks and its needs."""

from __future__ import annotations

from typing import Any

import pytest

from canopy import protocol as wire
from sessions.authorization import MATRIX, Need, Where, authorize, check_arguments
from sessions.registry import SessionRegistry
from sessions.requests import RequestError
from sessions.security import GlobalPermission, PathPermission, PermissionDenied, default_store
from topics.errors import PathError, SelectorError


def registry() -> SessionRegistry:
    store = default_store("admin-password").apply([
        ["set_path_permissions", "CLIENT", "mine", ["READ_TOPIC", "SELECT_TOPIC", "UPDATE_TOPIC", "MODIFY_TOPIC"]],
        ["set_global_permissions", "LINK", ["SERVER_LINK"]],
        ["set_default_path_permissions", "LINK", ["SELECT_TOPIC"]],
    ])
    r = SessionRegistry(security=store)
    r.open("anon", "", {}, frozenset({"ANONYMOUS"}))
    r.open("client", "c", {}, frozenset({"CLIENT"}))
    r.open("admin", "admin", {}, frozenset({"ADMINISTRATOR"}))
    r.open("link", "l", {}, frozenset({"LINK"}))
    return r


def test_the_matrix_covers_every_request_type_of_the_protocol() -> None:
    assert set(MATRIX) == set(wire.OPERATIONS)
    for op, rule in MATRIX.items():
        assert 0 <= rule.required <= len(rule.arguments), op
        for need in rule.needs:
            assert need.where is Where.SERVER or need.argument < rule.required, (op, need)
        assert rule.describe()


def test_server_to_server_requests_need_server_link() -> None:
    needs = [p for n in MATRIX["missing_topic_fwd"].needs for p in n.permissions]
    assert GlobalPermission.SERVER_LINK in needs
    assert all(GlobalPermission.SERVER_LINK not in n.permissions for op, r in MATRIX.items()
               if op != "missing_topic_fwd" for n in r.needs)
    r = registry()
    forged = [">a/b", "some-session", {"$Principal": "admin"}, ["elsewhere"]]
    for sid in ("anon", "client"):
        with pytest.raises(PermissionDenied, match="SERVER_LINK"):
            authorize(r, sid, "missing_topic_fwd", forged)
    authorize(r, "link", "missing_topic_fwd", forged)
    authorize(r, "admin", "missing_topic_fwd", forged)


@pytest.mark.parametrize(
    "op, args, message",
    [
        ("fetch", [], "fetch takes 1 to 5 arguments: selector (then, optionally: with_values, with_properties, "
                      "types, limit); got 0"),
        ("security_get", [1], "security_get takes 0 arguments: none; got 1"),
        ("unsubscribe", ["a", "b"], "unsubscribe takes 1 argument: selector; got 2"),
        ("set", ["a"], "set takes 3 to 8 arguments: path, value, raw (then, optionally: type, add_if_missing, retain, "
                       "attributes, constraint); got 1"),
    ],
)
def test_wrong_argument_counts_are_named_in_the_protocol_s_words(op: str, args: list[Any], message: str) -> None:
    with pytest.raises(RequestError) as info:
        check_arguments(op, MATRIX[op], args)
    assert str(info.value) == message and info.value.code == "INVALID_REQUEST"


def test_path_needs_are_checked_where_the_argument_points() -> None:
    r = registry()
    authorize(r, "client", "set", ["/mine/x/", b"", False])  # normalised before the check
    with pytest.raises(PermissionDenied, match="UPDATE_TOPIC is needed on 'other'"):
        authorize(r, "client", "set", ["other", b"", False])
    with pytest.raises(PathError):
        authorize(r, "admin", "set", ["a/\x01", b"", False])
    with pytest.raises(SelectorError):
        authorize(r, "admin", "fetch", ["?a(("])
    with pytest.raises(RequestError, match="selector has the wrong type"):
        authorize(r, "admin", "fetch", [5])


def test_remove_needs_modify_on_the_one_path_else_the_core_filters_each_topic() -> None:
    r = registry()
    with pytest.raises(PermissionDenied, match="MODIFY_TOPIC is needed on 'other'"):
        authorize(r, "client", "remove", [">other"])
    authorize(r, "client", "remove", [">mine/t"])
    authorize(r, "client", "remove", ["?other//"])  # only what it may modify goes (sessions.requests.remove_plan)


def test_any_of_the_permissions_of_a_need_will_do() -> None:
    r = registry()
    with pytest.raises(PermissionDenied):
        authorize(r, "client", "missing_topic_list", [])
    r.open("viewer", "v", {}, frozenset({"CONTROL"}))  # REGISTER_HANDLER and VIEW_SERVER both
    authorize(r, "viewer", "missing_topic_list", [])


def test_own_requests_need_nothing() -> None:
    r = registry()
    for op in ("unsubscribe", "missing_topic_rm", "missing_topic_ans", "tree_list"):
        args = ["x"] * MATRIX[op].required
        authorize(r, "anon", op, args)


def test_a_need_pairs_global_permissions_with_the_server_only() -> None:
    with pytest.raises(ValueError):
        Need((GlobalPermission.VIEW_SERVER,), Where.PATH)
    with pytest.raises(ValueError):
        Need((PathPermission.READ_TOPIC,), Where.SERVER)


def test_the_readme_shows_the_matrix_as_it_is() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    for op, rule in MATRIX.items():
        assert f"| `{op}` | {rule.describe()} |" in readme, op


def test_every_mqtt_packet_a_client_sends_maps_onto_the_matrix() -> None:
    from mqtt.properties import PacketType
    from sessions.authorization import MQTT_PACKETS

    sent_by_clients = {t.name for t in PacketType} - {"CONNACK", "SUBACK", "UNSUBACK", "PINGRESP"}
    assert set(MQTT_PACKETS) == sent_by_clients
    assert all(op in MATRIX for ops in MQTT_PACKETS.values() for op in ops)
