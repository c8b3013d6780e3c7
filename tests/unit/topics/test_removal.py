"""topics/removal.py and removal_state.py: the REMOVAL policy language, and when a policy is due over simulated time,
checked against an oracle that reads the facts' whole timeline."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from topics.errors import SpecificationError, TopicModelError
from topics.removal import (
    MAX_DURATION_MS,
    MAX_POLICY_LENGTH,
    MAX_TERMS,
    AllOf,
    AnyOf,
    Condition,
    FewerSubscriptions,
    NoSessionHas,
    NoUpdates,
    RemovalPolicy,
    RemovalPolicyError,
    RemovalStateError,
    SessionCloses,
    Term,
    TimeAfter,
    format_rfc1123,
    parse_policy,
    parse_rfc1123,
    selector_to_remove,
)
from topics.removal_state import RemovalState, TopicFacts
from topics.selectors import parse_selector

S, M, H = 1000, 60_000, 3_600_000
JUNE_3_2008 = 1_212_491_130_000  # Tue, 3 Jun 2008 11:05:30 GMT

# -- parsing -----------------------------------------------------------------------

TERMS: list[tuple[str, Term]] = [
    ("time after 1212491130000", TimeAfter(JUNE_3_2008)),
    ('time after "Tue, 3 Jun 2008 11:05:30 GMT"', TimeAfter(JUNE_3_2008, as_date=True)),
    ("time after 'Tue, 3 Jun 2008 11:05:30 GMT'", TimeAfter(JUNE_3_2008)),
    ("subscriptions < 1 for 20m", FewerSubscriptions(1, 20 * M)),
    ("subscriptions<2 for 10s after 1h", FewerSubscriptions(2, 10 * S, H)),
    ("local subscriptions < 3 for 1h", FewerSubscriptions(3, H, local=True)),
    ("no updates for 3h", NoUpdates(3 * H)),
    ("no updates for 90s after 5m", NoUpdates(90 * S, 5 * M)),
    ("no updates for 250ms", NoUpdates(250)),
    ("no updates for 10 s", NoUpdates(10 * S)),
    ("no session has \"$Principal is 'Alice'\"", NoSessionHas("$Principal is 'Alice'")),
    ("no session has '$Principal is \"Alice\"' for 10m", NoSessionHas('$Principal is "Alice"', 10 * M)),
    ("no session has 'all' for 1m after 2h", NoSessionHas("all", M, 2 * H)),
    ("no session has 'all' after 2h", NoSessionHas("all", 0, 2 * H)),
    ("this session closes", SessionCloses()),
]


@pytest.mark.parametrize(("text", "term"), TERMS)
def test_every_term_form_parses(text: str, term: Term) -> None:
    policy = parse_policy("when " + text)
    assert policy.condition == term and policy.selector is None and policy.terms == (term,)
    assert parse_policy(str(policy)) == policy


a, b, c, d = NoUpdates(S), NoUpdates(2 * S), NoUpdates(3 * S), NoUpdates(4 * S)


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("a and b", AllOf((a, b))),
        ("a or b", AnyOf((a, b))),
        ("a or b and c", AnyOf((a, AllOf((b, c))))),
        ("a and b or c", AnyOf((AllOf((a, b)), c))),
        ("a and b or c and d", AnyOf((AllOf((a, b)), AllOf((c, d))))),
        ("(a or b) and c", AllOf((AnyOf((a, b)), c))),
        ("a and (b or c) and d", AllOf((a, AnyOf((b, c)), d))),
        ("((a))", a),
        ("(a and b) and (c and d)", AllOf((a, b, c, d))),  # same-kind groups flatten
        ("a or (b or c)", AnyOf((a, b, c))),
    ],
)
def test_and_binds_tighter_than_or_and_parentheses_group(condition: str, expected: Condition) -> None:
    names = {"a": "no updates for 1s", "b": "no updates for 2s", "c": "no updates for 3s", "d": "no updates for 4s"}
    text = "when " + re.sub(r"\b[abcd]\b", lambda m: names[m.group()], condition)
    policy = parse_policy(text)
    assert policy.condition == expected
    assert parse_policy(str(policy)) == policy


def test_keywords_are_case_insensitive_and_whitespace_is_free() -> None:
    policy = parse_policy(
        "  WHEN\tNo  Updates\nFOR 10M  Or  THIS session CLOSES\r\nAnD Subscriptions<1 For 1H   "
        "remove  '>a/b'  "
    )
    assert policy == RemovalPolicy(
        AnyOf((NoUpdates(10 * M), AllOf((SessionCloses(), FewerSubscriptions(1, H))))), parse_selector(">a/b")
    )
    assert str(policy) == 'when no updates for 10m or this session closes and subscriptions < 1 for 1h remove ">a/b"'


def test_the_remove_clause_takes_any_selector() -> None:
    policy = parse_policy("when this session closes remove '?alpha/beta//'")
    assert policy.selector == parse_selector("?alpha/beta//")
    assert selector_to_remove(policy, "alpha/beta/x") == parse_selector("?alpha/beta//")
    assert selector_to_remove(parse_policy("when this session closes"), "a/b") == parse_selector(">a/b")
    # a regular expression keeps its backslashes; a backslash before the quote is the quote
    assert parse_policy(r'when this session closes remove "*a\d+"').selector == parse_selector(r"*a\d+")
    assert parse_policy(r"when no session has '$Principal is \'a\''").terms == (NoSessionHas("$Principal is 'a'"),)
    assert parse_policy(r"""when no session has "$Principal is 'it\'s'" """).terms == (
        NoSessionHas(r"$Principal is 'it\'s'"),
    )


@pytest.mark.parametrize(
    "policy",
    [
        "when no updates for 10m",
        'when time after "Tue, 3 Jun 2008 11:05:30 GMT" remove "*alpha/beta//"',
        "when (subscriptions < 1 for 10s or no updates for 1h) and this session closes",
        "when no session has \"$Principal is 'Alice'\" for 1m after 2h or local subscriptions < 1 for 90s",
        "when no session has \"say 'it\\\"s'\"",
    ],
)
def test_str_is_a_canonical_form(policy: str) -> None:
    assert str(parse_policy(policy)) == policy


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("", 1, "may not be empty: expected 'when'"),
        ("   ", 1, "may not be empty"),
        ("if no updates for 1m", 1, "expected 'when', found 'if'"),
        ("when", 5, "expected a condition: 'time after', "),
        ("when no updates for", 20, "expected a duration such as 10s, 5m or 1h, found the end"),
        ("when no upd for 1m", 9, "expected 'updates' or 'session', found 'upd'"),
        ("when no updates in 1m", 17, "expected 'for', found 'in'"),
        ("when time before 5", 11, "expected 'after', found 'before'"),
        ("when this session ends", 19, "expected 'closes', found 'ends'"),
        ("when no updates for 10", 23, "expected a duration unit (ms, s, m or h) after 10, found the end"),
        ("when no updates for 10d", 23, "expected a duration unit (ms, s, m or h) after 10, found 'd'"),
        ("when no updates for 10 and this session closes", 24, "expected a duration unit"),
        ("when subscriptions < x for 1m", 22, "expected a subscription count, found 'x'"),
        ("when subscriptions <= 1 for 1m", 21, "expected a subscription count, found '='"),
        ("when subscriptions 1 for 1m", 20, "expected '<', found '1'"),
        ("when subscriptions < 0 for 1m", 22, "a subscription count must be from 1 to 2147483647"),
        ("when subscriptions < 2147483648 for 1m", 22, "a subscription count out of range: at most 2147483647"),
        ("when subscriptions < 1 for 1m after", 36, "expected a duration"),
        ("when no session has $Principal", 21, "expected a session filter in quotes, found '$'"),
        ("when no session has '$Principal is \"a\"", 21, "unterminated quoted text: expected a closing '"),
        ("when no session has ''", 21, "invalid session filter: a session filter may not be empty"),
        ("when this session closes remove '?a('", 36, "invalid topic selector: invalid regular expression"),
        ("when this session closes remove ''", 34, "invalid topic selector: empty selector expression"),
        ("when this session closes remove >a", 33, "expected a topic selector in quotes, found '>'"),
        ("when this session closes remove '>a", 33, "unterminated quoted text"),
        ("when time after Tue", 17, "expected milliseconds since the epoch or a quoted RFC 1123 date, found 'Tue'"),
        ("when time after 'yesterday'", 17, "invalid date: expected an RFC 1123 date"),
        ("when time after 'Wed, 3 Jun 2008 11:05:30 GMT'", 17, "invalid date: 3 Jun 2008 is a Tue, not a Wed"),
        ("when time after '31 Feb 2008 11:05:30 GMT'", 17, "invalid date: no such date and time"),
        ("when time after 253402300800000", 17, "a time out of range: at most 253402300799999"),
        ("when no updates for 87841h", 21, "duration out of range: at most 87840h (ten years)"),
        ("when no updates for 1m after 99999999999999999999999h", 30, "duration out of range"),
        ("when no updates for 1m this session closes", 24, "expected 'and', 'or', 'remove' or the end, found 'this'"),
        ("when no updates for 1m and", 27, "expected a condition"),
        ("when (no updates for 1m", 24, "expected ')', 'and' or 'or', found the end"),
        ("when no updates for 1m)", 23, "expected 'and', 'or', 'remove' or the end, found ')'"),
        ("when () ", 7, "expected a condition"),
        ("when no updates for 1m\n  xor this session closes", 3, "found 'xor'"),
        ("whenever no updates for 1m", 1, "expected 'when', found 'whenever'"),
    ],
)
def test_a_parse_error_says_where_and_what_was_expected(text: str, column: int, fragment: str) -> None:
    with pytest.raises(RemovalPolicyError) as caught:
        parse_policy(text)
    e = caught.value
    assert e.column == column and fragment in e.reason, str(e)
    assert isinstance(e, SpecificationError) and e.code == "INVALID_SPECIFICATION"
    line = text.split("\n")[e.line - 1]
    assert str(e).endswith(f"\n{line}\n{' ' * (column - 1)}^")
    assert f"column {column}: " in str(e)


def test_the_bounds() -> None:
    ok = "when no updates for 1m"
    assert parse_policy(ok + " " * (MAX_POLICY_LENGTH - len(ok)))
    with pytest.raises(RemovalPolicyError, match="at most 1024 characters") as caught:
        parse_policy(ok + " " * (MAX_POLICY_LENGTH + 1 - len(ok)))
    assert caught.value.column == MAX_POLICY_LENGTH + 1

    many = "when " + " or ".join(["this session closes"] * MAX_TERMS)
    assert len(parse_policy(many).terms) == MAX_TERMS
    with pytest.raises(RemovalPolicyError, match="at most 32 conditions") as caught:
        parse_policy(many + " and this session closes")
    assert caught.value.column == len(many) + len(" and ") + 1

    assert parse_policy("when " + "(" * 32 + "this session closes" + ")" * 32).terms == (SessionCloses(),)
    with pytest.raises(RemovalPolicyError, match="nest at most 32 deep") as caught:
        parse_policy("when " + "(" * 33 + "this session closes" + ")" * 33)
    assert caught.value.column == 5 + 33
    with pytest.raises(RemovalPolicyError, match="at most 1024 characters"):
        parse_policy("when " + "(" * 5000)  # long before any recursion

    assert parse_policy("when no updates for 87840h").terms == (NoUpdates(MAX_DURATION_MS),)
    assert parse_policy("when subscriptions < 2147483647 for 0s").terms == (FewerSubscriptions(2**31 - 1, 0),)
    assert parse_policy("when time after 253402300799999").terms == (TimeAfter(253_402_300_799_999),)
    with pytest.raises(RemovalPolicyError, match="is text, not bytes"):
        parse_policy(b"when this session closes")


def test_terms_built_directly_are_checked() -> None:
    with pytest.raises(SpecificationError):
        FewerSubscriptions(0, S)
    with pytest.raises(SpecificationError):
        NoUpdates(MAX_DURATION_MS + 1)
    with pytest.raises(SpecificationError):
        TimeAfter(-1)


# -- RFC 1123 dates --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("Tue, 3 Jun 2008 11:05:30 GMT", JUNE_3_2008),
        ("3 Jun 2008 11:05:30 GMT", JUNE_3_2008),
        ("Tue, 03 Jun 2008 11:05:30 GMT", JUNE_3_2008),
        ("tue,3 jun 2008 11:05:30 gmt", JUNE_3_2008),
        ("Tue, 3 Jun 2008 11:05 GMT", JUNE_3_2008 - 30 * S),
        ("Tue, 3 Jun 2008 13:05:30 +0200", JUNE_3_2008),
        ("Tue, 3 Jun 2008 06:35:30 -0430", JUNE_3_2008),
        ("Sun, 3 Jun 2018 11:05:30 GMT", 1_528_023_930_000),
        ("Thu, 1 Jan 1970 00:00:00 GMT", 0),
        ("Fri, 31 Dec 9999 23:59:59 GMT", 253_402_300_799_000),
    ],
)
def test_rfc1123_dates(text: str, ms: int) -> None:
    assert parse_rfc1123(text) == ms
    assert parse_rfc1123(format_rfc1123(ms)) == ms


@pytest.mark.parametrize(
    "text",
    ["Tue, 3 Jun 08 11:05:30 GMT", "Tue, 3 June 2008 11:05:30 GMT", "Tue, 3 Jun 2008 11:05:30 CET",
     "Tue, 3 Jun 2008 24:00:00 GMT", "Tue, 3 Foo 2008 11:05:30 GMT", "Wed, 31 Dec 1969 23:59:59 GMT",
     "2008-06-03T11:05:30Z"],
)
def test_rfc1123_dates_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_rfc1123(text)


# -- session filters ---------------------------------------------------------------


def test_the_filter_validator_is_injected() -> None:
    seen: list[str] = []

    class Bad(ValueError):
        line, column, reason = 1, 4, "unknown operator 'iz'"

    def validate(text: str) -> None:
        seen.append(text)
        if " iz " in text:
            raise Bad("no")

    policy = parse_policy("when no session has '$A is \"x\"' or no session has 'all' for 1s", validate)
    assert seen == ['$A is "x"', "all"] and policy.session_filters == ('$A is "x"', "all")
    with pytest.raises(RemovalPolicyError) as caught:
        parse_policy("when no session has '$A iz \"x\"'", validate)
    assert caught.value.reason == "invalid session filter: unknown operator 'iz'"
    assert caught.value.column == len("when no session has '$A ") + 1  # where the filter's error points


def test_the_sessions_filter_parser_can_be_the_validator() -> None:
    from sessions.filters import parse_filter

    assert parse_policy("when no session has \"$Principal is 'Alice'\"", parse_filter).terms == (
        NoSessionHas("$Principal is 'Alice'"),
    )
    with pytest.raises(RemovalPolicyError) as caught:
        parse_policy("when no session has \"$Principal iss 'Alice'\"", parse_filter)
    assert caught.value.reason.startswith("invalid session filter: ") and caught.value.column == 33  # at 'iss'


# -- evaluation over simulated time -------------------------------------------------


def facts(
    subscriptions: int = 0,
    last_update_ms: int | None = None,
    creator_open: bool = True,
    sessions: dict[str, int] | None = None,
    local: int | None = None,
) -> TopicFacts:
    return TopicFacts(subscriptions, last_update_ms, creator_open, sessions or {}, local)


def started(text: str, created_ms: int = 0, first: TopicFacts | None = None) -> RemovalState:
    state = RemovalState.start(parse_policy(text), created_ms, "session-1")
    return state.observe(first or facts(), created_ms)


def test_time_after() -> None:
    state = started("when time after 5000", first=facts(subscriptions=9))
    assert state.due_at() == 5000 and state.next_check_ms(1000) == 5000
    assert not state.due(4999) and state.due(5000) and state.next_check_ms(6000) == 6000
    assert state.observe(facts(subscriptions=1, last_update_ms=100), 200).due_at() == 5000


def test_no_updates_counts_from_the_last_update_or_the_creation() -> None:
    state = started("when no updates for 10s", created_ms=1000)
    assert state.due_at() == 11_000 and not state.due(10_999) and state.due(11_000)
    state = state.observe(facts(last_update_ms=4000), 4000)
    assert state.due_at() == 14_000 and state.next_check_ms(5000) == 14_000
    # a stale report of an older update does not bring removal forward
    assert state.observe(facts(last_update_ms=2000), 6000).due_at() == 14_000
    assert started("when no updates for 10s after 1m").due_at() == 70_000
    assert started("when no updates for 10s after 1m").observe(facts(last_update_ms=65_000), 65_000).due_at() == 75_000


def test_fewer_subscriptions_for_a_period_resets_when_it_stops_holding() -> None:
    state = started("when subscriptions < 2 for 10s", first=facts(subscriptions=1))
    assert state.due_at() == 10_000
    state = state.observe(facts(subscriptions=1), 3000)  # still holding: the period goes on
    assert state.due_at() == 10_000
    state = state.observe(facts(subscriptions=2), 4000)
    assert state.due_at() is None and state.next_check_ms(4000) is None and not state.due(10**12)
    state = state.observe(facts(subscriptions=0), 6000)
    assert state.due_at() == 16_000 and not state.due(15_999) and state.due(16_000)


def test_fewer_subscriptions_after_an_initial_period() -> None:
    state = started("when subscriptions < 1 for 10s after 1m")
    assert state.due_at() == 70_000  # the period starts when checking does
    state = state.observe(facts(subscriptions=1), 50_000).observe(facts(), 65_000)
    assert state.due_at() == 75_000


def test_local_subscriptions_leave_out_fan_out() -> None:
    state = started("when local subscriptions < 1 for 1s", first=facts(subscriptions=3, local=0))
    assert state.due_at() == S
    assert state.observe(facts(subscriptions=3, local=1), 500).due_at() is None
    assert started("when local subscriptions < 1 for 1s", first=facts(subscriptions=3)).due_at() is None
    assert started("when subscriptions < 1 for 1s", first=facts(subscriptions=3, local=0)).due_at() is None


def test_no_session_has() -> None:
    state = started("when no session has '$Principal is \"a\"'", first=facts(sessions={'$Principal is "a"': 2}))
    assert state.due_at() is None
    state = state.observe(facts(sessions={'$Principal is "a"': 0}), 3000)
    assert state.due(3000) and state.next_check_ms(3000) == 3000

    state = started("when no session has 'F' for 5s", first=facts(sessions={"F": 1}))
    state = state.observe(facts(sessions={"F": 0}), 2000)
    assert state.due_at() == 7000
    state = state.observe(facts(sessions={"F": 1}), 6000).observe(facts(sessions={"F": 0}), 6500)
    assert state.due_at() == 11_500

    counted: list[str] = []

    def count(filter_text: str) -> int:
        counted.append(filter_text)
        return 0

    state = started("when no session has 'F' after 1m", first=facts(sessions={"F": 1}))
    assert state.observe(TopicFacts(sessions_matching=count), 1).due_at() == M
    assert counted == ["F"]
    with pytest.raises(ValueError, match="no session count given for the filter 'F'"):
        state.observe(facts(sessions={"G": 0}), 2)
    with pytest.raises(ValueError, match="needs the number of sessions matching 'F'"):
        state.observe(TopicFacts(), 2)


def test_this_session_closes() -> None:
    state = started("when this session closes")
    assert state.creator_session == "session-1" and state.due_at() is None
    state = state.observe(facts(creator_open=False), 2500)
    assert state.due_at() == 2500 and state.due(2500) and not state.due(2499)
    assert state.observe(facts(creator_open=False), 9000).due_at() == 2500


def test_and_needs_every_operand_or_needs_one() -> None:
    both = started("when time after 5000 and no updates for 1s")
    assert both.observe(facts(last_update_ms=4500), 4500).due_at() == 5500
    assert both.observe(facts(last_update_ms=3000), 3000).due_at() == 5000
    either = started("when time after 5000 or no updates for 1s")
    assert either.observe(facts(last_update_ms=4500), 4500).due_at() == 5000
    assert either.observe(facts(last_update_ms=3000), 3000).due_at() == 4000
    never = started("when this session closes and no updates for 1s")
    assert never.due_at() is None
    grouped = started("when (this session closes or subscriptions < 1 for 2s) and no updates for 1s")
    assert grouped.due_at() == 2 * S
    assert grouped.observe(facts(subscriptions=1, creator_open=False), 500).due_at() == S


def test_observing_what_changes_nothing_keeps_the_state() -> None:
    state = started("when subscriptions < 1 for 1s")
    assert state.observe(facts(), 500) is state


# -- the wire form --------------------------------------------------------------------


def test_the_state_round_trips_through_msgpack() -> None:
    state = started(
        "when no session has 'F' for 1s or subscriptions < 1 for 1m and no updates for 1h or time after 5",
        created_ms=100,
        first=facts(sessions={"F": 0}, last_update_ms=150),
    )
    wire = msgpack.unpackb(msgpack.packb(state.to_wire()))
    assert wire == [100, "session-1", [100, 100, 150, None]]
    assert RemovalState.from_wire(state.policy, wire) == state
    assert RemovalState.from_wire(state.policy, tuple(wire)) == state


@pytest.mark.parametrize(
    "wire",
    [None, [], [1, None], [1, None, [None]], ["1", None, [1, 2, 3, None]], [1, 5, [1, 2, 3, None]],
     [1, None, [1, "2", 3, None]], [True, None, [1, 2, 3, None]], [1, None, [1, 2, 3, 4.5]]],
)
def test_a_malformed_wire_state_is_refused(wire: Any) -> None:
    policy = parse_policy(
        "when no session has 'F' for 1s or subscriptions < 1 for 1m or no updates for 1h or time after 5"
    )
    with pytest.raises(RemovalStateError) as caught:
        RemovalState.from_wire(policy, wire)
    assert isinstance(caught.value, TopicModelError)


# -- against an oracle ---------------------------------------------------------------

FILTERS = ("F1", "F2")
small = st.integers(0, 40)
terms: st.SearchStrategy[Term] = st.one_of(
    st.builds(TimeAfter, st.integers(0, 300)),
    st.builds(FewerSubscriptions, st.integers(1, 3), small, small, st.booleans()),
    st.builds(NoUpdates, small, small),
    st.builds(NoSessionHas, st.sampled_from(FILTERS), small, small),
    st.just(SessionCloses()),
)
conditions: st.SearchStrategy[Condition] = st.recursive(
    terms,
    lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=3).map(lambda ops: AllOf(tuple(ops))),
        st.lists(inner, min_size=2, max_size=3).map(lambda ops: AnyOf(tuple(ops))),
    ),
    max_leaves=6,
)


@dataclass(frozen=True)
class Change:
    delay: int
    subscriptions: int
    local: int
    updated: bool
    creator_open: bool
    sessions: tuple[int, int]


changes = st.lists(
    st.builds(Change, st.integers(1, 30), st.integers(0, 3), st.integers(0, 3), st.booleans(),
              st.booleans(), st.tuples(st.integers(0, 1), st.integers(0, 1))),
    max_size=12,
)


def _timeline(created: int, start: Change, later: list[Change]) -> list[tuple[int, TopicFacts]]:
    """The facts from each change on: the first at ``created``, an update at a change's time."""
    out: list[tuple[int, TopicFacts]] = []
    t, last_update = created, None
    for i, ch in enumerate([start, *later]):
        t += ch.delay if i else 0
        if ch.updated and i:
            last_update = t
        sessions = dict(zip(FILTERS, ch.sessions, strict=True))
        out.append((t, TopicFacts(ch.subscriptions, last_update, ch.creator_open, sessions, ch.local)))
    return out


def _oracle(policy: RemovalPolicy, created: int, timeline: list[tuple[int, TopicFacts]], horizon: int) -> int | None:
    """The first tick at which the policy holds, from the definition of each term over the
    whole timeline (a condition held 'for D' at t when it held at every tick of [t - D, t])."""
    ticks = range(created, horizon + 1)
    at: list[TopicFacts] = []
    j = 0
    for t in ticks:
        while j + 1 < len(timeline) and timeline[j + 1][0] <= t:
            j += 1
        at.append(timeline[j][1])

    def held_throughout(base: list[bool]) -> Callable[[int, int], bool]:
        false_before = [0]  # prefix counts of ticks where the base condition fails
        for ok in base:
            false_before.append(false_before[-1] + (not ok))
        return lambda lo, hi: lo >= created and false_before[hi - created + 1] - false_before[lo - created] == 0

    def truth(term: Term) -> list[bool]:
        if isinstance(term, TimeAfter):
            return [t >= term.at_ms for t in ticks]
        if isinstance(term, NoUpdates):
            updates = [f.last_update_ms for f in at]
            return [t - term.for_ms >= max(created, u or created) and t - term.for_ms >= created + term.after_ms
                    for t, u in zip(ticks, updates, strict=True)]
        if isinstance(term, SessionCloses):
            return [not f.creator_open for f in at]
        if isinstance(term, FewerSubscriptions):
            base = [(f.subscriptions if not term.local or f.local_subscriptions is None else f.local_subscriptions)
                    < term.limit for f in at]
        else:
            assert isinstance(term, NoSessionHas)
            base = [f.sessions(term.filter) == 0 for f in at]
        held = held_throughout(base)
        return [t - term.for_ms >= created + term.after_ms and held(t - term.for_ms, t) for t in ticks]

    per_term = iter([truth(term) for term in policy.terms])

    def combine(condition: Condition) -> list[bool]:
        if isinstance(condition, AllOf | AnyOf):
            parts = [combine(o) for o in condition.operands]
            fold = all if isinstance(condition, AllOf) else any
            return [fold(p[i] for p in parts) for i in range(len(ticks))]
        return next(per_term)

    whole = combine(policy.condition)
    return next((t for t, ok in zip(ticks, whole, strict=True) if ok), None)


def _detect(state: RemovalState, now: int, later: list[tuple[int, TopicFacts]]) -> int | None:
    """What a caller sees: it observes every change, and looks again at ``next_check_ms``."""
    if state.due(now):
        return now
    for t, f in later:
        check = state.next_check_ms(now)
        assert check is None or check > now
        if check is not None and check < t:
            assert state.due(check) and not state.due(check - 1)
            return check
        state, now = state.observe(f, t), t
        if state.due(now):
            return now
    check = state.next_check_ms(now)
    if check is not None:
        assert state.due(check) and not state.due(check - 1)
    return check


@given(conditions, st.integers(0, 50), st.builds(Change, st.just(0), st.integers(0, 3), st.integers(0, 3),
       st.just(False), st.booleans(), st.tuples(st.integers(0, 1), st.integers(0, 1))), changes)
def test_the_state_machine_sees_the_policy_due_exactly_when_the_oracle_does(
    condition: Condition, created: int, first: Change, later: list[Change]
) -> None:
    policy = RemovalPolicy(condition)
    timeline = _timeline(created, first, later)
    horizon = max(timeline[-1][0], 300) + 2 * 40 + 10
    expected = _oracle(policy, created, timeline, horizon)
    state = RemovalState.start(policy, created, "s").observe(timeline[0][1], created)
    seen = _detect(state, created, timeline[1:])
    assert seen == expected
    # the wire form carries the whole state: a backup taking over mid-way sees the same
    if len(timeline) > 2:
        for t, f in timeline[1:2]:
            state = state.observe(f, t)
        carried = RemovalState.from_wire(policy, msgpack.unpackb(msgpack.packb(state.to_wire())))
        assert carried == state and _detect(carried, timeline[1][0], timeline[2:]) == _detect(
            state, timeline[1][0], timeline[2:]
        )


@given(conditions, st.builds(Change, st.just(0), st.integers(0, 3), st.integers(0, 3), st.just(False),
       st.booleans(), st.tuples(st.integers(0, 1), st.integers(0, 1))), changes, st.integers(0, 12))
def test_a_state_rebuilt_from_the_journal_is_never_earlier_and_late_by_at_most_the_longest_period_of_still_facts(
    condition: Condition, first: Change, later: list[Change], failover: int
) -> None:
    policy = RemovalPolicy(condition)
    timeline = _timeline(0, first, later)
    failover = min(failover, len(timeline) - 1)
    state = RemovalState.start(policy, 0, "s")
    for t, f in timeline[: failover + 1]:
        state = state.observe(f, t)
    f_ms, f_facts = timeline[failover]
    if state.due(f_ms):
        return  # removed before the failover
    original = _detect(state, f_ms, timeline[failover + 1 :])
    rebuilt = RemovalState.start(policy, 0, "s", last_update_ms=f_facts.last_update_ms).observe(f_facts, f_ms)
    late = _detect(rebuilt, f_ms, timeline[failover + 1 :])
    if original is None:
        assert late is None
        return
    assert late is None or original <= late  # never earlier
    longest = max((getattr(t, "for_ms", 0) for t in policy.terms), default=0)
    if all(t > f_ms + longest or f == f_facts for t, f in timeline[failover + 1 :]):
        # the facts held still while the rebuilt state counted its periods again: late by at most
        # the longest of them (when they change meanwhile, the count starts again, as any would)
        assert late is not None and late <= max(original, f_ms + longest)


@given(conditions, st.one_of(st.none(), st.sampled_from([">a/b", "?x//", "*a/.*"])))
def test_printing_and_parsing_agree(condition: Condition, selector: str | None) -> None:
    policy = RemovalPolicy(condition, None if selector is None else parse_selector(selector))
    again = parse_policy(str(policy))
    assert str(again) == str(policy) and again.terms == policy.terms and again.selector == policy.selector


def test_the_removal_property_is_validated_as_a_policy() -> None:
    from topics.properties import REMOVAL, validate_property

    assert validate_property(REMOVAL, "WHEN no updates for 10M") == (REMOVAL, "WHEN no updates for 10M")
    with pytest.raises(RemovalPolicyError, match="column 21: expected a duration"):
        validate_property(REMOVAL, "when no updates for soon")
    with pytest.raises(SpecificationError, match="may not be empty"):
        validate_property(REMOVAL, " ")
