"""What request handlers work with: the gateway's registry, its partition
link and the handles of the instance's other actors."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from actors.link import PartitionLink
from actors.settings import InstanceSettings
from actors.tracing import Tracer
from sessions.registry import Registration, SessionRegistry
from sessions.requests import RequestError
from topics.protocol import Failed, Operation, Register, Result, Unregister
from topics.selectors import Selector

log = logging.getLogger("canopy.gateway")


class Routed(NamedTuple):
    """Answer the request with the result of ``operation`` on ``path``'s partition."""

    path: str
    operation: Operation


def ok(result: Result) -> Any:
    """The payload of a result; a failure raises :class:`RequestError` with its code."""
    if isinstance(result, Failed):
        raise RequestError(result.code, result.message)
    return result.value


@dataclass(eq=False)
class Context:
    registry: SessionRegistry
    link: PartitionLink
    config: InstanceSettings
    controller: Any = None
    session_trees: Any = None
    views: Any = None
    #: every gateway of the instance (this one included), for session-wide operations
    peers: list[Any] = field(default_factory=list)
    #: registration token -> resolved when its snapshot is complete everywhere
    waiters: dict[int, asyncio.Future[None]] = field(default_factory=dict)
    tracer: Tracer = field(default_factory=Tracer)
    #: missing-topic handlers (:class:`actors.missing_topics.MissingTopics`)
    missing: Any = None
    #: request/response messaging (:class:`actors.messaging.Messaging`)
    messaging: Any = None
    #: client control: roles, subscriptions and session event listeners (:class:`actors.client_control.ClientControl`)
    clients: Any = None
    #: session locks: the table the controller pushed, waiting requests (:class:`actors.locks.GatewayLocks`)
    locks: Any = None
    #: topic notification listeners (:class:`actors.notifications.TopicNotifications`)
    notifications: Any = None
    #: sets, appends and edits of this gateway's sessions (MQTT publishes too) sent on to the partitions
    updates_received: int = 0

    async def all_ok(self, futures: list[asyncio.Future[Result]]) -> list[Any]:
        return [ok(r) for r in await asyncio.gather(*futures)]

    def register(self, registrations: list[Registration]) -> list[asyncio.Future[Result]]:
        futures = []
        loop = asyncio.get_running_loop()
        for selector, token in registrations:
            self.waiters.setdefault(token, loop.create_future())
            futures += self.link.everywhere(selector, Register(str(selector), token))
        return futures

    def unregister(self, selectors: list[Selector]) -> None:
        for selector in selectors:
            for index in self.link.partitions_for(selector):
                self.link.submit(index, Unregister(str(selector)))

    def apply_changes(self, changes: tuple[list[Registration], list[Selector]]) -> None:
        """Carry out a re-evaluation's registrations (nobody waits for them)."""
        registrations, unregistrations = changes
        for future in self.register(registrations):
            future.add_done_callback(_log_failure)
        self.unregister(unregistrations)

    def token_live(self, token: int) -> None:
        waiter = self.waiters.pop(token, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


async def answer_of(ref: Any) -> Any:
    """What an actor call answers: a handler returns this to answer the request with it. An
    actor that is away (its process or node was lost and Ray is bringing it back: the
    controller while the head is down) makes the request fail ``UNAVAILABLE`` at once: a call
    made while it is away never reaches it (one it was carrying out when it went has the
    unknown fate ``UNAVAILABLE`` says)."""
    import ray

    try:
        return await ref
    except (ray.exceptions.ActorUnavailableError, ray.exceptions.ActorDiedError) as e:
        raise RequestError("UNAVAILABLE", f"the server process this request needs is not answering now "
                                          f"({type(e).__name__}); try again") from None


def _log_failure(future: asyncio.Future[Result]) -> None:
    result = future.result()
    if isinstance(result, Failed):
        log.warning("background registration failed: %s %s", result.code, result.message)
