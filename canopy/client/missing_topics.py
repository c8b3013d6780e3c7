"""Missing-topic handlers (``session.missing_topics``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from canopy import errors
from canopy.client.registrations import Registrar, Registration

log = logging.getLogger("canopy.client")


@dataclass(frozen=True)
class MissingTopicNotification:
    """A subscription or fetch matched no topic under a path this session handles."""

    #: the selector the other session subscribed to or fetched
    selector: str
    #: the requesting session's id and properties
    session_id: str
    properties: dict[str, str]
    #: the servers the request passed through, where it was made first (fan-out adds hops)
    servers: tuple[str, ...]
    #: the path this handler was registered for
    path: str
    id: str = ""


#: a missing-topic handler: given a notification, True (or None) to proceed, False to cancel;
#: it may be a coroutine function
MissingTopicHandler = Callable[[MissingTopicNotification], Any]


class HandlerRegistration(Registration):
    """A missing-topic handler's registration; :meth:`close` (or closing the session) ends it."""

    _REMOVE = "missing_topic_rm"

    def __init__(self, owner: MissingTopics, token: str, path: str, handler: MissingTopicHandler) -> None:
        super().__init__(owner, token, path)
        self.handler = handler


class MissingTopics(Registrar[HandlerRegistration]):
    """Missing-topic handlers (``session.missing_topics``): this session hears of
    subscriptions and fetches that match no topic under a path, and says whether
    they go on (REGISTER_HANDLER, and MODIFY_TOPIC on the path).

    The request waits for the answer (the server's ``missing_topic_timeout_ms``
    at most; no answer counts as proceed); a handler that makes the topic before
    it answers proceed has the subscriber receive it. Cancel ends the request with
    :class:`~canopy.errors.RequestCancelledError`. A handler that raises counts
    as proceed (the error is logged).
    """

    _WHAT = "missing-topic handler"

    async def add_handler(self, path: str, handler: MissingTopicHandler) -> HandlerRegistration:
        """Register ``handler`` for ``path``: it hears of requests whose selector's path prefix
        lies at or under ``path``, unless a handler registered for a longer path does. Of the
        sessions that register one path, the first is notified."""
        token: str = await self._s._call("missing_topic_add", path)
        registration = self._by_token[token] = HandlerRegistration(self, token, path, handler)
        return registration

    async def list(self) -> list[tuple[str, str, str]]:
        """Every registration of the server: ``(registration, path, session id)``
        (REGISTER_HANDLER or VIEW_SERVER)."""
        return [(str(t), str(p), str(s)) for t, p, s in await self._s._call("missing_topic_list")]

    def _notified(self, body: Any) -> None:
        try:
            registration = self._by_token.get(body["registration"])
            notification = MissingTopicNotification(
                str(body["selector"]), str(body["session_id"]), dict(body["properties"]),
                tuple(body["servers"]), str(body["path"]), str(body["id"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            log.warning("malformed missing-topic notification from the server: %s", e)
            return
        if registration is None or registration.closed:
            self._answer(notification.id, True)
            return
        task = asyncio.ensure_future(self._run(registration, notification))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, registration: HandlerRegistration, notification: MissingTopicNotification) -> None:
        try:
            answer = registration.handler(notification)
            if asyncio.iscoroutine(answer) or isinstance(answer, asyncio.Future):
                answer = await answer
        except Exception:
            log.exception("missing-topic handler for %s failed; proceeding", registration.path)
            answer = True
        with contextlib.suppress(errors.CanopyError):  # a late answer, a session gone: logged
            await self._answer(notification.id, answer is not False)

    def _answer(self, notification_id: str, proceed: bool) -> asyncio.Future[Any]:
        if self._s.closed:
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        future = self._s._request("missing_topic_ans", notification_id, "proceed" if proceed else "cancel")
        future.add_done_callback(_ignore_answer)
        return future

    def _register_request(self, registration: HandlerRegistration) -> asyncio.Future[Any]:
        return self._s._request("missing_topic_add", registration.path)


def _ignore_answer(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.info("a missing-topic answer was not taken: %s", future.exception())
