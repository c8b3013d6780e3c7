from __future__ import annotations

import hashlib
from typing import Any

import pytest

from sessions.security import (
    AuthenticationFailed,
    GlobalPermission,
    PathPermission,
    PermissionDenied,
    SecurityCommandError,
    SecurityStore,
    default_store,
    hash_password,
    verify_password,
)

P = PathPermission
G = GlobalPermission


def test_password_hashes_are_salted_scrypt() -> None:
    a, b = hash_password("correct horse"), hash_password("correct horse")
    assert a != b and a.startswith("scrypt$") and "correct" not in a
    assert verify_password("correct horse", a) and not verify_password("wrong", a)
    assert not verify_password("x", "md5$whatever")


def test_nearest_assignment_walking_up_is_the_only_one_that_counts() -> None:
    store = SecurityStore().apply(
        [
            ["set_default_path_permissions", "R", ["READ_TOPIC"]],
            ["set_path_permissions", "R", "a", ["READ_TOPIC", "UPDATE_TOPIC"]],
            ["set_path_permissions", "R", "a/b", ["SELECT_TOPIC"]],
        ]
    )
    ev = store.evaluator()
    roles = frozenset({"R"})
    assert ev.path_permissions(roles, "x/y") == {P.READ_TOPIC}
    assert ev.path_permissions(roles, "a") == {P.READ_TOPIC, P.UPDATE_TOPIC}
    assert ev.path_permissions(roles, "a/c/d") == {P.READ_TOPIC, P.UPDATE_TOPIC}
    assert ev.path_permissions(roles, "a/b") == {P.SELECT_TOPIC}  # not merged with a's
    assert ev.path_permissions(roles, "a/b/c") == {P.SELECT_TOPIC}


def test_roles_union_and_inclusion_with_cycles() -> None:
    store = SecurityStore().apply(
        [
            ["set_global_permissions", "A", ["VIEW_SESSION"]],
            ["set_default_path_permissions", "B", ["MODIFY_TOPIC"]],
            ["set_path_permissions", "B", "x", []],
            ["set_role_includes", "A", ["B"]],
            ["set_role_includes", "B", ["A"]],
        ]
    )
    ev = store.evaluator()
    assert ev.has(frozenset({"A"}), G.VIEW_SESSION)
    assert ev.has(frozenset({"A"}), P.MODIFY_TOPIC, "y")
    assert not ev.has(frozenset({"A"}), P.MODIFY_TOPIC, "x/z")
    assert not ev.has(frozenset({"nobody"}), P.READ_TOPIC, "y")
    with pytest.raises(PermissionDenied, match="UPDATE_TOPIC is needed on 'y'"):
        ev.check(frozenset({"A"}), P.UPDATE_TOPIC, "y")


def test_the_closure_follows_includes_once_each() -> None:
    store = SecurityStore().apply(
        [["set_role_includes", "A", ["B"]], ["set_role_includes", "B", ["C", "A"]], ["set_global_permissions", "C", []]]
    )
    ev = store.evaluator()
    assert sorted(r.name for r in ev.closure(frozenset({"A"}))) == ["A", "B", "C"]
    assert [r.name for r in ev.closure(frozenset({"C"}))] == ["C"]
    assert ev.closure(frozenset({"unknown"})) == ()


@pytest.mark.parametrize(
    "path, uniform",
    [("", False), ("a", False), ("a/b", True), ("a/b/c", True), ("x", True), ("a/bc", True)],
)
def test_uniform_below_only_when_no_role_assigns_further_down(path: str, uniform: bool) -> None:
    store = SecurityStore().apply(
        [
            ["set_default_path_permissions", "R", ["MODIFY_TOPIC"]],
            ["set_path_permissions", "INCLUDED", "a/b", []],
            ["set_role_includes", "R", ["INCLUDED"]],
        ]
    )
    assert store.evaluator().uniform_below(frozenset({"R"}), path) is uniform


def test_authentication() -> None:
    store = default_store("s3cret-pass")
    assert store.authenticate("admin", "s3cret-pass") == {"ADMINISTRATOR"}
    assert store.authenticate(None, None) == {"ANONYMOUS"}
    with pytest.raises(AuthenticationFailed):
        store.authenticate("admin", "wrong")
    with pytest.raises(AuthenticationFailed):
        store.authenticate("ghost", "x")
    closed = store.apply([["set_anonymous", False, []]])
    with pytest.raises(AuthenticationFailed, match="anonymous"):
        closed.authenticate("", None)


@pytest.fixture
def scrypt_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int, int]]:
    """Every scrypt derivation made while the test runs, as (n, r, p, dklen)."""
    calls: list[tuple[int, int, int, int]] = []
    real = hashlib.scrypt

    def counting(password: bytes, *, salt: bytes, n: int, r: int, p: int, dklen: int = 64, **kw: Any) -> bytes:
        calls.append((n, r, p, dklen))
        return real(password, salt=salt, n=n, r=r, p=p, dklen=dklen, **kw)

    monkeypatch.setattr(hashlib, "scrypt", counting)
    return calls


@pytest.mark.parametrize(
    ("principal", "password"),
    [("ghost", "password1"), ("admin", "password1"), ("ghost", None), ("admin", None), ("broken", "password1")],
)
def test_every_named_login_costs_one_scrypt_with_the_same_parameters(
    scrypt_calls: list[tuple[int, int, int, int]], principal: str, password: str | None
) -> None:
    """An unknown principal, a wrong password, a missing one and a hash that cannot be used each
    cost one scrypt with the same parameters as a right password: a failed login takes as long
    whatever made it fail (counted, not timed, so a busy machine cannot make it flaky)."""
    data = default_store("s3cret-pass").to_dict()
    data["principals"]["broken"] = {"password": "md5$not-scrypt", "roles": []}  # a hash it cannot use
    store = SecurityStore.from_dict(data)
    scrypt_calls.clear()
    with pytest.raises(AuthenticationFailed) as failure:
        store.authenticate(principal, password)
    assert scrypt_calls == [(2**14, 8, 1, 32)]
    assert str(failure.value) == str(AuthenticationFailed.wrong_credentials(principal))
    scrypt_calls.clear()
    assert store.authenticate("admin", "s3cret-pass") == {"ADMINISTRATOR"}
    assert scrypt_calls == [(2**14, 8, 1, 32)]
    scrypt_calls.clear()
    store.authenticate(None, None)
    assert scrypt_calls == []  # anonymous logins have nothing to check


def test_default_store_is_safe() -> None:
    store = default_store("s3cret-pass")
    ev = store.evaluator()
    anonymous = store.anonymous_roles
    assert ev.has(anonymous, P.READ_TOPIC, "any/thing") and ev.has(anonymous, P.SELECT_TOPIC, "any")
    for permission in (P.UPDATE_TOPIC, P.MODIFY_TOPIC, P.EXPOSE_BRANCH, P.EDIT_TIME_SERIES_EVENTS):
        assert not ev.has(anonymous, permission, "any/thing")
    assert ev.global_permissions(anonymous) == frozenset()
    admin = frozenset({"ADMINISTRATOR"})
    assert ev.global_permissions(admin) == set(G)
    assert ev.path_permissions(admin, "x") == set(P)
    control = frozenset({"CONTROL"})
    assert not ev.has(control, G.MODIFY_SECURITY) and ev.has(control, P.MODIFY_TOPIC, "x")


def test_principal_commands_and_round_trip() -> None:
    store = default_store("s3cret-pass").apply(
        [["add_principal", "alice", "alice-pass", ["CLIENT", "TRADER"]], ["set_principal_roles", "alice", ["CLIENT"]]]
    )
    assert store.authenticate("alice", "alice-pass") == {"CLIENT"}
    store = store.apply([["set_password", "alice", "new-password"]])
    assert store.authenticate("alice", "new-password")
    again = SecurityStore.from_dict(store.to_dict())
    assert again == store or again.to_dict() == store.to_dict()
    assert "password" not in str(store.to_dict(with_secrets=False))
    gone = store.apply([["remove_principal", "alice"]])
    assert "alice" not in gone.principals and gone.version == store.version + 1


@pytest.mark.parametrize(
    ("commands", "fragment"),
    [
        ([["set_global_permissions", "R", ["FLY"]]], "unknown GlobalPermission 'FLY'"),
        ([["set_default_path_permissions", "R", ["READ"]]], "unknown PathPermission 'READ'"),
        ([["set_path_permissions", "R", "//", ["READ_TOPIC"]]], "at least one non-empty segment"),
        ([["add_principal", "admin", "password1", []]], "already exists"),
        ([["add_principal", "bob", "short", []]], "at least 8 characters"),
        ([["set_password", "ghost", "password1"]], "no principal 'ghost'"),
        ([["explode"]], "unknown security command"),
        ([["set_global_permissions", "R"]], "missing arguments"),
        (["not a list"], "a command is a list"),
        ([["set_anonymous", "yes", []]], "true or false"),
        ([["set_global_permissions", " R ", []]], "without surrounding spaces"),
    ],
)
def test_bad_commands_change_nothing(commands: list[object], fragment: str) -> None:
    store = default_store("s3cret-pass")
    with pytest.raises(SecurityCommandError, match=fragment):
        store.apply([["add_principal", "ok", "password1", []], *commands])
    assert "ok" not in store.principals
