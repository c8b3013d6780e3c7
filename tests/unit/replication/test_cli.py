"""``canopy journal check`` and ``canopy journal repair`` on journals written with the Journal class."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.cli import main
from replication.cli import find_journals
from replication.journal import Journal, partition_directory, read_segment
from tests.unit.replication.test_journal import _flip, batch, open_journal, segments, states
from tests.unit.replication.test_journal_verify import contents

ROOT = Path(__file__).resolve().parents[3]


def journal_at(home: Path, partition: int, batches: int = 12, snapshot: int | None = None) -> Path:
    journal = open_journal(partition_directory(home, partition), partition=partition, segment_bytes=600)
    journal.recover()
    for i in range(batches):
        journal.append(batch(i * 3, 3), i)
        if i == snapshot:
            journal.write_snapshot(states(3), journal.last_sequence)
    journal.close()
    return journal.directory


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """An embedded node's partitions 0 and 1 (a snapshot after record 15 in 1), and node-1's partition 0."""
    data = tmp_path / "data"
    journal_at(data, 0)
    journal_at(data, 1, snapshot=4)
    journal_at(data / "nodes" / "node-1", 0)
    return data


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    code = main(["journal", *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_every_journal_of_a_data_directory_is_found(data_dir: Path) -> None:
    assert [(str(j.path.relative_to(data_dir)), j.partition) for j in find_journals(data_dir)] == [
        ("journal/partition-0", 0), ("journal/partition-1", 1), ("nodes/node-1/journal/partition-0", 0)]


def test_check_a_healthy_data_directory(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", "--data-dir", str(data_dir))
    assert (code, err) == (0, [])
    assert out == [
        f"{data_dir}/journal/partition-0: OK, last good record 36 (no snapshot)",
        f"{data_dir}/journal/partition-1: OK, last good record 36 (snapshot 15)",
        f"{data_dir}/nodes/node-1/journal/partition-0: OK, last good record 36 (no snapshot)",
    ]


def test_check_reports_a_torn_tail_and_fails_on_damage(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torn = segments(data_dir / "journal" / "partition-1")[-1]
    good = read_segment(torn, 1)[-2].sequence
    os.truncate(torn, torn.stat().st_size - 3)
    code, out, _ = run(capsys, "check", "--data-dir", str(data_dir))
    assert code == 0  # recovery cuts a torn tail: reported, not a failure
    assert out[1] == f"{data_dir}/journal/partition-1: torn tail, last good record {good} (snapshot 15)"
    assert out[2].startswith(f"  {torn.name} at offset ") and ": torn tail: a frame cut short" in out[2]

    damaged = segments(data_dir / "nodes" / "node-1" / "journal" / "partition-0")[1]
    _flip(damaged, 60)
    before = contents(data_dir)
    code, out, err = run(capsys, "check", "--data-dir", str(data_dir))
    assert (code, err) == (1, [])
    assert contents(data_dir) == before
    at = out.index(f"{data_dir}/nodes/node-1/journal/partition-0: damaged, last good record 6 (no snapshot)")
    assert out[at + 1].startswith(f"  {damaged.name} at offset 27: damaged: checksum mismatch")
    assert out[-1].startswith(f"canopy journal repair --data-dir {data_dir} cuts a damaged journal")


def test_check_and_repair_take_a_bad_last_record_for_damage(data_dir: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A whole last frame that fails its checksum is no torn tail (under ``always`` it may hold an
    acknowledged record): ``check`` fails on it, and ``repair`` cuts it, keeping the segment."""
    last = segments(data_dir / "journal" / "partition-1")[-1]
    good = read_segment(last, 1)[-2].sequence
    _flip(last, last.stat().st_size - 3)
    code, out, _ = run(capsys, "check", "--data-dir", str(data_dir))
    assert code == 1
    assert out[1] == f"{data_dir}/journal/partition-1: damaged, last good record {good} (snapshot 15)"
    assert ": damaged: checksum mismatch; it ends the journal, but a write cut short leaves no such frame" in out[2]
    [line] = run(capsys, "check", "--data-dir", str(data_dir), "--partition", "1", "--json")[1]
    assert json.loads(line)["status"] == "damage"
    code, out, _ = run(capsys, "repair", "--data-dir", str(data_dir), "--partition", "1")
    assert code == 0
    assert out[0] == f"{data_dir}/journal/partition-1: repaired, last record {good}"
    assert out[1].startswith(f"  repair: {last} cut at offset ") and "kept as" in out[1]
    assert (last.parent / (last.name + ".corrupt")).exists()
    assert run(capsys, "check", "--data-dir", str(data_dir))[0] == 0


def test_check_in_json(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    damaged = segments(data_dir / "journal" / "partition-0")[1]
    _flip(damaged, 60)
    code, out, _ = run(capsys, "check", "--data-dir", str(data_dir), "--json")
    assert code == 1
    lines = [json.loads(line) for line in out]
    assert [(o["directory"], o["status"], o["damaged"], o["last_sequence"], o["snapshot_sequence"]) for o in lines] == [
        (str(data_dir / "journal" / "partition-0"), "damage", True, 6, None),
        (str(data_dir / "journal" / "partition-1"), "ok", False, 36, 15),
        (str(data_dir / "nodes" / "node-1" / "journal" / "partition-0"), "ok", False, 36, None),
    ]
    [problem] = lines[0]["problems"]
    assert problem["kind"] == "damage" and problem["file"] == str(damaged) and problem["offset"] == 27
    assert problem["reason"].startswith("checksum mismatch")


def test_one_partition_and_usage_errors(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "--data-dir", str(data_dir), "--partition", "1")
    assert code == 0 and len(out) == 1 and "partition-1" in out[0]
    for argv, message in [
        (["--data-dir", str(data_dir), "--partition", "7"], f"no journal of partition 7 in {data_dir}"),
        (["--data-dir", str(tmp_path / "absent")], f"no data directory {tmp_path / 'absent'}"),
        (["--data-dir", str(tmp_path)], f"no journal in {tmp_path}"),
    ]:
        for action in ("check", "repair"):
            code, out, err = run(capsys, action, *argv)
            assert (code, out, len(err)) == (2, [], 1), (action, argv)
            assert err[0].startswith(f"canopy journal {action}: {message}")


def test_the_data_directory_defaults_to_the_servers(data_dir: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANOPY_DATA_DIR", str(data_dir))
    assert run(capsys, "check")[0] == 0
    monkeypatch.delenv("CANOPY_DATA_DIR")
    monkeypatch.chdir(data_dir.parent)  # then ./data
    assert run(capsys, "check")[0] == 0


def test_repair_cuts_at_the_damage_and_says_so(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = data_dir / "journal" / "partition-0"
    files = segments(directory)
    _flip(files[1], 60)
    torn = segments(data_dir / "journal" / "partition-1")[-1]
    good = read_segment(torn, 1)[-2].sequence
    os.truncate(torn, torn.stat().st_size - 3)
    code, out, err = run(capsys, "repair", "--data-dir", str(data_dir))
    assert (code, err) == (0, [])
    assert out[0] == f"{directory}: repaired, last record 6"
    assert out[1].startswith(f"  repair: {files[1]} cut at offset 27 (checksum mismatch")
    assert all(line.startswith("  repair: ") and "set aside as" in line for line in out[2:len(files)])
    assert out[len(files)] == f"{data_dir}/journal/partition-1: repaired, last record {good}"
    assert out[len(files) + 1].startswith(f"  torn tail of {torn} at offset ")
    assert out[-1] == f"{data_dir}/nodes/node-1/journal/partition-0: OK, nothing to repair, last record 36"
    assert (directory / (files[1].name + ".corrupt")).exists()

    assert run(capsys, "check", "--data-dir", str(data_dir))[0] == 0
    code, out, _ = run(capsys, "repair", "--data-dir", str(data_dir), "--json")
    assert code == 0
    assert [(o["repaired"], o["last_sequence"], o["problems"]) for o in map(json.loads, out)] == [
        (False, 6, []), (False, good, []), (False, 36, [])]


def test_repair_refuses_a_journal_in_use(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    busy = data_dir / "journal" / "partition-1"
    _flip(segments(data_dir / "journal" / "partition-0")[1], 60)
    # holds the LOCK until closed; the command opens it again (another open file description), which
    # flock refuses in this process too
    held = Journal(busy, partition=1)
    held.recover()
    _flip(segments(busy)[-2], 60)  # damage the check sees and the repair may not touch
    before = contents(busy)
    try:
        code, out, err = run(capsys, "check", "--data-dir", str(data_dir))
        assert code == 1  # a check needs no lock
        code, out, err = run(capsys, "repair", "--data-dir", str(data_dir))
        assert code == 1
        assert err == [f"canopy journal repair: {busy} is in use by a running server (it holds the journal's LOCK): "
                       "stop the server first"]
        assert out[0].startswith(f"{data_dir}/journal/partition-0: repaired")  # the others are repaired
        assert all("partition-1" not in line for line in out)
        assert contents(busy) == before
        code, out, err = run(capsys, "repair", "--data-dir", str(data_dir), "--partition", "1", "--json")
        assert code == 1 and len(err) == 1
        assert json.loads(out[0]) == {"directory": str(busy), "partition": 1, "error": err[0].split(": ", 1)[1]}
    finally:
        held.close()
    assert run(capsys, "repair", "--data-dir", str(data_dir), "--partition", "1")[0] == 0


def test_the_console_script_prints_one_line_not_a_traceback(data_dir: Path, tmp_path: Path) -> None:
    _flip(segments(data_dir / "journal" / "partition-0")[1], 60)

    def canopy(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cluster.cli", "journal", *argv], capture_output=True, text=True,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)

    checked = canopy("check", "--data-dir", str(data_dir), "--json")
    assert checked.returncode == 1 and checked.stderr == ""
    assert [json.loads(line)["status"] for line in checked.stdout.splitlines()] == ["damage", "ok", "ok"]
    missing = canopy("repair", "--data-dir", str(tmp_path / "absent"))
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == f"canopy journal repair: no data directory {tmp_path / 'absent'}\n"


def test_check_shows_a_journal_set_aside_as_damaged(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = data_dir / "nodes" / "node-1" / "journal" / "partition-0"
    Journal(directory, partition=0).set_aside("a checksum mismatch", 1234)
    code, out, _ = run(capsys, "check", "--data-dir", str(data_dir))
    assert code == 0
    assert out[-2:] == [f"{directory}: OK, last good record 0 (no snapshot)",
                        "  set aside as damaged: a checksum mismatch (its files are in damaged-1234/); "
                        "the replica waits for its peer"]
    [line] = run(capsys, "check", "--data-dir", str(data_dir), "--json", "--partition", "0")[1][1:]
    assert json.loads(line)["set_aside"].startswith("set aside as damaged: a checksum mismatch")


def test_check_shows_a_backup_awaiting_its_prime(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its journal is marked, not damaged: the records are an older state of the partition, kept."""
    directory = data_dir / "nodes" / "node-1" / "journal" / "partition-0"
    Journal(directory, partition=0).await_prime(7)
    code, out, _ = run(capsys, "check", "--data-dir", str(data_dir))
    assert code == 0
    assert out[-2:] == [f"{directory}: OK, last good record 36 (no snapshot)",
                        "  a backup awaiting its prime at epoch 7: its records are an older state of the partition, "
                        "kept; its replica leads from them only when no copy is newer"]
    line = run(capsys, "check", "--data-dir", str(data_dir), "--json", "--partition", "0")[1][-1]
    assert (json.loads(line)["awaiting_prime"], json.loads(line)["set_aside"]) == (7, None)
