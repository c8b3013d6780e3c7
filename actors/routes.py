"""Where a link asks for a partition's primary: the controller."""

from __future__ import annotations

from typing import Any

import ray

from actors.link import Resolve, Route


def from_controller() -> Resolve:
    """A :data:`~actors.link.Resolve` that asks the controller (``ControllerActor.route``);
    ``None`` (keep the route) when there is no controller, as in tests that run actors alone."""
    handle: Any = None

    async def resolve(index: int, failed: int) -> Route | None:
        nonlocal handle
        if handle is None:
            from actors import names

            try:
                handle = ray.get_actor(names.CONTROLLER)
            except ValueError:
                return None
        try:
            epoch, replica, node = await handle.route.remote(index)
        except (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnschedulableError):
            handle = None  # given up for good: serve makes a new one under the name; found at the next ask
            raise
        return Route(epoch, replica, node)

    return resolve
