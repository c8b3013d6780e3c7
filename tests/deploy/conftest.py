"""Fixtures of the container tests: a Docker engine, and canopy's image built from this tree.

Ryuk (testcontainers' reaper) is off: its image cannot be pulled here, and every test
removes what it started itself (:meth:`tests.deploy.compose.Project.down`, in ``finally``).
The tests skip, with the reason, only when no Docker engine answers; ``.ci/run`` starts one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    import docker

    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as e:
        pytest.skip(
            f"NO DOCKER ENGINE REACHABLE ({os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')}: {e}): "
            "the container tests did not run; start one (.ci/run does: dockerd --bridge=none --iptables=false)"
        )
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def canopy_image(docker_client: Any) -> str:
    """The tag of this tree's image (built now, or reused when the tree did not change)."""
    from tests.deploy.images import ensure_image

    tag, took = ensure_image(docker_client)
    print(f"[deploy] image {tag}: {'built in %.1f s' % took if took is not None else 'reused'}")
    return tag
