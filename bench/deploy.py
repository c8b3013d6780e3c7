"""Figures of the container deployment: image size and build times, then the container scenarios.

    .venv/bin/python bench/deploy.py [--cold] [--skip-scenarios]

* base: deploy/image/base.sh (debootstrap + docker import), timed when it runs (``--cold``
  removes the base first);
* image: deploy/image/Dockerfile built from scratch (``--no-cache``), then again unchanged
  (every layer cached), then after a change to one source file (only the layers after the
  sources' copy run again); its size;
* scenarios: tests/deploy/test_containers.py with ``-s``, which prints the 3-node cluster's
  start time, the failover and rejoin times and lost updates under ``docker kill``, and the
  fan-out secondary's resync time.

Needs a Docker engine (.ci/run shows how to start one) and root for the base.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import docker  # noqa: E402

from tests.deploy import images  # noqa: E402


def build(client: docker.DockerClient, wheels: Path, tag: str, no_cache: bool) -> float:
    started = time.monotonic()
    with tempfile.TemporaryFile() as context:
        images._context(wheels, context)
        context.seek(0)
        for chunk in client.api.build(
            fileobj=context, custom_context=True, dockerfile=images.DOCKERFILE, tag=tag,
            buildargs={"BASE": images.BASE_TAG}, network_mode="host", rm=True, forcerm=True, decode=True,
            nocache=no_cache,
        ):
            if "error" in chunk:
                raise SystemExit(f"build failed: {chunk['error']}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold", action="store_true", help="make the base image again too")
    parser.add_argument("--skip-scenarios", action="store_true")
    args = parser.parse_args()
    client = docker.from_env(timeout=600)
    if args.cold:
        try:
            client.images.remove(images.BASE_TAG, force=True)
        except docker.errors.ImageNotFound:
            pass
    started = time.monotonic()
    images.ensure_base(client, log=lambda line: None)
    print(f"base image {images.BASE_TAG}: {time.monotonic() - started:.1f} s "
          f"({'made' if args.cold else 'as found'}), {client.images.get(images.BASE_TAG).attrs['Size'] / 1e6:.0f} MB")
    started = time.monotonic()
    wheels = images.wheelhouse(log=lambda line: None)
    print(f"wheelhouse: {time.monotonic() - started:.1f} s, {len(list(wheels.glob('*.whl')))} wheels")
    tag = "canopy:bench"
    cold = build(client, wheels, tag, no_cache=True)
    cached = build(client, wheels, tag, no_cache=False)
    probe = ROOT / "cluster" / "_bench_probe.py"  # one source file changed: the sources' layers again
    probe.write_text("# bench/deploy.py: a source change\n")
    try:
        changed = build(client, wheels, tag, no_cache=False)
    finally:
        probe.unlink()
    size = client.images.get(tag).attrs["Size"] / 1e9
    print(f"image: cold {cold:.1f} s, unchanged {cached:.1f} s, one source file changed {changed:.1f} s; {size:.2f} GB")
    client.images.remove(tag, force=True)
    if not args.skip_scenarios:
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                        "tests/deploy/test_containers.py"], cwd=ROOT, check=False)


if __name__ == "__main__":
    main()
