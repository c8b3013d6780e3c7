"""Update constraints: their wire form, its refusals, evaluation, and the topic store's
conditional sets and JSON patches (all or nothing)."""

from __future__ import annotations

from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topics import constraints as c
from topics import protocol as p
from topics.constraints import (
    And,
    Current,
    JsonWithoutValue,
    JsonWithValue,
    Locked,
    NoTopic,
    NoValue,
    Or,
    ValueEquals,
    decide_locks,
    evaluate,
    from_wire,
    to_wire,
)
from topics.errors import ConstraintError, UnsatisfiedConstraintError
from topics.changes import TopicAdded, ValueSet
from topics.protocol import (
    AddTopic,
    Changed,
    End,
    Failed,
    Ok,
    PatchJson,
    RefPut,
    Register,
    Result,
    SetValue,
    Snapshot,
)
from topics.store import CREATED, TopicStore
from topics.types import TopicType


def cb(value: Any) -> bytes:
    return bytes(cbor2.dumps(value))


def ok(result: Result) -> Any:
    assert isinstance(result, Ok), result
    return result.value


def failed(result: Result) -> Failed:
    assert isinstance(result, Failed), result
    return result


DOC = {"owner": "ann", "items": [1, 2.5, {"k": None}], "a/b": True}
JSON_TOPIC = Current(TopicType.JSON, cb(DOC))

EVERY_KIND: list[c.Constraint] = [
    ValueEquals(cb("x")),
    ValueEquals(b"\x00raw", True),
    NoValue(),
    NoTopic(),
    Locked("door", 3),
    JsonWithValue(("items", "2", "k"), cb(None)),
    JsonWithoutValue(("a/b", "")),
    And((NoValue(), Or((NoTopic(), ValueEquals(cb(1)))))),
    Or((Locked("x", 0),)),
]


# -- the wire form --------------------------------------------------------------------------


@pytest.mark.parametrize("constraint", EVERY_KIND, ids=lambda k: type(k).__name__)
def test_every_kind_round_trips_as_plain_lists(constraint: c.Constraint) -> None:
    wire = to_wire(constraint)
    assert wire == constraint.to_wire()
    assert from_wire(cbor2.loads(cbor2.dumps(wire))) == constraint  # plain values, any codec


def test_the_wire_form_is_the_documented_one() -> None:
    assert to_wire(ValueEquals(b"\x61", False)) == ["value_equals", b"\x61", False]
    assert to_wire(NoValue()) == ["no_value"] and to_wire(NoTopic()) == ["no_topic"]
    assert to_wire(Locked("l", 7)) == ["locked", "l", 7]
    assert to_wire(JsonWithValue(("a/b", "~"), cb(1))) == ["json_with_value", "/a~1b/~0", cb(1)]
    assert to_wire(JsonWithoutValue(())) == ["json_without_value", ""]
    assert to_wire(NoTopic() | NoValue()) == ["or", [["no_topic"], ["no_value"]]]


def test_a_json_value_is_kept_as_the_cbor_a_patch_test_compares() -> None:
    half = b"\xf9\x3c\x00"  # 1.0 as a half-precision float: the same JSON value, other bytes
    assert from_wire(["json_with_value", "/x", half]) == JsonWithValue(("x",), cb(1.0))


@pytest.mark.parametrize(
    "wire, where, fragment",
    [
        (None, "", "a term is a list starting with its kind"),
        ([], "", "a term is a list"),
        ([3], "", "a term is a list"),
        (["nope"], "", "unknown kind 'nope'"),
        (["no_topic", 1], "", "no_topic takes 0 fields, got 1"),
        (["value_equals", b"x"], "", "value_equals takes 2 fields, got 1"),
        (["value_equals", "x", False], "", "value_equals's value is bytes, got 'x'"),
        (["value_equals", b"x", 0], "", "value_equals's raw is a boolean, got 0"),
        (["locked", "", 1], "", "a lock name has 1 to 256 characters"),
        (["locked", "l", True], "", "locked's sequence is an integer, got True"),
        (["locked", "l", -1], "", "a lock sequence is 0 to 2**63-1"),
        (["json_with_value", "x", cb(1)], "", "is not a JSON pointer"),
        (["json_with_value", "/~2", cb(1)], "", "'~' must be followed by '0' or '1'".replace("'", '"')),
        (["json_with_value", "/" + "a" * 1024, cb(1)], "", "longer than 1024 characters"),
        (["json_with_value", "/a", b"\xff"], "", "not one CBOR item of a JSON value"),
        (["json_with_value", "/a", cb(b"bytes")], "", "not one CBOR item of a JSON value"),
        (["json_without_value", 5], "", "json_without_value's pointer is a string, got 5"),
        (["and", []], "", "and takes a non-empty list of terms"),
        (["or", "x"], "", "or takes a non-empty list of terms"),
        (["and", [["no_topic"], ["or", [["no_value"], ["bad"]]]]], "and[1].or[1]", "unknown kind 'bad'"),
    ],
)
def test_a_bad_wire_form_is_refused_naming_where_and_what(wire: Any, where: str, fragment: str) -> None:
    with pytest.raises(ConstraintError) as info:
        from_wire(wire)
    assert info.value.code == "INVALID_CONSTRAINT"
    assert info.value.where == where and fragment in str(info.value), str(info.value)


def _nested(levels: int) -> list[Any]:
    wire: list[Any] = ["no_topic"]
    for _ in range(levels - 1):
        wire = ["and", [wire]]
    return wire


def test_nesting_and_size_are_bounded() -> None:
    assert from_wire(_nested(c.MAX_DEPTH))
    with pytest.raises(ConstraintError, match="at most 8 levels"):
        from_wire(_nested(c.MAX_DEPTH + 1))
    with pytest.raises(ConstraintError, match="at most 8 levels"):
        from_wire(_nested(100_000))  # refused at the ninth level, before any deeper one is read
    assert from_wire(["or", [["no_topic"]] * (c.MAX_TERMS - 1)])
    with pytest.raises(ConstraintError, match="at most 64 terms") as info:
        from_wire(["or", [["no_topic"]] * c.MAX_TERMS])
    assert info.value.where == "or[63]"


_WIRE_ATOMS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.binary(max_size=4), st.sampled_from(["", "/a", "x", "and", "or"]),
    st.sampled_from([["no_topic"], ["no_value"], ["locked", "l", 1], ["value_equals", b"\x01", False]]),
)
_WIRE = st.recursive(
    _WIRE_ATOMS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(st.sampled_from(sorted(c._ARITY)), st.lists(inner, max_size=3)).map(lambda t: [t[0], t[1]]),
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(_WIRE)
def test_any_wire_value_is_read_or_refused_with_a_constraint_error(wire: Any) -> None:
    try:
        constraint = from_wire(wire)
    except ConstraintError:
        return
    assert from_wire(to_wire(constraint)) == constraint


# -- evaluation -----------------------------------------------------------------------------


NONE = Current(None)
EMPTY_STRING = Current(TopicType.STRING, None)
STRING_X = Current(TopicType.STRING, cb("x"))


@pytest.mark.parametrize(
    "constraint, current, reason",
    [
        (NoTopic(), NONE, None),
        (NoTopic(), EMPTY_STRING, "no_topic: a STRING topic is at the path"),
        (NoValue(), EMPTY_STRING, None),
        (NoValue(), STRING_X, "no_value: the topic has a value"),
        (NoValue(), NONE, "no_value: no topic is at the path"),
        (ValueEquals(cb("x")), STRING_X, None),
        (ValueEquals(cb("y")), STRING_X, "value_equals: the topic's value differs"),
        (ValueEquals(cb("x")), EMPTY_STRING, "value_equals: the topic has no value"),
        (ValueEquals(cb("x")), NONE, "value_equals: no topic is at the path"),
        (ValueEquals(cb(1)), STRING_X, "value_equals: the value is not one a STRING topic holds"),
        (ValueEquals(cb(1)), Current(TopicType.DOUBLE, cb(1.0)), None),  # converted as a set would be
        (ValueEquals(b"\x01", True), Current(TopicType.BINARY, b"\x01"), None),
        (ValueEquals(cb(b"\x01")), Current(TopicType.BINARY, b"\x01"), "a BINARY topic takes raw bytes"),
        (JsonWithValue(("owner",), cb("ann")), JSON_TOPIC, None),
        (JsonWithValue(("items", "1"), cb(2.5)), JSON_TOPIC, None),
        (JsonWithValue(("items", "1"), cb(2)), JSON_TOPIC, "json_with_value: the value at '/items/1' differs"),
        (JsonWithValue(("a/b",), cb(True)), JSON_TOPIC, None),
        (JsonWithValue((), cb(DOC)), JSON_TOPIC, None),
        (JsonWithValue(("nope",), cb(1)), JSON_TOPIC, "json_with_value: no value is at '/nope'"),
        (JsonWithValue(("owner",), cb("ann")), STRING_X, "the topic is a STRING topic, not JSON"),
        (JsonWithValue(("owner",), cb("ann")), Current(TopicType.JSON), "the topic has no value"),
        (JsonWithoutValue(("items", "3")), JSON_TOPIC, None),
        (JsonWithoutValue(("items", "-")), JSON_TOPIC, None),
        (JsonWithoutValue(("items", "0")), JSON_TOPIC, "json_without_value: a value is at '/items/0'"),
        (JsonWithoutValue(("x",)), NONE, "no topic is at the path"),
        (Locked("door", 1), JSON_TOPIC, "locked: the session does not hold lock 'door' at sequence 1 "
                                        "(no session is known here: the gateway decides locks)"),
    ],
)
def test_each_kind_holds_exactly_when_documented(
    constraint: c.Constraint, current: Current, reason: str | None
) -> None:
    outcome = evaluate(constraint, current)
    if reason is None:
        assert outcome is True
    else:
        assert isinstance(outcome, str) and reason in outcome, outcome


def test_and_names_the_first_term_that_fails_and_or_every_one() -> None:
    both = And((NoValue(), Or((NoTopic(), ValueEquals(cb("y"))))))
    assert evaluate(both, EMPTY_STRING) == (
        "no term of or at and[1] holds (no_topic at and[1].or[0]: a STRING topic is at the path; "
        "value_equals at and[1].or[1]: the topic has no value)"
    )
    assert evaluate(NoValue() & NoTopic(), EMPTY_STRING) == "no_topic at and[1]: a STRING topic is at the path"
    assert evaluate(NoTopic() | NoValue(), EMPTY_STRING) is True


def test_a_lock_lookup_decides_locked_terms() -> None:
    held = {("door", 3)}

    def locks(name: str, sequence: int) -> bool:
        return (name, sequence) in held

    assert evaluate(Locked("door", 3), NONE, locks) is True
    assert evaluate(Locked("door", 2), NONE, locks) == "locked: the session does not hold lock 'door' at sequence 2"


_LEAVES = [NoTopic(), NoValue(), ValueEquals(cb("x")), ValueEquals(cb("y")), JsonWithValue(("owner",), cb("ann")),
           JsonWithoutValue(("owner",)), Locked("held", 1), Locked("free", 1)]
_CONSTRAINTS = st.recursive(
    st.sampled_from(_LEAVES),
    lambda inner: st.lists(inner, min_size=1, max_size=3).flatmap(
        lambda terms: st.sampled_from([And(tuple(terms)), Or(tuple(terms))])
    ),
    max_leaves=12,
)
_STATES = st.sampled_from([NONE, EMPTY_STRING, STRING_X, JSON_TOPIC, Current(TopicType.JSON)])


def _held(name: str, sequence: int) -> bool:
    return name == "held"


def _oracle(constraint: c.Constraint, current: Current) -> bool:
    if isinstance(constraint, And):
        return all(_oracle(t, current) for t in constraint.terms)
    if isinstance(constraint, Or):
        return any(_oracle(t, current) for t in constraint.terms)
    return evaluate(constraint, current, _held) is True


@settings(max_examples=300, deadline=None)
@given(_CONSTRAINTS, _STATES)
def test_and_or_agree_with_an_oracle_and_deciding_locks_first_changes_nothing(
    constraint: c.Constraint, current: Current
) -> None:
    expected = _oracle(constraint, current)
    assert (evaluate(constraint, current, _held) is True) == expected
    try:
        rest = decide_locks(constraint, _held)
    except UnsatisfiedConstraintError:
        assert not expected
        return
    assert rest is None or not any(isinstance(t, Locked) for t in _terms(rest))
    assert (rest is None or evaluate(rest, current) is True) == expected


def _terms(constraint: c.Constraint) -> list[c.Constraint]:
    if isinstance(constraint, (And, Or)):
        return [constraint, *(t for term in constraint.terms for t in _terms(term))]
    return [constraint]


def test_deciding_locks_leaves_a_constraint_without_them_as_it_is() -> None:
    constraint = NoTopic() | ValueEquals(cb(1))
    assert decide_locks(constraint, c.NO_LOCKS) is constraint
    assert decide_locks(None, c.NO_LOCKS) is None
    assert decide_locks(Locked("a", 1) | NoTopic(), c.NO_LOCKS) == NoTopic()
    with pytest.raises(UnsatisfiedConstraintError, match="locked at and\\[0\\]: the session does not hold lock 'a'"):
        decide_locks(Locked("a", 1) & NoTopic(), c.NO_LOCKS)


def test_terms_combine_flat_and_only_with_terms() -> None:
    a, b, d = NoTopic(), NoValue(), ValueEquals(cb(1))
    assert a & b & d == And((a, b, d)) == a.and_(b).and_(d)
    assert a | b | d == Or((a, b, d)) == a.or_(b.or_(d))
    assert (a & b) | d == Or((And((a, b)), d))
    with pytest.raises(TypeError):
        a & 1
    with pytest.raises(TypeError, match="combines with another constraint"):
        a.and_("no_topic")  # type: ignore[arg-type]


# -- the partition protocol -----------------------------------------------------------------


def test_operations_carry_constraints_in_their_wire_form() -> None:
    constraint = NoTopic() | JsonWithValue(("a",), cb(1))
    for op in (
        SetValue("a", cb(1), False, None, True, constraint=constraint),
        PatchJson("a", "[]", constraint),
        PatchJson("a", "[]"),
    ):
        encoded = p.encode_operation(op)
        assert p.decode_operation(encoded) == op
    assert p.encode_operation(SetValue("a", b"", True)) == [2, "a", b"", True, None, False]  # as before
    with pytest.raises(p.ProtocolError, match="unknown kind 'x'"):
        p.decode_operation([2, "a", b"", True, None, False, True, "", b"", ["x"]])


# -- the topic store: conditional sets ------------------------------------------------------


def _store() -> TopicStore:
    store = TopicStore(lambda: 1_000, record_changes=True)
    store.apply("g", [AddTopic("s", "STRING"), AddTopic("j", "JSON"), Register("?.*", 1)])
    store.apply("g", [SetValue("s", cb("x"), False), SetValue("j", cb(DOC), False)])
    store.drain_events()
    store.drain_changes()
    return store


def test_a_set_applies_only_when_its_constraint_holds_and_a_refusal_changes_nothing() -> None:
    store = _store()
    refused = failed(store.apply_one("g", SetValue("s", cb("y"), False, constraint=ValueEquals(cb("old")))))
    assert refused.code == "UNSATISFIED_CONSTRAINT"
    assert refused.message == "the update constraint does not hold: value_equals: the topic's value differs"
    assert store.tree.get("s").value == cb("x")  # type: ignore[union-attr]
    assert store.drain_events() == {} and store.drain_changes() == []
    assert ok(store.apply_one("g", SetValue("s", cb("y"), False, constraint=ValueEquals(cb("x"))))) is None
    assert store.drain_events() == {"g": [Changed("s", cb("y"))]}
    assert store.drain_changes() == [ValueSet("s", "STRING", cb("y"))]  # journaled as any set


def test_add_and_set_with_no_topic_adds_only_once() -> None:
    store = _store()
    first = SetValue("n", cb(5), False, "INT64", True, constraint=NoTopic())
    assert ok(store.apply_one("g", first)) == CREATED
    assert store.drain_changes() == [TopicAdded("n", "INT64", [], cb(5))]
    assert failed(store.apply_one("g", first._replace(data=cb(6)))).code == "UNSATISFIED_CONSTRAINT"
    assert store.tree.get("n").value == cb(5)  # type: ignore[union-attr]
    assert store.drain_changes() == []
    # without add_if_missing, a satisfied no_topic leaves the set to fail as it would
    assert failed(store.apply_one("g", SetValue("m", cb(1), False, constraint=NoTopic()))).code == "NO_SUCH_TOPIC"


def test_constraints_see_topics_without_values_series_and_reference_topics() -> None:
    store = _store()
    store.apply("g", [
        AddTopic("e", "STRING"),
        AddTopic("d", "STRING", {"DONT_RETAIN_VALUE": "true"}),
        AddTopic("ts", "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "STRING"}),
        RefPut("r", 1, "v", "STRING", None, cb("r")),
    ])
    assert ok(store.apply_one("g", SetValue("e", cb("1"), False, constraint=NoValue()))) is None
    assert ok(store.apply_one("g", SetValue("d", cb("1"), False, constraint=NoValue()))) is None
    assert ok(store.apply_one("g", SetValue("d", cb("2"), False, constraint=NoValue()))) is None  # never kept
    # a TIME_SERIES topic's value is its newest event's (a text set appends one)
    assert ok(store.apply_one("g", SetValue("ts", b"a", "text", constraint=NoValue()))) is None
    assert failed(store.apply_one("g", SetValue("ts", b"b", "text", constraint=NoValue()))).code == (
        "UNSATISFIED_CONSTRAINT")
    assert ok(store.apply_one("g", SetValue("ts", b"b", "text", constraint=ValueEquals(cb("a"))))) is None
    # a reference topic stays read-only whatever the constraint says
    assert failed(store.apply_one("g", SetValue("r", cb("x"), False, constraint=NoTopic()))).code == "REFERENCE_TOPIC"


def test_a_set_not_retained_is_conditional_too() -> None:
    store = _store()
    unretained = SetValue("s", cb("z"), False, retain=False, constraint=ValueEquals(cb("nope")))
    assert failed(store.apply_one("g", unretained)).code == "UNSATISFIED_CONSTRAINT"
    assert store.drain_events() == {}
    assert ok(store.apply_one("g", unretained._replace(constraint=ValueEquals(cb("x"))))) is None
    assert store.drain_events() == {"g": [Changed("s", cb("z"), False)]}


def test_a_partition_decides_no_lock() -> None:
    store = _store()
    refused = failed(store.apply_one("g", SetValue("s", cb("y"), False, constraint=Locked("l", 1))))
    assert refused.code == "UNSATISFIED_CONSTRAINT" and "the gateway decides locks" in refused.message


# -- the topic store: JSON patches ----------------------------------------------------------


def test_a_patch_applies_in_one_step_and_is_journaled_as_a_set() -> None:
    store = _store()
    patch = '[{"op": "test", "path": "/owner", "value": "ann"}, {"op": "replace", "path": "/owner", "value": "bob"},' \
            ' {"op": "add", "path": "/items/-", "value": 3}]'
    assert ok(store.apply_one("g", PatchJson("j", patch, JsonWithValue(("owner",), cb("ann"))))) is None
    patched = {"owner": "bob", "items": [1, 2.5, {"k": None}, 3], "a/b": True}
    assert store.tree.get("j").value == cb(patched)  # type: ignore[union-attr]
    assert store.drain_events() == {"g": [Changed("j", cb(patched))]}
    assert store.drain_changes() == [ValueSet("j", "JSON", cb(patched))]


@pytest.mark.parametrize(
    "op, code, fragment",
    [
        (PatchJson("j", '[{"op": "test", "path": "/owner", "value": "bob"}]'), "PATCH_FAILED",
         "operation 0: the value at \"/owner\" differs"),
        (PatchJson("j", '[{"op": "add", "path": "/x", "value": 1}, {"op": "remove", "path": "/nope"}]'),
         "PATCH_FAILED", "operation 1: path \"/nope\" does not exist"),
        (PatchJson("j", '[{"op": "add", "path": "/x", "value": 1}]', JsonWithoutValue(("owner",))),
         "UNSATISFIED_CONSTRAINT", "json_without_value: a value is at '/owner'"),
        (PatchJson("j", '[{"op": "jump", "path": "/x"}]'), "INVALID_VALUE", "invalid JSON patch: operation 0"),
        (PatchJson("j", '{"op": "add"}'), "INVALID_VALUE", "must be a JSON array"),
        (PatchJson("s", "[]"), "INVALID_VALUE", "a STRING topic: a JSON patch applies to JSON topics"),
        (PatchJson("nope", "[]"), "NO_SUCH_TOPIC", "no topic at 'nope'"),
        (PatchJson("j", 5), "INVALID_REQUEST", "a JSON patch travels as text"),  # type: ignore[arg-type]
    ],
)
def test_a_patch_that_fails_changes_nothing(op: PatchJson, code: str, fragment: str) -> None:
    store = _store()
    before = store.tree.get("j").value  # type: ignore[union-attr]
    result = failed(store.apply_one("g", op))
    assert result.code == code and fragment in result.message, result
    assert store.tree.get("j").value == before  # type: ignore[union-attr]
    assert store.drain_events() == {} and store.drain_changes() == []


def test_a_patch_needs_a_value_to_patch() -> None:
    store = TopicStore()
    store.apply("g", [AddTopic("j", "JSON")])
    result = failed(store.apply_one("g", PatchJson("j", "[]")))
    assert result.code == "PATCH_FAILED" and "has no value to patch" in result.message
    assert ok(store.apply_one("g", SetValue("j", cb([1]), False, constraint=NoValue()))) is None
    assert ok(store.apply_one("g", PatchJson("j", '[{"op": "add", "path": "/0", "value": 0}]'))) is None
    assert store.tree.get("j").value == cb([0, 1])  # type: ignore[union-attr]


def test_a_patched_topic_reaches_new_subscribers_and_a_replayed_journal() -> None:
    store = _store()
    store.apply_one("g", PatchJson("j", '[{"op": "remove", "path": "/items"}]'))
    changes = store.drain_changes()
    copy = TopicStore()
    copy.load(_store().state())
    assert copy.replay(changes) == 0
    assert copy.tree.get("j").value == store.tree.get("j").value == cb({"owner": "ann", "a/b": True})  # type: ignore[union-attr]
    store.drain_events()
    store.apply("h", [Register(">j", 9)])
    assert store.drain_events()["h"] == [
        Snapshot(9, "j", "JSON", [], cb({"owner": "ann", "a/b": True})), End(9),
    ]
