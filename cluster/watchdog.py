"""The watchdog of ``canopy serve`` and the processes of an embedded Ray.

The watchdog is a small process of its own (``python -m cluster.watchdog
PID DATA_DIR``, in its own session so a terminal's signals pass it by) that
waits for the data directory's lock. canopy serve holds that lock for as
long as it lives, so the watchdog gets it exactly when serve is gone,
however it went (``kill -9`` included). Holding the lock (a new serve on the
same directory is refused meanwhile), it stops every process of that
serve's embedded Ray still running: Ray kills its GCS and raylet with their
driver (``PR_SET_PDEATHSIG``) and the workers follow the raylet, but its
dashboard and runtime-env agents notice the raylet's death and then hang
while exiting. A process belongs to the instance when it is a Ray process
started after the watchdog that names the instance's session directory
(``session_<date>_<serve pid>``) in its arguments or open files. It removes
the simulated nodes' network namespaces (``node_namespaces``, named in
``server.json``) with what runs in them, then marks a ``server.json`` its serve
left behind as failed, and exits.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from actors.processes import arguments

STOP_GRACE = 2.0  # seconds between SIGTERM and SIGKILL for what a dead serve left
STOP_DEADLINE = 20.0
SERVER_FILE = "server.json"
LOCK_FILE = ".lock"


def write_json(path: Path, data: dict[str, object]) -> None:
    """Replace ``path`` whole: a reader sees the old content or the new, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(data, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def start(data_dir: Path) -> subprocess.Popen[bytes]:
    """Start the watchdog of this process (see the module docstring); call with the lock held."""
    root = str(Path(__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
    return subprocess.Popen(
        [sys.executable, "-m", "cluster.watchdog", str(os.getpid()), str(data_dir)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env, start_new_session=True,
    )


def watch(serve_pid: int, data_dir: Path) -> int:
    """The watchdog: wait until ``serve_pid`` lets go of ``data_dir``'s lock, then stop what it left."""
    since = process_start(os.getpid())
    with open(data_dir / LOCK_FILE, "a+", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # canopy serve holds it for as long as it lives
        lock.seek(0)
        lock.truncate()
        lock.write(f"the watchdog of canopy serve pid {serve_pid} (pid {os.getpid()}), stopping what it left\n")
        lock.flush()
        stopped = stop_instance(serve_pid, since)
        stopped += _remove_network(data_dir / SERVER_FILE, serve_pid)
        abandoned = _mark_abandoned(data_dir / SERVER_FILE, serve_pid)
        lock.seek(0)
        lock.truncate()
    if abandoned:
        said = f"canopy serve (pid {serve_pid}) ended without stopping; its watchdog stopped {stopped} processes"
    elif stopped:
        said = f"the watchdog of canopy serve (pid {serve_pid}) stopped {stopped} processes its Ray left"
    else:
        return 0
    try:
        print(f"canopy: {said}", file=sys.stderr, flush=True)
    except OSError:  # nobody reads the console any more
        pass
    return 0


def _remove_network(path: Path, serve_pid: int) -> int:
    """Remove the network namespaces of the simulated nodes (``node_namespaces``) that ``serve_pid``
    recorded in ``server.json`` and left, killing what still runs in them; return how many processes."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    name = info.get("network") if isinstance(info, dict) and info.get("pid") == serve_pid else None
    if not isinstance(name, str) or not name.startswith("cnp"):
        return 0
    from cluster import netns

    removed = netns.teardown(name)
    return sum(int(m.group(1)) for line in removed if (m := re.search(r"\((\d+) processes killed\)", line)))


def _mark_abandoned(path: Path, serve_pid: int) -> bool:
    """Turn a ``server.json`` that ``serve_pid`` left saying it serves into a failed one."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(info, dict) or info.get("pid") != serve_pid or info.get("state") != "serving":
        return False
    reason = f"canopy serve (pid {serve_pid}) ended without stopping (killed?)"
    write_json(path, {**info, "state": "failed", "reason": reason, "failed_at": time.time()})
    return True


_SESSION = re.compile(r"/session_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_(\d+)(?:/|$)")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _boot_time() -> float:
    with open("/proc/stat", encoding="ascii") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0


_BOOT = _boot_time()


def process_start(pid: int) -> float:
    """When ``pid`` started, in seconds since the epoch (to the clock tick; 0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return _BOOT + int(fields[19]) / _CLOCK_TICKS


def holds(pid: int, path: Path) -> bool:
    """Whether ``pid`` has ``path`` open (or the file that was at ``path``, since deleted)."""
    return any(name in (str(path), f"{path} (deleted)") for name in _open_files(pid))


def _is_ray_process(args: list[str]) -> bool:
    """A Ray worker or agent (``ray::`` title), Ray's binaries, or a script of the ray package."""
    if not args:
        return False
    return args[0].startswith("ray::") or Path(args[0]).name in ("gcs_server", "raylet") or any(
        "/ray/" in a for a in args[:3]
    )


def _open_files(pid: int) -> Iterator[str]:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return
    for fd in fds:
        try:
            yield os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue


def instance_processes(driver_pid: int, since: float) -> list[int]:
    """The running processes of the Ray that ``driver_pid`` started: Ray processes started at or
    after ``since`` that name its session directory in their arguments or open files."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (me, driver_pid):
            continue
        pid = int(entry)
        args = arguments(pid)
        if not _is_ray_process(args) or process_start(pid) < since:
            continue
        for name in (*args, *_open_files(pid)):
            match = _SESSION.search(name)
            if match and int(match.group(1)) == driver_pid:
                found.append(pid)
                break
    return found


def stop_instance(driver_pid: int, since: float) -> int:
    """Stop what is left of the Ray that ``driver_pid`` started: SIGTERM, then SIGKILL after
    :data:`STOP_GRACE`; return how many processes there were."""
    seen: set[int] = set()
    started = time.monotonic()
    while time.monotonic() - started < STOP_DEADLINE:
        left = instance_processes(driver_pid, since)
        if not left:
            break
        late = time.monotonic() - started > STOP_GRACE
        for pid in left:
            if late or pid not in seen:
                try:
                    os.kill(pid, signal.SIGKILL if late else signal.SIGTERM)
                except OSError:
                    pass
            seen.add(pid)
        time.sleep(0.1)
    return len(seen)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        sys.exit(watch(int(sys.argv[1]), Path(sys.argv[2])))
    sys.exit("usage: python -m cluster.watchdog SERVE_PID DATA_DIR (started by canopy serve)")
