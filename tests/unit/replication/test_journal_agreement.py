"""The copies of a partition's journal compared epoch by epoch (``replication/journal_agreement.py``),
on journals the real :class:`~replication.journal.Journal` writes in a ``--local-nodes`` data
directory (``nodes/<name>/journal/partition-<i>/``), and ``canopy journal check`` reporting it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.cli import main
from replication.cli import DISAGREE, agreements
from replication.journal import Journal, partition_directory, read_segment, verify
from replication.journal_agreement import Copy, Stamp, compare
from replication.journal_check import read_copy
from replication.nodes import node_data_dir
from tests.unit.replication.test_journal import batch, open_journal, segments, states


class Copies:
    """Partition 0's journal on each node of a data directory, written as replication writes them: a
    primary journals a batch under its epoch, and each backup that follows it the same records."""

    def __init__(self, data_dir: Path, *nodes: str) -> None:
        self.data_dir = data_dir
        self.journals: dict[str, Journal] = {}
        for node in nodes:
            journal = open_journal(partition_directory(node_data_dir(data_dir, node), 0), segment_bytes=700)
            journal.recover()
            self.journals[node] = journal
        self.now = 1000

    def write(self, epoch: int, primary: str, *backups: str, start: int = 0, count: int = 3) -> int:
        """One batch of ``count`` changes (values from ``start``) journaled by ``primary`` at ``epoch``
        and by its ``backups``; the primary's last sequence."""
        self.now += 1
        changes = batch(start, count)
        first = self.journals[primary].last_sequence + 1
        last = self.journals[primary].append(changes, self.now, epoch=epoch)
        for backup in backups:
            self.journals[backup].append(changes, self.now, first=first, epoch=epoch)
        return last

    def prime(self, primary: str, backup: str) -> None:
        """``backup`` starts over from ``primary``'s state (its journal reset after the primary's last record)."""
        self.journals[backup].reset(states(4), self.journals[primary].last_sequence)

    def close(self) -> None:
        for journal in self.journals.values():
            journal.close()


@pytest.fixture
def copies(tmp_path: Path) -> Copies:
    return Copies(tmp_path / "data", "node-0", "node-1", "node-2")


def check(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], list[str]]:
    code = main(["journal", "check", "--data-dir", str(data_dir)])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_a_record_keeps_its_epoch_and_one_without_reads_as_before(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    journal.recover()
    journal.append(batch(0, 2), 5)  # as every record was before records named their epoch
    journal.append(batch(2, 2), 6, epoch=7)
    journal.close()
    assert [(r.sequence, r.epoch) for r in read_segment(segments(tmp_path)[0], 0)] == [(1, 0), (2, 0), (3, 7), (4, 7)]
    again = open_journal(tmp_path)
    assert again.recover().changes == batch(0, 4)
    again.append(batch(4, 1), 7, epoch=8)
    again.close()
    assert [r.epoch for r in read_segment(segments(tmp_path)[-1], 0)] == [8]


def test_a_record_that_names_its_epoch_after_a_frame_cut_short_is_damage_not_a_torn_tail(tmp_path: Path) -> None:
    """A length gone bad in the middle of the last segment looks like a frame cut short; the records
    after it (arrays of 4 once they name their epoch) tell it from a torn tail, which recovery would cut."""
    journal = open_journal(tmp_path)
    journal.recover()
    for i in range(6):
        journal.append(batch(i, 1), i, epoch=3)
    journal.close()
    [segment] = segments(tmp_path)
    raw = bytearray(segment.read_bytes())
    header = 8 + int.from_bytes(raw[0:4], "little")
    second = header + 8 + int.from_bytes(raw[header:header + 4], "little")  # record 2's frame
    raw[second:second + 4] = (len(raw) * 2).to_bytes(4, "little")
    segment.write_bytes(bytes(raw))
    found = verify(tmp_path, 0)
    assert found.damaged and found.last_sequence == 1, found
    assert "a valid record follows" in found.problems[0].reason


def test_copies_that_agree_pass(copies: Copies, capsys: pytest.CaptureFixture[str]) -> None:
    """node-1 primary at epoch 3 with node-2 its backup, primed after two batches; node-0 holds nothing."""
    copies.write(3, "node-1", start=0)
    copies.write(3, "node-1", start=3)
    copies.prime("node-1", "node-2")
    for i in range(2, 12):
        copies.write(3, "node-1", "node-2", start=3 * i)
    copies.close()
    [agreement] = agreements(copies.data_dir)
    assert agreement.agree, agreement
    assert (agreement.nodes, agreement.epochs, agreement.records, agreement.compared) == (
        ("node-0", "node-1", "node-2"), (3,), 36 + 30, 30)
    code, out, err = check(copies.data_dir, capsys)
    assert (code, err) == (0, [])
    assert out[-1] == ("partition 0: copies agree: 3 copies (node-0, node-1, node-2), epochs 3, 66 records, "
                       "30 held by two copies or more compared")


def test_two_primaries_in_one_epoch_are_reported(copies: Copies, capsys: pytest.CaptureFixture[str]) -> None:
    """node-1 and node-2 share epoch 4's first records, then both lead epoch 4 from record 10 with writes
    of their own: the same sequences hold different records in one epoch."""
    for i in range(3):
        copies.write(4, "node-1", "node-2", start=3 * i)
    copies.write(4, "node-1", start=100)
    copies.write(4, "node-2", start=200)
    copies.write(4, "node-2", start=203)
    copies.close()
    [agreement] = agreements(copies.data_dir)
    assert not agreement.agree
    [divergence] = agreement.divergences
    assert (divergence.partition, divergence.epoch, divergence.sequence, divergence.count) == (0, 4, 10, 3)
    assert [nodes for nodes, _ in divergence.held] == [("node-1",), ("node-2",)]
    code, out, err = check(copies.data_dir, capsys)
    assert code == DISAGREE
    message = "partition 0, epoch 4, sequence 10: acknowledged in two primaries of one epoch: node-1 (set topics/"
    assert out[-2].startswith("partition 0: COPIES DISAGREE: 3 copies") and out[-1].startswith("  " + message), out
    assert "2 later record(s) of epoch 4 differ too" in out[-1]
    assert len(err) == 1 and err[0].startswith("canopy journal check: copies disagree: " + message), err


def test_a_third_copy_that_differs_is_named(copies: Copies) -> None:
    for i in range(2):
        copies.write(5, "node-0", "node-1", "node-2", start=3 * i)
    copies.write(5, "node-0", "node-1", start=10)
    copies.write(5, "node-2", start=20)
    copies.close()
    [agreement] = agreements(copies.data_dir)
    [divergence] = agreement.divergences
    assert divergence.sequence == 7 and [nodes for nodes, _ in divergence.held] == [("node-0", "node-1"), ("node-2",)]


def test_a_backup_behind_its_primary_passes(copies: Copies) -> None:
    copies.prime("node-0", "node-1")
    for i in range(6):
        copies.write(2, "node-0", "node-1", start=3 * i)
    for i in range(6, 9):  # the backup's stream is down: these wait for it
        copies.write(2, "node-0", start=3 * i)
    copies.close()
    [agreement] = agreements(copies.data_dir)
    assert agreement.agree and agreement.compared == 18 and agreement.records == 27 + 18, agreement


def test_a_tail_numbered_again_in_a_later_epoch_passes(copies: Copies) -> None:
    """node-1, primary at epoch 5, is cut off with records its backup node-2 never got; node-2 takes
    over at epoch 6 and numbers its own records from there, replicated to node-0 (primed anew)."""
    copies.prime("node-1", "node-2")
    for i in range(4):
        copies.write(5, "node-1", "node-2", start=3 * i)
    cut = copies.write(5, "node-1", start=50)  # never acknowledged
    copies.write(5, "node-1", start=53)
    copies.prime("node-2", "node-0")
    for i in range(4):
        copies.write(6, "node-2", "node-0", start=60 + 3 * i)
    copies.close()
    [agreement] = agreements(copies.data_dir)
    assert agreement.agree, agreement
    assert agreement.epochs == (5, 6) and agreement.compared == 12 + 12
    ones = {c.node: {s.sequence: s.epoch for s in c.stamps} for c in
            (read_copy(partition_directory(node_data_dir(copies.data_dir, n), 0), 0, n) for n in ("node-1", "node-2"))}
    assert ones["node-1"][cut] == 5 and ones["node-2"][cut] == 6  # the same sequence, two epochs: not compared


def test_a_copy_that_goes_back_an_epoch_is_reported(copies: Copies, capsys: pytest.CaptureFixture[str]) -> None:
    copies.write(7, "node-0", start=0)
    copies.write(6, "node-0", start=3)
    copies.close()
    [agreement] = agreements(copies.data_dir)
    [regression] = agreement.regressions
    assert str(regression) == "partition 0, epoch 6, sequence 4: node-0's copy goes back from epoch 7 to 6"
    assert check(copies.data_dir, capsys)[0] == DISAGREE


def test_records_that_name_no_epoch_are_counted_not_compared(copies: Copies,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Journals written before records named their epoch: nothing to compare, and check says nothing of it."""
    copies.write(0, "node-0", start=0)
    copies.write(0, "node-1", start=9)
    copies.close()
    [agreement] = agreements(copies.data_dir)
    assert agreement.agree and (agreement.unstamped, agreement.compared, agreement.epochs) == (6, 0, ())
    code, out, _ = check(copies.data_dir, capsys)
    assert code == 0 and not any("copies" in line for line in out), out


def test_the_comparison_itself() -> None:
    def stamps(*held: tuple[int, int, str]) -> list[Stamp]:
        return [Stamp(sequence, epoch, record.encode(), record) for sequence, epoch, record in held]

    same = compare(2, [Copy("a", stamps((1, 1, "x"), (2, 1, "y"))), Copy("b", stamps((2, 1, "y"), (3, 1, "z")))])
    assert same.agree and (same.compared, same.records, same.epochs) == (1, 4, (1,))
    split = compare(2, [Copy("a", stamps((1, 1, "x"), (2, 2, "y"))), Copy("b", stamps((1, 1, "x"), (2, 2, "w")))])
    assert [(d.epoch, d.sequence, d.held) for d in split.divergences] == [(2, 2, ((("a",), "y"), (("b",), "w")))]
    later = compare(2, [Copy("a", stamps((1, 1, "x"), (2, 1, "y"))), Copy("b", stamps((1, 1, "x"), (2, 2, "w")))])
    assert later.agree and later.compared == 1
