"""The authorization matrix: what every request needs before it is carried out.

:data:`MATRIX` maps each request type of the native protocol to a
:class:`Rule`: the arguments it takes (names, how many are required) and the
permissions it needs, each at a place the rule names (:class:`Where`). The
gateway hands every request to :func:`authorize` before its handler runs, and
nothing else decides whether a request may start: a request type missing from
the table is refused (and the matrix test fails).

Every :class:`Need` of a rule must hold; a need with several permissions is met
by any of them. Some requests go on to check each topic or mapping they touch;
a rule's ``then`` says so in words, and the check is made by the core function
that knows the topics (:mod:`sessions.requests`, :mod:`views.requests`):

* a fetch shows only the topics the session may read (READ_TOPIC per topic);
* a remove with a wildcard selector removes only the topics the session may
  modify (MODIFY_TOPIC per topic);
* a set with ``add_if_missing`` also needs MODIFY_TOPIC on the path;
* a branch mapping table needs EXPOSE_BRANCH on every topic tree branch it maps;
* a topic view needs SELECT_TOPIC on its source selector's path prefix.

Server-to-server requests (``missing_topic_fwd``: a secondary's fan-out link
or a remote server connection passing on a request of one of its sessions)
need SERVER_LINK, a global permission that only the principals those links log
in as should hold (the shipped ADMINISTRATOR role has it; a security store made
before SERVER_LINK existed grants it to nobody until an administrator does).

Requests that act only on what the session itself holds (unsubscribing, its
own missing-topic registrations and notifications, its request handlers and
the requests given to it to answer) need no permission:
:attr:`Where.OWN`.

Later front doors (MQTT packets, HTTP endpoints, console actions) add their
request types here, so that one table answers for all of them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sessions.requests import RequestError, expect
from sessions.security import GlobalPermission, PathPermission, PermissionDenied

if TYPE_CHECKING:
    from sessions.registry import SessionRegistry

__all__ = ["MATRIX", "Need", "Rule", "Where", "authorize", "check_arguments"]

G, P = GlobalPermission, PathPermission


class Where(enum.Enum):
    """Where a permission is needed."""

    #: a global permission
    SERVER = "the server"
    #: a path permission at the topic path (or session path) an argument names
    PATH = "the path argument"
    #: a path permission at the path prefix of the selector an argument gives
    SELECTOR_PREFIX = "the selector's path prefix"
    #: a path permission at the path a selector names, when it names exactly one
    #: (otherwise at each topic it matches, checked by the core)
    SELECTED_PATH = "the selector's one path, or each topic it matches"
    #: nothing: the request acts only on what the session itself holds
    OWN = "the session's own registrations"


@dataclass(frozen=True)
class Need:
    """One of ``permissions`` (any will do) at ``where``, read from argument ``argument``."""

    permissions: tuple[GlobalPermission | PathPermission, ...]
    where: Where = Where.SERVER
    argument: int = 0

    def __post_init__(self) -> None:
        kinds = {isinstance(p, GlobalPermission) for p in self.permissions}
        if kinds != {self.where is Where.SERVER}:
            raise ValueError(f"global permissions are needed on the server, path permissions at a path: {self}")


@dataclass(frozen=True)
class Rule:
    """A request type: its arguments (the first ``required`` must be given) and what it needs."""

    arguments: tuple[str, ...]
    required: int
    needs: tuple[Need, ...]
    #: the finer checks the core makes on what the request touches, in words
    then: str = ""

    def describe(self) -> str:
        """The needs in words (then the finer checks), as the README's table shows them."""
        parts = []
        for need in self.needs:
            names = " or ".join(p.value for p in need.permissions)
            argument = self.arguments[need.argument] if need.where is not Where.SERVER else ""
            at = {
                Where.SERVER: "",
                Where.PATH: f" on {argument}",
                Where.SELECTOR_PREFIX: f" on the path prefix of {argument}",
                Where.SELECTED_PATH: f" on the path {argument} names",
            }[need.where]
            parts.append(names + at)
        return (" and ".join(parts) or "nothing") + (f"; {self.then}" if self.then else "")


def _global(*permissions: GlobalPermission) -> Need:
    return Need(permissions)


def _at(where: Where, *permissions: PathPermission, argument: int = 0) -> Need:
    return Need(permissions, where, argument)


#: request type -> what it takes and needs (the protocol's table of operations, in
#: :mod:`canopy.protocol`, gives the arguments' meaning and the answers)
MATRIX: Mapping[str, Rule] = {
    # topics
    "add": Rule(("path", "type", "properties"), 2, (_at(Where.PATH, P.MODIFY_TOPIC),)),
    "set": Rule(
        ("path", "value", "raw", "type", "add_if_missing", "retain", "attributes", "constraint"), 3,
        (_at(Where.PATH, P.UPDATE_TOPIC),), "and MODIFY_TOPIC on the path when add_if_missing",
    ),
    "json_patch": Rule(("path", "patch", "constraint"), 2, (_at(Where.PATH, P.UPDATE_TOPIC),)),
    "remove": Rule(
        ("selector",), 1, (_at(Where.SELECTED_PATH, P.MODIFY_TOPIC),),
        "a selector naming more than one path removes only the topics the session may modify",
    ),
    "fetch": Rule(
        ("selector", "with_values", "with_properties", "types", "limit"), 1,
        (_at(Where.SELECTOR_PREFIX, P.SELECT_TOPIC),), "shows only the topics the session may read (READ_TOPIC)",
    ),
    "subscribe": Rule(
        ("selector",), 1, (_at(Where.SELECTOR_PREFIX, P.SELECT_TOPIC),),
        "delivers only the topics the session may read (READ_TOPIC)",
    ),
    "unsubscribe": Rule(("selector",), 1, (), "acts on the session's own subscriptions only"),
    # time series
    "append": Rule(("path", "value", "raw", "timestamp"), 3, (_at(Where.PATH, P.UPDATE_TOPIC),)),
    "edit": Rule(
        ("path", "original", "value", "raw"), 4,
        (_at(Where.PATH, P.EDIT_TIME_SERIES_EVENTS, P.EDIT_OWN_TIME_SERIES_EVENTS),),
        "with EDIT_OWN_TIME_SERIES_EVENTS alone, only events the principal appended",
    ),
    "range_query": Rule(
        ("path", "anchor", "anchor_value", "span", "span_value", "view", "limit"), 6,
        (_at(Where.PATH, P.READ_TOPIC),),
    ),
    # security, session trees, sessions
    "security_get": Rule((), 0, (_global(G.VIEW_SECURITY),)),
    "security_update": Rule(("commands",), 1, (_global(G.MODIFY_SECURITY),)),
    "tree_put": Rule(
        ("branch", "mappings"), 2, (_at(Where.PATH, P.MODIFY_TOPIC),),
        "and EXPOSE_BRANCH on every topic tree branch the table maps",
    ),
    "tree_get": Rule(("branch",), 1, (_at(Where.PATH, P.MODIFY_TOPIC),)),
    "tree_remove": Rule(("branch",), 1, (_at(Where.PATH, P.MODIFY_TOPIC),)),
    "tree_list": Rule((), 0, (), "lists only the tables whose branch the session may modify (MODIFY_TOPIC)"),
    "session_get": Rule(("target", "keys"), 1, (_global(G.VIEW_SESSION),)),
    "session_set": Rule(("target", "properties"), 2, (_global(G.MODIFY_SESSION),)),
    # as the reference system's ClientControl.close: both
    "session_close": Rule(("target",), 1, (_global(G.VIEW_SESSION), _global(G.MODIFY_SESSION))),
    # client control, as the reference system's ClientControl and SubscriptionControl
    "session_roles": Rule(
        ("target", "remove", "add"), 3, (_global(G.VIEW_SESSION), _global(G.MODIFY_SESSION)),
        "the sessions' subscriptions are re-evaluated for their new roles (READ_TOPIC)",
    ),
    "session_subscribe": Rule(
        ("target", "selector"), 2, (_global(G.MODIFY_SESSION), _at(Where.SELECTOR_PREFIX, P.SELECT_TOPIC, argument=1)),
        "the subscribed sessions receive only the topics they may read (READ_TOPIC), and need no SELECT_TOPIC",
    ),
    "session_unsubscribe": Rule(
        ("target", "selector"), 2, (_global(G.MODIFY_SESSION), _at(Where.SELECTOR_PREFIX, P.SELECT_TOPIC, argument=1)),
    ),
    "session_listen": Rule(
        ("listener", "filter", "keys"), 2, (_global(G.VIEW_SESSION), _global(G.REGISTER_HANDLER)),
    ),
    "session_unlisten": Rule(("registration",), 1, (), "acts on the session's own listeners only"),
    # topic views
    "view_create": Rule(
        ("name", "specification"), 2, (_global(G.MODIFY_TOPIC_VIEWS),),
        "and SELECT_TOPIC on the path prefix of the view's source selector",
    ),
    "view_list": Rule((), 0, (_global(G.READ_TOPIC_VIEWS),)),
    "view_remove": Rule(
        ("name",), 1, (_global(G.MODIFY_TOPIC_VIEWS),),
        "and SELECT_TOPIC on the path prefix of the view's source selector",
    ),
    # the cluster, fan-out and remote servers
    "trace": Rule(("every", "limit"), 1, (_global(G.CONTROL_SERVER),)),
    "cluster_status": Rule((), 0, (_global(G.VIEW_SERVER),)),
    "cluster_node": Rule(("action", "node", "seconds", "force", "options"), 4, (_global(G.CONTROL_SERVER),)),
    "fanout_list": Rule((), 0, (_global(G.VIEW_SERVER),)),
    "fanout_add": Rule(("definition",), 1, (_global(G.CONTROL_SERVER),)),
    "fanout_remove": Rule(("name",), 1, (_global(G.CONTROL_SERVER),)),
    "server_add": Rule(("definition",), 1, (_global(G.CONTROL_SERVER),)),
    "server_remove": Rule(("name",), 1, (_global(G.CONTROL_SERVER),)),
    "server_list": Rule((), 0, (_global(G.VIEW_SERVER),)),
    "server_check": Rule(("name",), 1, (_global(G.VIEW_SERVER),)),
    "collector_put": Rule(("definition",), 1, (_global(G.CONTROL_SERVER),)),
    "collector_remove": Rule(("name",), 1, (_global(G.CONTROL_SERVER),)),
    "collector_list": Rule((), 0, (_global(G.VIEW_SERVER),)),
    # missing-topic handlers
    "missing_topic_add": Rule(
        ("path",), 1, (_global(G.REGISTER_HANDLER), _at(Where.PATH, P.MODIFY_TOPIC)),
    ),
    "missing_topic_rm": Rule(("registration",), 1, (), "acts on the session's own registrations only"),
    "missing_topic_ans": Rule(
        ("notification", "answer"), 2, (), "answers only notifications given to the session's own handlers"),
    "missing_topic_list": Rule((), 0, (_global(G.REGISTER_HANDLER, G.VIEW_SERVER),)),
    "missing_topic_fwd": Rule(
        ("selector", "session_id", "properties", "servers", "hops"), 4,
        (_global(G.SERVER_LINK), _at(Where.SELECTOR_PREFIX, P.SELECT_TOPIC)),
        "the forwarded session's properties reach handlers marked with $ForwardedBy",
    ),
    # request/response messaging
    "message_handler_add": Rule(
        ("path", "properties"), 1, (_global(G.REGISTER_HANDLER),),
        "and VIEW_SESSION when it asks for session properties",
    ),
    "message_handler_rm": Rule(("registration",), 1, (), "acts on the session's own handlers only"),
    "message_send": Rule(
        ("path", "type", "data", "response_type", "timeout_ms"), 3, (_at(Where.PATH, P.SEND_TO_MESSAGE_HANDLER),),
    ),
    "message_send_session": Rule(
        ("session_id", "path", "type", "data", "response_type", "timeout_ms"), 4,
        (_at(Where.PATH, P.SEND_TO_SESSION, argument=1),),
    ),
    "message_send_filter": Rule(
        ("filter", "path", "type", "data", "tag", "response_type", "timeout_ms"), 5,
        (_at(Where.PATH, P.SEND_TO_SESSION, argument=1),),
    ),
    "message_respond": Rule(
        ("request", "type", "data"), 3, (), "answers only requests given to the session itself"),
    "message_reject": Rule(
        ("request", "message", "code"), 2, (), "answers only requests given to the session itself"),
    # session locks (the lock's name is a path)
    "lock": Rule(("name", "scope"), 1, (_at(Where.PATH, P.ACQUIRE_LOCK),)),
    "unlock": Rule(("name", "sequence"), 1, (), "acts on the session's own locks only"),
    "lock_cancel": Rule(("name",), 1, (), "acts on the session's own waiting requests only"),
    "lock_list": Rule((), 0, (_global(G.VIEW_SERVER),)),
    # topic notifications
    "notify_select": Rule(
        ("listener", "selector", "descendants"), 2, (_at(Where.SELECTOR_PREFIX, P.SELECT_TOPIC, argument=1),),
        "notifies only of topics and descendants the session may read (READ_TOPIC)",
    ),
    "notify_deselect": Rule(("listener", "selector"), 2, (), "acts on the session's own listeners only"),
    "notify_close": Rule(("listener",), 1, (), "acts on the session's own listeners only"),
}


#: MQTT control packet a client sends -> the request types of :data:`MATRIX` it becomes (the
#: MQTT front door, ``actors/mqtt.py``; what it needs is what they need). CONNECT is a login
#: (``SecurityStore.authenticate``), the rest concern the connection alone.
MQTT_PACKETS: Mapping[str, tuple[str, ...]] = {
    "CONNECT": (),
    "PUBLISH": ("set",),  # text, retained or not; appends to a TIME_SERIES topic; adds a topic with MODIFY_TOPIC
    "PUBACK": (), "PUBREC": (), "PUBREL": (), "PUBCOMP": (),
    "SUBSCRIBE": ("subscribe",),  # one per topic filter
    "UNSUBSCRIBE": ("unsubscribe",),
    "PINGREQ": (), "DISCONNECT": (), "AUTH": (),
}


def check_arguments(op: str, rule: Rule, args: Sequence[Any]) -> None:
    """Refuse a request with too few or too many arguments, naming them."""
    count, most = len(args), len(rule.arguments)
    if rule.required <= count <= most:
        return
    names = ", ".join(rule.arguments[: rule.required]) or "none"
    optional = rule.arguments[rule.required :]
    takes = f"{op} takes {rule.required}" if not optional else f"{op} takes {rule.required} to {most}"
    extra = f" (then, optionally: {', '.join(optional)})" if optional else ""
    raise RequestError(
        "INVALID_REQUEST", f"{takes} argument{'s' if most != 1 else ''}: {names}{extra}; got {count}"
    )


def authorize(registry: SessionRegistry, session_id: str, op: str, args: Sequence[Any]) -> None:
    """Refuse a request of a session that its rule does not allow: arguments
    (``INVALID_REQUEST``), the paths and selectors the rule reads (their own
    typed errors: ``INVALID_PATH``, ``INVALID_SELECTOR``), then every need
    (:class:`~sessions.security.PermissionDenied`). An unknown ``op`` is the
    caller's to refuse (``UNKNOWN_OPERATION``) before it gets here."""
    rule = MATRIX[op]
    if not rule.required <= len(args) <= len(rule.arguments):
        check_arguments(op, rule, args)
    if not rule.needs:
        return
    roles = registry.sessions[session_id].roles
    has = registry.permissions.has
    for need in rule.needs:
        where = need.where
        if where is Where.SERVER:
            path: str | None = None
        elif where is Where.PATH:
            path = registry.limits.path(args[need.argument])
        else:
            path = _selected(registry, need, args[need.argument])
            if path is None:
                continue  # the core checks each topic instead
        for permission in need.permissions:
            if has(roles, permission, path):
                break
        else:
            raise PermissionDenied(need.permissions[0], path)


def _selected(registry: SessionRegistry, need: Need, value: Any) -> str | None:
    """The path a selector need is checked at, or ``None`` when it names several."""
    selector = registry.limits.selector(expect(value, str, "selector"))
    if need.where is Where.SELECTOR_PREFIX:
        return selector.path_prefix
    return selector.literal_path
