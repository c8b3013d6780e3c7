"""Crash or pause a node the way a machine fails: its raylet and every process
the raylet started (the workers holding its actors, its agents) get SIGKILL,
or SIGSTOP and later SIGCONT. Nothing is told first; Ray finds out by its
health checks, as it would for a machine that lost power or hung.

``canopy cluster kill-node`` / ``pause-node`` run :func:`launch` inside a Ray
task pinned to the node (so the raylet is the task's parent process); the
signals are sent by a separate helper process (``python -m actors.processes``),
after a short delay that lets the task answer, because the task's own process
is one of those stopped or killed. Linux only (``/proc``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

#: the helper waits this long before signalling, so that the request that launched it is answered
DELAY = 0.5
#: the helper's working directory: the one holding the ``actors`` package, which ``python -m``
#: imports first (the calling worker's may hold anything: it is where ``ray start`` ran)
HOME = str(Path(__file__).resolve().parents[1])


def stat(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after the command name: state, parent pid, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        return stat(pid)[0] != "Z"
    except OSError:
        return False


def arguments(pid: int) -> list[str]:
    """The process's command line ([] when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            children.setdefault(int(stat(int(entry))[1]), []).append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def crash(root: int, exclude: frozenset[int] = frozenset()) -> list[int]:
    """SIGKILL ``root`` and every process below it (children first, so none is reparented unseen)."""
    pids = sorted(descendants(root) - exclude - {os.getpid()}) + [root]
    _signal(pids, signal.SIGKILL)
    return pids


def pause(root: int, seconds: float, exclude: frozenset[int] = frozenset()) -> list[int]:
    """SIGSTOP ``root`` and every process below it for ``seconds``, then SIGCONT the same ones."""
    pids = [root] + sorted(descendants(root) - exclude - {os.getpid()})
    _signal(pids, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        _signal(pids, signal.SIGCONT)
    return pids


def launch(action: str, root: int, seconds: float = 0.0) -> int:
    """Start the helper that crashes or pauses ``root``'s process tree after :data:`DELAY`;
    return the helper's pid. It is started through a short-lived intermediate, so that
    it is nobody's child here (no zombie left behind, none of this process's to wait
    for), and in its own session, so a stopped terminal does not take it along."""
    if action not in ("kill", "pause"):
        raise ValueError(f"unknown action {action!r}")
    started = subprocess.run(
        [sys.executable, "-m", "actors.processes", "detach", action, str(root), str(seconds)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30, check=True, cwd=HOME,
    )
    return int(started.stdout)


def main(argv: list[str]) -> int:
    if argv[0] == "detach":
        helper = subprocess.Popen(
            [sys.executable, "-m", "actors.processes", *argv[1:]],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True,
        )
        print(helper.pid)
        return 0
    action, root, seconds = argv[0], int(argv[1]), float(argv[2])
    time.sleep(DELAY)
    if action == "kill":
        crash(root)
    else:
        pause(root, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
