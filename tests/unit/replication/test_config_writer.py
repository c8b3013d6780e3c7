"""The configuration log's writer as a state machine, over in-memory copies (no Ray, no files)."""

from __future__ import annotations

from typing import Any

import pytest

from replication.config_log import ConfigLogError, ConfigLogStore, Entry
from replication.config_writer import Answers, Ask, ConfigWriter, NoAnswer, NotCommitted, OutcomeUnknown, drive

pytestmark = pytest.mark.unit


class Copies:
    """Three nodes' copies; a node in ``down`` does not answer (its calls are not made)."""

    def __init__(self, *nodes: str) -> None:
        self.stores = {n: ConfigLogStore.in_memory() for n in nodes}
        self.down: set[str] = set()

    def carry(self, ask: Ask) -> Answers:
        answers: Answers = {}
        for node, (method, args) in ask.calls.items():
            if node in self.down:
                answers[node] = (None, NoAnswer(node))
                continue
            try:
                answers[node] = (self.stores[node].answer(method, *args), None)
            except Exception as e:
                answers[node] = (None, e)
        return answers

    def run(self, step: Any) -> Any:
        return drive(step, self.carry)


def test_a_change_commits_on_a_majority_and_a_copy_that_missed_it_is_caught_up_first() -> None:
    copies = Copies("a", "b", "c")
    writer = ConfigWriter()
    assert copies.run(writer.recover(["a", "b", "c"])) == {}
    assert writer.committed == 1  # the writer's own entry, under its term
    copies.down = {"c"}
    assert copies.run(writer.append("views", {"v": 1})) == 2
    assert copies.stores["c"].state().committed == 1
    copies.down = set()
    assert copies.run(writer.append("views", {"v": 2})) == 3
    assert {n: s.documents() for n, s in copies.stores.items()} == {n: {"views": {"v": 2}} for n in "abc"}


class Refusing(Copies):
    """``b`` and ``c`` refuse every store (a full disk, say), and answer every other call."""

    def carry(self, ask: Ask) -> Answers:
        refusing = {n for n, (method, _) in ask.calls.items() if method == "store_entries" and n in ("b", "c")}
        answers = super().carry(Ask({n: call for n, call in ask.calls.items() if n not in refusing}))
        answers.update({n: (None, ConfigLogError(f"{n}: disk full")) for n in refusing})
        return answers


def test_a_change_no_majority_stored_is_cut_back_where_it_was_and_refused() -> None:
    copies = Refusing("a", "b", "c")
    writer = ConfigWriter()
    copies.run(writer.recover(["a", "b", "c"]))
    with pytest.raises(NotCommitted, match="stored by 1 of 3"):
        copies.run(writer.append("views", {"v": 1}))
    assert all(store.state().last == 1 for store in copies.stores.values()) and writer.documents == {}
    assert writer.ready


def test_a_change_whose_copies_did_not_answer_has_an_unknown_outcome_until_a_recovery() -> None:
    copies = Copies("a", "b", "c")
    writer = ConfigWriter()
    copies.run(writer.recover(["a", "b", "c"]))
    copies.down = {"b", "c"}  # they may have stored it, for all the writer knows
    with pytest.raises(OutcomeUnknown, match="1 of 3 node copies stored it"):
        copies.run(writer.append("views", {"v": 1}))
    assert not writer.ready
    with pytest.raises(NotCommitted, match="1 of 3 node copies answered"):  # it recovers first: no majority
        copies.run(writer.append("security", {"s": 1}))
    copies.down = {"c"}
    copies.run(writer.tend(["a", "b", "c"]))
    assert writer.ready and writer.documents == {}  # not made: no copy but a had it, and a cut it back
    assert copies.run(writer.append("security", {"s": 1})) == 3  # after the two writers' own entries
    assert copies.stores["a"].documents() == {"security": {"s": 1}}


class Late(Copies):
    """Once: ``b`` stores an entry but its answer is lost, and then it does not answer at all."""

    lost = False

    def carry(self, ask: Ask) -> Answers:
        if any(method == "store_entries" for method, _ in ask.calls.values()) and not self.lost:
            self.lost = True
            answers = super().carry(ask)
            answers["b"] = (None, NoAnswer("b"))  # stored there, the answer lost
            self.down = {"b", "c"}
            return answers
        return super().carry(ask)


def test_a_change_a_copy_may_keep_is_not_refused_and_the_next_recovery_decides() -> None:
    copies = Late("a", "b", "c")
    writer = ConfigWriter()
    copies.run(writer.recover(["a", "b", "c"]))
    copies.down = {"c"}
    # a and b stored it (b's answer lost); b does not answer the cut back, so b may keep it: not
    # refused, the outcome unknown
    with pytest.raises(OutcomeUnknown):
        copies.run(writer.append("views", {"v": 1}))
    copies.down = {"c"}
    copies.run(writer.tend(["a", "b", "c"]))  # b, the most up to date of a and b, holds it: made
    assert writer.ready and writer.documents == {"views": {"v": 1}}
    assert copies.stores["a"].documents() == {"views": {"v": 1}}
    copies.down = set()
    copies.run(writer.tend(["a", "b", "c"]))
    assert copies.stores["c"].documents() == {"views": {"v": 1}}


def test_a_new_writer_keeps_an_entry_a_majority_stored_though_none_heard_it_committed() -> None:
    copies = Copies("a", "b", "c")
    old = ConfigWriter()
    copies.run(old.recover(["a", "b", "c"]))
    step = old.append("views", {"v": 1})
    ask = step.send(None)  # every copy is caught up: straight to storing
    assert {m for m, _ in ask.calls.values()} == {"store_entries"}
    copies.carry(Ask({n: ask.calls[n] for n in ("a", "b")}))  # stored on two; the old writer dies here
    new = ConfigWriter()
    assert copies.run(new.recover(["a", "b", "c"])) == {"views": {"v": 1}}
    assert new.term == old.term + 1
    assert all(s.state().committed == 3 for s in copies.stores.values())


def test_an_acknowledged_change_survives_a_recovery_that_reads_one_of_its_copies() -> None:
    """Stored on a and b (so acknowledged), committed nowhere; the next writer reads b and c only."""
    copies = Copies("a", "b", "c")
    old = ConfigWriter()
    copies.run(old.recover(["a", "b", "c"]))
    ask = old.append("views", {"v": 1}).send(None)
    copies.carry(Ask({n: ask.calls[n] for n in ("a", "b")}))
    copies.down = {"a"}
    assert copies.run(ConfigWriter().recover(["a", "b", "c"])) == {"views": {"v": 1}}


class NoCatchUp(Copies):
    """Every copy but ``a`` answers the reads and nothing else of a recovery."""

    def carry(self, ask: Ask) -> Answers:
        answers = super().carry(Ask({n: c for n, c in ask.calls.items() if n == "a" or c[0] == "held"}))
        answers.update({n: (None, NoAnswer(n)) for n in ask.calls if n not in answers})
        return answers


def test_a_recovery_that_stores_its_term_on_no_majority_is_not_ready() -> None:
    """Else a later recovery reading another majority could take the same term again."""
    copies = NoCatchUp("a", "b", "c")
    writer = ConfigWriter()
    with pytest.raises(NotCommitted, match="1 of 3 node copies took the writer's term"):
        copies.run(writer.recover(["a", "b", "c"]))
    assert not writer.ready
    assert [s.state().term for s in copies.stores.values()] == [1, 0, 0]
    retry = ConfigWriter()
    copies.down = {"a"}  # a later recovery that does not read a: the term it takes is not used by a
    with pytest.raises(NotCommitted):
        copies.run(retry.recover(["a", "b", "c"]))
    assert retry.term == 1 and not retry.ready  # the same number, and never ready under it


def test_recovery_needs_a_majority_to_answer() -> None:
    copies = Copies("a", "b", "c")
    copies.down = {"a", "b"}
    with pytest.raises(NotCommitted, match="1 of 3 node copies answered"):
        copies.run(ConfigWriter().recover(["a", "b", "c"]))


def test_tending_takes_the_nodes_it_is_given_and_catches_up_a_copy_made_again() -> None:
    copies = Copies("a", "b", "c")
    writer = ConfigWriter()
    copies.run(writer.recover(["a", "b", "c"]))
    copies.run(writer.set_nodes(["a", "c"]))  # b left (the writer never hears it came back)
    copies.run(writer.append("views", {"v": 1}))
    copies.run(writer.tend(["a", "b", "c"]))
    assert writer.nodes == ["a", "b", "c"] and copies.stores["b"].documents() == {"views": {"v": 1}}
    copies.stores["c"] = ConfigLogStore.in_memory()  # c's copy made again, over a store that lost its entries
    copies.run(writer.tend(["a", "b", "c"], renewed=["c"]))
    assert copies.stores["c"].documents() == {"views": {"v": 1}}


def test_a_writer_never_started_recovers_when_tended() -> None:
    copies = Copies("a", "b", "c")
    old = ConfigWriter()
    copies.run(old.recover(["a", "b", "c"]))
    copies.run(old.append("security", {"s": 1}))
    restarted = ConfigWriter()  # Ray restarted it, and the controller did not see it
    copies.run(restarted.tend([]))
    assert not restarted.ready
    copies.run(restarted.tend(["a", "b", "c"]))
    assert restarted.ready and restarted.documents == {"security": {"s": 1}}


def test_a_copy_caught_up_to_the_truths_commit_point_gets_every_entry_up_to_it() -> None:
    """The truth commits ``views`` v1 at 2 and holds v2 at 3, not committed; a lagging copy is
    caught up to 2 before the writer's own entry is committed: it must get v1 (not only v2, which
    supersedes it but is not committed there yet)."""

    class NoCommitToC(Copies):
        def carry(self, ask: Ask) -> Answers:
            answers = super().carry(Ask({n: c for n, c in ask.calls.items() if not (n == "c" and c[0] == "commit")}))
            answers.update({n: (None, NoAnswer(n)) for n, c in ask.calls.items() if n == "c" and c[0] == "commit"})
            return answers

    copies = NoCommitToC("a", "b", "c")
    copies.run(ConfigWriter().recover(["a", "b", "c"]))
    for node in ("a", "b"):
        copies.stores[node].store(1, [Entry(2, 1, "views", '{"v": 1}')])
        copies.stores[node].commit(1, 2)
    copies.stores["a"].store(1, [Entry(3, 1, "views", '{"v": 2}')])
    writer = ConfigWriter()
    assert copies.run(writer.recover(["a", "b", "c"])) == {"views": {"v": 2}}
    assert copies.stores["c"].state().committed == 2 and copies.stores["c"].documents() == {"views": {"v": 1}}
