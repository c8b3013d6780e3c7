"""Replaying a topic view over journaled updates: the live view engine
(:class:`views.engine.ViewEngine`, pure) fed the history's rows in journal
order, its claims turned into rows. No Spark here: :mod:`history.jobs` runs
:func:`replay` inside Spark tasks, and tests run it directly.

A row in (:data:`IN_COLUMNS`) is one history row (see :mod:`history.store`)
or, with ``op`` = ``snapshot``, a source topic's state when the window
opens. A row out (:data:`OUT_COLUMNS`) is a change of a reference topic:
``op`` is ``put`` (created or updated: ``value`` is its value), ``append``
(a TIME_SERIES reference topic's event) or ``remove``, at ``timestamp`` (the
source update's; a delayed view's claims come out at their due time, and a
throttled view's held values when the throttle releases them), with the
source row that caused it (``source_path``, ``source_partition``,
``source_sequence``; none for releases and removals at the end).

The replay runs the view with every permission (the live view reads only
what its roles may; the history holds no security store over time).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from history.store import value_json
from topics.protocol import Added, Appended, Changed, RefDrop, RefPut, Removed, Snapshot, TopicEvent
from topics.timeseries import Event
from views.engine import Changes, ViewDefinition, ViewEngine

__all__ = ["IN_COLUMNS", "OUT_COLUMNS", "replay"]

IN_COLUMNS = (
    "path", "timestamp", "partition", "sequence", "op", "type", "properties", "value", "author",
    "event_sequence", "event_timestamp", "original_sequence", "original_timestamp", "original_author",
)
OUT_COLUMNS = (
    "path", "timestamp", "op", "type", "value", "value_json", "source_path", "source_partition", "source_sequence",
)
EVENT_TYPE = "TIME_SERIES_EVENT_VALUE_TYPE"

VIEW_NAME = "replay"


def _event(row: dict[str, Any]) -> TopicEvent | None:
    op, path = row["op"], row["path"]
    properties = [[str(k), str(v)] for k, v in (row.get("properties") or [])]
    if op == "snapshot":
        return Snapshot(0, path, row["type"], properties, row.get("value"))
    if op == "add":
        return Added(path, row["type"], properties, row.get("value"))
    if op == "set":
        return Changed(path, row["value"])
    if op == "remove":
        return Removed(path)
    if op in ("append", "edit"):
        return Appended(path, Event(
            int(row["event_sequence"]), int(row["event_timestamp"]), row.get("author") or "", row["value"],
            row.get("original_sequence"), row.get("original_timestamp"), row.get("original_author"),
        ))
    return None


def _rows_of(
    changes: Changes, now: int, source: dict[str, Any] | None, event_types: dict[str, str],
) -> Iterator[tuple[Any, ...]]:
    where = (source["path"], source["partition"], source["sequence"]) if source is not None else (None, None, None)
    timed = [(now, operation) for _routing, operation in changes.operations]
    timed += [(due, operation) for due, _view, _routing, operation in changes.delayed]
    for when, operation in timed:
        if isinstance(operation, RefPut):
            if operation.properties and EVENT_TYPE in operation.properties:
                event_types[operation.path] = operation.properties[EVENT_TYPE]
            if operation.event is not None:
                value = operation.event.value
                yield (operation.path, when, "append", operation.type, value,
                       value_json(event_types.get(operation.path), value), *where)
            else:
                yield (operation.path, when, "put", operation.type, operation.value,
                       value_json(operation.type, operation.value), *where)
        elif isinstance(operation, RefDrop):
            event_types.pop(operation.path, None)
            yield (operation.path, when, "remove", None, None, None, *where)


def replay(specification: str, rows: Iterable[dict[str, Any]], end: int | None = None) -> Iterator[tuple[Any, ...]]:
    """The reference topic changes the view ``specification`` makes from ``rows`` (snapshots
    first, then updates in journal order); throttled values held at the end come out at ``end``."""
    engine = ViewEngine(lambda roles, permission, path: True)
    event_types: dict[str, str] = {}
    started = False
    for row in rows:
        now = int(row["timestamp"])
        if not started:
            engine.put_view(ViewDefinition(VIEW_NAME, specification, 0, "history", frozenset()), now)
            started = True
        yield from _released(engine, now, event_types)
        event = _event(row)
        if event is not None:
            yield from _rows_of(engine.on_events([event], now), now, row, event_types)
    if started and end is not None:
        yield from _released(engine, end, event_types)


def _released(engine: ViewEngine, until: int, event_types: dict[str, str]) -> Iterator[tuple[Any, ...]]:
    """What throttles release up to ``until``, each at its due time."""
    due = engine.next_release()
    while due is not None and due <= until:
        yield from _rows_of(engine.release(due), due, None, event_types)
        after = engine.next_release()
        if after is None or after <= due:
            break
        due = after
