"""What a starting actor tells the controller (crash-loop detection).

Ray restarts a crashed actor within about half a second, faster than the
controller's probes (one a second) can see each restart; so every actor
announces each start of its own from its constructor, and the controller
counts the ones after the instance started (:class:`actors.liveness.Liveness`).

Every serving actor also leaves with its node: a worker whose raylet died
(a node crashed, or paused past the failure detector and then resumed, which
makes the raylet exit) can otherwise live on as an orphan, a stale gateway
or a superseded primary that retries its backup. Its process exits as soon as
its parent is no longer the raylet that started it.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from pathlib import Path

import ray

log = logging.getLogger("canopy.supervision")
#: seconds between two looks at whether the raylet is still this process's parent
ORPHAN_CHECK = 0.5


def new_incarnation() -> str:
    """A serving actor's incarnation token: new at every start of its process, and
    naming the Ray node it runs on (``<token>@<node id>``; see
    :class:`actors.liveness.Liveness`)."""
    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    return f"{secrets.token_hex(8)}@{node}"


def announce_start() -> None:
    """Call from an actor's constructor; does nothing outside a Ray actor."""
    if not ray.is_initialized():
        return
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:
        return
    from actors import names

    name = context.get_actor_name()
    _exit_with_raylet()
    try:
        ray.get_actor(names.CONTROLLER).started.remote(name)
    except Exception as e:  # no controller (a test that runs the actor alone)
        log.debug("could not tell the controller that %s started: %s", name, e)


def _exit_with_raylet() -> None:
    parent = os.getppid()
    try:
        if Path(f"/proc/{parent}/comm").read_text().strip() != "raylet":
            return
    except OSError:
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_CHECK)
        log.error("the raylet (pid %d) that started this worker is gone: its node left the cluster; exiting", parent)
        os._exit(1)

    threading.Thread(target=watch, name="canopy-leaves-with-its-node", daemon=True).start()
