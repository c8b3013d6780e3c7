"""What the tests of clients nobody here wrote need from outside: Debian packages and npm packages.

Debian's are installed as `.ci/run` installs them (root only); npm's from the registry, once, into
``~/.cache/canopy-tests`` under a name keyed by the manifest (package.json) that asks for them.
A test that cannot have them skips, loudly, saying what goes untested.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def apt_install(*packages: str) -> None:
    """As `.ci/run` does: from the package index as it is, else after an update (root only)."""
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env, "timeout": 600}
    if subprocess.run(["apt-get", "install", "-y", "-q", *packages], **quiet).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], **quiet)
        subprocess.run(["apt-get", "install", "-y", "-q", *packages], **quiet)


def node_major(node: str) -> int:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    try:
        return int(out.strip().lstrip("v").split(".")[0])
    except ValueError:
        return 0


def node_and_npm(untested: str) -> tuple[str, str]:
    """Node 18 or later and npm (installed from Debian when missing), or a loud skip saying what goes
    ``untested``."""
    if not (shutil.which("node") and shutil.which("npm")):
        apt_install(*(["nodejs", "npm"] if not shutil.which("node") else ["npm"]))
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(f"NODE/NPM ARE NOT INSTALLED (apt-get install nodejs npm; .ci/run installs them): {untested}")
    if node_major(node) < 18:
        pytest.skip(f"NODE IS OLDER THAN 18 ({node}): {untested}")
    return node, npm


def npm_modules(
    manifest: Path, installed: Callable[[Path], bool], untested: str, tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """A ``node_modules`` directory holding what ``manifest`` (a package.json) depends on, from the
    cache or installed into it now; ``installed(dir)`` tells whether ``dir/node_modules`` has it."""
    _, npm = node_and_npm(untested)
    text = manifest.read_bytes()
    cache_root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "canopy-tests"
    cache = cache_root / f"{json.loads(text)['name']}-{hashlib.sha256(text).hexdigest()[:16]}"
    if not installed(cache):
        staging = tmp_path_factory.mktemp("npm-install")
        shutil.copy(manifest, staging / "package.json")
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--no-update-notifier", "--omit=dev", "--no-package-lock"],
            cwd=staging, capture_output=True, text=True, timeout=300,
        )
        if done.returncode != 0 or not installed(staging):
            pytest.skip(f"{manifest} COULD NOT BE INSTALLED FROM THE NPM REGISTRY (npm install exited "
                        f"{done.returncode}): {untested}: {done.stderr[-2000:]}")
        partial = cache_root / f".{cache.name}.{os.getpid()}"
        try:  # into the cache in one step; another run may have put it there first
            cache_root.mkdir(parents=True, exist_ok=True)
            shutil.copytree(staging, partial, symlinks=True)
            os.replace(partial, cache)
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)
        if not installed(cache):
            cache = staging
    return cache / "node_modules"
