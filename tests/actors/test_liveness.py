"""The controller's liveness probes report only on the actors it still asks after.

A full CI run stopped canopy with ``KeyError: 'partition-0@node-1#1'`` in
``ControllerActor.check``: a replica replaced after its node's crash still had a probe
in flight, and its answer (``dead``) was reported for a name no longer serving."""

from __future__ import annotations

import time
from typing import Any

from actors.cluster import RayCluster
from actors.liveness import Liveness
from cluster.config import InstanceConfig


def _actor_class(ray: Any) -> Any:
    @ray.remote(num_cpus=0)
    class Probed:
        def __init__(self) -> None:
            self.token = f"{id(self)}@node"
            self.released = False

        async def incarnation(self) -> str:
            import asyncio

            while not self.released:
                await asyncio.sleep(0.01)
            return self.token

        def release(self) -> None:
            self.released = True

    return Probed


def test_a_probe_in_flight_for_an_actor_no_longer_asked_after_reports_nothing(ray_node: Any) -> None:
    ray = ray_node
    probed = _actor_class(ray)
    kept, dropped = probed.remote(), probed.remote()
    liveness = Liveness(RayCluster(InstanceConfig(data_dir="/nonexistent")))
    try:
        assert liveness.poll({"kept": kept, "dropped": dropped}) == []  # both probes pending
        in_flight = liveness._pending["dropped"]
        ray.kill(dropped)
        ray.wait([in_flight], timeout=30)  # its answer (the actor died) is in
        kept.release.remote()
        deadline, events, seen = time.monotonic() + 30, [], None
        while time.monotonic() < deadline:
            events += liveness.poll({"kept": kept})
            seen = liveness._known.get("kept")
            if seen is not None:
                break
            time.sleep(0.05)
        assert seen is not None, "the kept actor's probe never answered"
        assert [name for name, _, _ in events] == [], events
    finally:
        ray.kill(kept)
