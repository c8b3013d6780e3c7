"""`make test`: every test, in two pytest processes side by side.

The tests without Ray (:data:`WITHOUT_RAY`: pure code, the manifests' schema checks, the history's
Spark jobs on journal files) need a core and nothing the others use; the rest mostly wait on Ray
clusters, servers, containers and browsers starting and failing over. So those run in a second
pytest beside the rest, with the client-side tests against one embedded `canopy serve` each
(:data:`BESIDE`: the CLI, the JavaScript client, the reference API, fan-out between embedded serves) and the cluster of containers,
which time nothing, and so do not mind sharing the cores: its report is printed when both are done, and
the run fails if either does (or either collects nothing).

    python tests/run.py [PYTEST OPTIONS...]       # e.g. -m "not soak"
"""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WITHOUT_RAY = ["tests/unit", "tests/simulation", "tests/deploy/test_kuberay.py", "tests/history/test_cli.py",
               "tests/history/test_jobs.py", "tests/history/test_standalone.py", "tests/history/test_store.py"]
#: tests with an embedded `canopy serve` of their own that run in the side pytest too
BESIDE = [
    "tests/e2e/test_cli.py", "tests/e2e/test_js_client.py", "tests/e2e/test_reference_api.py",
    "tests/e2e/test_fanout.py", "tests/e2e/test_fanout_missing.py",
    # Ray's GCS and the head node restarting: waits on the restarts mostly
    "tests/cluster/test_gcs_fault_tolerance.py",
    # a cluster of containers: it waits on Docker mostly, and evens the two runs out
    "tests/deploy/test_containers.py",
]


#: canopy's own packages (installed in place, so pip compiled none of them) and the tests
SOURCES = ["actors", "canopy", "cluster", "console", "fanout", "history", "mqtt", "replication", "sessions",
           "topics", "views", "tests"]


def compile_sources() -> None:
    """Write the bytecode of canopy's sources once. Where ``PYTHONDONTWRITEBYTECODE`` is set (CI's
    environment sets it), no process writes any, and every process the tests start (each Ray
    worker of each serve, each CLI call) compiled the modules it imports again: about half a second
    of a core each, some thousands of times a run. Bytecode already up to date is left alone."""
    for package in SOURCES:
        compileall.compile_dir(str(ROOT / package), quiet=1, workers=0)


def main(options: list[str]) -> int:
    compile_sources()
    pytest = [sys.executable, "-m", "pytest", *options]
    with tempfile.TemporaryFile("w+") as log:
        # the side run keeps no cache: the main run owns .pytest_cache
        side = subprocess.Popen([*pytest, "-p", "no:cacheprovider", *WITHOUT_RAY, *BESIDE], cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            ignored = [f"--ignore={path}" for path in WITHOUT_RAY + BESIDE]
            main_run = subprocess.run([*pytest, *ignored], cwd=ROOT).returncode
            side_run = side.wait()
        except BaseException:
            side.terminate()
            side.wait(30)
            raise
        log.seek(0)
        print(f"\n{'=' * 30} the tests run beside the rest ({', '.join(WITHOUT_RAY + BESIDE)}) {'=' * 30}",
              flush=True)
        sys.stdout.write(log.read())
    print(f"\nmake test: the main run exited {main_run}, the one beside it {side_run}", flush=True)
    return 0 if main_run == 0 and side_run == 0 else (main_run or side_run)


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main(sys.argv[1:]))
