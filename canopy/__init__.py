"""canopy: a clustered real-time data broker.

This package is its public face: the client library (:func:`connect`,
:func:`connect_sync`), the wire protocol codec (:mod:`canopy.protocol`),
the error classes (:mod:`canopy.errors`) and the ``canopy`` command line.
The client names are loaded on first use, so that importing the
sans-I/O protocol module pulls in no networking code.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "AddResult": "canopy.client",
    "FetchedTopic": "canopy.client",
    "Session": "canopy.client",
    "Subscription": "canopy.client",
    "TopicEvent": "canopy.client",
    "EventMetadata": "canopy.client",
    "TimeSeriesEvent": "canopy.client",
    "RangeResult": "canopy.client",
    "MissingTopicNotification": "canopy.client",
    "HandlerRegistration": "canopy.client",
    "connect": "canopy.client",
    "SessionLock": "canopy.client",
    "SessionLockScope": "canopy.client",
    "UNLOCK_ON_SESSION_LOSS": "canopy.client",
    "UNLOCK_ON_CONNECTION_LOSS": "canopy.client",
    "CanopyError": "canopy.errors",
    "SyncSession": "canopy.sync",
    "connect_sync": "canopy.sync",
    "TopicType": "topics.types",
}

__all__ = [*sorted(_EXPORTS), "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'canopy' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
