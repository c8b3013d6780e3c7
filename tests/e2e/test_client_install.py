"""`pip install canopy` (no extras) gives a client that runs without Ray or PySpark.

A fresh virtual environment gets this repository installed by pip, as a user
would (a copy of the sources, built by pip; not editable), and talks to a
real broker started from the main environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.e2e.conftest import ADMIN, Server

ROOT = Path(__file__).resolve().parents[2]

CLIENT = textwrap.dedent(
    """
    import asyncio
    import sys

    import canopy


    async def main(url: str, principal: str, password: str) -> None:
        async with canopy.connect(url, principal, password) as session:
            await session.topics.add_and_set("install/greeting", "before", "STRING")
            async with session.topics.subscribe("?install//") as subscription:
                async for event in subscription:
                    print(event.kind, event.path, event.value, flush=True)
                    if event.kind != "subscribed":
                        break
                    await session.topics.set("install/greeting", "from a client without Ray")


    asyncio.run(asyncio.wait_for(main(*sys.argv[1:]), 60))
    """
)


def _run(*command: str | Path, cwd: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``command``; on a timeout, fail with what it printed."""
    try:
        return subprocess.run(
            [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        printed = [out.decode(errors="replace") if isinstance(out, bytes) else out or "" for out in (e.stdout, e.stderr)]
        raise AssertionError(f"{command} did not finish in {timeout}s:\n" + "\n".join(printed)) from None


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _sources(into: Path) -> Path:
    """What an sdist would hold: the project files and every top-level package."""
    into.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, into / name)
    for package in sorted(p.parent for p in ROOT.glob("*/__init__.py")):
        if package.name != "tests":
            shutil.copytree(package, into / package.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return into


def test_the_client_installs_and_subscribes_without_ray(tmp_path: Path) -> None:
    started = time.monotonic()
    server = Server(tmp_path / "data", "--partitions", "1")  # starts Ray while pip works
    try:
        work = tmp_path / "work"  # the current directory of the fresh venv's processes: no sources in it
        work.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        venv = tmp_path / "venv"
        _ok(_run(sys.executable, "-m", "venv", venv, cwd=work, env=env))
        python, bin_ = venv / "bin" / "python", venv / "bin"
        _ok(_run(python, "-m", "pip", "install", "--quiet", _sources(tmp_path / "src"), cwd=work, env=env, timeout=600))
        installed = time.monotonic()

        where = _ok(_run(python, "-c", "import canopy, cluster.cli; print(canopy.__file__)", cwd=work, env=env))
        assert where.startswith(str(venv)), where  # the installed copy, not the working tree
        absent = _ok(_run(
            python, "-c",
            "import importlib.util as u; print([m for m in ('ray', 'pyspark', 'lark') if u.find_spec(m)])",
            cwd=work, env=env,
        ))
        assert absent.strip() == "[]"

        refused = _run(bin_ / "canopy", "serve", cwd=work, env=env)
        assert (refused.returncode, refused.stderr.strip()) == (
            2, "canopy serve: the server is not installed: pip install 'canopy[server]'"
        ), refused
        assert "canopy" in _ok(_run(bin_ / "canopy", "demo", cwd=work, env=env))

        server.wait_ready()
        script = tmp_path / "client.py"
        script.write_text(CLIENT)
        printed = _ok(_run(python, script, server.url, *ADMIN, cwd=work, env=env, timeout=90))
        assert printed.splitlines() == [
            "subscribed install/greeting before",
            "value install/greeting from a client without Ray",
        ]
        fetched = _ok(_run(bin_ / "canopy", "topic", "fetch", ">install/greeting", "--url", server.url,
                           cwd=work, env=env, timeout=60))
        assert fetched.strip() == "install/greeting STRING from a client without Ray"
    finally:
        code = server.stop()
    assert code == 0, f"canopy serve exited with {code}:\n{server.output}"
    print(f"client install: venv and pip {installed - started:.1f}s, whole test {time.monotonic() - started:.1f}s")
