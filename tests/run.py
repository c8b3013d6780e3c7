"""`make test`: every test, in two pytest processes side by side.

The offline tests (:data:`OFFLINE`: pure code, schema checks; no ports, no processes) need one core
and nothing else; the rest mostly wait on Ray clusters, servers, containers and browsers starting
and failing over. So the offline tests run in a second pytest beside the rest: its report is
printed when both are done, and the run fails if either does (or either collects nothing).

    python tests/run.py [PYTEST OPTIONS...]       # e.g. -m "not soak"
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OFFLINE = ["tests/unit", "tests/deploy/test_kuberay.py"]


def main(options: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest", *options]
    with tempfile.TemporaryFile("w+") as log:
        # the offline run keeps no cache: the main run owns .pytest_cache
        offline = subprocess.Popen([*pytest, "-p", "no:cacheprovider", *OFFLINE], cwd=ROOT, stdout=log,
                                   stderr=subprocess.STDOUT)
        try:
            main_run = subprocess.run([*pytest, *(f"--ignore={path}" for path in OFFLINE)], cwd=ROOT).returncode
            offline_run = offline.wait()
        except BaseException:
            offline.terminate()
            offline.wait(30)
            raise
        log.seek(0)
        print(f"\n{'=' * 30} the offline tests ({', '.join(OFFLINE)}), run beside the rest {'=' * 30}", flush=True)
        sys.stdout.write(log.read())
    print(f"\nmake test: the rest exited {main_run}, the offline tests {offline_run}", flush=True)
    return 0 if main_run == 0 and offline_run == 0 else (main_run or offline_run)


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main(sys.argv[1:]))
