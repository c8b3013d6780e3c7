"""Pure evaluation of a view for one source topic (the topic view rules)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from topics import types as codec
from topics.specification import TopicSpecification
from topics.types import MAX_JSON_DEPTH
from views.evaluate import Source, derive
from views.parser import parse_view


def source(path: str, value: Any, type_name: str = "JSON", **properties: str) -> Source:
    spec = TopicSpecification.of(type_name, properties or None)
    data = None if value is None else codec.encode(spec.value_type, value)
    return Source(path, spec, data)


def run(spec: str, src: Source, others: dict[str, Source] | None = None) -> dict[str, Any]:
    outputs, _ = derive(parse_view(spec), src, (others or {}).get)
    return {
        o.path: None if o.value is None else codec.decode(o.specification.value_type, o.value) for o in outputs
    }


def test_path_directive() -> None:
    assert run("map ?a// to b/<path(1)>", source("a/x/y/z", 1)) == {"b/x/y/z": 1}
    assert run("map ?a// to b/<path(0, 2)>", source("a/b/c/d", 1)) == {"b/a/b": 1}
    assert run("map ?a// to b/<path(9)>", source("a/b", 1)) == {}


def test_scalar_texts() -> None:
    spec = "map x to r/<scalar(/v)>"
    assert run(spec, source("x", {"v": None})) == {"r/null": {"v": None}}
    assert run(spec, source("x", {"v": True})) == {"r/true": {"v": True}}
    assert run(spec, source("x", {"v": 12})) == {"r/12": {"v": 12}}
    assert run(spec, source("x", {"v": [1]})) == {}
    assert run(spec, source("x", {"w": 1})) == {}
    assert run(spec, source("x", "not json", "STRING")) == {}


def test_duplicate_expansions_first_wins() -> None:
    value = {"cars": [{"reg": "A", "n": 1}, {"reg": "A", "n": 2}, {"reg": "B", "n": 3}]}
    assert run("map x to c/<expand(/cars, /reg)>", source("x", value)) == {
        "c/A": {"reg": "A", "n": 1},
        "c/B": {"reg": "B", "n": 3},
    }


def test_expand_falls_back_to_key_or_index() -> None:
    value = {"o": {"k1": {"name": "n1"}, "k2": {"other": 1}}}
    assert run("map x to c/<expand(/o, /name)>", source("x", value)) == {
        "c/n1": {"name": "n1"},
        "c/k2": {"other": 1},
    }


def test_insert_failures_and_defaults() -> None:
    others = {"t": source("t", {"k": 5}), "s": source("s", "text", "STRING"), "b": Source("b", TopicSpecification.of("BINARY"), b"x")}
    assert run("map x to r insert t key /k at /v", source("x", {}), others) == {"r": {"v": 5}}
    assert run("map x to r insert s at /v", source("x", {}), others) == {"r": {"v": "text"}}
    assert run("map x to r insert b at /v default 0", source("x", {}), others) == {"r": {"v": 0}}
    assert run("map x to r insert t key /nope at /v", source("x", {}), others) == {"r": {}}
    assert run("map x to r insert t at /a/b default 1", source("x", {}), others) == {"r": {}}
    assert run("map x to r insert t at /arr/- ", source("x", {"arr": [1]}), others) == {"r": {"arr": [1, {"k": 5}]}}


def _nested(depth: int) -> Any:
    value: Any = 1
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


@given(st.integers(min_value=1, max_value=MAX_JSON_DEPTH), st.integers(min_value=1, max_value=6))
def test_an_insert_too_deep_for_any_topic_fails(depth: int, at_length: int) -> None:
    """The inserted value sits inside ``at_length`` objects: together they may nest
    :data:`MAX_JSON_DEPTH` deep, no more."""
    at = "/" + "/".join(["o"] * at_length)
    document: Any = {}
    for _ in range(at_length - 1):
        document = {"o": document}
    others = {"t": source("t", _nested(depth))}
    found = run(f"map x to r insert t at {at} default 'too deep'", source("x", document), others)
    inserted = found["r"]
    for _ in range(at_length):
        inserted = inserted["o"]
    assert inserted == (_nested(depth) if at_length + depth <= MAX_JSON_DEPTH else "too deep")


def test_consulted_insertion_paths() -> None:
    _, consulted = derive(parse_view("map ?a// to r/<path(1)> insert o/<scalar(/f)> at /x"), source("a/q", {"f": "z"}), {}.get)
    assert consulted == {"o/z"}


def test_properties_are_derived() -> None:
    src = source("x", 1, "INT64", CONFLATION="always", PERSISTENT="false", OWNER="$Principal is 'al'")
    outputs, _ = derive(parse_view("map x to r with properties CONFLATION:off"), src, {}.get)
    assert outputs[0].specification.properties == {"CONFLATION": "off", "OWNER": "$Principal is 'al'"}


def test_time_series_retained_range_only_narrows() -> None:
    src = Source("x", TopicSpecification.of("TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "INT64", "TIME_SERIES_RETAINED_RANGE": "limit 5"}), None)
    outputs, _ = derive(parse_view("map x to r with properties TIME_SERIES_RETAINED_RANGE:'limit 50'"), src, {}.get)
    assert outputs[0].specification.properties["TIME_SERIES_RETAINED_RANGE"] == "limit 5"


def test_source_without_value() -> None:
    assert run("map x to r", source("x", None)) == {"r": None}
    assert run("map x to r/<scalar(/a)>", source("x", None)) == {}


@given(st.lists(st.text("abcXYZ019-_", min_size=1, max_size=4), max_size=10))
def test_expand_makes_one_topic_per_distinct_child(names: list[str]) -> None:
    """Oracle: one reference topic per distinct name, holding the first child of that name."""
    children = [{"name": n, "i": i} for i, n in enumerate(names)]
    expected: dict[str, Any] = {}
    for child in children:
        expected.setdefault(f"out/{child['name']}", child)
    assert run("map x to out/<expand(/list, /name)>", source("x", {"list": children})) == expected
    by_index = {f"out/{i}": child for i, child in enumerate(children)}
    assert run("map x to out/<expand(/list)>", source("x", {"list": children})) == by_index
