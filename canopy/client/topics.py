"""Topic operations of a session (``session.topics``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from canopy import errors
from canopy.client.events import AddResult, FetchedTopic, TopicEvent, _local
from canopy.client.notifications import NotificationCallback, NotificationListener
from canopy.client.subscriptions import SubscribeRequest
from topics import types as values
from topics.constraints import Constraint
from topics.errors import TopicModelError
from topics.selectors import Selector
from topics.specification import TopicSpecification
from topics.types import TopicType

if TYPE_CHECKING:
    from canopy.client.session import Session


class Topics:
    """Topic operations of a session (``session.topics``)."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def add(
        self, path: str, type: TopicType | str, properties: dict[str, Any] | None = None
    ) -> AddResult:
        try:
            spec = TopicSpecification.of(type, properties)
        except TopicModelError as e:
            raise _local(e) from None
        return AddResult(await self._s._call("add", path, spec.type.value, spec.properties))

    def set(
        self, path: str, value: Any, type: TopicType | str | None = None, *, add_if_missing: bool = False,
        retain: bool = True, constraint: Constraint | None = None,
    ) -> asyncio.Future[None]:
        """Set a topic's value; await the result to know the partition applied it.

        The request is sent at the end of the current event-loop turn whether
        or not the result is awaited, so many sets pipeline without a task
        each. Every error (a value that cannot be encoded included) comes
        out of the awaited result.

        With ``retain=False`` the value goes to the subscribers (their
        :class:`TopicEvent` says ``retained=False``) without becoming the
        topic's value, which stays what it was: an MQTT publish without RETAIN.

        With a ``constraint`` (:mod:`canopy.constraints`) the partition applies the value only
        if the constraint holds for the topic as it is then, in the same step; otherwise the
        result fails with :class:`~canopy.errors.UnsatisfiedConstraintError` and nothing
        changes (``add_if_missing=True`` with :func:`~canopy.constraints.no_topic` adds a
        topic only where there is none).
        """
        try:
            topic_type = TopicType.parse(type) if type is not None else None
            data, raw = values.encode_any(value, topic_type)
            if constraint is not None:
                return self._s._request(
                    "set", path, data, raw, topic_type.value if topic_type else None, add_if_missing, retain, b"",
                    _constraint(constraint), result=_nothing,
                )
            if not retain:
                return self._s._request(
                    "set", path, data, raw, topic_type.value if topic_type else None, add_if_missing, False,
                    result=_nothing,
                )
            return self._s._request(
                "set", path, data, raw, topic_type.value if topic_type else None, add_if_missing, result=_nothing
            )
        except TopicModelError as e:
            return _failed(_local(e))
        except errors.CanopyError as e:
            return _failed(e)

    def add_and_set(
        self, path: str, value: Any, type: TopicType | str | None = None, *, constraint: Constraint | None = None
    ) -> asyncio.Future[None]:
        """Set the value, creating the topic (of ``type``, or inferred from the value) if missing."""
        return self.set(path, value, type, add_if_missing=True, constraint=constraint)

    def apply_json_patch(
        self, path: str, patch: str | Iterable[dict[str, Any]], constraint: Constraint | None = None
    ) -> asyncio.Future[None]:
        """Apply an RFC 6902 JSON patch (its text, or its list of operations) to a JSON topic's
        value, in the partition, in one step: all of it or, when an operation fails (a ``test``
        that does not hold — it compares the stored bytes, so key order counts — or a path that
        is not there), nothing (:class:`~canopy.errors.PatchFailedError`). With a
        ``constraint``, only if it holds too."""
        try:
            text = patch if isinstance(patch, str) else json.dumps(list(patch), allow_nan=False)
        except (TypeError, ValueError) as e:
            return _failed(errors.InvalidValueError(f"the patch is not JSON: {e}"))
        args: tuple[Any, ...] = (path, text) if constraint is None else (path, text, _constraint(constraint))
        try:
            return self._s._request("json_patch", *args, result=_nothing)
        except errors.CanopyError as e:
            return _failed(e)

    def update_stream(
        self, path: str, type: TopicType | str, constraint: Constraint | None = None, *, add_if_missing: bool = False
    ) -> UpdateStream:
        """An update stream for one topic: its first :meth:`UpdateStream.set` is checked
        against ``constraint`` (and may add the topic, with ``add_if_missing``); later ones
        are plain sets of the stream's type, with nothing more to check or carry."""
        return UpdateStream(self, path, TopicType.parse(type), constraint, add_if_missing)

    async def remove(self, selector: str | Selector) -> int:
        result: int = await self._s._call("remove", str(self._s._selector(selector)))
        return result

    async def fetch(
        self,
        selector: str | Selector,
        with_values: bool = True,
        with_properties: bool = False,
        types: list[TopicType | str] | None = None,
        limit: int | None = None,
    ) -> list[FetchedTopic]:
        try:
            wanted = [TopicType.parse(t).value for t in types] if types is not None else None
        except TopicModelError as e:
            raise _local(e) from None
        rows = await self._s._call(
            "fetch", str(self._s._selector(selector)), with_values, with_properties, wanted, limit
        )
        out = []
        for path, type_name, props, data, event_type in rows:
            topic_type = TopicType(type_name)
            value = None
            if data is not None:
                value = values.decode(TopicType(event_type) if event_type else topic_type, data)
            out.append(FetchedTopic(path, topic_type, value, dict(props) if props is not None else None))
        return out

    def subscribe(
        self, selector: str | Selector, callback: Callable[[TopicEvent], Any] | None = None
    ) -> SubscribeRequest:
        """Subscribe; use ``await``, ``async with`` or ``async for`` on the result.

        With ``callback``, every event goes to it as it arrives instead (see
        :class:`Subscription`): the lowest latency, for code that does not block.
        """
        return SubscribeRequest(self._s._subscribe(self._s._selector(selector), callback=callback))

    async def unsubscribe(self, selector: str | Selector) -> None:
        sel = self._s._selector(selector)
        await self._s._call_again("unsubscribe", str(sel))
        for sub in [s for s in self._s._subscriptions if s.selector == sel]:
            self._s._subscriptions.remove(sub)
            sub._end()
        self._s._reroute()

    async def notifications(
        self, selector: str | Selector | None, callback: NotificationCallback, *,
        descendants: NotificationCallback | None = None,
    ) -> NotificationListener:
        """A topic notification listener (:mod:`canopy.client.notifications`): ``callback``
        hears of the topics ``selector`` selects coming and going (path and specification,
        never a value; ``SELECTED`` for those there now, before this returns), ``descendants``
        (if given) of the immediate descendants of the selected paths that are not selected.
        More selectors with :meth:`~NotificationListener.select`; ``None``: none yet."""
        return await self._s._notifications.listen(
            None if selector is None else str(selector), callback, descendants
        )


class UpdateStream:
    """Sets of one topic's value that are validated once (see :meth:`Topics.update_stream`).

    The first :meth:`set` carries the stream's constraint; until it is answered, later sets
    wait for it, so none overtakes the check. A failed set (the constraint, or anything else)
    makes the stream invalid: every later set fails with the same error, as the reference
    system's streams do. :meth:`get` is the last value set through the stream. (Unlike the
    reference system's, the server keeps no state for a stream: another session's set does
    not invalidate it, and its later sets are plain sets, which the partition applies in
    order.)"""

    def __init__(
        self, topics: Topics, path: str, type: TopicType, constraint: Constraint | None, add_if_missing: bool
    ) -> None:
        self._topics, self.path, self.type = topics, path, type
        self._constraint, self._add = constraint, add_if_missing
        self._first: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._value: Any = None
        self._has_value = False

    @property
    def validated(self) -> bool:
        """Whether the first set was applied (and the stream is still valid)."""
        return self._first is not None and self._first.done() and self._error is None

    def get(self) -> Any:
        """The last value set through the stream (:class:`~canopy.errors.NoSuchTopicError`
        before the first)."""
        if not self._has_value:
            raise errors.NoSuchTopicError(f"nothing was set through the update stream of {self.path} yet")
        return self._value

    def set(self, value: Any) -> asyncio.Future[None]:
        if self._error is not None:
            return _failed(self._error)
        self._value, self._has_value = value, True
        if self._first is None:
            self._first = self._topics.set(
                self.path, value, self.type, add_if_missing=self._add, constraint=self._constraint)
            self._first.add_done_callback(self._checked)
            return self._first
        if self._first.done():
            return self._watch(self._topics.set(self.path, value, self.type))
        return asyncio.ensure_future(self._after_first(value))

    async def _after_first(self, value: Any) -> None:
        assert self._first is not None
        await asyncio.wait([self._first])
        if self._error is not None:
            raise self._error
        await self._watch(self._topics.set(self.path, value, self.type))

    def _watch(self, future: asyncio.Future[None]) -> asyncio.Future[None]:
        future.add_done_callback(self._checked)
        return future

    def _checked(self, future: asyncio.Future[None]) -> None:
        if not future.cancelled() and future.exception() is not None and self._error is None:
            self._error = future.exception()


def _constraint(constraint: Constraint) -> Any:
    if not isinstance(constraint, Constraint):
        raise errors.InvalidConstraintError(
            f"a constraint comes from canopy.constraints, not {type(constraint).__name__}")
    return constraint.to_wire()


def _nothing(_: Any) -> None:
    return None


def _failed(error: BaseException) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(error)
    return future
