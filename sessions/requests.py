"""Checking a session's requests and planning what they need (pure).

The gateway decodes a request's arguments off the wire and hands them here
with the session that asked. Each function checks the arguments (types,
ranges, syntax) and the session's permissions, and returns what the
gateway must then do: a partition operation (:mod:`topics.protocol`) to
route, or a small plan. Nothing here does I/O; a bad argument raises
:class:`RequestError`, a missing permission
:class:`~sessions.security.PermissionDenied`, and bad paths, selectors,
types or values the :class:`~topics.errors.TopicModelError` of the topic
model — each with a ``code`` and a message that says what and where.
Every path and selector a client names goes through the registry's
:class:`~sessions.limits.Limits` (``r.limits``): one over a limit is refused
like an invalid one (``INVALID_PATH``, ``INVALID_SELECTOR``).

Permissions, per the security model:

=================  ====================================================
add, remove        MODIFY_TOPIC on each topic path (remove skips topics
                   without it)
set                UPDATE_TOPIC (and MODIFY_TOPIC when it may create)
json_patch         UPDATE_TOPIC
subscribe, fetch   SELECT_TOPIC on the selector's path prefix; only
                   topics with READ_TOPIC on their *session* path show
append             UPDATE_TOPIC
edit               EDIT_TIME_SERIES_EVENTS, or EDIT_OWN_TIME_SERIES_EVENTS
                   for events the session's principal wrote
range_query        READ_TOPIC on the session path
security_get       VIEW_SECURITY        security_update  MODIFY_SECURITY
tree_put           MODIFY_TOPIC on the session tree branch and
                   EXPOSE_BRANCH on every topic tree branch
tree_remove        MODIFY_TOPIC on the branch
tree_get, list     MODIFY_TOPIC on the branch (list skips the others)
session_get        VIEW_SESSION         session_set      MODIFY_SESSION
session_close      VIEW_SESSION and MODIFY_SESSION
=================  ====================================================

(Topic views are checked in :mod:`views.requests`.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sessions.filters import parse_filter
from sessions.registry import SessionRegistry
from sessions.security import GlobalPermission, PathPermission, PermissionDenied, SecurityStore
from sessions.trees import BranchMappingTable
from topics.constraints import NO_LOCKS, Constraint, LockLookup, decide_locks, from_wire
from topics.errors import InvalidValueError
from topics.patch import PatchSyntaxError, parse_patch
from topics.pointer import nests_deeper_than
from topics.properties import REMOVAL
from topics.removal import parse_policy
from topics.protocol import AddTopic, AppendEvent, EditEvent, FetchTopics, PatchJson, QueryEvents, SetValue
from topics.selectors import Selector
from topics.specification import TopicSpecification, check_honoured
from topics.types import MAX_JSON_DEPTH, TEXT, TopicType

__all__ = [
    "FetchPlan", "RemovePlan", "RequestError", "add_topic", "append_event", "edit_event", "expect",
    "fetch_plan", "json_patch", "property_changes", "query_events", "remove_plan", "security_commands", "selector",
    "session_target", "set_value", "tree_branch", "tree_table", "update_constraint",
]

P, G = PathPermission, GlobalPermission
#: the times an event may carry, in ms since 1970: the years 1 to 9999 (a far-future
#: event would make every later append stamped by the server's clock fail)
EARLIEST_MS, LATEST_MS = -62_135_596_800_000, 253_402_300_799_999


class RequestError(Exception):
    """A request's arguments are wrong; ``code`` is the wire error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise RequestError("INVALID_REQUEST", f"{what} has the wrong type ({type(value).__name__})")
    return value


def _optional_int(value: Any, what: str) -> int | None:
    return None if value is None else int(expect(value, int, what))


def selector(r: SessionRegistry, text: Any) -> Selector:
    """A selector a client gave, parsed and checked against ``r.limits``."""
    return r.limits.selector(expect(text, str, "selector"))


# -- topics ------------------------------------------------------------------------------


def add_topic(r: SessionRegistry, sid: str, path: Any, type_name: Any, properties: Any = None) -> AddTopic:
    path = r.limits.path(path)
    spec = TopicSpecification.of(expect(type_name, str, "type"), expect(properties or {}, dict, "properties"))
    check_honoured(spec)
    policy = spec.get(REMOVAL)
    if policy is None:
        return AddTopic(path, spec.type.value, spec.properties)
    parse_policy(policy, parse_filter)  # a bad session filter, refused where it is in the policy
    # the partition watches the creating session and removes with the roles it has now
    return AddTopic(path, spec.type.value, spec.properties, sid, sorted(r.sessions[sid].roles))


def set_value(
    r: SessionRegistry, sid: str, path: Any, data: Any, raw: Any, type_name: Any = None,
    add_if_missing: Any = False, retain: Any = True, attributes: Any = b"", constraint: Any = None, *,
    max_size: int, locks: LockLookup = NO_LOCKS,
) -> SetValue:
    """A set request checked: ``raw`` is the value's form (true: raw bytes, false: one CBOR
    item, ``"text"``: text, as MQTT carries it); ``retain`` false delivers the value without
    keeping it; ``attributes`` are delivered with it, opaque, never kept; ``constraint`` (the
    wire form of :mod:`topics.constraints`, or nil) must hold for the set to apply (see
    :meth:`topics.store.TopicStore.set`; its ``locked`` terms are decided here, by ``locks``)."""
    path = r.limits.path(path)
    expect(data, bytes, "value")
    if raw != TEXT:
        expect(raw, bool, "raw")
    expect(add_if_missing, bool, "add_if_missing")
    expect(retain, bool, "retain")
    expect(attributes, bytes, "attributes")
    if type_name is not None:
        type_name = TopicType.parse(expect(type_name, str, "type")).value
    if len(data) + len(attributes) > max_size:
        raise InvalidValueError("value larger than the maximum frame size")
    if add_if_missing:
        r.check(sid, P.MODIFY_TOPIC, path)
    author = r.sessions[sid].principal if raw == TEXT else ""
    checked = update_constraint(constraint, locks)
    return SetValue(path, data, raw, type_name, add_if_missing, retain, author, attributes, checked)


def update_constraint(wire: Any, locks: LockLookup = NO_LOCKS) -> Constraint | None:
    """An update constraint a client gave (its wire form, or nil), read and with its ``locked``
    terms decided by ``locks``: what the partition is to evaluate (``None``: nothing).
    :class:`~topics.errors.ConstraintError` (``INVALID_CONSTRAINT``) for a malformed one,
    :class:`~topics.errors.UnsatisfiedConstraintError` for one its locks already fail."""
    if wire is None:
        return None
    return decide_locks(from_wire(wire), locks)


def json_patch(
    r: SessionRegistry, sid: str, path: Any, patch: Any, constraint: Any = None, *,
    max_size: int, locks: LockLookup = NO_LOCKS,
) -> PatchJson:
    """A JSON patch request checked: ``patch`` is RFC 6902 JSON text, or the array of operations
    itself (sent as JSON text to the partition); ``constraint`` as for :func:`set_value`. Patch
    text that is not a patch is :class:`~topics.errors.InvalidValueError` naming the operation."""
    path = r.limits.path(path)
    if isinstance(patch, list):
        if nests_deeper_than(patch, MAX_JSON_DEPTH):
            raise InvalidValueError(f"invalid JSON patch: it nests deeper than {MAX_JSON_DEPTH} levels")
        try:
            patch = json.dumps(patch, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError) as e:
            raise InvalidValueError(f"invalid JSON patch: not a JSON value ({e})") from None
    text = expect(patch, str, "patch")
    if len(text) > max_size:
        raise InvalidValueError("JSON patch larger than the maximum frame size")
    try:
        parse_patch(text)
    except PatchSyntaxError as e:
        raise InvalidValueError(f"invalid JSON patch: {e}") from None
    return PatchJson(path, text, update_constraint(constraint, locks))


@dataclass(frozen=True)
class RemovePlan:
    """``direct``: remove by the selector itself. Otherwise list the topics
    first and remove only those the session may modify."""

    selector: Selector
    direct: bool


def remove_plan(r: SessionRegistry, sid: str, text: Any) -> RemovePlan:
    sel = selector(r, text)
    literal = sel.literal_path
    if literal is not None:  # MODIFY_TOPIC on it was checked with the request (sessions.authorization)
        return RemovePlan(sel, True)
    roles = r.sessions[sid].roles
    direct = r.has(sid, P.MODIFY_TOPIC, sel.path_prefix) and r.permissions.uniform_below(roles, sel.path_prefix)
    return RemovePlan(sel, direct)


@dataclass(frozen=True)
class FetchPlan:
    """Fetch ``operations`` (one per topic-space selector), then keep the rows
    :meth:`SessionRegistry.visible` shows at ``selector``, up to ``limit``."""

    selector: Selector
    operations: list[tuple[Selector, FetchTopics]]
    limit: int | None


def fetch_plan(
    r: SessionRegistry, sid: str, text: Any, with_values: Any = True, with_properties: Any = False,
    types: Any = None, limit: Any = None,
) -> FetchPlan:
    sel = selector(r, text)
    expect(with_values, bool, "with_values")
    expect(with_properties, bool, "with_properties")
    if types is not None:
        types = [TopicType.parse(expect(t, str, "type")).value for t in expect(types, list, "types")]
    if _optional_int(limit, "limit") is not None and limit < 0:
        raise RequestError("INVALID_REQUEST", "limit must not be negative")
    plan = r.fetch_plan(sid, sel)
    return FetchPlan(
        sel, [(s, FetchTopics(str(s), with_values, with_properties, types, None)) for s in plan], limit
    )


# -- time series ---------------------------------------------------------------------------


def append_event(r: SessionRegistry, sid: str, path: Any, data: Any, raw: Any, timestamp: Any = None) -> AppendEvent:
    path = r.limits.path(path)
    expect(data, bytes, "value")
    expect(raw, bool, "raw")
    if _optional_int(timestamp, "timestamp") is not None and not EARLIEST_MS <= timestamp <= LATEST_MS:
        raise RequestError(
            "INVALID_REQUEST",
            f"timestamp {timestamp} is not a time between the years 1 and 9999 (milliseconds since 1970)",
        )
    return AppendEvent(path, data, raw, timestamp, r.sessions[sid].principal)


def edit_event(r: SessionRegistry, sid: str, path: Any, original: Any, data: Any, raw: Any) -> EditEvent:
    path = r.limits.path(path)
    expect(original, int, "original sequence")
    expect(data, bytes, "value")
    expect(raw, bool, "raw")
    own_only = False
    if not r.has(sid, P.EDIT_TIME_SERIES_EVENTS, path):
        if not r.has(sid, P.EDIT_OWN_TIME_SERIES_EVENTS, path):
            raise PermissionDenied(P.EDIT_TIME_SERIES_EVENTS, path)
        own_only = True
    return EditEvent(path, original, data, raw, r.sessions[sid].principal, own_only)


def query_events(
    r: SessionRegistry, sid: str, path: Any, anchor: Any, anchor_value: Any, span: Any, span_value: Any,
    view: Any, limit: Any = None,
) -> QueryEvents:
    """A range query over a *session* path, resolved to the topic it shows."""
    session_path = r.limits.path(path)
    expect(anchor, str, "anchor")
    expect(anchor_value, int, "anchor value")
    expect(span, str, "span")
    expect(span_value, int, "span value")
    expect(view, str, "view")
    _optional_int(limit, "limit")
    topic_path = r.resolve(sid, session_path)
    return QueryEvents(topic_path, anchor, anchor_value, span, span_value, view, limit)


# -- security, session trees, sessions -----------------------------------------------------------


def security_commands(r: SessionRegistry, sid: str, commands: Any) -> SecurityStore:
    """Check the commands (all or nothing); return the store they make."""
    store = r.security.apply(expect(commands, list, "commands"))
    for command in commands:  # well formed, or apply would have refused them
        if command[0] in _PATH_COMMANDS:
            r.limits.path(command[2])
    return store


#: the security commands that name a path, third (after the verb and the role)
_PATH_COMMANDS = frozenset({"set_path_permissions", "remove_path_permissions"})


def tree_table(r: SessionRegistry, sid: str, branch: Any, mappings: Any) -> BranchMappingTable:
    table = BranchMappingTable.of(branch, expect(mappings, list, "mappings"))
    r.limits.check_path(table.session_tree_branch)
    for mapping in table.mappings:
        r.limits.check_path(mapping.topic_tree_branch)
    for mapping in table.mappings:
        r.check(sid, P.EXPOSE_BRANCH, mapping.topic_tree_branch)
    return table


def tree_branch(r: SessionRegistry, branch: Any) -> str:
    return r.limits.path(branch)


def session_target(target: Any) -> tuple[str, str]:
    """``["id", SESSION_ID]`` or ``["filter", FILTER]`` (the filter is parsed)."""
    expect(target, list, "target")
    if len(target) != 2 or target[0] not in ("id", "filter") or not isinstance(target[1], str):
        raise RequestError("INVALID_REQUEST", "a target is ['id', SESSION_ID] or ['filter', FILTER]")
    if target[0] == "filter":
        parse_filter(target[1])  # refuse a bad filter with its position
    return target[0], target[1]


def property_changes(r: SessionRegistry, changes: Any) -> dict[str, str | None]:
    """Changes to sessions' user properties (``None`` removes one), within ``r.limits``
    (a session they would take over ``max_session_properties`` is left as it is)."""
    expect(changes, dict, "properties")
    for key, new in changes.items():
        if not isinstance(key, str) or not key or key.startswith("$"):
            raise RequestError("INVALID_PROPERTIES", f"only user properties can change, not {key!r}")
        if new is not None and not isinstance(new, str):
            raise RequestError("INVALID_PROPERTIES", f"property {key!r} needs a string value or nil")
    r.limits.properties(changes)
    return dict(changes)
