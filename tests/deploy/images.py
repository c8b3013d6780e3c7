"""canopy's container image for the tests (and bench/deploy.py), built here with no registry.

* The base is ``canopy-base:bookworm``, made by ``deploy/image/base.sh`` (debootstrap of
  Debian bookworm, ``docker import``) when the engine does not have it yet.
* The image is ``deploy/image/Dockerfile`` built on that base, tagged
  ``canopy:test-<digest>``: the digest covers every file the build reads and the base's id,
  so an unchanged tree reuses the image, and a change rebuilds only the layers after it (the
  dependencies' layer stays while pyproject.toml does).
* Its dependencies come from a wheelhouse that ``pip wheel`` fills from pip's cache (kept in
  ``~/.cache/canopy/wheels/<pyproject digest>``), the build's ``deploy/image/wheels/``: the
  image build itself never reaches a package index.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BASE_TAG = "canopy-base:bookworm"
REPOSITORY = "canopy"
#: what the Dockerfile copies, besides deploy/image/
SOURCES = ("pyproject.toml", "README.md", "canopy", "topics", "sessions", "views", "mqtt", "actors", "cluster",
           "replication", "fanout", "history", "console", "clients/js/src")
DOCKERFILE = "deploy/image/Dockerfile"


class ImageError(RuntimeError):
    pass


def _files() -> Iterator[Path]:
    """Every file of the build context but the wheels, in a stable order."""
    for name in SOURCES + ("deploy/image",):
        top = ROOT / name
        if top.is_file():
            yield top
            continue
        for path in sorted(top.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc" and "wheels" not in path.parts:
                yield path


def ensure_base(client: Any, log: Any = print) -> str:
    """The id of the local base image, made by deploy/image/base.sh when missing."""
    try:
        return str(client.images.get(BASE_TAG).id)
    except Exception:
        pass
    if os.geteuid() != 0:
        raise ImageError(f"no {BASE_TAG} image, and deploy/image/base.sh needs root to make it")
    started = time.monotonic()
    done = subprocess.run([str(ROOT / "deploy/image/base.sh"), BASE_TAG], capture_output=True, text=True)
    if done.returncode != 0:
        raise ImageError(f"deploy/image/base.sh failed ({done.returncode}): {done.stderr[-3000:]}")
    log(f"[deploy] base image {BASE_TAG} made in {time.monotonic() - started:.1f} s")
    return str(client.images.get(BASE_TAG).id)


def wheelhouse(log: Any = print) -> Path:
    """Wheels of canopy's server dependencies (and the build's setuptools), from pip's cache."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    where = Path.home() / ".cache" / "canopy" / "wheels" / digest
    if (where / ".complete").exists():
        return where
    where.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(where),
         f"{ROOT}[server]", "setuptools>=77", "wheel"],
        capture_output=True, text=True,
    )
    if done.returncode != 0:
        raise ImageError(f"pip wheel failed ({done.returncode}): {done.stderr[-3000:]}")
    for own in where.glob("canopy-*.whl"):
        own.unlink()
    (where / ".complete").touch()
    log(f"[deploy] wheelhouse of {len(list(where.glob('*.whl')))} wheels in {time.monotonic() - started:.1f} s")
    return where


def image_tag(base_id: str, wheels: Path) -> str:
    digest = hashlib.sha256(base_id.encode())
    for path in _files():
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    for wheel in sorted(wheels.glob("*.whl")):
        digest.update(wheel.name.encode())
    return f"{REPOSITORY}:test-{digest.hexdigest()[:16]}"


def _context(wheels: Path, into: Any) -> None:
    """The build context as a tar stream: the sources, deploy/image and the wheels."""
    with tarfile.open(fileobj=into, mode="w") as tar:
        for path in _files():
            tar.add(path, arcname=str(path.relative_to(ROOT)), recursive=False)
        for wheel in sorted(wheels.glob("*.whl")):
            tar.add(wheel, arcname=f"deploy/image/wheels/{wheel.name}", recursive=False)
        keep = tarfile.TarInfo("deploy/image/wheels/.keep")
        tar.addfile(keep, io.BytesIO(b""))


def ensure_image(client: Any, log: Any = print) -> tuple[str, float | None]:
    """The tag of the current tree's image and the seconds its build took (None: it was there)."""
    base_id = ensure_base(client, log)
    wheels = wheelhouse(log)
    tag = image_tag(base_id, wheels)
    try:
        client.images.get(tag)
        return tag, None
    except Exception:
        pass
    started = time.monotonic()
    with tempfile.TemporaryFile() as context:
        _context(wheels, context)
        context.seek(0)
        output: list[str] = []
        for chunk in client.api.build(
            fileobj=context, custom_context=True, dockerfile=DOCKERFILE, tag=tag, buildargs={"BASE": BASE_TAG},
            network_mode="host", rm=True, forcerm=True, decode=True,
        ):
            if "stream" in chunk:
                output.append(chunk["stream"])
            if "error" in chunk:
                raise ImageError(f"docker build of {tag} failed: {chunk['error']}\n{''.join(output)[-4000:]}")
    took = time.monotonic() - started
    log(f"[deploy] built {tag} in {took:.1f} s")
    for old in client.images.list(name=REPOSITORY):  # earlier trees' test images
        for other in old.tags:
            if other.startswith(f"{REPOSITORY}:test-") and other != tag:
                try:
                    client.images.remove(other)
                except Exception:
                    pass  # in use by a container another run left: harmless
    return tag, took
