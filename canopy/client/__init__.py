"""The asyncio client.

::

    import canopy

    async with canopy.connect("ws://127.0.0.1:8080") as session:
        await session.topics.add("prices/cod", "DOUBLE")
        await session.topics.set("prices/cod", 12.5)
        async for event in session.topics.subscribe("?prices//"):
            print(event.kind, event.path, event.value)

Requests issued in the same event-loop turn travel in one frame, and any
number may be outstanding, so ``asyncio.gather`` over many ``set`` calls
pipelines them. Values are Python objects: ``str``, ``int``, ``float``,
JSON-compatible ``dict``/``list`` values, and ``bytes`` for BINARY topics.
Without a ``type``, ``set`` sends the value for the server to check
against the topic's type.

A :class:`Subscription` is an async iterator of :class:`TopicEvent`
(``subscribed`` with the current value, ``value`` for each update,
``unsubscribed`` with a reason) for the topics its selector matches; it
ends when the selector is unsubscribed or the session closes. Subscribing
is per session and per selector, as on the server: two subscriptions with
the same selector share it, and unsubscribing the selector ends both.

A session outlives its connection. When the connection drops, the client
reconnects (to the same URL or any other it was given), resumes the session
where the server still has it or opens a new one and subscribes again, and
brings every subscription up to date; subscriptions see ``disconnected`` and
``reconnected`` events around it. Requests in flight when it dropped fail with
:class:`~canopy.errors.ConnectionInterruptedError` (their outcome is
unknown); requests made meanwhile wait. :func:`connect` has the details.

The modules, by concern (each name is re-exported here: import from
``canopy.client``):

* :mod:`~canopy.client.dialer`: :func:`connect`, reaching a server and saying HELLO;
* :mod:`~canopy.client.session`: :class:`Session`, its requests, what the server
  sends, reconnecting and bringing subscriptions up to date;
* :mod:`~canopy.client.subscriptions`: :class:`Subscription`, :class:`SubscribeRequest`;
* :mod:`~canopy.client.events`: the values handed out (:class:`TopicEvent`,
  :class:`TimeSeriesEvent`, :class:`FetchedTopic`...);
* one module per API area of a session: ``topics``, ``timeseries``, ``hub``,
  ``security``, ``session_trees``, ``sessions``, ``clients``, ``views``, ``server``,
  ``missing_topics``, ``messaging``, ``fanout`` (with the remote servers), ``metrics``,
  ``locks`` and ``notifications`` (topic notifications, ``session.topics.notifications``).
"""

from __future__ import annotations

from canopy.client.clients import (
    ALL_FIXED_PROPERTIES,
    ALL_USER_PROPERTIES,
    Clients,
    SessionEvent,
    SessionEventCallback,
    SessionListener,
)
from canopy.client.dialer import DEFAULT_URL, connect
from canopy.client.events import AddResult, EventMetadata, FetchedTopic, RangeResult, TimeSeriesEvent, TopicEvent
from canopy.client.fanout import Fanout, RemoteServers
from canopy.client.hub import Hub
from canopy.client.locks import (
    UNLOCK_ON_CONNECTION_LOSS,
    UNLOCK_ON_SESSION_LOSS,
    Locks,
    SessionLock,
    SessionLockScope,
)
from canopy.client.messaging import (
    FilteredResponseCallback,
    Messaging,
    RequestContext,
    RequestHandler,
    RequestHandlerRegistration,
)
from canopy.client.metrics import Metrics
from canopy.client.missing_topics import (
    HandlerRegistration,
    MissingTopicHandler,
    MissingTopicNotification,
    MissingTopics,
)
from canopy.client.notifications import (
    NotificationCallback,
    NotificationListener,
    NotificationType,
    TopicNotification,
)
from canopy.client.security import Security
from canopy.client.server import Server
from canopy.client.session import (
    FINAL_CLOSE_CODES,
    GONE_WHILE_DISCONNECTED,
    NEW_SESSION,
    RESUMABLE_CLOSES,
    RESUMED,
    Session,
    log,
)
from canopy.client.session_trees import SessionTrees
from canopy.client.sessions import Sessions
from canopy.client.subscriptions import SubscribeRequest, Subscription
from canopy.client.timeseries import TimeSeries
from canopy.client.topics import Topics, UpdateStream
from canopy.client.views import TopicView, TopicViews

__all__ = [
    "ALL_FIXED_PROPERTIES",
    "ALL_USER_PROPERTIES",
    "Clients",
    "SessionEvent",
    "SessionEventCallback",
    "SessionListener",
    "DEFAULT_URL",
    "FINAL_CLOSE_CODES",
    "GONE_WHILE_DISCONNECTED",
    "NEW_SESSION",
    "RESUMABLE_CLOSES",
    "RESUMED",
    "AddResult",
    "UpdateStream",
    "EventMetadata",
    "Fanout",
    "FetchedTopic",
    "HandlerRegistration",
    "Hub",
    "Locks",
    "SessionLock",
    "SessionLockScope",
    "UNLOCK_ON_CONNECTION_LOSS",
    "UNLOCK_ON_SESSION_LOSS",
    "Metrics",
    "FilteredResponseCallback",
    "Messaging",
    "RequestContext",
    "RequestHandler",
    "RequestHandlerRegistration",
    "MissingTopicHandler",
    "MissingTopicNotification",
    "MissingTopics",
    "NotificationCallback",
    "NotificationListener",
    "NotificationType",
    "TopicNotification",
    "RangeResult",
    "RemoteServers",
    "Security",
    "Server",
    "Session",
    "SessionTrees",
    "Sessions",
    "SubscribeRequest",
    "Subscription",
    "TimeSeries",
    "TimeSeriesEvent",
    "TopicEvent",
    "TopicView",
    "TopicViews",
    "Topics",
    "connect",
    "log",
]
