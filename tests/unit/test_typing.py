"""The pure packages are mypy --strict clean (configuration in pyproject.toml)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_package_type_checks(tmp_path: pathlib.Path) -> None:
    """mypy --strict over the files pyproject.toml names: every package, the Ray shells included."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
