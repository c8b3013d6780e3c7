"""`canopy serve` never imports from the directory it was started in.

Ray gives its workers the driver's working directory at the front of their
``sys.path``; a ``sessions.py`` there once took the place of canopy's
``sessions`` package in every actor (issue 24).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import Server, cli

#: top-level names of canopy's packages (and of the client module) that a stray file could shadow
HOSTILE = ("actors", "canopy", "cluster", "sessions", "topics")


def plant(workdir: Path, markers: Path) -> None:
    """A module per name that leaves a marker file when it is imported, then fails the import."""
    for name in HOSTILE:
        (workdir / f"{name}.py").write_text(
            "import pathlib\n"
            f"pathlib.Path({str(markers / name)!r}).touch()\n"
            f"raise ImportError('the {name}.py of canopy serve\\'s working directory was imported')\n",
            encoding="utf-8",
        )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("flags", [(), ("--local-nodes", "2")], ids=["embedded", "local-nodes"])
def test_serve_and_the_cli_import_nothing_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...]
) -> None:
    workdir, markers = tmp_path / "workdir", tmp_path / "imported"
    workdir.mkdir()
    markers.mkdir()
    plant(workdir, markers)
    monkeypatch.chdir(workdir)  # serve and the CLI start here; this process imports nothing more
    server = Server(tmp_path / "data", *flags, own_session=bool(flags))
    try:
        server.wait_ready()
        url = server.url
        assert ok(cli("topic", "add", "workdir/t", "--type", "STRING", url=url)).strip() == "CREATED"
        ok(cli("topic", "set", "workdir/t", "served", url=url))
        assert ok(cli("topic", "fetch", ">workdir/t", url=url)).strip() == "workdir/t STRING served"
    finally:
        code = server.stop()
    assert sorted(p.name for p in markers.iterdir()) == [], server.output
    assert code == 0, server.output
