from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from mqtt.mapping import (
    EMPTY_LEVEL,
    MAX_TOPIC_LENGTH,
    MappingError,
    content_type,
    from_payload,
    has_topic_name,
    parse_shared,
    path_of,
    payload_format,
    selector_of,
    to_payload,
    topic_of,
)
from topics import paths
from topics.errors import InvalidValueError
from topics.selectors import PathSelector, SplitPathSelector, compile_regex, literal_text, parse_selector
from topics.types import TopicType, from_text, to_text

T = TopicType


# --------------------------------------------------------------------------
# the oracle: MQTT 5 section 4.7, straight from the text


def mqtt_matches(topic_filter: str, topic_name: str) -> bool:
    """Whether an MQTT topic filter (syntactically valid) matches a topic name.

    Levels are split on "/"; "+" matches exactly one level, empty ones
    included; "#" (the last level) matches its parent level and any number of
    levels below it (MQTT-4.7.1-2); a filter whose first level is a wildcard
    does not match a name starting with "$" (MQTT-4.7.2-1).
    """
    want = topic_filter.split("/")
    have = topic_name.split("/")
    if topic_name.startswith("$") and want[0] in ("+", "#"):
        return False
    for index, level in enumerate(want):
        if level == "#":
            return True
        if index >= len(have):
            return False
        if level != "+" and level != have[index]:
            return False
    return len(want) == len(have)


@pytest.mark.parametrize(
    ("topic_filter", "topic_name", "expected"),
    [
        ("sport/tennis/player1/#", "sport/tennis/player1", True),
        ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
        ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
        ("sport/#", "sport", True),
        ("sport/tennis/+", "sport/tennis/player1", True),
        ("sport/tennis/+", "sport/tennis/player1/ranking", False),
        ("sport/+", "sport", False),
        ("sport/+", "sport/", True),
        ("+/+", "/finance", True),
        ("/+", "/finance", True),
        ("+", "/finance", False),
        ("#", "$SYS/x", False),
        ("+/monitor/Clients", "$SYS/monitor/Clients", False),
        ("$SYS/#", "$SYS/monitor/Clients", True),
        ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    ],
)
def test_oracle_follows_the_spec_examples(topic_filter: str, topic_name: str, expected: bool) -> None:
    assert mqtt_matches(topic_filter, topic_name) is expected


# --------------------------------------------------------------------------
# strategies: small alphabets so that filters and names meet; levels full of
# regex metacharacters, "$" and "%" (but never exactly "%")

LEVELS = st.sampled_from(
    ["", "a", "b", "ab", "$", "$SYS", "a$", "^", ".", ".*", "a.b", "(a|b)", "[ab]", "{1}", "?",
     "\\", "\\d", "|", "é", "%%", "a%", "%a", " ", "x y", "*", "()", "[", "]"]
)
NAMES = st.lists(LEVELS, min_size=1, max_size=4).map("/".join).filter(bool)


@st.composite
def filters(draw: st.DrawFn) -> str:
    """Random filters, often derived from a random name so that they match it."""
    if draw(st.booleans()):
        levels = draw(st.lists(st.one_of(LEVELS, st.just("+")), min_size=0, max_size=4))
    else:
        levels = draw(NAMES).split("/")
        levels = [draw(st.sampled_from([lv, lv, "+"])) for lv in levels]
        levels = levels[: draw(st.integers(0, len(levels)))] if draw(st.booleans()) else levels
    if not levels or draw(st.booleans()):
        levels.append("#")
    result = "/".join(levels)
    assume(result)
    return result


# any text, which may or may not be a mappable name
TEXTS = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12) | st.text(
    st.sampled_from("a/%$+#\x00\x1f"), min_size=0, max_size=8
)


# --------------------------------------------------------------------------
# topic names


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("sport/tennis/player1", "sport/tennis/player1"),
        ("/finance", "%/finance"),
        ("a//b/", "a/%/b/%"),
        ("/", "%/%"),
        ("$SYS/broker/uptime", "$SYS/broker/uptime"),
        ("%%/a%/%b", "%%/a%/%b"),
        ("a.b/(x|y)/[z]", "a.b/(x|y)/[z]"),
        ("ünï/✓", "ünï/✓"),
    ],
)
def test_path_of_maps_levels_to_segments(name: str, path: str) -> None:
    assert path_of(name) == path
    assert topic_of(path) == name
    assert has_topic_name(path)


@pytest.mark.parametrize(
    ("name", "level", "position"),
    [
        ("%", 0, 0),
        ("a/%", 1, 2),
        ("a/%/b", 1, 2),
        ("ab/cd/%", 2, 6),
    ],
)
def test_a_level_that_is_exactly_percent_is_refused(name: str, level: int, position: int) -> None:
    with pytest.raises(MappingError, match="exactly '%'") as info:
        path_of(name)
    assert info.value.level == level
    assert info.value.position == position
    assert info.value.text == name
    assert repr(name) in str(info.value)


def test_mqtt_4_7_3_1_topic_names_and_filters_are_at_least_one_character_long() -> None:
    with pytest.raises(MappingError, match="MQTT-4.7.3-1"):
        path_of("")
    with pytest.raises(MappingError, match="MQTT-4.7.3-1"):
        selector_of("")


def test_mqtt_4_7_3_2_names_and_filters_must_not_contain_the_null_character() -> None:
    with pytest.raises(MappingError, match="MQTT-4.7.3-2") as info:
        path_of("a/b\x00c")
    assert info.value.position == 3
    assert info.value.level == 1
    with pytest.raises(MappingError, match="MQTT-4.7.3-2"):
        selector_of("a/+/\x00")


@pytest.mark.parametrize("char", ["\x01", "\n", "\x1f", "\x7f", "\x85", "\x9f"])
def test_control_characters_are_refused(char: str) -> None:
    with pytest.raises(MappingError, match=f"U\\+{ord(char):04X}") as info:
        path_of("ab" + char)
    assert info.value.position == 2
    with pytest.raises(MappingError, match=f"U\\+{ord(char):04X}"):
        selector_of("ab/#" + char)


def test_surrogates_are_not_utf8() -> None:
    with pytest.raises(MappingError, match="MQTT-1.5.4-1"):
        path_of("a\ud800")
    with pytest.raises(MappingError, match="MQTT-1.5.4-1"):
        selector_of("+/\udfff")


@pytest.mark.parametrize(("name", "position"), [("+", 0), ("a/+", 2), ("a/#", 2), ("a/b#c", 3), ("x+", 1)])
def test_topic_names_may_not_hold_wildcards(name: str, position: int) -> None:
    with pytest.raises(MappingError, match="MQTT-3.3.2-2") as info:
        path_of(name)
    assert info.value.position == position


def test_names_longer_than_max_length_are_refused() -> None:
    name = "a/" * (MAX_TOPIC_LENGTH // 2) + "b"
    assert len(name) == MAX_TOPIC_LENGTH + 1
    with pytest.raises(MappingError, match="4097 characters long"):
        path_of(name)
    with pytest.raises(MappingError, match="4097 characters long"):
        selector_of(name)
    assert path_of(name[2:]) == name[2:]
    assert path_of("abcdef", max_length=6) == "abcdef"
    with pytest.raises(MappingError, match="more than the 5 allowed"):
        path_of("abcdef", max_length=5)
    assert not has_topic_name("abcdef", max_length=5)


def test_long_names_are_shortened_in_messages() -> None:
    with pytest.raises(MappingError) as info:
        path_of("x" * 1000 + "/%")
    assert len(str(info.value)) < 250


def test_mapping_error_is_a_value_error() -> None:
    assert issubclass(MappingError, ValueError)


@pytest.mark.parametrize(
    ("path", "name"),
    [("%", ""), ("a+b", "a+b"), ("a/#", "a/#"), ("%/%", "/")],
)
def test_topic_of_is_defined_for_every_path(path: str, name: str) -> None:
    assert topic_of(path) == name


@pytest.mark.parametrize("path", ["%", "a+b", "a/#", "+", "x/\ud800"])
def test_paths_without_a_topic_name(path: str) -> None:
    assert not has_topic_name(path)


@given(TEXTS)
def test_path_of_is_injective_and_reversed_by_topic_of(name: str) -> None:
    try:
        path = path_of(name)
    except MappingError:
        assert (
            not name
            or "+" in name
            or "#" in name
            or re.search("[\x00-\x1f\x7f-\x9f\ud800-\udfff]", name)
            or EMPTY_LEVEL in name.split("/")
        )
        return
    assert paths.is_normal(path)
    assert paths.depth(path) == name.count("/") + 1
    assert topic_of(path) == name
    assert has_topic_name(path)


@given(NAMES)
def test_names_from_the_small_alphabet_round_trip(name: str) -> None:
    assert topic_of(path_of(name)) == name


# any canopy path: segments "%", wildcards and surrogates among them
PATHS = st.lists(
    st.sampled_from(["%", "%%", "a%", "+", "#", "a+b", "$", "$SYS", "\ud800"])
    | st.text(st.characters(exclude_categories=["Cc", "Cs"], exclude_characters="/"), min_size=1, max_size=5),
    min_size=1,
    max_size=4,
).map("/".join)


@given(PATHS)
def test_topic_of_is_reversed_by_path_of_for_paths_with_a_topic_name(path: str) -> None:
    assert paths.is_normal(path)
    has = path != EMPTY_LEVEL and not re.search("[+#\ud800-\udfff]", path)
    assert has_topic_name(path) is has
    if has:
        assert path_of(topic_of(path)) == path


# --------------------------------------------------------------------------
# topic filters


@pytest.mark.parametrize(
    ("topic_filter", "expression"),
    [
        ("sport/tennis", ">sport/tennis"),
        ("/finance", ">%/finance"),
        ("a//b/", ">a/%/b/%"),
        ("$SYS/broker/uptime", ">$SYS/broker/uptime"),
        ("a.b/(x)", ">a.b/(x)"),
        ("sport/tennis/+", "?sport/tennis/.+"),
        ("sport/+/player1", "?sport/.+/player1"),
        ("a/b/#", "?a/b//"),
        ("#", "?[^$].*//"),
        ("+", "?[^$].*"),
        ("+/x", "?[^$].*/x"),
        ("+/#", "?[^$].*//"),
        ("$SYS/#", "?\\$SYS//"),
        ("$SYS/+/x", "?\\$SYS/.+/x"),
        ("/+", "?%/.+"),
        ("a.b/+/(c|d)", "?a\\.b/.+/\\(c\\|d\\)"),
    ],
)
def test_selector_of(topic_filter: str, expression: str) -> None:
    selector = selector_of(topic_filter)
    assert str(selector) == expression
    assert parse_selector(expression) == selector


def test_literal_filters_select_one_path() -> None:
    selector = selector_of("a//b")
    assert isinstance(selector, PathSelector)
    assert selector.literal_path == "a/%/b"


def test_literal_levels_are_trie_keys() -> None:
    selector = selector_of("$SYS/a.b/+/#")
    assert isinstance(selector, SplitPathSelector)
    assert selector.literals == ("$SYS", "a.b", None)
    assert selector.path_prefix == "$SYS/a.b"


def test_mqtt_4_7_1_2_multi_level_wildcard_matches_the_parent_level() -> None:
    selector = selector_of("a/#")
    assert selector.matches(path_of("a"))
    assert selector.matches(path_of("a/b"))
    assert selector.matches(path_of("a/b/c"))
    assert selector.matches(path_of("a/"))  # a trailing empty level is a child of "a"
    assert not selector.matches(path_of("ab"))
    assert not selector.matches(path_of("b/a"))
    assert selector_of("sport/tennis/player1/#").matches(path_of("sport/tennis/player1"))


def test_mqtt_4_7_1_2_misplaced_multi_level_wildcards_are_refused() -> None:
    with pytest.raises(MappingError, match="last level") as info:
        selector_of("a/#/b")
    assert (info.value.level, info.value.position) == (1, 2)
    with pytest.raises(MappingError, match="entire level") as info:
        selector_of("a/b#")
    assert (info.value.level, info.value.position) == (1, 3)


def test_mqtt_4_7_1_3_single_level_wildcards_occupy_a_whole_level() -> None:
    with pytest.raises(MappingError, match="MQTT-4.7.1-3") as info:
        selector_of("sport+")
    assert info.value.position == 5
    assert selector_of("+/tennis/#").matches(path_of("sport/tennis/player1"))
    assert selector_of("sport/+").matches(path_of("sport/"))
    assert not selector_of("sport/+").matches(path_of("sport"))


def test_mqtt_4_7_2_1_wildcards_do_not_match_dollar_topics() -> None:
    for topic_filter in ["#", "+", "+/#", "+/monitor/Clients", "+/+/+"]:
        selector = selector_of(topic_filter)
        for name in ["$SYS", "$SYS/monitor/Clients", "$/a/b", "$x/y/z"]:
            assert not selector.matches(path_of(name)), (topic_filter, name)
    assert selector_of("#").matches(path_of("a$/x"))
    assert selector_of("+/+").matches(path_of("x/$SYS"))
    assert selector_of("$SYS/#").matches(path_of("$SYS/monitor/Clients"))
    assert selector_of("$SYS/monitor/+").matches(path_of("$SYS/monitor/Clients"))


def test_a_filter_level_that_is_exactly_percent_is_refused() -> None:
    with pytest.raises(MappingError, match="exactly '%'") as info:
        selector_of("+/%/#")
    assert (info.value.level, info.value.position) == (1, 2)
    with pytest.raises(MappingError, match="exactly '%'"):
        selector_of("a/%")


@given(filters(), NAMES)
def test_selectors_match_as_mqtt_filters_do(topic_filter: str, name: str) -> None:
    selector = selector_of(topic_filter)
    assert parse_selector(str(selector)) == selector
    assert selector.matches(path_of(name)) is mqtt_matches(topic_filter, name)


@given(filters())
def test_filters_match_the_names_they_were_made_from(topic_filter: str) -> None:
    name = "/".join("x" if lv in ("+", "#") else lv for lv in topic_filter.split("/"))
    assume(name and not name.startswith("$"))
    assert selector_of(topic_filter).matches(path_of(name))


@given(st.text(st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=10))
def test_literal_levels_match_exactly_their_text(level: str) -> None:
    pattern = re.escape(level)
    assert compile_regex(pattern).fullmatch(level)
    assert literal_text(pattern) == level


# --------------------------------------------------------------------------
# shared subscriptions


@pytest.mark.parametrize(
    ("topic_filter", "expected"),
    [
        ("$share/g/a/b", ("g", "a/b")),
        ("$share/consumers/#", ("consumers", "#")),
        ("$share/g/$share/x", ("g", "$share/x")),
        ("$share/g//", ("g", "/")),
        ("a/b", (None, "a/b")),
        ("$SYS/#", (None, "$SYS/#")),
        ("$share", (None, "$share")),
        ("$sharex/g/a", (None, "$sharex/g/a")),
    ],
)
def test_parse_shared(topic_filter: str, expected: tuple[str | None, str]) -> None:
    assert parse_shared(topic_filter) == expected


@pytest.mark.parametrize("topic_filter", ["$share/", "$share//a"])
def test_mqtt_4_8_2_1_share_names_are_at_least_one_character_long(topic_filter: str) -> None:
    with pytest.raises(MappingError, match="MQTT-4.8.2-1") as info:
        parse_shared(topic_filter)
    assert info.value.position == 7


@pytest.mark.parametrize(
    ("topic_filter", "what"),
    [
        ("$share/g+/a", "'\\+'"),
        ("$share/#/a", "'#'"),
        ("$share/a#b/x", "'#'"),
        ("$share/g\x00/x", "U\\+0000"),
        ("$share/g", "followed by '/'"),
        ("$share/g/", "followed by '/'"),
    ],
)
def test_mqtt_4_8_2_2_share_names_hold_no_wildcards_and_are_followed_by_a_filter(
    topic_filter: str, what: str
) -> None:
    with pytest.raises(MappingError, match=what) as info:
        parse_shared(topic_filter)
    assert "MQTT-4.8.2-2" in str(info.value)


# --------------------------------------------------------------------------
# payloads


def test_payload_format_and_content_type() -> None:
    assert [payload_format(t) for t in (T.STRING, T.INT64, T.DOUBLE, T.JSON, T.BINARY)] == [1, 1, 1, 1, 0]
    assert content_type(T.STRING) == "text/plain; charset=utf-8"
    assert content_type(T.INT64) == content_type(T.DOUBLE) == "text/plain; charset=utf-8"
    assert content_type(T.JSON) == "application/json"
    assert content_type(T.BINARY) == "application/octet-stream"


@pytest.mark.parametrize("call", [payload_format, content_type, lambda t: from_payload(t, b"1"), lambda t: to_payload(t, b"\x01")])
def test_time_series_is_not_a_value_type(call: Any) -> None:
    with pytest.raises(InvalidValueError, match="event value type"):
        call(T.TIME_SERIES)


# the rule itself is topics.types.from_text and to_text, tested in tests/unit/topics/test_text_values.py
@pytest.mark.parametrize(
    ("topic_type", "payload"),
    [(T.STRING, b"h\xc3\xa9"), (T.STRING, b""), (T.INT64, b" -7\n"), (T.DOUBLE, b"-Infinity"), (T.JSON, b'{"a":[1]}'),
     (T.JSON, b""), (T.BINARY, b"\x00\xff")],
)
def test_payloads_convert_as_topic_values_given_as_text_do(topic_type: TopicType, payload: bytes) -> None:
    stored = from_payload(topic_type, payload)
    assert stored == from_text(topic_type, payload)
    assert to_payload(topic_type, stored) == to_text(topic_type, stored)


@pytest.mark.parametrize(
    ("topic_type", "payload"),
    [(T.STRING, b"\xff"), (T.INT64, b"1.5"), (T.DOUBLE, b"1E309"), (T.JSON, b'{"a":1,"a":2}')],
)
def test_payloads_are_refused_as_topic_values_given_as_text_are(topic_type: TopicType, payload: bytes) -> None:
    with pytest.raises(InvalidValueError) as expected:
        from_text(topic_type, payload)
    with pytest.raises(InvalidValueError, match=re.escape(str(expected.value))):
        from_payload(topic_type, payload)
