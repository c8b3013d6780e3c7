"""py-spy profiles of a running canopy instance and of this process, summarised.

:class:`Profiler` finds the gateway and partition actor processes under a
``canopy serve`` process, records each of them (and the calling process)
with ``py-spy record`` for a window, and prints, per process, the functions
with the most samples: *self* (the function was on top of the stack) and
*total* (anywhere on it). The collapsed stacks stay in the output directory
(``<name>.txt``, one ``frame;frame;... count`` line per stack; any
flame-graph tool reads them).
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
from pathlib import Path

ACTORS = ("GatewayActor", "PartitionActor")
TOP = 12


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def _title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def find_actors(serve_pid: int) -> dict[str, int]:
    """``{"GatewayActor": pid, "PartitionActor-1": pid, ...}`` under ``serve_pid``."""
    found: dict[str, int] = {}
    for pid in sorted(_descendants(serve_pid)):
        title = _title(pid)
        for actor in ACTORS:
            if title.startswith(f"ray::{actor}"):
                name = actor if actor not in found else f"{actor}-{sum(k.startswith(actor) for k in found)}"
                found[name] = pid
    return found


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "py-spy"], check=True)
    return found


class Profiler:
    def __init__(self, out: Path, serve_pid: int, rate: int = 250) -> None:
        self.out = out
        self.serve_pid = serve_pid
        self.rate = rate
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, seconds: float) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        spy = _py_spy()
        targets = {**find_actors(self.serve_pid), "client": os.getpid()}
        for name, pid in targets.items():
            self.running[name] = subprocess.Popen(
                [spy, "record", "--pid", str(pid), "--rate", str(self.rate), "--duration", str(max(1, int(seconds))),
                 "--format", "raw", "--output", str(self.out / f"{name}.txt"), "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )

    def finish(self) -> None:
        for name, proc in self.running.items():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
            print(summarise(name, self.out / f"{name}.txt"))


def summarise(name: str, collapsed: Path, top: int = TOP) -> str:
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    try:
        lines = collapsed.read_text().splitlines()
    except OSError:
        return f"\n[profile] {name}: no profile"
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";") if f]
        samples += count
        if frames:
            own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    idle = sum(c for f, c in own.items() if _idle(f))
    rows = [f"\n[profile] {name}: {samples} samples, {100 * idle / max(samples, 1):.0f}% waiting (epoll, Ray's main loop)"]
    rows.append("  self%  total%  function")
    for frame, count in own.most_common():
        if _idle(frame):
            continue
        rows.append(f"  {100 * count / samples:5.1f}  {100 * total[frame] / samples:6.1f}  {frame}")
        if len(rows) >= top + 2:
            break
    return "\n".join(rows)


def _short(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "func (file.py:123)"
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit('/', 1)[-1]}" if where else name


def _idle(frame: str) -> bool:
    """Frames where a thread waits rather than works (py-spy cannot always tell)."""
    return frame.startswith(("select (", "poll (", "EpollSelector.select (", "Worker.main_loop (", "wait (threading"))
