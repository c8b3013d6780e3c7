"""The topic view DSL parser: every example specification of topic views, errors, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topics.selectors import MAX_SELECTOR_DEPTH
from topics.types import MAX_JSON_DEPTH, TopicType
from views.parser import ViewSemanticError, ViewSpecError, ViewSyntaxError, parse_view
from views.spec import NO_DEFAULT, Expand, Insert, Patch, PathPart, Scalar, Template, Throttle, ValueStep

SPECIFICATION_EXAMPLES = [
    "map ?a// to b/<path(1)>",
    "map ?A//\nfrom Server1\nto <path(1)>\nas <value(/foo)>\n# Join 2 topics\ninsert Topic2 at /T2\ninsert Topic3 at /T3\nthrottle to 1 update every minute\n",
    "map ?foo/bar// to /foo/bar/All/<path(3)>",
    'map "?Results/Home games//" to results/<path(1)>',
    "map ?accounts// to currency/<scalar(/balance/currency)>/account/<scalar(/account)>",
    "map allCars to cars/<expand(/cars, /reg)>",
    "map allCars to cars/<expand(/cars)>",
    "map allCars to cars/<expand(/cars, /reg)>/drivers/<expand(/drivers, /name)>",
    "map ?Some_Source_Topics/ to Mapped_Topics/<path(1)> insert Some_Other_Topic at /Some_JSON_Pointer",
    'map Topic1 to Topic2 insert AnotherTopic at /key default "unknown"',
    "map ?Topics/ to Mapped/<path(1)> insert AnotherTopic at /other",
    "map ?Topics/ to Mapped/<path(1)> insert Others/<path(1)> at /other",
    "map ?Topics/ to Mapped/<path(1)> insert Others/<scalar(/foo)> at /other",
    "map ?Topics/ to Mapped/<path(1)> insert Others/<path(1)> key /foo at /other",
    "map Topic1 to Expanded/<expand()> insert AnotherTopic at /other",
    "map Topic1 to Topic2 insert AnotherTopic at /other insert YetAnotherTopic at /yetAnother",
    "map Topic1 to Topic2 insert AnotherTopic at /foo/bar as <value(/foo)>",
    "map ?a// to b/<path(1)> patch '[{\"op\":\"test\", \"path\":\"/price\", \"value\" : 22}, {\"op\":\"add\", \"path\":\"/price\", \"value\": 23}]'",
    "map ?a// to b/<path(1)>\n  patch '[{\"op\":\"add\", \"path\":\"/price\", \"value\" : 22}]'\n  insert AnyTopic at /T/- default \"unknown\"\n  patch '[{\"op\":\"remove\", \"path\":\"/name\"}]'",
    "map ?a// to b/<path(1)> with properties CONFLATION:off, COMPRESSION:false",
    "map ?accounts// to balances/<scalar(/account)> as <value(/balance)>",
    "map ?a// to b/<path(1)> throttle to 2 updates every 5 seconds",
    "map ?a// to b/<path(1)> throttle to 1 update every hour",
    "map ?a// to b/<path(1)> delay by 5 minutes",
    "map ?a// to specimen/<scalar(/exhibit/category)>/species/<scalar(/species)> preserve topics",
    "map ?a/path/ to b/<scalar(/markets/name)> separator '%'",
    "map ?a/ to b/<path(1)> type STRING",
    "map ?a/ from Server1 to b/<path(1)>",
]


@pytest.mark.parametrize("text", SPECIFICATION_EXAMPLES)
def test_every_specification_example_parses_and_round_trips(text: str) -> None:
    spec = parse_view(text)
    assert parse_view(str(spec)) == spec


def test_the_general_example_in_detail() -> None:
    spec = parse_view(SPECIFICATION_EXAMPLES[1])
    assert str(spec.selector) == "?A//"
    assert spec.remote == "Server1"
    assert spec.target == Template((PathPart(1),))
    assert spec.steps == (
        ValueStep(("foo",)),
        Insert(Template(("Topic2",)), ("T2",)),
        Insert(Template(("Topic3",)), ("T3",)),
    )
    assert spec.throttle == Throttle(1, 60_000)


def test_directives() -> None:
    spec = parse_view("map allCars to cars/<expand(/cars, /reg)>/drivers/<expand(/drivers, /name)>")
    assert spec.target.parts == ("cars/", Expand(("cars",), ("reg",)), "/drivers/", Expand(("drivers",), ("name",)))
    spec = parse_view("map x to a/<path(0, 2)>/<scalar(/balance/currency)>/<expand()>")
    assert spec.target.parts == ("a/", PathPart(0, 2), "/", Scalar(("balance", "currency")), "/", Expand())


def test_insert_clause_parts() -> None:
    spec = parse_view('map Topic1 to Topic2 insert Others/<path(1)> key /foo at /T/- default "unknown"')
    assert spec.steps == (Insert(Template(("Others/", PathPart(1))), ("T", "-"), ("foo",), "unknown"),)
    assert parse_view("map a to b insert c at /x default 42").steps[0].default == 42  # type: ignore[union-attr]
    assert parse_view("map a to b insert c at /x").steps[0].default is NO_DEFAULT  # type: ignore[union-attr]


def test_patch_is_parsed_once() -> None:
    step = parse_view("map a to b patch '[{\"op\":\"remove\", \"path\":\"/name\"}]'").steps[0]
    assert isinstance(step, Patch)
    assert step.operations[0].op == "remove"


def test_quoting_and_escapes() -> None:
    spec = parse_view(r"map 'a b/c\'d' to 'x y/\<lit>/<path(0)>'")
    assert spec.selector.matches("a b/c'd")
    assert spec.target.parts == ("x y/<lit>/", PathPart(0))


def test_whitespace_and_keywords() -> None:
    spec = parse_view("MAP\ta\n\n  TO\tb\nTHROTTLE TO 3 UPDATES EVERY 2 MINUTES\nTYPE json")
    assert spec.throttle == Throttle(3, 120_000)
    assert spec.topic_type is TopicType.JSON


def test_comments_keep_positions() -> None:
    with pytest.raises(ViewSyntaxError) as e:
        parse_view("# a comment\nmap a to b\nbogus")
    assert (e.value.line, e.value.column) == (3, 1)


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("map", 1, 4, "ends early"),
        ("map a", 1, 6, "'to'"),
        ("map a b", 1, 7, "unexpected 'b'"),
        ("map a to b throttle to 0 updates every second", 1, 24, "positive"),
        ("map a to b throttle 1 updates", 1, 21, "'to'"),
        ("map a to b/<bogus(1)>", 1, 12, "unknown directive"),
        ("map a to b/<path(x)>", 1, 18, "whole numbers"),
        ("map a to b/<scalar(foo)>", 1, 20, "JSON pointer"),
        ("map a to b with properties OWNER:fred", 1, 28, "cannot be set"),
        ("map a to b with properties NOPE:1", 1, 28, "unknown topic property"),
        ("map a to b with properties CONFLATION:sideways", 1, 39, "CONFLATION"),
        ("map a to b type RECORD", 1, 17, "unknown topic type"),
        ("map a to b separator 'x//y'", 1, 22, "empty path segment"),
        ("map a to b patch '[{\"op\":\"jump\"}]'", 1, 19, "invalid patch"),
        ("map a to b patch 'not json'", 1, 19, "invalid patch"),
        ("map a to b delay by 1 second delay by 2 seconds", 1, 30, "only once"),
        ("map ?a[ to b", 1, 7, "invalid source selector"),
        ("map a to b insert c/<expand()> at /x", 1, 21, "only be used in the path mapping"),
        ("map a to b as <value(/x)> as <value(/y)>", 1, 27, "only once"),
        ("map a to b/<path(1", 1, 12, "unexpected '<path(1'"),
        ("map a to b throttle to 9223372036854775808 updates every second", 1, 24, "at most"),
        ("map a to b delay by 3000000000000 hours", 1, 21, "at most"),
        ("map a to b insert c at /x default 1e999", 1, 35, "out of range"),
        ("map a to b/<path(\u00b2)>", 1, 18, "whole numbers"),
        ("map a to 'b/<path(1'", 1, 13, "not closed"),
    ],
)
def test_errors_say_what_and_where(text: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(ViewSpecError) as e:
        parse_view(text)
    assert (e.value.line, e.value.column) == (line, column), str(e.value)
    assert fragment in str(e.value)
    assert "^" in str(e.value).splitlines()[-1]


@given(st.integers(min_value=1, max_value=3000), st.sampled_from(["'", '"']))
def test_nested_selector_sets_in_the_source_are_bounded(depth: int, quote: str) -> None:
    text = f"map {quote}{'#' * depth}>a{quote} to b"
    if depth <= MAX_SELECTOR_DEPTH:
        assert str(parse_view(text).selector) == "#>a"
        return
    with pytest.raises(ViewSemanticError) as e:
        parse_view(text)
    assert f"selector sets may nest at most {MAX_SELECTOR_DEPTH} deep" in e.value.reason
    assert (e.value.line, e.value.column) == (1, len("map '") + MAX_SELECTOR_DEPTH + 1)


def _nested_patch(depth: int) -> str:
    """A patch adding a value ``depth`` arrays and objects deep, written without spaces."""
    levels = [("[", "]") if level % 2 else ('{"k":', "}") for level in range(depth)]
    value = "".join(o for o, _ in levels) + "1" + "".join(c for _, c in reversed(levels))
    return f'[{{"op":"add","path":"/x","value":{value}}}]'


@given(st.integers(min_value=0, max_value=20_000))
def test_nested_patch_json_is_bounded(depth: int) -> None:
    """The patch array and its operation object are two levels: the value may nest
    ``MAX_JSON_DEPTH - 2`` more."""
    text = f"map a to b patch '{_nested_patch(depth)}'"
    if depth + 2 <= MAX_JSON_DEPTH:
        (step,) = parse_view(text).steps
        assert isinstance(step, Patch) and step.operations[0].path == ("x",)
        return
    with pytest.raises(ViewSemanticError) as e:
        parse_view(text)
    assert f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects" in e.value.reason
    assert (e.value.line, e.value.column) == (1, len("map a to b patch '") + 1)


def test_the_hostile_probe_in_a_view_is_a_semantic_error() -> None:
    with pytest.raises(ViewSemanticError, match=f"at most {MAX_SELECTOR_DEPTH} deep"):
        parse_view("map '" + "#" * 2000 + ">a' to b")
    with pytest.raises(ViewSemanticError, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        parse_view("map a to b patch '" + "[" * 100_000 + "'")


def test_semantic_and_syntax_errors_are_distinct() -> None:
    with pytest.raises(ViewSyntaxError):
        parse_view("map a to")
    with pytest.raises(ViewSemanticError):
        parse_view("map a to b type NOPE")


# -- property-based round trip -------------------------------------------------------

segment = st.text(st.sampled_from("abcXYZ09_-."), min_size=1, max_size=5)
pointer = st.lists(st.text(st.sampled_from("ab~/"), min_size=1, max_size=3), max_size=3).map(tuple)


@st.composite
def templates(draw: st.DrawFn, allow_expand: bool = True) -> Template:
    parts: list[object] = [draw(segment) + "/"]
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["path", "scalar", "expand", "text"] if allow_expand else ["path", "scalar", "text"]))
        if kind == "path":
            parts.append(PathPart(draw(st.integers(0, 3)), draw(st.none() | st.integers(1, 3))))
        elif kind == "scalar":
            parts.append(Scalar(draw(pointer)))
        elif kind == "expand":
            parts.append(Expand(draw(pointer), draw(st.none() | pointer)))
        else:
            parts.append(draw(segment))
        parts.append("/")
    merged: list[object] = []
    for p in parts:  # adjacent literals are one part
        if isinstance(p, str) and merged and isinstance(merged[-1], str):
            merged[-1] = merged[-1] + p  # type: ignore[operator]
        else:
            merged.append(p)
    return Template(tuple(merged))  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    target=templates(),
    inserts=st.lists(st.tuples(templates(allow_expand=False), pointer.filter(bool), st.none() | pointer,
                               st.none() | st.text(max_size=4) | st.integers(-(2**62), 2**62)), max_size=2),
    throttle=st.none() | st.tuples(st.integers(1, 9), st.sampled_from([1000, 60_000, 7_200_000])),
    delay=st.none() | st.sampled_from([1000, 300_000, 3_600_000]),
    preserve=st.booleans(),
    separator=st.none() | st.sampled_from(["%", "-", "_x_", "a/b"]),
    topic_type=st.none() | st.sampled_from(list(TopicType)).filter(lambda t: t.value != "RECORD_V2"),
)
def test_generated_specifications_round_trip(target, inserts, throttle, delay, preserve, separator, topic_type) -> None:  # type: ignore[no-untyped-def]
    words = [f"map ?src// to {target}"]
    for path, at, key, default in inserts:
        words.append(str(Insert(path, at, key, NO_DEFAULT if default is None else default)))
    if throttle:
        words.append(str(Throttle(*throttle)))
    if delay:
        words.append(f"delay by {delay // 1000} seconds")
    if preserve:
        words.append("preserve topics")
    if separator is not None:
        words.append(f"separator '{separator}'")
    if topic_type is not None:
        words.append(f"type {topic_type.value}")
    text = "\n".join(words)
    spec = parse_view(text)
    assert spec.target == target
    assert [(s.path, s.at, s.key) for s in spec.inserts] == [(p, a, k) for p, a, k, _ in inserts]
    assert spec.preserve_topics is preserve
    assert spec.separator == separator
    assert parse_view(str(spec)) == spec
