"""The JavaScript client (clients/js) under ``node --test``, against a real `canopy serve`.

``clients/js/test/*.test.js`` hold the tests: the codecs and selector matching on their own, the
protocol constants against docs/PROTOCOL.md, and against the server started here every operation,
both ways with the Python client (tests/e2e/js_harness.py), a dropped connection resumed, bad
input answered with typed errors, and last (it restarts the gateway) a reconnection across a
gateway restart checked by the checker's rules. Node comes from Debian and the ``ws`` package
(Node before 22 has no WebSocket of its own) from the npm registry; without them this skips, loudly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import ADMIN, Server
from tests.e2e.installs import node_and_npm, npm_modules

REPO = Path(__file__).parents[2]
CLIENT = REPO / "clients" / "js"
UNTESTED = "the JavaScript client goes untested"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Node, with the client's dependencies in clients/js/node_modules (a link into the npm cache)."""
    executable, _ = node_and_npm(UNTESTED)
    here = CLIENT / "node_modules"
    if not (here / "ws" / "package.json").exists():
        def installed(where: Path) -> bool:
            return (where / "node_modules" / "ws" / "package.json").exists()

        modules = npm_modules(CLIENT / "package.json", installed, UNTESTED, tmp_path_factory)
        if here.is_symlink():  # to a cache that has gone
            here.unlink()
        elif here.exists():  # an install without ws (npm failed half-way): ours to replace
            shutil.rmtree(here)
        here.symlink_to(modules)
    return executable


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("js-client") / "data")
    try:
        yield srv.wait_ready()
    finally:
        assert srv.stop() == 0, srv.output


def _node_test(node: str, server: Server | None, *files: str) -> None:
    env = {**os.environ, "CANOPY_PYTHON": sys.executable, "CANOPY_REPO": str(REPO)}
    if server is not None:
        env.update(CANOPY_URL=server.url, CANOPY_PRINCIPAL=ADMIN[0], CANOPY_PASSWORD=ADMIN[1],
                   CANOPY_SERVE_PID=str(server.proc.pid))
    done = subprocess.run(
        [node, "--test", "--test-reporter=tap", *(f"test/{f}" for f in files)],
        cwd=CLIENT, env=env, capture_output=True, text=True, timeout=400,
    )
    report = done.stdout + done.stderr
    failed = [line for line in report.splitlines() if line.startswith("not ok")]
    assert done.returncode == 0 and not failed, "\n".join(failed) + "\n\n" + report[-6000:]
    skipped = [line for line in report.splitlines() if "# SKIP" in line]
    assert not skipped, "\n".join(skipped)
    summary = {k: v for k, v in (line[2:].split(" ", 1) for line in report.splitlines()
                                 if line.startswith("# ") and line[2:].split(" ")[0] in ("tests", "pass"))}
    assert summary.get("tests") == summary.get("pass") and int(summary.get("tests", "0")) > 0, json.dumps(summary)


def test_the_codecs_selectors_and_protocol_tables(node: str) -> None:
    _node_test(node, None, "codec.test.js", "selectors.test.js", "protocol.test.js", "deltas.test.js")


def test_every_operation_against_a_real_server(node: str, server: Server) -> None:
    _node_test(node, server, "session.test.js")


def test_a_gateway_restart_loses_nothing(node: str, server: Server) -> None:
    _node_test(node, server, "reconnect.test.js")
