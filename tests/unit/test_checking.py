"""The durability checker itself: it must flag what it is there to flag."""

from __future__ import annotations

from tests.checking import History, check


def history(acked: dict[str, list[int]], final: dict[str, int | None], seen: list[int] | None = None) -> History:
    h = History()
    for topic, values in acked.items():
        h.acknowledged[topic] += values
        h.sent[topic] |= set(values) | {v + 1 for v in values}  # one more was sent, never answered
    h.final.update(final)
    if seen is not None:
        h.observed[0]["a"] += seen
    return h


def test_a_clean_history_is_valid() -> None:
    report = check(history({"a": [1, 2, 3]}, {"a": 3}, seen=[1, 2, 2, 3]))  # a repeat is fine
    assert report.valid and report.acknowledged == 3, report


def test_a_lost_acknowledged_write_is_reported() -> None:
    report = check(history({"a": [1, 2, 3], "b": [1]}, {"a": 2, "b": None}))
    assert report.lost == {"a": (3, 2), "b": (1, None)} and not report.valid


def test_values_nobody_wrote_and_values_going_backwards_are_reported() -> None:
    report = check(history({"a": [1, 2]}, {"a": 99}, seen=[1, 2, 1, 77]))
    assert ("a", 99) in report.unexpected and ("a", 77) in report.unexpected
    assert report.out_of_order == [(0, "a", 1, 2)]


def test_an_unacknowledged_write_that_was_applied_counts_as_recovered() -> None:
    h = history({"a": [1]}, {"a": 2})
    h.indeterminate["a"].append(2)
    report = check(h)
    assert report.valid and report.recovered == 1
