"""What a starting actor tells the controller (crash-loop detection).

Ray restarts a crashed actor within about half a second, faster than the
controller's probes (one a second) can see each restart; so every actor
announces each start of its own from its constructor, and the controller
counts the ones after the instance started (:class:`actors.controller.Liveness`).
"""

from __future__ import annotations

import logging

import ray

log = logging.getLogger("canopy.supervision")


def announce_start() -> None:
    """Call from an actor's constructor; does nothing outside a Ray actor."""
    if not ray.is_initialized():
        return
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:
        return
    from cluster import names

    name = context.get_actor_name()
    try:
        ray.get_actor(names.CONTROLLER).started.remote(name)
    except Exception as e:  # no controller (a test that runs the actor alone)
        log.debug("could not tell the controller that %s started: %s", name, e)
