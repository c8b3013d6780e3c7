"""The view engine: partition events in, reference-topic claims out (pure)."""

from __future__ import annotations

from typing import Any

import cbor2

from sessions.security import PathPermission
from topics.protocol import Added, Changed, Failed, RefDrop, RefDropView, RefPut, RefReserve, Removed, SetValue
from topics.store import TopicStore
from views.engine import ViewDefinition, ViewEngine


def allow_all(roles: frozenset[str], permission: PathPermission, path: str) -> bool:
    return True


def view(name: str, text: str, precedence: int = 1) -> ViewDefinition:
    return ViewDefinition(name, text, precedence, "admin", frozenset({"ADMINISTRATOR"}))


def add(path: str, value: Any, type_name: str = "JSON") -> Added:
    return Added(path, type_name, [], cbor2.dumps(value))


def puts(changes: Any) -> dict[str, Any]:
    return {op.path: cbor2.loads(op.value) for _, op in changes.operations if isinstance(op, RefPut)}


def test_registers_selectors_and_insertion_paths() -> None:
    engine = ViewEngine(allow_all)
    changes = engine.put_view(view("v", "map ?a// to b/<path(1)> insert o/<scalar(/k)> at /x"), 0)
    assert changes.register == ["?a//"]
    changes = engine.on_events([add("a/1", {"k": "z"})], 0)
    assert changes.register == [">o/z"]
    assert puts(changes) == {"b/1": {"k": "z"}}
    # the insertion topic arrives: the reference topic is re-derived
    changes = engine.on_events([add("o/z", 5, "INT64")], 0)
    assert puts(changes) == {"b/1": {"k": "z", "x": 5}}
    # the source stops reading it: its registration goes
    changes = engine.on_events([Changed("a/1", cbor2.dumps({"k": "y"}))], 0)
    assert changes.register == [">o/y"] and changes.unregister == [">o/z"]
    assert "o/z" not in engine.topics


def test_only_changes_are_sent() -> None:
    engine = ViewEngine(allow_all)
    engine.put_view(view("v", "map ?a// to b/<path(1)> as <value(/x)>"), 0)
    engine.on_events([add("a/1", {"x": 1, "y": 1})], 0)
    assert not engine.on_events([Changed("a/1", cbor2.dumps({"x": 1, "y": 2}))], 0).operations
    changes = engine.on_events([Removed("a/1")], 0)
    assert [op for _, op in changes.operations] == [RefDrop("b/1", 1)]


def test_first_source_claims_a_shared_path_and_the_next_takes_over() -> None:
    engine = ViewEngine(allow_all)
    engine.put_view(view("v", "map ?a// to same"), 0)
    assert puts(engine.on_events([add("a/1", 1), add("a/2", 2)], 0)) == {"same": 1}
    assert puts(engine.on_events([Removed("a/1")], 0)) == {"same": 2}


def test_throttle_holds_then_releases_the_last_value() -> None:
    engine = ViewEngine(allow_all)
    engine.put_view(view("v", "map ?a// to b/<path(1)> throttle to 1 update every 10 seconds"), 0)
    assert puts(engine.on_events([add("a/1", 0)], 0)) == {"b/1": 0}  # creation is never held, but counts
    for i in (1, 2, 3, 4):
        assert puts(engine.on_events([Changed("a/1", cbor2.dumps(i))], 200 + i)) == {}
    due = engine.next_release()
    assert due == 10_000
    assert puts(engine.release(due - 1)) == {}
    assert puts(engine.release(due)) == {"b/1": 4}
    assert engine.next_release() is None


def test_delayed_views_reserve_now_and_send_later() -> None:
    engine = ViewEngine(allow_all)
    engine.put_view(view("v", "map ?a// to b/<path(1)> delay by 5 seconds", 3), 1000)
    changes = engine.on_events([add("a/1", 1)], 1000)
    assert [op for _, op in changes.operations] == [RefReserve("b/1", 3, "v")]
    assert [(due, name, type(op)) for due, name, _, op in changes.delayed] == [(6000, "v", RefPut)]


def test_security_context_filters_sources_and_targets() -> None:
    allowed = {"a/ok": {PathPermission.READ_TOPIC}, "b/ok": {PathPermission.MODIFY_TOPIC}}

    def permitted(roles: frozenset[str], permission: PathPermission, path: str) -> bool:
        return permission in allowed.get(path, set())

    engine = ViewEngine(permitted)
    engine.put_view(view("v", "map ?a// to b/<path(1)>"), 0)
    assert puts(engine.on_events([add("a/ok", 1), add("a/no", 2)], 0)) == {"b/ok": 1}
    changes = engine.set_permitted(allow_all, 0)
    assert puts(changes) == {"b/no": 2}


def test_replacing_a_view_replaces_its_claims_in_place() -> None:
    engine = ViewEngine(allow_all)
    engine.put_view(view("v", "map ?a// to b/<path(1)>", 7), 0)
    engine.on_events([add("a/1", 1), add("a/2", 2)], 0)
    changes = engine.put_view(view("v", "map ?a// to b/<scalar(/nope)>", 7), 0)
    ops = [op for _, op in changes.operations]
    assert sorted(ops) == [RefDrop("b/1", 7), RefDrop("b/2", 7)]  # nothing made: dropped
    changes = engine.put_view(view("v", "map ?a// to b/<path(1)> type STRING", 7), 0)
    assert sorted((type(op), op.path, op.precedence) for _, op in changes.operations) == [  # type: ignore[union-attr]
        (RefPut, "b/1", 7), (RefPut, "b/2", 7)
    ]
    assert changes.register == [] and changes.unregister == []
    assert [op for _, op in engine.remove_view("v", 0).operations] == [RefDropView(7)]


def test_inserts_read_only_what_the_context_may_read() -> None:
    def permitted(roles: frozenset[str], permission: PathPermission, path: str) -> bool:
        return path != "secret"

    engine = ViewEngine(permitted)
    engine.put_view(view("v", "map ?a// to b/<path(1)> insert secret at /leak"), 0)
    engine.on_events([add("secret", {"pin": 1234})], 0)
    assert puts(engine.on_events([add("a/1", {})], 0)) == {"b/1": {}}


def test_the_store_settles_conflicts() -> None:
    store = TopicStore(clock=lambda: 0)
    put = RefPut("r", 2, "late", "INT64", {}, cbor2.dumps(2), None)
    store.apply("views", [put])
    assert store.tree.get("r").value == cbor2.dumps(2)  # type: ignore[union-attr]
    store.apply("views", [RefPut("r", 1, "early", "INT64", {}, cbor2.dumps(1), None)])
    assert store.tree.get("r").value == cbor2.dumps(1)  # type: ignore[union-attr]
    store.apply("views", [RefDrop("r", 1)])
    assert store.tree.get("r").value == cbor2.dumps(2)  # type: ignore[union-attr]
    # read-only for clients
    result = store.apply("gw", [SetValue("r", cbor2.dumps(5), False)])
    assert result == [Failed("REFERENCE_TOPIC", "'r' is a reference topic of topic view 'late': it is read-only")]
    # a reserved (delayed) claim of a better view hides the path until it is published
    store.apply("views", [RefReserve("r", 0, "delayed")])
    assert store.tree.get("r") is None
    store.apply("views", [RefDropView(0)])
    assert store.tree.get("r") is not None


def test_remote_views_take_their_sources_from_their_server_only() -> None:
    engine = ViewEngine(allow_all)
    changes = engine.put_view(view("remote", "map ?a// from Server1 to r/<path(1)>", 1), 0)
    assert changes.register == []  # nothing is registered with the local partitions
    engine.put_view(view("local", "map ?a// to l/<path(1)>", 2), 0)
    assert engine.remote_selectors() == {"Server1": ["?a//"]}
    assert puts(engine.on_events([add("a/1", "remote value")], 0, "Server1")) == {"r/1": "remote value"}
    assert puts(engine.on_events([add("a/1", "local value")], 0)) == {"l/1": "local value"}
    assert puts(engine.on_events([Changed("a/1", cbor2.dumps("newer"))], 0, "Server1")) == {"r/1": "newer"}
    assert engine.on_events([add("a/2", "x")], 0, "Server2").operations == []  # nobody's server
    # losing the server removes its views' reference topics; they come back with its topics
    lost = engine.remote_lost("Server1", 0)
    assert [op for _, op in lost.operations] == [RefDrop("r/1", 1)]
    assert puts(engine.on_events([add("a/1", "back")], 0, "Server1")) == {"r/1": "back"}
    assert engine.topics["a/1"].value == cbor2.dumps("local value")


def test_a_remote_view_inserts_from_the_local_tree() -> None:
    engine = ViewEngine(allow_all)
    changes = engine.put_view(view("v", "map ?a// from S to b/<path(1)> insert o/<scalar(/k)> at /x"), 0)
    changes = engine.on_events([add("a/1", {"k": "z"})], 0, "S")
    assert changes.register == [">o/z"]  # the insert is read from the local partitions
    assert puts(changes) == {"b/1": {"k": "z"}}
    assert puts(engine.on_events([add("o/z", 5, "INT64")], 0)) == {"b/1": {"k": "z", "x": 5}}
    assert puts(engine.on_events([add("o/z", 6, "INT64")], 0, "S")) == {}  # the remote o/z is not the insert
    engine.remove_view("v", 0)
    assert engine.remote_selectors() == {}


def test_a_replaced_remote_view_keeps_its_sources_and_a_removed_one_forgets_them() -> None:
    engine = ViewEngine(allow_all)
    engine.put_view(view("v", "map ?a// from S to b/<path(1)>", 1), 0)
    engine.on_events([add("a/1", 1)], 0, "S")
    assert puts(engine.put_view(view("v", "map ?a// from S to c/<path(1)>", 1), 0)) == {"c/1": 1}
    engine.remove_view("v", 0)
    assert engine.remote.get("S", {}) == {}


def test_evaluations_are_counted_and_a_failing_one_makes_nothing_while_the_rest_go_on(monkeypatch: Any) -> None:
    import views.engine as engine_module

    real = engine_module.derive

    def derive(spec: Any, source: Any, lookup: Any) -> Any:
        if source.path == "a/bad":
            raise KeyError("a bug")
        return real(spec, source, lookup)

    monkeypatch.setattr(engine_module, "derive", derive)
    engine = ViewEngine(allow_all)
    engine.put_view(view("v", "map ?a// to b/<path(1)>"), 0)
    assert puts(engine.on_events([add("a/good", 1), add("a/bad", 2)], 0)) == {"b/good": 1}
    assert engine.evaluations == 2 and engine.errors == 1
    assert "view 'v', source 'a/bad': KeyError" in engine.last_error
    assert puts(engine.on_events([Changed("a/good", cbor2.dumps(3))], 0)) == {"b/good": 3}
    assert engine.evaluations == 3 and engine.errors == 1
