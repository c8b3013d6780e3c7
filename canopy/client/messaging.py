"""Request/response messaging between sessions (``session.messaging``).

A request is a typed value (STRING, INT64, DOUBLE, JSON or BINARY) sent on a
message path; its recipient answers with one typed value, the response.

* :meth:`Messaging.add_request_handler` registers a handler on the server for a
  path's branch: unaddressed requests (:meth:`Messaging.send_request`) from any
  session on any gateway reach the handler of the most specific registered path
  (sessions that registered the same path are taken in turn).
* :meth:`Messaging.set_request_stream` sets a purely local handler for requests
  addressed to this session, by id (:meth:`Messaging.send_request_to_session`)
  or by session filter (:meth:`Messaging.send_request_to_filter`).

A handler (or stream callback) is ``handler(request, context)`` returning the
response, or a coroutine function; ``context`` is a :class:`RequestContext`.
If it raises, the sender gets :class:`~canopy.errors.RejectedRequestError`
with the exception's message. Failures reach the sender as the
:class:`~canopy.errors.MessagingError` subclasses, ``NoSuchSessionError``,
``PermissionDeniedError`` and the input errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from canopy import errors
from canopy.client.registrations import Registrar, Registration
from canopy.client.clients import ALL_FIXED_PROPERTIES, ALL_USER_PROPERTIES
from canopy.client.events import _local
from topics import paths
from topics import types as values
from topics.errors import TopicModelError
from topics.types import TopicType

if TYPE_CHECKING:
    from canopy.client.session import Session

log = logging.getLogger("canopy.client")

__all__ = [
    "ALL_FIXED_PROPERTIES", "ALL_USER_PROPERTIES", "FilteredResponseCallback", "Messaging", "RequestContext",
    "RequestHandler", "RequestHandlerRegistration",
]

#: the types a request or response may have
VALUE_TYPES = (TopicType.STRING, TopicType.INT64, TopicType.DOUBLE, TopicType.JSON, TopicType.BINARY)
#: seconds a filter request's callback is kept after its timeout, for answers still on their way
_FILTER_GRACE = 5.0


@dataclass(frozen=True)
class RequestContext:
    """What a handler knows of a request besides its value."""

    #: the sender's session id
    session_id: str
    #: the request's message path (under the handler's path)
    path: str
    #: the sender's session properties the handler's registration asked for
    properties: dict[str, str]


#: a request handler or request stream callback: ``(request, context) -> response`` (or a coroutine)
RequestHandler = Callable[[Any, RequestContext], Any]
#: a filter request's callback: ``(session_id, response, error)``, exactly one of the last two not None
FilteredResponseCallback = Callable[[str, Any, "errors.CanopyError | None"], Any]


def value_type(name: TopicType | str | None) -> TopicType | None:
    """The request or response type ``name`` names (None stays None)."""
    if name is None:
        return None
    try:
        parsed = TopicType.parse(name)
    except TopicModelError as e:
        raise _local(e) from None
    if parsed not in VALUE_TYPES:
        raise errors.InvalidTypeError(f"a request or response cannot be a {parsed.value}")
    return parsed


def typed(value: Any, type_: TopicType | None) -> tuple[str, bytes]:
    """A value as it travels: its type's name (inferred when ``type_`` is None: bytes are
    BINARY, str STRING, int INT64, float DOUBLE, anything else JSON) and its bytes."""
    try:
        if type_ is None:
            data, raw = values.encode_any(value)
            return values.infer(data, raw=raw).value, data
        return type_.value, values.encode(type_, value)
    except TopicModelError as e:
        raise _local(e) from None


def untyped(type_name: Any, data: Any, expected: TopicType | None) -> Any:
    """The Python value of a typed value received; a type other than ``expected`` is
    :class:`~canopy.errors.IncompatibleDatatypeError`."""
    kind = value_type(str(type_name))
    if expected is not None and kind is not expected:
        raise errors.IncompatibleDatatypeError(f"a {kind} came where a {expected.value} was expected")
    assert kind is not None
    try:
        return values.decode(kind, bytes(data))
    except TopicModelError as e:
        raise errors.IncompatibleDatatypeError(f"a value that is not a {kind.value}: {e}") from None


@dataclass
class _FilterRequest:
    callback: FilteredResponseCallback
    expected: TopicType | None
    #: sessions it went to (None until the server said), answers received
    count: int | None = None
    answered: int = 0


@dataclass
class _Target:
    handler: RequestHandler
    request_type: TopicType | None
    response_type: TopicType | None


class RequestHandlerRegistration(Registration):
    """A request handler's registration; :meth:`close` (or closing the session) ends it."""

    _REMOVE = "message_handler_rm"

    def __init__(self, owner: Messaging, token: str, path: str, target: _Target, keys: tuple[str, ...]) -> None:
        super().__init__(owner, token, path)
        self._target = target
        self.session_properties = keys


class Messaging(Registrar[RequestHandlerRegistration]):
    """Request/response messaging (``session.messaging``); see the module's description.

    ``timeout`` (seconds) bounds how long a request waits for its response; without it the
    server's ``message_timeout_ms`` applies, and the server cuts any to ``max_message_timeout_ms``.
    """

    _WHAT = "request handler"

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self._streams: dict[str, _Target] = {}
        self._filters: dict[int, _FilterRequest] = {}
        self._tags = itertools.count(1)

    # -- receiving ---------------------------------------------------------------------

    async def add_request_handler(
        self, path: str, handler: RequestHandler, request_type: TopicType | str | None = None,
        response_type: TopicType | str | None = None, session_properties: Iterable[str] = (),
    ) -> RequestHandlerRegistration:
        """Handle the requests sent to ``path``'s branch (REGISTER_HANDLER; VIEW_SESSION too with
        ``session_properties``, the sender's properties each request's context carries:
        ``ALL_FIXED_PROPERTIES``/``ALL_USER_PROPERTIES`` for all of a kind). A request of another
        type than ``request_type`` is refused (INCOMPATIBLE_DATATYPE); the response is encoded
        as the sender asks, else as ``response_type``, else by its Python type. A session may
        register one handler per path (a second is :class:`~canopy.errors.HandlerConflictError`)."""
        target = _Target(handler, value_type(request_type), value_type(response_type))
        keys = tuple(session_properties)
        token: str = await self._s._call("message_handler_add", path, list(keys))
        registration = self._by_token[token] = RequestHandlerRegistration(self, token, path, target, keys)
        return registration

    def set_request_stream(
        self, path: str, callback: RequestHandler, request_type: TopicType | str | None = None,
        response_type: TopicType | str | None = None,
    ) -> RequestHandler | None:
        """Answer the requests addressed to this session on ``path``'s branch (by id or by
        filter) with ``callback``; local, no server call. Returns the callback set before, if any."""
        path = paths.normalise(path)
        old = self._streams.get(path)
        self._streams[path] = _Target(callback, value_type(request_type), value_type(response_type))
        return old.handler if old is not None else None

    def remove_request_stream(self, path: str) -> RequestHandler | None:
        """Stop answering requests on ``path`` (later ones are UNHANDLED_MESSAGE for their senders);
        returns the callback removed, if any."""
        old = self._streams.pop(paths.normalise(path), None)
        return old.handler if old is not None else None

    # -- sending -------------------------------------------------------------------------

    async def send_request(
        self, path: str, value: Any, request_type: TopicType | str | None = None,
        response_type: TopicType | str | None = None, timeout: float | None = None,
    ) -> Any:
        """Send ``value`` to the handler of ``path`` (SEND_TO_MESSAGE_HANDLER on the path) and
        return its response."""
        expected = value_type(response_type)
        type_name, data = typed(value, value_type(request_type))
        result = await self._s._call("message_send", path, type_name, data, _name(expected), _ms(timeout))
        return untyped(result[0], result[1], expected)

    async def send_request_to_session(
        self, session_id: str, path: str, value: Any, request_type: TopicType | str | None = None,
        response_type: TopicType | str | None = None, timeout: float | None = None,
    ) -> Any:
        """Send ``value`` to session ``session_id``'s request stream for ``path`` (SEND_TO_SESSION
        on the path) and return its response."""
        expected = value_type(response_type)
        type_name, data = typed(value, value_type(request_type))
        result = await self._s._call(
            "message_send_session", session_id, path, type_name, data, _name(expected), _ms(timeout))
        return untyped(result[0], result[1], expected)

    async def send_request_to_filter(
        self, session_filter: str, path: str, value: Any, callback: FilteredResponseCallback,
        request_type: TopicType | str | None = None, response_type: TopicType | str | None = None,
        timeout: float | None = None,
    ) -> int:
        """Send ``value`` to every session ``session_filter`` matches (SEND_TO_SESSION on the
        path); return how many it went to (0 when none matches). Each answer is given to
        ``callback(session_id, response, None)``, each failure (rejected, timed out, ...) to
        ``callback(session_id, None, error)``: exactly one call per session counted."""
        expected = value_type(response_type)
        type_name, data = typed(value, value_type(request_type))
        tag = next(self._tags)
        self._filters[tag] = request = _FilterRequest(callback, expected)
        try:
            count: int = await self._s._call(
                "message_send_filter", session_filter, path, type_name, data, tag, _name(expected), _ms(timeout))
        except BaseException:
            self._filters.pop(tag, None)
            raise
        request.count = count
        if request.answered >= count:
            self._filters.pop(tag, None)
        else:  # whatever happens, the server answers for each session by the timeout
            seconds = (timeout if timeout is not None else 3600.0) + _FILTER_GRACE
            asyncio.get_running_loop().call_later(seconds, self._filters.pop, tag, None)
        return count

    # -- what the server sends ---------------------------------------------------------------

    def _requested(self, body: Any) -> None:
        task = asyncio.ensure_future(self._answer(body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, body: Any) -> None:
        try:
            request_id, path = str(body["id"]), str(body["path"])
            type_name, data = str(body["type"]), bytes(body["data"])
            context = RequestContext(str(body["session_id"]), path, dict(body.get("properties") or {}))
            registration, asked = body.get("registration"), body.get("response_type")
        except (KeyError, TypeError, ValueError) as e:
            log.warning("malformed request from the server: %s", e)
            return
        target = self._target(registration, path)
        if target is None:
            whose = "request handler" if registration is not None else "request stream"
            await self._reject(request_id, f"session {self._s.session_id} has no {whose} for {path!r}",
                               "UNHANDLED_MESSAGE")
            return
        try:
            request = untyped(type_name, data, target.request_type)
        except errors.CanopyError as e:
            await self._reject(request_id, e.message, "INCOMPATIBLE_DATATYPE")
            return
        try:
            response = target.handler(request, context)
            if asyncio.iscoroutine(response) or isinstance(response, asyncio.Future):
                response = await response
        except Exception as e:
            await self._reject(request_id, str(e) or type(e).__name__, "REJECTED_REQUEST")
            return
        try:
            answer = typed(response, value_type(asked) if isinstance(asked, str) else target.response_type)
        except errors.CanopyError as e:
            await self._reject(request_id, f"the handler's response does not encode: {e.message}",
                               "INCOMPATIBLE_DATATYPE")
            return
        try:
            await self._s._call("message_respond", request_id, *answer)
        except errors.FrameTooLargeError as e:
            await self._reject(request_id, f"the response is too large: {e.message}", "REJECTED_REQUEST")
        except errors.CanopyError as e:  # late (the sender stopped waiting), or the session is gone
            log.info("a response to request %s was not taken: %s", request_id, e)

    def _target(self, registration: Any, path: str) -> _Target | None:
        if registration is not None:
            handler = self._by_token.get(str(registration))
            return handler._target if handler is not None and not handler.closed else None
        for candidate in [path, *reversed(paths.ancestors(path))]:
            if candidate in self._streams:
                return self._streams[candidate]
        return None

    async def _reject(self, request_id: str, message: str, code: str) -> None:
        with contextlib.suppress(errors.CanopyError):
            await self._s._call("message_reject", request_id, message[:1024], code)

    def _responded(self, body: Any) -> None:
        """One answer to a request to a filter."""
        try:
            tag, session_id = body["request"], str(body["session_id"])
        except (KeyError, TypeError) as e:
            log.warning("malformed response from the server: %s", e)
            return
        request = self._filters.get(tag) if isinstance(tag, int) else None
        if request is None:
            return
        response: Any = None
        error: errors.CanopyError | None = None
        try:
            if "code" in body:
                error = errors.error_for(str(body["code"]), str(body.get("message", "")))
            else:
                response = untyped(body["type"], body["data"], request.expected)
        except errors.CanopyError as e:
            error = e
        except (KeyError, TypeError, ValueError) as e:
            error = errors.InvalidValueError(f"a malformed response: {e}")
        request.answered += 1
        if request.count is not None and request.answered >= request.count:
            self._filters.pop(tag, None)
        try:
            outcome = request.callback(session_id, response, error)
            if asyncio.iscoroutine(outcome):
                task = asyncio.ensure_future(outcome)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except Exception:
            log.exception("a filter request's callback failed")

    def _register_request(self, registration: RequestHandlerRegistration) -> asyncio.Future[Any]:
        return self._s._request("message_handler_add", registration.path, list(registration.session_properties))


def _name(type_: TopicType | None) -> str | None:
    return type_.value if type_ is not None else None


def _ms(timeout: float | None) -> int | None:
    if timeout is None:
        return None
    if not timeout > 0:
        raise errors.InvalidRequestError(f"a timeout is a positive number of seconds, not {timeout!r}")
    return max(1, round(timeout * 1000))
