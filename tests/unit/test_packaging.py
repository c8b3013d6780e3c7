"""What the package installs is what the container image copies: a package added to one and
not the other broke every container test once (``ModuleNotFoundError`` in the image)."""

from __future__ import annotations

import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_image_copies_every_package_the_project_installs() -> None:
    packages = {p.rstrip("*") for p in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                ["packages"]["find"]["include"]}
    dockerfile = (ROOT / "deploy/image/Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\w+) /tmp/canopy/\1$", dockerfile, re.MULTILINE))
    assert copied == packages
    from tests.deploy.images import SOURCES

    assert packages <= set(SOURCES)
