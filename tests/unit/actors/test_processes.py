"""Crashing and pausing a process tree as ``canopy cluster kill-node`` / ``pause-node`` do."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors import processes
from tests.conftest import wait_for


@pytest.fixture
def tree() -> Iterator[subprocess.Popen[bytes]]:
    """A root with two children and a grandchild (like a raylet, its workers and theirs)."""
    root = subprocess.Popen(["sh", "-c", "sleep 300 & sh -c 'sleep 300 & wait' & wait"])
    try:
        wait_for(lambda: len(processes.descendants(root.pid)) >= 3, 10, "the tree to start")
        yield root
    finally:
        for pid in processes.descendants(root.pid):
            try:
                processes.os.kill(pid, 9)
            except OSError:
                pass
        root.kill()
        root.wait()


def state(pid: int) -> str:
    return processes.stat(pid)[0]


def test_crash_kills_the_root_and_everything_below_it(tree: subprocess.Popen[bytes]) -> None:
    below = processes.descendants(tree.pid)
    killed = processes.crash(tree.pid)
    assert set(killed) == below | {tree.pid} and killed[-1] == tree.pid
    tree.wait(10)
    wait_for(lambda: not any(processes.alive(p) for p in below), 10, "every process below to die",
             describe=lambda: [p for p in below if processes.alive(p)])


def test_pause_stops_the_tree_then_lets_it_go_on(tree: subprocess.Popen[bytes]) -> None:
    below = processes.descendants(tree.pid)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (processes.pause(tree.pid, 1.0), done.set()))
    worker.start()
    try:
        wait_for(lambda: all(state(p) == "T" for p in below | {tree.pid}), 5, "every process to be stopped",
                 describe=lambda: {p: state(p) for p in below | {tree.pid}})
        assert not done.is_set()
    finally:
        worker.join(10)
    assert done.is_set()
    wait_for(lambda: all(state(p) in "SR" for p in below | {tree.pid}), 5, "every process to run again",
             describe=lambda: {p: state(p) for p in below | {tree.pid}})


def test_the_helper_is_launched_apart_and_refuses_unknown_actions(tree: subprocess.Popen[bytes]) -> None:
    with pytest.raises(ValueError):
        processes.launch("reboot", tree.pid)
    below = processes.descendants(tree.pid)
    helper = processes.launch("kill", tree.pid)
    assert helper not in below
    tree.wait(10 + processes.DELAY)
    wait_for(lambda: not any(processes.alive(p) for p in below), 10, "the helper to kill the tree")


def test_a_gone_process_has_no_arguments_and_is_not_alive() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert processes.arguments(gone.pid) == [] and not processes.alive(gone.pid)
    assert processes.arguments(processes.os.getpid())


def test_the_helper_imports_canopy_not_the_callers_working_directory(
    tree: subprocess.Popen[bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a worker of a joined Ray runs where `ray start` ran, and `python -m` imports from there first
    (tmp_path / "actors.py").write_text("raise ImportError('the actors.py of the working directory')\n")
    monkeypatch.chdir(tmp_path)
    below = processes.descendants(tree.pid)
    processes.launch("kill", tree.pid)
    tree.wait(10 + processes.DELAY)
    wait_for(lambda: not any(processes.alive(p) for p in below), 10, "the helper to kill the tree")
