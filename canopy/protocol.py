"""The canopy wire protocol (version 3), sans I/O.

canopy speaks over WebSocket. Every WebSocket message is a *binary frame*
holding one msgpack array of *messages*; a sender may batch any number of
messages into one frame, and should (one frame per update costs ten times
more than sixteen updates in one). Each message is itself a msgpack array
whose first element is the message type:

=====  ==============  ======================================================
code   message         fields after the code
=====  ==============  ======================================================
0      HELLO           version, principal (str|nil), password (str|nil),
                       properties (map str→str), resume ([session
                       id, resume token] | nil; may be left out),
                       options (map str→any; may be left out)      c → s
1      WELCOME         version, session id, session properties (map),
                       max frame size (int), OpenAjax root (str),
                       max messages per frame (int), resume token
                       (str), resumed (bool), refresh (int)          s → c
2      REQUEST         correlation id (int > 0), operation (str), args (array)
3      RESPONSE        correlation id, result                        s → c
4      ERROR           correlation id (int, 0 when none applies), code (str),
                       message (str)                                 s → c
5      SUBSCRIBED      topic alias (int), path, type, properties
                       (array of [name, value]), value (bin|nil)     s → c
6      VALUE           topic alias, value (bin)[, retained (bool)]   s → c
7      UNSUBSCRIBED    topic alias, reason (str)                     s → c
8      CLOSE           code (str), message (str)                     s → c
9      EVENT           topic alias, sequence, timestamp (ms), author,
                       value (bin), original sequence|nil, original
                       timestamp|nil, original author|nil            s → c
10     NOTIFY          kind (str), body (any)                        s → c
11     DELTA           topic alias, delta (bin)                      s → c
12     COMPRESSED      topic alias, value (bin: zlib, RFC 1950)      s → c
=====  ==============  ======================================================

The first frame from the client must hold exactly one HELLO; the server
answers WELCOME, or ERROR (correlation id 0) and closes. The server refuses
a version it does not speak (``UNSUPPORTED_VERSION``): of a HELLO or WELCOME
of another version only the version is read, whatever its other fields. After that the client sends REQUESTs; each gets
exactly one RESPONSE or ERROR carrying its correlation id. Topic
notifications (SUBSCRIBED, VALUE, UNSUBSCRIBED) arrive in the same stream:
a SUBSCRIBED gives the path and specification once, later messages name the
topic by its alias. CLOSE tells the client why the server ends the session
just before the WebSocket closes: ``QUEUE_LIMIT`` (a consumer too slow for a
topic with CONFLATION off, or over its byte budget) and ``PROTOCOL_ERROR``
end it for what the client did; ``CLOSED_BY_CLIENT_CONTROL`` says another
session closed it (``session_close``: the client must not reconnect);
``SERVER_SHUTDOWN`` says the gateway stops (the session is gone; a client may
open a new one, there or elsewhere).

*Delta streaming.* A HELLO whose options say ``deltas`` (true) lets the
server send a DELTA instead of a VALUE: the binary difference between the
topic's value the client was last sent (by SUBSCRIBED, VALUE or DELTA, its
*basis*) and the new value, which the client applies to its basis to get the
value, that then becomes the basis. The server does it for STRING, JSON and
BINARY topics without PUBLISH_VALUES_ONLY, for a retained value of at least
64 bytes whose delta is smaller than the value; everything else still comes
as a VALUE. A delta is (all numbers unsigned LEB128 varints) one version byte
(1), the basis's length, the value's length, the value's CRC-32 (4 bytes,
big-endian), then operations: ``0x00 length bytes`` inserts the bytes,
``0x01 offset length`` copies that many bytes of the basis from the offset
(see :mod:`topics.deltas`). A client that finds a delta does not apply (a
wrong basis length, an operation outside the basis, a length or checksum
that does not match) must not guess: it fetches the topic's value and goes
on from that value as its basis. Deltas apply only within one connection:
after a resume the refresh's SUBSCRIBEDs give every basis again.

*Compression.* A HELLO whose options say ``compression`` (true) lets the
server send a COMPRESSED message instead of a VALUE: the new value deflated
with zlib. It does so for a retained value of at least 512 bytes of a STRING,
JSON or BINARY topic whose COMPRESSION property is not ``off`` (a topic
without the property is ``low``: zlib level 1; ``medium`` 6, ``high`` 9),
when a delta was not sent instead and the result is smaller. The client
inflates it (never to more than the maximum frame size: more is a failure to
apply, handled as a delta's) and it is then the topic's value and basis like
any VALUE.

NOTIFY tells the session of something it asked to hear of, outside any
request. Kind ``missing_topic``: a subscription or fetch
matched no topic where the session registered a missing-topic handler (see
below); its body is a map: ``id`` (answer with it), ``registration``,
``path`` (the registration's), ``selector``, ``session_id`` and
``properties`` (of the session that asked), ``servers`` (the servers the
request passed through, where it was made first). Kind ``session_event``:
events of a session event listener (``session_listen``), its body a map:
``listener`` (the id the client gave), ``registration`` and ``events``, a list
of maps ``session_id``, ``type`` (``STATE`` or ``PROPERTIES``), ``state``
(``ACTIVE``, ``DISCONNECTED``, ``RECONNECTED``, ``CLOSED``), ``properties``
(those the listener asked for; none for a closed session), ``changed`` (the
old values of those that changed, nil for a new key) and ``reason`` (why a
closed session ended: ``CLOSED_BY_CLIENT``, ``CLOSED_BY_CLIENT_CONTROL``,
``EXPIRED``, ``QUEUE_LIMIT``, ``SERVER_SHUTDOWN``, ...). Kind ``request``: a
request for the session to answer (messaging, below), its body a map: ``id``
(answer with it), ``path``, ``type`` and ``data`` (the request's value),
``session_id`` (the sender), ``properties`` (the sender's properties the
handler asked for), ``registration`` (the handler's; nil for a request sent to
the session by id or filter) and ``response_type`` (nil when the sender did
not say). Kind ``response``: one answer to a ``message_send_filter``, its body
``request`` (the tag the sender gave), ``session_id`` (who answered), then
``type`` and ``data``, or ``code`` and ``message`` for a failure. Kind
``topic_notification``: one notification of a topic notification listener
(``notify_select``, below), its body a map: ``listener`` (the id the client
gave), ``type`` (``SELECTED``, ``ADDED``, ``REMOVED``, ``DESELECTED``),
``path`` (a session path), ``descendant`` (bool) and, unless it is a
descendant notification, ``topic_type`` and ``properties`` (the topic's
specification; never its value). A kind a client does not know is ignored.

*Resuming* (version 3). Every WELCOME carries the session's *resume token*,
a random secret the gateway made when it opened the session. A connection
that drops without a WebSocket close from the client (code 1000 or 1001)
leaves the session on its gateway for ``session_grace_ms``: its
subscriptions stay and updates are queued for it (within its byte budget;
over it the session is ended). A HELLO whose *resume* names that session and
its token, and whose principal authenticates (as any HELLO's) as the
session's principal, reattaches the session to the new connection (a
connection the gateway still holds for it is dropped): the WELCOME says
``resumed`` (true), with the same session id and the session's properties
(those of the HELLO are ignored). A refused resume (unknown or expired
session, wrong token, another principal) is no error: the WELCOME opens a
new session (``resumed`` false, ``refresh`` 0).

What was queued for the dead connection is dropped, and so are the answers
to the requests it carried (their outcome is unknown to the client).
Instead, the WELCOME of a resumed session is followed, before anything
else, by ``refresh`` messages: a SUBSCRIBED for every topic the session is
subscribed to, under its alias, with its current value, a TIME_SERIES
topic's followed by the EVENTs its subscription range selects. A client
tells the refresh from what comes after by counting; a topic it knew that
is not among them went while it was away. After the grace
period the session is closed as if its client had closed it; a client that
closes the WebSocket itself ends its session at once.

Values travel as the bytes the broker stores: one CBOR item for STRING,
INT64, DOUBLE and JSON topics, raw bytes for BINARY. In requests a value is
``data`` plus ``raw`` (true for bytes meant literally; for ``set`` and ``append``
also ``"text"``: the value as text, UTF-8 for STRING, decimal for INT64 and
DOUBLE, JSON text for JSON, the bytes for BINARY, which is what MQTT
publishes carry; a text value set on a TIME_SERIES topic is appended).
``set``'s ``retain`` (default true) false delivers the value to the
subscribers without keeping it as the topic's value; ``attributes`` (bytes, default
empty) go with the value to the subscribers that understand them (MQTT 5 ones: the
publish's message properties) and are never kept.

*Update constraints.* ``set`` and ``json_patch`` take an optional
``constraint``: the update applies only if it holds against the topic as it
is, checked by the topic's partition in the same step as the update;
otherwise the request fails ``UNSATISFIED_CONSTRAINT`` (naming the term that
failed) and nothing changes. A constraint is an array (see
:mod:`topics.constraints`): ``["value_equals", data, raw]`` (the topic's
value is that value, compared as stored), ``["no_value"]`` (a topic without a
value), ``["no_topic"]`` (no topic at the path; with ``add_if_missing``, add
only if absent), ``["locked", lock name, sequence]`` (the session holds that
session lock, acquired at that sequence; decided by the gateway),
``["json_with_value", pointer, data]`` (a JSON topic whose value has, at the
RFC 6901 pointer, the JSON value ``data`` encodes as one CBOR item, compared
as CBOR bytes), ``["json_without_value", pointer]`` (a JSON topic whose value
has nothing at the pointer), ``["and", [constraint...]]`` and ``["or",
[constraint...]]``: at most 8 levels deep, 64 terms, pointers of 1,024
characters. A malformed one is ``INVALID_CONSTRAINT``, naming where (such as
``and[1].or[0]``). ``json_patch`` applies an RFC 6902 patch to a JSON topic's
value in one step (``test`` compares CBOR bytes, so member order and number
types matter): a patch that is not one is ``INVALID_VALUE``, one that cannot
apply (a failed ``test``, a missing path, no value) ``PATCH_FAILED``, and
either changes nothing; it needs UPDATE_TOPIC, and the result is delivered
as any new value.

Operations and their arguments (results in the RESPONSE):

==============  ===============================================  ==================
operation       args                                             result
==============  ===============================================  ==================
add             path, type, properties (map|nil)                 "CREATED"|"EXISTS"
set             path, data, raw, type (str|nil), add_if_missing, "CREATED"|nil
                retain, attributes, constraint (array|nil)
json_patch      path, patch (JSON text|array), constraint        nil
                (array|nil)
remove          selector                                         topics removed
fetch           selector, with_values, with_properties,          [[path, type,
                types (array|nil), limit (int|nil)               props|nil, value|nil,
                                                                 event type|nil]]
subscribe       selector                                         nil
unsubscribe     selector                                         nil
append          path, data, raw, timestamp (int|nil)             [sequence, timestamp,
                                                                 author]
edit            path, original sequence, data, raw               [sequence, timestamp,
                                                                 author, original
                                                                 sequence, timestamp,
                                                                 author]
range_query     path, anchor, anchor value, span, span value,    [selected count,
                view, limit (int|nil)                            [event...], event
                                                                 type]
==============  ===============================================  ==================

Security, session trees and sessions:

==============  ===============================================  ==================
security_get                                                     the store (no
                                                                 password hashes)
security_update commands (see :mod:`sessions.security`)          new version
tree_put        session tree branch, [[filter, topic branch]...]  new version
tree_get        session tree branch                              table|nil
tree_list                                                        [table...]
tree_remove     session tree branch                              new version
session_get     target, keys (array|nil; may be left out)        {session id: props}
session_set     target, {key: value|nil}                         sessions changed
session_close   target                                           sessions closed
trace           every (int), limit (int)                         [[path, value,
                                                                 received, forwarded,
                                                                 applied, returned,
                                                                 written]]
cluster_status                                                   {nodes, partitions,
                                                                 gateways, ...}
cluster_node    action ("kill"|"pause"|"add"|"restart-gcs"|    {node, action, ...}
                "kill-head"|"partition"), node|nil,
                seconds, force, options (map; may be
                left out)
==============  ===============================================  ==================

Client control (other sessions, on any gateway; see below):

===================  ==========================================  ==================
session_roles        target, roles to remove, roles to add       sessions named
session_subscribe    target, selector                            sessions named
session_unsubscribe  target, selector                            sessions named
session_listen       listener id (int), filter (str|nil),        registration (str)
                     keys (array|nil; may be left out)
session_unlisten     registration                                nil
===================  ==========================================  ==================

Missing-topic handlers (REGISTER_HANDLER, and MODIFY_TOPIC on the path):

==================  ===========================================  ==================
missing_topic_add   path                                         registration (str)
missing_topic_rm    registration                                 nil
missing_topic_ans   notification id, "proceed"|"cancel"          nil
missing_topic_list                                               [[registration,
                                                                 path, session id]...]
missing_topic_fwd   selector, session id, properties, servers,   "proceed"|"cancel"
                    hops (instance ids; may be left out)
==================  ===========================================  ==================

A subscription or fetch that matches no topic the session can see, where a
handler is registered for a prefix of its selector's path prefix, waits for
the handler's answer (``missing_topic_timeout_ms``, default 10 s; no answer
counts as proceed); ``cancel`` ends the request with ERROR ``CANCELLED``
and nothing is subscribed (see :mod:`sessions.missing_topics`).
``missing_topic_fwd`` is a secondary's fan-out link passing on such a request
of one of its sessions (its id and properties, and the servers it came
through); SERVER_LINK and SELECT_TOPIC on the selector's path prefix (the
properties reach the handlers with ``$ForwardedBy``, the link's principal).

Request/response messaging (a value is a type name, ``STRING``, ``INT64``,
``DOUBLE``, ``JSON`` or ``BINARY``, and its bytes as a topic of that type stores
them; ``timeout_ms`` nil is the server's ``message_timeout_ms``):

====================  =========================================  ==================
message_handler_add   path, session property keys (array|nil;    registration (str)
                      may be left out)
message_handler_rm    registration                               nil
message_send          path, type, data, response type (str|nil), [type, data]
                      timeout_ms (int|nil)
message_send_session  session id, path, type, data, response     [type, data]
                      type, timeout_ms
message_send_filter   filter, path, type, data, tag (int|str),   sessions sent to
                      response type, timeout_ms
message_respond       request id, type, data                     nil
message_reject        request id, message, code (may be left     nil
                      out: ``REJECTED_REQUEST``)
====================  =========================================  ==================

A handler (REGISTER_HANDLER; VIEW_SESSION too when it asks for session
properties, with ``*F`` for every fixed and ``*U`` for every user property)
takes the unaddressed requests (``message_send``, SEND_TO_MESSAGE_HANDLER on the
path) on its path's branch: the handler of the most specific registered path
at or above the request's path gets it; of several sessions registered on one
path, the sender's gateway takes them in turn. A session may hold one handler
per path (a second is ``HANDLER_CONFLICT``) and 100 in all. Handlers are known
to every gateway, so a request reaches its handler wherever it is connected.
``message_send_session`` and ``message_send_filter`` (SEND_TO_SESSION on the
path) address sessions on any gateway, which answer through their client's
request streams (a client without one for the path rejects with
``UNHANDLED_MESSAGE``); a filter request answers at once how many sessions it
went to (at most 1,000) and each answer follows as a NOTIFY ``response``. The
recipient gets a NOTIFY ``request`` and answers ``message_respond`` (a response
of another type than the sender asked for is ``INCOMPATIBLE_DATATYPE``, for both)
or ``message_reject`` (its message reaches the sender as ``REJECTED_REQUEST``,
or the code it gives). The sender's errors: ``UNHANDLED_MESSAGE`` (no handler),
``NO_SUCH_SESSION``, ``REQUEST_TIMEOUT`` (no answer within the request's
timeout, at most ``max_message_timeout_ms``), ``RECIPIENT_CLOSED`` (its session
ended first), ``LIMIT_EXCEEDED`` (more than ``max_message_requests`` requests of
the session waiting), ``INVALID_TYPE``, ``INVALID_VALUE`` (a value that is not
of its type, or longer than the frame size less 64 KiB), ``INVALID_FILTER``.

Session locks (see :mod:`sessions.locks`; a lock's name is a path of at most 256
characters, and a lock is ``[name, sequence, scope]``):

====================  =========================================  ==================
lock                  name, scope (``"UNLOCK_ON_SESSION_LOSS"``  lock
                      or ``"UNLOCK_ON_CONNECTION_LOSS"``; may be
                      left out: the first)
unlock                name, sequence (int|nil; may be left out)  owned (bool)
lock_cancel           name                                       [withdrawn (bool),
                                                                 lock|nil]
lock_list                                                        [{name, sequence,
                                                                 session_id, scope,
                                                                 waiting}...]
====================  =========================================  ==================

``lock`` (ACQUIRE_LOCK on the name) is answered when the session owns the lock:
at once when it is free or the session holds it already (the same lock; asked
with ``UNLOCK_ON_CONNECTION_LOSS`` it keeps that, the weaker scope), otherwise
once every earlier waiter had it (first come, first served). The sequence is a
fencing token: each grant of any lock takes the next of one counter the cluster
keeps in its replicated configuration, so a name's sequences only grow. The
lock is released by ``unlock`` (at that sequence, when given; the answer says
whether the session owned it), when the session ends (closed, expired, its
gateway lost) and, with ``UNLOCK_ON_CONNECTION_LOSS``, when the session loses
its connection, even if it is kept for resumption. A session that loses its
connection stops waiting: the requests' answers went with it, and the client
asks again. ``lock_cancel`` stops the session's waiting for the lock (its
waiting ``lock`` requests fail ``CANCELLED``) and says whether it was waiting
and the lock if the session owns it now (granted before the cancel arrived: the
client should unlock it). ``lock_list`` (VIEW_SERVER) lists the locks held now.
A session holds or waits for at most 100 locks (16 waiting), the cluster at
most 10,000 in all: ``LIMIT_EXCEEDED``. Every change is committed to the
replicated configuration before it is answered: without a majority it is
``UNAVAILABLE``.

Topic notifications (a listener is numbered by its client, like a session
event listener, and made by its first ``notify_select``):

====================  =========================================  ==================
notify_select         listener id (int), selector, descendants   nil
                      (bool; may be left out: false)
notify_deselect       listener id, selector                      nil
notify_close          listener id                                nil
====================  =========================================  ==================

``notify_select`` (SELECT_TOPIC on the selector's path prefix) adds a selector
to a listener: a NOTIFY ``topic_notification`` ``SELECTED`` comes for every
topic it selects now (before the RESPONSE), then ``ADDED`` for each topic
added that it selects and ``REMOVED`` for each of those removed; only topics
the session may read (READ_TOPIC at the session path) are told, under their
session paths. ``notify_deselect`` takes a selector away: ``DESELECTED`` for
the topics no other selector of the listener selects. A listener made with
``descendants`` (every select of it must say the same, else
``INVALID_REQUEST``) is also told, as descendant notifications, of the
*immediate descendants* of each path it selects (bound or not) that it does
not select itself: the first topic bound on each branch below the path (for
a/b, a/c, a/c/d and a/e/f/g under a selected ``a``: a/b, a/c and a/e/f/g),
``SELECTED``/``DESELECTED`` as its selectors change and ``ADDED``/``REMOVED``
as the tree does; READ_TOPIC filters them too. A session holds at most 16
listeners and 100 selectors in all (``LIMIT_EXCEEDED``); its notifications
go through its outbound queue and count against its byte budget, like every
other message. ``notify_close`` ends a listener (no notifications); closing
the session ends them all. Values never travel for a listener: the gateway
registers its selectors with the partitions for structure only.

What every request needs, and how many arguments it takes, is the
authorization matrix (:mod:`sessions.authorization`); a wrong count is
``INVALID_REQUEST`` naming the arguments.

``fanout_add`` (CONTROL_SERVER) takes a connection definition (a map:
``name``, ``primaries``, ``links``, ``principal``, ``password``,
``retry_delay``, ``reconnect_timeout``; see :mod:`fanout.config`), commits it
to the replicated configuration and starts it; it answers the definition
without its password. ``fanout_remove`` (CONTROL_SERVER) takes a name and
answers whether there was such a connection (those of the configuration file
are refused: ``INVALID_FANOUT``). ``fanout_list`` (VIEW_SERVER) answers, for each fan-out connection of this
(secondary) server: ``name``, ``primaries``, ``state`` (``connecting``,
``connected``, ``reconnecting``, ``retrying``), ``error``, ``sessions``
(how many it opened), ``forwarded`` (missing-topic notifications passed
on), ``lag_ms``, ``rtt_ms``, ``apply_ms``, ``apply_max_ms``,
``last_update_s`` (see :meth:`canopy.client.Fanout.list`), and per link its
``selector``, ``topics`` mirrored, ``updates`` and ``contested`` paths.

Remote servers (the sources of remote topic views, ``from NAME``):
``server_add`` (CONTROL_SERVER) takes a definition (a map: ``name``,
``urls``, ``principal``, ``password``, ``retry_delay``,
``reconnect_timeout``, ``missing_topic_filter``; see :mod:`fanout.servers`)
and answers it without its password; ``server_remove`` (CONTROL_SERVER) a
name, answering whether it existed; ``server_list`` (VIEW_SERVER) answers
every definition with ``views`` (those naming it), ``state`` (``not in
use``, ``connecting``, ``connected``, ``reconnecting``, ``retrying``) and
``error``; ``server_check`` (VIEW_SERVER) opens a session with a
definition and answers ``{name, ok, error, ms}``. A bad definition, a name
in use or an unknown name is ``INVALID_REMOTE_SERVER``.

Metric collectors (exported on every gateway's ``/metrics``; see
:mod:`sessions.collectors`): ``collector_put`` (CONTROL_SERVER) takes a
definition, a map with ``kind`` ``"topic"`` (``name``, ``selector``,
``group_by_type``) or ``"session"`` (``name``, ``filter``, ``group_by``: a
list of session property names, ``remove_metrics_with_no_matches``), commits
it to the replicated configuration (replacing the one of its name) and
answers it with ``replaced`` (bool); ``collector_remove`` (CONTROL_SERVER) a
name, answering whether there was one; ``collector_list`` (VIEW_SERVER)
answers every definition. A bad definition (name, selector, filter, group-by
property) or a 101st collector is ``INVALID_COLLECTOR``.

``cluster_status`` (VIEW_SERVER) answers what ``canopy cluster status
--json`` prints: the nodes, each partition's primary and backup node, epoch,
topics, journal positions and replication lag, the gateways and their
sessions (see :meth:`canopy.client.Server.cluster_status`).

``cluster_node`` (CONTROL_SERVER) crashes (SIGKILL of the raylet and every
process it started), pauses (SIGSTOP, SIGCONT after ``seconds``) or adds a
node (see ``actors/node_control.py``). Killing and pausing are refused
(``REFUSED``) on clusters not started with ``--local-nodes``, and on the
controller's own node, unless ``force``; adding works with ``--local-nodes``
only, and a node named after a dead one starts again on its data directory.
An unknown node is ``NO_SUCH_NODE``. ``restart-gcs`` kills Ray's GCS and
``kill-head`` the whole head node (the GCS and every process on it, the
controller included), each started again ``seconds`` later, on
``--local-nodes`` clusters whose GCS keeps its tables in Redis only
(``REFUSED`` otherwise). While the controller is away, a request that needs it
fails ``UNAVAILABLE``. ``partition`` cuts the node off the other nodes' network
for ``seconds`` (``options``: ``peers``, a list of node names or nil for every
other node; ``direction``, ``both``, ``in`` or ``out``), then heals it; only
on ``--local-nodes`` clusters started with ``node_namespaces``. With
``options`` ``delay_ms`` (an integer, 1 to 10000; left out or nil: a cut) that
traffic is delayed by so many milliseconds instead of dropped, then no
longer; another value is ``INVALID_REQUEST``. The answer carries ``delay_ms``
(nil for a cut).

``trace`` (CONTROL_SERVER) makes the gateway time every ``every``-th set it
receives from then on (0 stops), keeping up to ``limit`` records, and
answers the records taken since the previous ``trace``: monotonic
nanosecond clock readings at each hop (see ``actors/tracing.py``).

A target is ``["id", session id]`` or ``["filter", session filter]``;
``session_close`` needs VIEW_SESSION and MODIFY_SESSION, ends every session
the target names on any gateway (CLOSE ``CLOSED_BY_CLIENT_CONTROL`` and
WebSocket code 4002) and answers how many; a session that closes itself gets
no answer.

*Client control.* Property ``keys`` name properties, ``*F`` standing for
every fixed (``$``) one and ``*U`` for every user one. ``session_roles``
(VIEW_SESSION and MODIFY_SESSION) takes roles from and gives roles to the
sessions a target names (lists of names, at most 64 together, not the same
role in both, not both empty): their ``$Roles`` and their permissions change
at once, for their next requests and for what they receive (a subscribed
topic they may no longer read is UNSUBSCRIBED ``AUTHORIZATION``).
``session_subscribe`` and ``session_unsubscribe`` (MODIFY_SESSION, and
SELECT_TOPIC on the selector's path prefix) change the named sessions'
subscriptions as if they had asked: the selector stays theirs, so it matches
topics added later, and they receive only what they may read (READ_TOPIC)
through the usual SUBSCRIBED messages, but need no SELECT_TOPIC themselves;
missing-topic handlers are not asked. A filter is evaluated once, on the
sessions open then. The answer is how many sessions the target named (a
subscription is answered once the current values are on their way); a target
naming a session id no gateway holds is ``NO_SUCH_SESSION``.
``session_listen`` (VIEW_SESSION and REGISTER_HANDLER; at most 16 per
session) registers a session event listener across every gateway: a STATE
``ACTIVE`` event for every session the filter (nil: every session) matches
now, then one for each session opened, DISCONNECTED and RECONNECTED for a
session kept for its client, CLOSED when one ends, and PROPERTIES when one
of the properties named in ``keys`` changes (none without keys); the filter
is evaluated on the session as it is at each event. ``session_unlisten``
ends one of the session's own listeners; closing the session ends them all.

A HELLO with a principal is authenticated (ERROR ``AUTHENTICATION_FAILED``
otherwise); without one the session is anonymous if the server allows it.
A request the session lacks a permission for gets ``PERMISSION_DENIED``
naming the permission and the path.

Time series (TIME_SERIES topics): a subscription delivers, after SUBSCRIBED
(whose value is nil), the events the topic's TIME_SERIES_SUBSCRIPTION_RANGE
selects (default the newest one), then every new event and edit as EVENT
messages in sequence order. A range query's anchor is one of ``start``,
``sequence``, ``time``, ``last``, ``last_millis``; its span one of ``end``,
``to_sequence``, ``to_time``, ``next``, ``next_millis``, ``until_last``,
``until_last_millis``, ``previous``, ``previous_millis``, ``to_start``;
its view ``values``, ``latest_edits`` or ``all_edits`` (semantics in
:mod:`topics.timeseries`). An event in a result is ``[sequence, timestamp,
author, value, original sequence|nil, original timestamp|nil, original
author|nil]``.

Error codes are strings (``INVALID_PATH``, ``INVALID_SELECTOR``,
``INVALID_VALUE``, ``NO_SUCH_TOPIC``, ``UNKNOWN_OPERATION``,
``PROTOCOL_ERROR``, ``FRAME_TOO_LARGE``, ...); :mod:`canopy.errors` maps each
to an exception class. A frame larger than the server's maximum closes the
connection (WebSocket code 1009); a malformed message gets an ERROR and the
session continues.

This module only turns messages into bytes and back; the client and the
gateway drive it over their sockets.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack

PROTOCOL_VERSION = 3  # 2: WELCOME says how many messages a frame may carry; 3: sessions resume
FRAME_OVERHEAD = 5  # the largest msgpack array header
HELLO, WELCOME, REQUEST, RESPONSE, ERROR, SUBSCRIBED, VALUE, UNSUBSCRIBED, CLOSE, EVENT, NOTIFY, DELTA, COMPRESSED = (
    range(13))
OPERATIONS = frozenset(
    {
        "add", "set", "json_patch", "remove", "fetch", "subscribe", "unsubscribe",
        "append", "edit", "range_query",
        "security_get", "security_update",
        "tree_put", "tree_get", "tree_list", "tree_remove",
        "session_get", "session_set", "session_close",
        "session_roles", "session_subscribe", "session_unsubscribe", "session_listen", "session_unlisten",
        "view_create", "view_list", "view_remove",
        "trace", "cluster_status", "cluster_node",
        "missing_topic_add", "missing_topic_rm", "missing_topic_ans", "missing_topic_list",
        "fanout_list", "fanout_add", "fanout_remove", "missing_topic_fwd",
        "server_add", "server_remove", "server_list", "server_check",
        "collector_put", "collector_remove", "collector_list",
        "message_handler_add", "message_handler_rm", "message_send", "message_send_session", "message_send_filter",
        "message_respond", "message_reject",
        "lock", "unlock", "lock_cancel", "lock_list",
        "notify_select", "notify_deselect", "notify_close",
    }
)


class ProtocolError(Exception):
    """Bytes that are not a valid canopy frame or message."""

    code = "PROTOCOL_ERROR"

    def __init__(self, message: str, correlation_id: int = 0) -> None:
        super().__init__(message)
        self.correlation_id = correlation_id


class UnencodableRequestError(ValueError):
    """A request's arguments are not values the wire protocol can carry."""


#: the integers msgpack encodes (int 64 and uint 64)
_PACKABLE_INT_MIN, _PACKABLE_INT_MAX = -(2**63), 2**64 - 1


def _out_of_range_int(value: Any, depth: int = 0) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value if not _PACKABLE_INT_MIN <= value <= _PACKABLE_INT_MAX else None
    if depth < 32:  # requests nest a few levels; deeper is the nesting error, said below
        items = value.items() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
        for item in items:
            found = _out_of_range_int(item, depth + 1)
            if found is not None:
                return found
    return None


def _unencodable(args: tuple[Any, ...], error: Exception) -> str:
    """What a user must change in ``args``, which msgpack refused with ``error``."""
    if isinstance(error, OverflowError):
        found = _out_of_range_int(args)
        if found is not None:
            shown = str(found) if found.bit_length() < 200 else f"of {found.bit_length()} bits"
            return f"integer {shown} is outside the 64-bit range (-2**63 to 2**64-1)"
        return "an integer is outside the 64-bit range (-2**63 to 2**64-1)"
    if isinstance(error, UnicodeError):
        return "a string is not valid Unicode (it holds a lone surrogate)"
    if isinstance(error, TypeError):
        return f"an argument is not a wire value ({error})"
    if "recursion" in str(error):
        return "the arguments are nested too deeply"
    return str(error)


class Resume(NamedTuple):
    """What a HELLO names to resume: a session and the token its WELCOME gave."""

    session_id: str
    token: str


class Hello(NamedTuple):
    version: int
    principal: str | None
    password: str | None
    properties: dict[str, str]
    resume: Resume | None = None
    #: what the client understands beyond the base protocol: ``deltas``, ``compression`` (bools)
    options: dict[str, Any] | None = None


class Welcome(NamedTuple):
    version: int
    session_id: str
    properties: dict[str, str]
    max_frame_size: int
    hub_root: str
    max_messages: int = 1000
    #: the secret a later HELLO gives to resume this session
    resume_token: str = ""
    #: whether this WELCOME reattached an existing session
    resumed: bool = False
    #: how many messages (SUBSCRIBED, EVENT) follow at once as a resumed session's refresh
    refresh: int = 0


class Request(NamedTuple):
    cid: int
    op: str
    args: list[Any]


class Response(NamedTuple):
    cid: int
    result: Any


class Error(NamedTuple):
    cid: int
    code: str
    message: str


class Subscribed(NamedTuple):
    alias: int
    path: str
    type: str
    properties: list[list[str]]
    value: bytes | None


class Value(NamedTuple):
    """A subscribed topic's new value. ``retained`` false: a value delivered without
    becoming the topic's value (an MQTT publish without its RETAIN flag, a ``set`` with
    ``retain`` false); only then is the field on the wire."""

    alias: int
    value: bytes
    retained: bool = True


class Unsubscribed(NamedTuple):
    alias: int
    reason: str


class Close(NamedTuple):
    code: str
    message: str


class Event(NamedTuple):
    """A time series event (an edit when ``original_sequence`` is set)."""

    alias: int
    sequence: int
    timestamp: int
    author: str
    value: bytes
    original_sequence: int | None = None
    original_timestamp: int | None = None
    original_author: str | None = None


class Notify(NamedTuple):
    """Something the session asked to hear of, outside any request (``kind`` says what)."""

    kind: str
    body: Any


class TraceRecord(NamedTuple):
    """One row of a ``trace`` result: a sampled set and when it passed each
    hop (monotonic ns on the gateway's clock; ``applied_ns`` on the partition's)."""

    path: str
    value: bytes
    received_ns: int
    forwarded_ns: int
    applied_ns: int
    returned_ns: int
    written_ns: int


@dataclass(frozen=True)
class Malformed:
    """A message inside a valid frame that could not be understood."""

    cid: int
    reason: str


class Delta(NamedTuple):
    """A new value of a subscribed topic as a delta from the client's basis (:mod:`topics.deltas`)."""

    alias: int
    delta: bytes


class Compressed(NamedTuple):
    """A new value of a subscribed topic, deflated (zlib)."""

    alias: int
    data: bytes


Message = (
    Hello | Welcome | Request | Response | Error | Subscribed | Value | Unsubscribed | Close | Event | Notify | Delta
    | Compressed
)

# -- encoding ----------------------------------------------------------------

_packer = msgpack.Packer(use_bin_type=True)


def pack(item: Any) -> bytes:
    data: bytes = msgpack.packb(item, use_bin_type=True)
    return data


def frame(messages: list[bytes]) -> bytes:
    """One frame from already-encoded messages (no re-encoding)."""
    header: bytes = _packer.pack_array_header(len(messages))
    return header + b"".join(messages)


_CODES: dict[type[Any], int] = {
    Hello: HELLO, Welcome: WELCOME, Request: REQUEST, Response: RESPONSE, Error: ERROR,
    Subscribed: SUBSCRIBED, Value: VALUE, Unsubscribed: UNSUBSCRIBED, Close: CLOSE, Event: EVENT,
    Notify: NOTIFY, Delta: DELTA, Compressed: COMPRESSED,
}


def _fields(message: Message) -> list[Any]:
    code = _CODES.get(type(message))
    if code is None:
        raise TypeError(f"not a protocol message: {message!r}")
    if code == VALUE and message.retained:  # type: ignore[union-attr]
        return [VALUE, message[0], message[1]]  # the common value: its default stays off the wire
    if code == HELLO and message.options is None:  # type: ignore[union-attr]
        return [code, *message[:-1]]
    return [code, *message]


def encode(message: Message) -> bytes:
    """Encode one message."""
    return pack(_fields(message))


def encode_frame(messages: list[Message | bytes]) -> bytes:
    """One frame holding ``messages``; a ``bytes`` item is a message already
    encoded (:func:`encode`) and goes in as it is."""
    if not any(type(m) is bytes for m in messages):
        data: bytes = msgpack.packb([_fields(m) for m in messages], use_bin_type=True)  # type: ignore[arg-type]
        return data
    parts = [m if isinstance(m, bytes) else encode(m) for m in messages]
    return frame(parts)


def message_count(data: bytes) -> int | None:
    """How many messages a frame says it holds (its array header), without
    decoding it; ``None`` when it does not start with an array header."""
    if not data:
        return None
    first = data[0]
    if 0x90 <= first <= 0x9F:
        return first - 0x90
    if first == 0xDC and len(data) >= 3:
        return int.from_bytes(data[1:3], "big")
    if first == 0xDD and len(data) >= 5:
        return int.from_bytes(data[1:5], "big")
    return None


# -- decoding ----------------------------------------------------------------


def _expect(value: Any, kinds: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in _as_tuple(kinds)):
        raise ValueError(f"{what} must be {_names(kinds)}, got {type(value).__name__}")
    return value


def _as_tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _names(kinds: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ if k is not type(None) else "nil" for k in _as_tuple(kinds))


def _str_map(value: Any, what: str) -> dict[str, str]:
    _expect(value, dict, what)
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"{what} must map strings to strings")
    return dict(value)


_ARITY = {
    HELLO: 7,
    WELCOME: 10,
    REQUEST: 4,
    RESPONSE: 3,
    ERROR: 4,
    SUBSCRIBED: 6,
    VALUE: 3,
    UNSUBSCRIBED: 3,
    CLOSE: 3,
    EVENT: 9,
    NOTIFY: 3,
    DELTA: 3,
    COMPRESSED: 3,
}


def _decode_one(item: Any) -> Message:
    if not isinstance(item, list) or not item:
        raise ValueError("a message must be a non-empty array")
    code = item[0]
    arity = _ARITY.get(code) if isinstance(code, int) and not isinstance(code, bool) else None
    if arity is None:
        raise ValueError(f"unknown message type {code!r}")
    if code in (HELLO, WELCOME) and len(item) > 1 and type(item[1]) is int and item[1] != PROTOCOL_VERSION:
        # another version's handshake: only its version is read, so that the answer can say so
        return Hello(item[1], None, None, {}) if code == HELLO else Welcome(item[1], "", {}, 0, "")
    if len(item) != arity and not (
        (code == HELLO and arity - 2 <= len(item) < arity)  # a HELLO may leave out options, and resume
        or (code == VALUE and len(item) == arity + 1)  # a VALUE not retained says so
    ):
        raise ValueError(f"message type {code} has {arity - 1} fields, got {len(item) - 1}")
    if code == REQUEST:
        cid = _expect(item[1], int, "correlation id")
        if cid <= 0:
            raise ValueError("correlation id must be positive")
        args = _expect(item[3], list, "args")
        for arg in args:  # most requests (set, append) hold no array or map: no walk
            if type(arg) is list or type(arg) is dict:
                if _nests_deeper_than(args, MAX_ARGS_DEPTH):
                    raise ValueError(f"args nest arrays and maps deeper than {MAX_ARGS_DEPTH} levels")
                break
        return Request(cid, _expect(item[2], str, "operation"), args)
    if code == VALUE:
        if len(item) == 4:
            return Value(_expect(item[1], int, "alias"), _expect(item[2], bytes, "value"),
                         _expect(item[3], bool, "retained"))
        return Value(_expect(item[1], int, "alias"), _expect(item[2], bytes, "value"))
    if code == RESPONSE:
        return Response(_expect(item[1], int, "correlation id"), item[2])
    if code == SUBSCRIBED:
        return Subscribed(
            _expect(item[1], int, "alias"),
            _expect(item[2], str, "path"),
            _expect(item[3], str, "type"),
            _expect(item[4], list, "properties"),
            _expect(item[5], (bytes, type(None)), "value"),
        )
    if code == UNSUBSCRIBED:
        return Unsubscribed(_expect(item[1], int, "alias"), _expect(item[2], str, "reason"))
    if code == ERROR:
        return Error(
            _expect(item[1], int, "correlation id"),
            _expect(item[2], str, "code"),
            _expect(item[3], str, "message"),
        )
    if code == HELLO:
        return Hello(
            _expect(item[1], int, "version"),
            _expect(item[2], (str, type(None)), "principal"),
            _expect(item[3], (str, type(None)), "password"),
            _str_map(item[4], "properties"),
            _resume(item[5] if len(item) > 5 else None),
            _options(item[6] if len(item) > 6 else None),
        )
    if code == WELCOME:
        refresh = _expect(item[9], int, "refresh")
        if refresh < 0:
            raise ValueError("refresh may not be negative")
        return Welcome(
            _expect(item[1], int, "version"),
            _expect(item[2], str, "session id"),
            _str_map(item[3], "properties"),
            _expect(item[4], int, "max frame size"),
            _expect(item[5], str, "root"),
            _expect(item[6], int, "max messages per frame"),
            _expect(item[7], str, "resume token"),
            _expect(item[8], bool, "resumed"),
            refresh,
        )
    if code == EVENT:
        return Event(
            _expect(item[1], int, "alias"),
            _expect(item[2], int, "sequence"),
            _expect(item[3], int, "timestamp"),
            _expect(item[4], str, "author"),
            _expect(item[5], bytes, "value"),
            _expect(item[6], (int, type(None)), "original sequence"),
            _expect(item[7], (int, type(None)), "original timestamp"),
            _expect(item[8], (str, type(None)), "original author"),
        )
    if code == NOTIFY:
        return Notify(_expect(item[1], str, "kind"), item[2])
    if code == DELTA:
        return Delta(_expect(item[1], int, "alias"), _expect(item[2], bytes, "delta"))
    if code == COMPRESSED:
        return Compressed(_expect(item[1], int, "alias"), _expect(item[2], bytes, "value"))
    return Close(_expect(item[1], str, "code"), _expect(item[2], str, "message"))


#: at most this many options in a HELLO
MAX_OPTIONS = 16


def _options(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > MAX_OPTIONS or not all(type(k) is str for k in value):
        raise ValueError(f"options must be a map of at most {MAX_OPTIONS} names")
    return value


def _resume(value: Any) -> Resume | None:
    if value is None:
        return None
    _expect(value, list, "resume")
    if len(value) != 2 or not all(isinstance(v, str) for v in value):
        raise ValueError("resume must be [session id, resume token] (two strings) or nil")
    return Resume(value[0], value[1])


#: how deep msgpack's C unpacker nests arrays and maps (its fixed stack); one more
#: level is its StackError, which says nothing
MSGPACK_MAX_DEPTH = 1024
#: how deep a request's args may nest arrays and maps (real ones nest three or four):
#: deeper ones, down to :data:`MSGPACK_MAX_DEPTH`, would reach code that recurses
#: once per level (pickling for Ray, ``repr``) near Python's limit
MAX_ARGS_DEPTH = 32


def _nests_deeper_than(args: list[Any], levels: int) -> bool:
    """Whether ``args`` holds arrays and maps more than ``levels`` deep (``args``
    itself is level 0); walks with its own stack."""
    stack: list[tuple[Any, int]] = [(args, 0)]
    while stack:
        container, depth = stack.pop()
        for value in container.values() if type(container) is dict else container:
            if type(value) is list or type(value) is dict:
                if depth >= levels:
                    return True
                stack.append((value, depth + 1))
    return False


def unpack_frame(data: bytes) -> list[Any]:
    """The raw message arrays of a frame, unchecked; see :func:`decode_item`.

    A frame that is not a msgpack array, or nests arrays and maps deeper than
    :data:`MSGPACK_MAX_DEPTH`, raises :class:`ProtocolError`.
    """
    try:
        items = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except msgpack.StackError:
        raise ProtocolError(
            f"frame nests arrays and maps deeper than {MSGPACK_MAX_DEPTH} levels (msgpack's limit)"
        ) from None
    except (msgpack.ExtraData, msgpack.FormatError, ValueError) as e:
        raise ProtocolError(f"frame is not msgpack: {e}") from None
    except Exception as e:  # msgpack raises a few other types on hostile input
        raise ProtocolError(f"frame is not msgpack: {type(e).__name__}: {e}") from None
    if not isinstance(items, list):
        raise ProtocolError(f"a frame must be an array of messages, got {type(items).__name__}")
    return items


def decode_item(item: Any) -> Message | Malformed:
    """Check and convert one raw message array; a bad one becomes :class:`Malformed`
    (with its correlation id when it has one)."""
    try:
        return _decode_one(item)
    except ValueError as e:
        cid = 0
        if (
            isinstance(item, list)
            and len(item) > 1
            and item[0] == REQUEST
            and isinstance(item[1], int)
            and not isinstance(item[1], bool)
        ):
            cid = item[1]
        return Malformed(cid, str(e))


def decode(data: bytes) -> list[Message | Malformed]:
    """Decode a frame: a bad message inside a good frame becomes a
    :class:`Malformed` entry so the messages around it still count."""
    return [decode_item(item) for item in unpack_frame(data)]


# -- the client side -----------------------------------------------------------


@dataclass
class ClientProtocol:
    """Client state: correlation ids and the frame being assembled.

    Call :meth:`hello` once, then :meth:`request` for each operation; the
    messages accumulate until :meth:`data_to_send` returns them as one frame.
    Feed every received frame to :meth:`receive`.
    """

    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _outgoing: list[bytes] = field(default_factory=list)
    welcomed: Welcome | None = None

    def hello(
        self,
        principal: str | None = None,
        password: str | None = None,
        properties: dict[str, str] | None = None,
        resume: Resume | None = None,
        options: dict[str, Any] | None = None,
    ) -> bytes:
        """The HELLO frame; with ``resume``, it asks to resume that session; ``options`` say
        what the client understands (``{"deltas": True}``: send DELTA messages)."""
        hello = Hello(PROTOCOL_VERSION, principal, password, dict(properties or {}), resume, options)
        return frame([encode(hello)])

    def discard(self) -> None:
        """Drop the requests queued and not yet sent (their connection is gone);
        correlation ids go on from where they were, so answers meant for an
        old connection never match a new request."""
        self._outgoing = []
        self.welcomed = None

    def request(self, op: str, *args: Any, max_size: int | None = None) -> int:
        """Queue a request and return its correlation id.

        Arguments msgpack cannot carry (an integer outside its 64-bit range,
        nesting past its limit, an object it has no type for) raise
        :class:`UnencodableRequestError`; with ``max_size``, a request that
        could not fit in a frame of that size raises :class:`ValueError`.
        Either way nothing is queued.
        """
        cid = next(self._ids)
        try:
            message = pack([REQUEST, cid, op, list(args)])
        except (OverflowError, TypeError, ValueError) as e:
            raise UnencodableRequestError(f"{op} request cannot be encoded: {_unencodable(args, e)}") from None
        if max_size is not None and len(message) + FRAME_OVERHEAD > max_size:
            raise ValueError(f"{op} request of {len(message)} bytes exceeds the frame limit of {max_size}")
        self._outgoing.append(message)
        return cid

    def data_to_send(self, max_size: int | None = None, max_messages: int | None = None) -> list[bytes]:
        """The queued requests as frames, none larger than ``max_size`` bytes
        nor holding more than ``max_messages`` messages (the server's limits)."""
        frames: list[bytes] = []
        batch: list[bytes] = []
        size = FRAME_OVERHEAD
        for message in self._outgoing:
            if batch and (
                (max_size is not None and size + len(message) > max_size)
                or (max_messages is not None and len(batch) >= max_messages)
            ):
                frames.append(frame(batch))
                batch, size = [], FRAME_OVERHEAD
            batch.append(message)
            size += len(message)
        if batch:
            frames.append(frame(batch))
        self._outgoing = []
        return frames

    def receive(self, data: bytes) -> list[Message | Malformed]:
        messages = decode(data)
        for m in messages:
            if isinstance(m, Welcome):
                if m.version != PROTOCOL_VERSION:
                    raise ProtocolError(f"server speaks protocol version {m.version}, not {PROTOCOL_VERSION}")
                self.welcomed = m
        return messages
