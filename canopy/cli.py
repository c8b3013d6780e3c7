"""The ``canopy`` command line: the client verbs.

::

    canopy topic add PATH --type T [--property K=V]...
    canopy topic set PATH VALUE [--type T]
    canopy topic remove SELECTOR
    canopy topic fetch SELECTOR [--json] [--properties] [--type T]... [--limit N]
    canopy topic subscribe SELECTOR [--count N] [--json] [--reconnect-timeout SECONDS]
    canopy ts append PATH VALUE [--timestamp MS] [--json]
    canopy ts edit PATH SEQUENCE VALUE [--json]
    canopy ts query PATH [--from-sequence N | --from-time MS | --from-last N | --from-last-ms MS]
                         [--to-sequence N | --to-time MS | --next N | --next-ms MS | --previous N |
                          --previous-ms MS | --until-last N | --until-last-ms MS | --to-start]
                         [--edits latest|all] [--limit N] [--json]
    canopy hub publish NAME VALUE
    canopy hub subscribe PATTERN [--count N] [--json] [--reconnect-timeout SECONDS]
    canopy security show [--json]
    canopy security role ROLE [--global P,..] [--default P,..] [--path PATH=P,..]... [--remove-path PATH]...
                              [--includes R,..]
    canopy security principal add NAME --new-password PW [--roles R,..]
    canopy security principal (remove NAME | password NAME --new-password PW | roles NAME --roles R,..)
    canopy security anonymous (--allow | --deny) [--roles R,..]
    canopy tree put BRANCH [--map FILTER TOPIC_BRANCH]...
    canopy tree (get BRANCH | list | remove BRANCH) [--json]
    canopy view create NAME (SPECIFICATION | --file FILE)
    canopy view list [--json]
    canopy view remove NAME
    canopy session get (--id ID | --filter FILTER) [--json]
    canopy session set (--id ID | --filter FILTER) [KEY=VALUE]... [--unset KEY]...
    canopy session close (ID | --id ID | --filter FILTER)
    canopy metrics collector add NAME --topics SELECTOR [--group-by-type]
    canopy metrics collector add NAME --sessions FILTER [--group-by PROPERTY]... [--remove-metrics-with-no-matches]
    canopy metrics collector (list [--json] | remove NAME)
    canopy demo

Client commands authenticate with ``--principal``/``--password`` (or
``$CANOPY_PRINCIPAL``/``$CANOPY_PASSWORD``); without them the session is
anonymous.

Client commands talk to ``--url`` (default ``$CANOPY_URL`` or
ws://127.0.0.1:8080; several URLs separated by commas, such as a cluster's
gateways, are tried in turn and reconnected to); a ``wss://`` server is verified against ``--ca-file``
(default ``$CANOPY_CA_FILE``, else the system's trust store). ``topic set``
parses VALUE by the topic's type (taken
from ``--type``, else from the existing topic): text for STRING, a number
for INT64 and DOUBLE, JSON text for JSON, base64 for BINARY; with ``--type``
a missing topic is created; ``ts append`` and ``ts edit`` parse VALUE by the
series' event value type the same way. ``hub publish`` takes JSON text, or plain text
when VALUE is not JSON. VALUE is read strictly: JSON text may not hold ``NaN``
or ``Infinity``, and a number beyond a 64-bit float (``1e400``) is refused
rather than read as infinity; a DOUBLE may be ``nan``, ``inf`` or ``-inf``
only when spelled out. VALUE, and an option's argument, may start with ``-``
(``canopy topic set --type DOUBLE p -inf``; see :class:`_Parser`); only one that
starts with ``--`` has to follow ``--``.
``--json`` prints one JSON object per line
(``{"path", "type", "value"}``, plus ``"properties"`` when asked and
``"event"`` for subscriptions; BINARY values in base64), always strict JSON
that ``jq`` reads: a NaN or infinite DOUBLE prints as the string ``"NaN"``,
``"Infinity"`` or ``"-Infinity"`` (as proto3's JSON mapping does; ``null``
stays a topic without a value). Errors, bad input included, print one line
(``canopy: CODE: message``) to stderr and exit with status 1.

``subscribe`` outlives a dropped connection: it reconnects (for up to
``--reconnect-timeout`` seconds, default 60; 0 never), prints
``canopy: the connection to URL was lost (...); reconnecting`` and then
``canopy: reconnected (resumed session ID)`` or ``(new session ID)`` to stderr,
and goes on printing events, the current values first; when it cannot
reconnect in time it fails with ``RECONNECT_TIMEOUT``.

The server verbs (``canopy serve``) are not defined here: the client needs
no server code. The ``canopy`` console script is :func:`cluster.cli.main`,
which passes them to :func:`main` as an extension of this parser.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from canopy import __version__
from canopy.errors import CanopyError


#: how ``--json`` spells the floats JSON has no number for (as proto3's JSON mapping does)
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def _render(value: Any) -> Any:
    """A value as it goes into a ``--json`` record."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return _NON_FINITE.get(value, "NaN")
    return value


def _json_line(record: dict[str, Any]) -> str:
    # allow_nan=False: a non-finite float that _render missed fails here rather than
    # printing NaN, which is not JSON
    return json.dumps(record, ensure_ascii=False, allow_nan=False)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        value = base64.b64encode(value).decode("ascii")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)  # plain text: NaN may show as NaN


def _invalid(text: str, kind: str, why: object) -> CanopyError:
    shown = text if len(text) <= 60 else text[:57] + "..."
    return CanopyError(f"VALUE {shown!r} is not a valid {kind} value: {why}", "INVALID_VALUE")


def _finite(text: str) -> float:
    """A float that the text's digits name: ``1e400`` is out of range, not infinity."""
    number = float(text)
    if math.isinf(number):
        raise OverflowError(f"number {text} is out of range for a 64-bit float")
    return number


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_json(text: str) -> Any:
    """Strict JSON: no NaN or Infinity. Raises :class:`ValueError` when ``text`` is
    not JSON, and INVALID_VALUE when it is JSON no topic can hold (a number out of
    a float's range, nesting deeper than Python parses)."""
    try:
        return json.loads(text, parse_float=_finite, parse_constant=_refuse_constant)
    except OverflowError as e:
        raise _invalid(text, "JSON", e) from None
    except RecursionError:
        from topics.types import MAX_JSON_DEPTH

        raise _invalid(text, "JSON", f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects") from None


def _spells_non_finite(text: str) -> bool:
    """``nan``, ``inf``, ``-Infinity`` and the like, in any case."""
    return text.strip().lstrip("+-").lower() in ("nan", "inf", "infinity")


def _parse_value(text: str, type_name: str) -> Any:
    kind = type_name.upper()
    try:
        if kind == "STRING":
            return text
        if kind == "INT64":
            if _spells_non_finite(text):
                raise ValueError(f"{text.strip()} is not a finite number (INT64 has no NaN or infinity)")
            return int(text)
        if kind == "DOUBLE":
            if _spells_non_finite(text):
                return float(text)  # spelled out: a DOUBLE topic holds them
            return _finite(text.strip())
        if kind == "JSON":
            if _spells_non_finite(text):
                raise ValueError(f"{text.strip()} is not JSON (JSON has no NaN or infinity)")
            return _parse_json(text)
        if kind == "BINARY":
            return base64.b64decode(text, validate=True)
    except (ValueError, OverflowError) as e:
        raise _invalid(text, kind, e) from None
    raise CanopyError(f"cannot set a value of a {kind} topic from the command line", "INVALID_TYPE")


def _properties(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CanopyError(f"--property expects K=V, got {pair!r}", "INVALID_SPECIFICATION")
        out[key] = value
    return out


def urls(text: str) -> list[str]:
    """``--url``: one URL, or several separated by commas (a cluster's gateways: the
    client connects to the first that answers and reconnects to the others)."""
    found = [u.strip() for u in text.split(",") if u.strip()]
    if not found:
        raise CanopyError("--url: no URL given", "INVALID_REQUEST")
    return found


def _session(args: argparse.Namespace) -> Any:
    from canopy.sync import connect_sync

    options = {"reconnect_timeout": args.reconnect_timeout} if "reconnect_timeout" in args else {}
    return connect_sync(urls(args.url), args.principal, args.password, timeout=args.timeout, ca_file=args.ca_file, **options)


def _print_event(event: Any, as_json: bool, name: str | None = None) -> None:
    label = name if name is not None else event.path
    if as_json:
        record = {"event": event.kind, "path": event.path, "type": event.type.value, "value": _render(event.value)}
        if name is not None:
            record["name"] = name
        if event.reason:
            record["reason"] = event.reason
        if not event.retained:
            record["retained"] = False
        print(_json_line(record), flush=True)
    elif event.kind == "unsubscribed":
        print(f"unsubscribed {label} ({event.reason})", flush=True)
    else:
        passing = "" if event.retained else " (not retained)"
        print(f"{event.kind} {label} {event.type.value} {_text(event.value)}{passing}", flush=True)


def _follow(subscription: Any, count: int | None, as_json: bool, hub: bool) -> None:
    """Print a subscription's events (its connection's go to stderr) until ``count`` values."""
    seen = 0
    if count == 0:
        return
    for event in subscription:
        if event.kind == "disconnected":
            print(f"canopy: {event.reason}; reconnecting", file=sys.stderr, flush=True)
            continue
        if event.kind == "reconnected":
            how = "resumed session" if event.reason == "RESUMED" else "new session"
            print(f"canopy: reconnected ({how} {event.value})", file=sys.stderr, flush=True)
            continue
        _print_event(event, as_json, event.name if hub else None)
        if event.kind in ("subscribed", "value"):
            seen += 1
            if count is not None and seen >= count:
                return


def _topic(args: argparse.Namespace) -> int:
    with _session(args) as session:
        t = session.topics
        if args.action == "add":
            result = t.add(args.path, args.type, _properties(args.property))
            print(result.value)
        elif args.action == "set":
            type_name = args.type
            if type_name is None:
                found = t.fetch(f">{args.path}", with_values=False)
                if not found:
                    raise CanopyError(
                        f"no topic at {args.path!r}; give --type to create it", "NO_SUCH_TOPIC"
                    )
                type_name = found[0].type.value
            t.set(args.path, _parse_value(args.value, type_name), type_name, add_if_missing=args.type is not None,
                  retain=not args.no_retain)
        elif args.action == "remove":
            print(t.remove(args.selector))
        elif args.action == "fetch":
            rows = t.fetch(
                args.selector, not args.no_values, args.properties, args.types or None, args.limit
            )
            for row in rows:
                if args.json:
                    record: dict[str, Any] = {"path": row.path, "type": row.type.value, "value": _render(row.value)}
                    if args.properties:
                        record["properties"] = row.properties
                    print(_json_line(record))
                else:
                    extra = f" {row.properties}" if args.properties else ""
                    print(f"{row.path} {row.type.value} {_text(row.value)}{extra}")
        else:  # closing the session ends the subscription: no unsubscribe to wait for
            _follow(t.subscribe(args.selector), args.count, args.json, hub=False)
    return 0


def _event_type(session: Any, path: str) -> str:
    found = session.topics.fetch(f">{path}", with_values=False, with_properties=True)
    if not found:
        raise CanopyError(f"no topic at {path!r}", "NO_SUCH_TOPIC")
    event_type = (found[0].properties or {}).get("TIME_SERIES_EVENT_VALUE_TYPE")
    if event_type is None:
        raise CanopyError(f"topic {path!r} is a {found[0].type.value} topic, not a TIME_SERIES topic", "INVALID_VALUE")
    return str(event_type)


def _print_meta(meta: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"sequence": meta.sequence, "timestamp": meta.timestamp, "author": meta.author}))
    else:
        print(f"{meta.sequence} {meta.timestamp} {meta.author}")


_QUERY_OPTIONS = (
    "from_sequence", "from_time", "from_last", "from_last_ms", "to_sequence", "to_time", "next", "next_ms",
    "previous", "previous_ms", "until_last", "until_last_ms",
)


def _ts(args: argparse.Namespace) -> int:
    with _session(args) as session:
        ts = session.time_series
        if args.action == "append":
            value = _parse_value(args.value, _event_type(session, args.path))
            _print_meta(ts.append(args.path, value, args.timestamp), args.json)
        elif args.action == "edit":
            value = _parse_value(args.value, _event_type(session, args.path))
            _print_meta(ts.edit(args.path, args.sequence, value), args.json)
        else:
            query = {k: getattr(args, k) for k in _QUERY_OPTIONS if getattr(args, k) is not None}
            result = ts.range_query(args.path, to_start=args.to_start, edits=args.edits, limit=args.limit, **query)
            for e in result.events:
                if args.json:
                    record: dict[str, Any] = {
                        "sequence": e.sequence, "timestamp": e.timestamp, "author": e.author, "value": _render(e.value),
                    }
                    if e.original is not None:
                        record["original_sequence"] = e.original.sequence
                    print(_json_line(record))
                else:
                    edit = f" (edit of {e.original.sequence})" if e.original is not None else ""
                    print(f"{e.sequence} {e.timestamp} {e.author or '-'} {_text(e.value)}{edit}")
            if not result.complete:
                print(f"canopy: {len(result.events)} of {result.selected_count} events shown (--limit)", file=sys.stderr)
    return 0


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _security(args: argparse.Namespace) -> int:
    with _session(args) as session:
        sec = session.security
        if args.action == "show":
            store = sec.get()
            if args.json:
                print(json.dumps(store, indent=2))
            else:
                anonymous = store["anonymous"]
                print(f"version {store['version']}; anonymous sessions "
                      f"{'allowed' if anonymous['allowed'] else 'refused'} with roles {anonymous['roles']}")
                for name, role in store["roles"].items():
                    print(f"role {name}: global {role['global']} default {role['default']} "
                          f"paths {role['paths']} includes {role['includes']}")
                for name, principal in store["principals"].items():
                    print(f"principal {name}: roles {principal['roles']}")
            return 0
        commands: list[list[Any]] = []
        if args.action == "role":
            if args.global_ is not None:
                commands.append(["set_global_permissions", args.role, _split(args.global_)])
            if args.default is not None:
                commands.append(["set_default_path_permissions", args.role, _split(args.default)])
            for assignment in args.path:
                path, sep, perms = assignment.partition("=")
                if not sep:
                    raise CanopyError(f"--path expects PATH=P1,P2, got {assignment!r}", "INVALID_SECURITY_COMMAND")
                commands.append(["set_path_permissions", args.role, path, _split(perms)])
            for path in args.remove_path:
                commands.append(["remove_path_permissions", args.role, path])
            if args.includes is not None:
                commands.append(["set_role_includes", args.role, _split(args.includes)])
        elif args.action == "principal":
            if args.what == "add":
                commands.append(["add_principal", args.name, args.new_password, _split(args.roles)])
            elif args.what == "remove":
                commands.append(["remove_principal", args.name])
            elif args.what == "password":
                commands.append(["set_password", args.name, args.new_password])
            else:
                commands.append(["set_principal_roles", args.name, _split(args.roles)])
        else:
            commands.append(["set_anonymous", args.allow, _split(args.roles)])
        if not commands:
            raise CanopyError("nothing to change: give at least one option", "INVALID_SECURITY_COMMAND")
        print(sec.update(*commands))
    return 0


def _tree(args: argparse.Namespace) -> int:
    with _session(args) as session:
        trees = session.session_trees
        if args.action == "put":
            print(trees.put_table(args.branch, [tuple(m) for m in args.map]))
        elif args.action == "remove":
            print(trees.remove_table(args.branch))
        else:
            tables = trees.list_tables() if args.action == "list" else {}
            if args.action == "get":
                table = trees.get_table(args.branch)
                if table is None:
                    raise CanopyError(f"no branch mapping table at {args.branch!r}", "NO_SUCH_TABLE")
                tables = {args.branch: table}
            for branch, mappings in tables.items():
                if args.json:
                    print(json.dumps({"branch": branch, "mappings": [list(m) for m in mappings]}))
                else:
                    print(branch)
                    for session_filter, target in mappings:
                        print(f"  {session_filter}  ->  {target}")
    return 0


def _specification(args: argparse.Namespace) -> str:
    if (args.specification is None) == (args.file is None):
        raise CanopyError("give the specification or --file, not both", "INVALID_REQUEST")
    if args.file is None:
        return str(args.specification)
    try:
        return Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CanopyError(f"cannot read --file {args.file!r}: {e}", "INVALID_REQUEST") from None


def _view(args: argparse.Namespace) -> int:
    text = _specification(args) if args.action == "create" else ""  # before connecting: fail fast
    with _session(args) as session:
        views = session.views
        if args.action == "create":
            view = views.create(args.name, text)
            print(f"{view.name} (precedence {view.precedence}, {view.state})")
        elif args.action == "remove":
            views.remove(args.name)
        else:
            for view in views.list():
                if args.json:
                    print(json.dumps({
                        "name": view.name, "specification": view.specification, "principal": view.principal,
                        "roles": sorted(view.roles), "precedence": view.precedence, "state": view.state,
                    }))
                else:
                    print(f"{view.name}\t{view.state}\t{' '.join(view.specification.split())}")
    return 0


def _sessions(args: argparse.Namespace) -> int:
    session_id = args.id or getattr(args, "session_id", None)
    target = {"session_id": session_id} if session_id else {"filter": args.filter}
    with _session(args) as session:
        if args.action == "close":
            print(session.sessions.close(**target))
        elif args.action == "get":
            found = session.sessions.get_properties(**target)
            for sid, props in sorted(found.items()):
                print(json.dumps({"session": sid, "properties": props}) if args.json else f"{sid} {props}")
        else:
            changes: dict[str, str | None] = {key: None for key in args.unset}
            for assignment in args.assignments:
                key, sep, value = assignment.partition("=")
                if not sep:
                    raise CanopyError(f"expected KEY=VALUE, got {assignment!r}", "INVALID_PROPERTIES")
                changes[key] = value
            print(session.sessions.set_properties(changes, **target))
    return 0


def _missing_topics(args: argparse.Namespace) -> int:
    """``canopy missing-topics handle``: print each notification, make the topic with
    ``--create``, answer proceed (or cancel with ``--cancel``), until interrupted or ``--count``."""
    import queue

    from topics.selectors import parse_selector

    with _session(args) as session:
        if args.action == "list":
            for token, path, sid in session.missing_topics.list():
                print(_json_line({"registration": token, "path": path, "session": sid}) if args.json
                      else f"{path}\t{sid}\t{token}")
            return 0
        heard: queue.Queue[int] = queue.Queue()

        def handle(notification: Any) -> bool:
            created = None
            if args.create is not None:
                path = parse_selector(notification.selector).path_prefix
                if path:
                    created = session.topics.add(path, args.create).value
            if args.json:
                record = {
                    "selector": notification.selector, "session": notification.session_id,
                    "properties": notification.properties, "servers": list(notification.servers),
                    "path": notification.path, "answer": "cancel" if args.cancel else "proceed",
                }
                if created is not None:
                    record["created"] = created
                print(_json_line(record), flush=True)
            else:
                made = f"; topic {created.lower()}" if created is not None else ""
                print(f"missing {notification.selector} (session {notification.session_id} via "
                      f"{' > '.join(notification.servers)}){made}; {'cancel' if args.cancel else 'proceed'}",
                      flush=True)
            heard.put(1)
            return not args.cancel

        session.missing_topics.add_handler(args.path, handle)
        print(f"canopy: handling missing topics under {args.path}", file=sys.stderr, flush=True)
        count = 0
        while args.count is None or count < args.count:
            heard.get()
            count += 1
        session.missing_topics.drain()  # the last answer reaches the server before the session ends
    return 0


def _fanout(args: argparse.Namespace) -> int:
    if args.action == "add":
        if (args.link_principal is None) != (args.link_password is None):
            raise CanopyError("give --principal and --password together (or neither: anonymous)", "INVALID_FANOUT")
        with _session(args) as session:
            added = session.fanout.add(
                args.name, args.primary, args.link, principal=args.link_principal, password=args.link_password,
                retry_delay=args.retry_delay, reconnect_timeout=args.link_reconnect_timeout,
            )
        print(f"{added['name']}: mirroring {', '.join(added['links'])} from {', '.join(added['primaries'])}")
        return 0
    if args.action == "remove":
        with _session(args) as session:
            removed = session.fanout.remove(args.name)
        print(f"{args.name}: removed" if removed else f"{args.name}: no such connection")
        return 0
    with _session(args) as session:
        listed = session.fanout.list()
    for connection in listed:
        if args.json:
            print(_json_line(connection))
            continue
        lag = connection.get("lag_ms")
        print(f"{connection['name']}\t{connection['state']}\t{', '.join(connection.get('primaries', []))}"
              + (f"\tlag {lag:g} ms" if lag is not None else "")
              + (f"\t{connection['error']}" if connection.get("error") else ""))
        for link in connection.get("links", []):
            contested = f", {len(link['contested'])} contested" if link.get("contested") else ""
            print(f"  {link['selector']}\t{link['topics']} topics, {link['updates']} updates{contested}")
    return 0


def _server(args: argparse.Namespace) -> int:
    if args.action == "add" and (args.remote_principal is None) != (args.remote_password is None):
        raise CanopyError("give --principal and --password together (or neither: anonymous)", "INVALID_REMOTE_SERVER")
    with _session(args) as session:
        servers = session.remote_servers
        if args.action == "add":
            added = servers.add(
                args.name, args.remote_url, principal=args.remote_principal, password=args.remote_password,
                retry_delay=args.retry_delay, reconnect_timeout=args.remote_reconnect_timeout,
                missing_topic_filter=args.missing_topic_filter,
            )
            print(f"{added['name']}: {', '.join(added['urls'])}")
        elif args.action == "remove":
            print(f"{args.name}: removed" if servers.remove(args.name) else f"{args.name}: no such remote server")
        elif args.action == "check":
            checked = servers.check(args.name)
            if not checked["ok"]:
                raise CanopyError(f"{args.name}: {checked['error']}", "CONNECT_FAILED")
            print(f"{args.name}: connected in {checked['ms']:g} ms")
        else:
            for server in servers.list():
                if args.json:
                    print(_json_line(server))
                else:
                    views = ", ".join(server["views"]) or "no views"
                    error = f" ({server['error']})" if server.get("error") else ""
                    print(f"{server['name']}\t{server['state']}{error}\t{', '.join(server['urls'])}\t{views}")
    return 0


def _metrics(args: argparse.Namespace) -> int:
    """``canopy metrics collector add|list|remove``: the metric collectors of /metrics."""
    if args.action == "add":
        if args.topics is not None and (args.group_by or args.remove_empty):
            raise CanopyError("--group-by and --remove-metrics-with-no-matches go with --sessions", "INVALID_COLLECTOR")
        if args.sessions is not None and args.group_by_type:
            raise CanopyError("--group-by-type goes with --topics", "INVALID_COLLECTOR")
        with _session(args) as session:
            if args.topics is not None:
                put = session.metrics.put_topic_collector(args.name, args.topics, group_by_type=args.group_by_type)
            else:
                put = session.metrics.put_session_collector(args.name, args.sessions, group_by=args.group_by,
                                                            remove_metrics_with_no_matches=args.remove_empty)
        print(f"{put['name']}: {'replaced' if put.get('replaced') else 'added'} ({_collector_text(put)})")
        return 0
    with _session(args) as session:
        if args.action == "remove":
            removed = session.metrics.remove_collector(args.name)
            print(f"{args.name}: removed" if removed else f"{args.name}: no such collector")
            return 0
        listed = session.metrics.list_collectors()
    for collector in listed:
        print(_json_line(collector) if args.json else f"{collector['name']}\t{_collector_text(collector)}")
    return 0


def _collector_text(c: dict[str, Any]) -> str:
    if c.get("kind") == "topic":
        return f"topics {c['selector']}" + (", by type" if c.get("group_by_type") else "")
    grouped = f", by {', '.join(c['group_by'])}" if c.get("group_by") else ""
    return f"sessions {c['filter']}{grouped}" + (", empty groups removed" if c.get("remove_metrics_with_no_matches")
                                                  else "")


def _cluster(args: argparse.Namespace) -> int:
    if args.action != "status":
        return _cluster_node(args)
    with _session(args) as session:
        status = session.server.cluster_status()
    if args.json:
        print(json.dumps(status, indent=2, allow_nan=False))
        return 0 if status.get("healthy") else 2
    for line in format_status(status):
        print(line)
    return 0 if status.get("healthy") else 2


def _cluster_node(args: argparse.Namespace) -> int:
    with _session(args) as session:
        if args.action == "kill-node":
            done = session.server.kill_node(args.node, force=args.force)
            print(f"node {done['node']}: its raylet (pid {done['raylet_pid']}) and every process it started "
                  "are being killed; watch `canopy cluster status`")
        elif args.action == "pause-node":
            done = session.server.pause_node(args.node, args.seconds, force=args.force)
            print(f"node {done['node']}: its raylet (pid {done['raylet_pid']}) and every process it started "
                  f"are being paused for {args.seconds:g} s")
        elif args.action == "restart-gcs":
            done = session.server.restart_gcs(args.seconds)
            print(f"Ray's GCS: being killed and started again {args.seconds:g} s later (its tables come back "
                  "from Redis); watch canopy serve's output and `canopy cluster status`")
        else:
            done = session.server.add_node(args.node)
            print(f"node {done['node']}: {'starting again' if done.get('rejoins') else 'starting'}; "
                  "watch `canopy cluster status`")
    return 0


def format_status(status: dict[str, Any]) -> list[str]:
    """``canopy cluster status`` as text: a line per node, partition and gateway."""
    lines = [f"cluster: {'healthy' if status.get('healthy') else 'DEGRADED'}"
             f"{'' if status.get('balanced') else ' (rebalancing)'}, namespace {status.get('namespace')}"]
    lines.append("nodes:")
    for node in status.get("nodes", []):
        lines.append(f"  {node['name']:<16} {node['address']:<16} {'alive' if node['alive'] else 'DEAD'}"
                     f"{'  (controller)' if node.get('home') else ''}")
    lines.append("partitions:   primary          backup           epoch  topics  sequence  backup-seq  lag")
    for p in status.get("partitions", []):
        def show(value: Any) -> str:
            return "-" if value is None else str(value)

        lines.append(
            f"  {p['partition']:<10}  {p['primary']:<16} {show(p['backup']):<16} {p['epoch']:<6} "
            f"{show(p['topics']):<7} {show(p['sequence']):<9} {show(p['backup_sequence']):<11} {show(p['lag'])}"
            f"{'' if p['healthy'] else '  NOT HEALTHY'}"
        )
    conf = status.get("configuration") or {}
    if "log_committed" in conf:
        copies = ", ".join(f"{node} {position}" for node, position in sorted(conf.get("log_copies", {}).items()))
        lines.append(f"configuration log: term {conf['log_term']}, committed {conf['log_committed']} "
                     f"(majority {conf['log_majority']}; copies: {copies or 'none caught up'})")
    services = status.get("services") or {}
    if services:
        lines.append("services: " + ", ".join(f"{name} on {node or 'nowhere (restarting)'}"
                                              for name, node in sorted(services.items())))
    lines.append("gateways:")
    for g in status.get("gateways", []):
        state = "lost with its node" if g.get("lost") else (
            f"{g.get('sessions')} sessions" if g.get("answering") else "not answering")
        guard = g.get("guard") or {}
        if g.get("answering") and guard:  # what clients tried: see the README's security section
            state += (f", {g.get('connections')} connections; logins failed {guard.get('login_failures', 0)}, "
                      f"refused {guard.get('login_refused', 0)}; unexpected errors {guard.get('unexpected_errors', 0)}")
        if g.get("answering") and g.get("mqtt"):
            state += (f"; MQTT at {g['mqtt']}: {g.get('mqtt_connections')} connections, "
                      f"{g.get('mqtt_kept_sessions')} sessions kept for absent clients, "
                      f"{g.get('mqtt_sessions_replayed') or 0} taken up from their records "
                      f"({g.get('mqtt_replay_gaps') or 0} missing messages no partition kept), "
                      f"{g.get('mqtt_sessions_adopted') or 0} adopted from lost gateways")
        lines.append(f"  {g['gateway']:<12} {str(g.get('node')):<16} {str(g.get('url')):<24} {state}")
    return lines


def _hub(args: argparse.Namespace) -> int:
    with _session(args) as session:
        if args.action == "publish":
            try:
                value = _parse_json(args.value)
            except ValueError:  # not JSON (NaN and Infinity included): plain text
                value = args.value
            session.hub.publish(args.name, value)
        else:
            _follow(session.hub.subscribe(args.pattern), args.count, args.json, hub=True)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from canopy.demo import run

    return run()


#: Adds verbs to the ``canopy`` subcommands (``commands.add_parser(VERB, ...)``), each with a
#: ``run(args)`` default that returns the exit status.
Extension = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds >= 0 or math.isinf(seconds):
        raise argparse.ArgumentTypeError(f"expected a number of seconds, at least 0, got {text!r}")
    return seconds


#: the longest ``cluster pause-node`` the server carries out (``actors.node_control.MAX_PAUSE``,
#: which the client cannot import; tests/unit/canopy/test_cli_arguments.py keeps them equal)
MAX_PAUSE = 3600.0


def _pause_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_PAUSE:  # NaN fails every comparison
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds, more than 0 and at most {MAX_PAUSE:g}, got {text!r}")
    return seconds


class _Parser(argparse.ArgumentParser):
    """The ``canopy`` parser and, through ``add_subparsers``, each verb's.

    A word that starts with one ``-`` and is not an option of the verb is an operand or an
    option's argument, not an unknown option: VALUE may be ``-inf``, ``-1e5``, ``-0x1`` or
    text such as ``-x`` (argparse takes only plain negative numbers so), and so may a
    password. canopy has no one-letter options but ``-h``, so no option is lost; a word
    starting with ``--`` is still an option, and ``--`` still ends the options."""

    def _parse_optional(self, arg_string: str) -> Any:
        if arg_string[:1] == "-" and arg_string[1:2] not in ("", "-") and arg_string not in self._option_string_actions:
            return None  # an operand
        return super()._parse_optional(arg_string)


def _reconnect_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reconnect-timeout", type=_seconds, default=60.0, metavar="SECONDS",
        help="how long to try to reconnect after the connection drops (default: 60; 0: never)",
    )


def build_parser(*extensions: Extension) -> argparse.ArgumentParser:
    """The ``canopy`` parser: the verbs of ``extensions`` (listed first), then the client verbs."""
    parser: argparse.ArgumentParser = _Parser(prog="canopy", description="canopy real-time data broker")
    parser.add_argument("--version", action="version", version=f"canopy {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for extend in extensions:
        extend(commands)

    client = argparse.ArgumentParser(add_help=False)
    client.add_argument(
        "--url", default=os.environ.get("CANOPY_URL", "ws://127.0.0.1:8080"),
        help="the server, or several comma-separated (a cluster's gateways)",
    )
    client.add_argument("--principal", default=os.environ.get("CANOPY_PRINCIPAL"))
    client.add_argument("--password", default=os.environ.get("CANOPY_PASSWORD"))
    client.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each answer")
    client.add_argument(
        "--ca-file", default=os.environ.get("CANOPY_CA_FILE") or None, metavar="FILE",
        help="CA certificates (PEM) to verify a wss:// server with (default: $CANOPY_CA_FILE, else the "
        "system's trust store)",
    )

    # the same, for verbs whose own --principal/--password say something else: the command
    # connects as $CANOPY_PRINCIPAL/$CANOPY_PASSWORD
    client_as_env = argparse.ArgumentParser(add_help=False)
    for action in client._actions:
        if action.dest not in ("principal", "password", "help"):
            client_as_env._add_action(action)
    client_as_env.set_defaults(principal=os.environ.get("CANOPY_PRINCIPAL"), password=os.environ.get("CANOPY_PASSWORD"))

    commands.add_parser("demo", help="walk through the pure topic model").set_defaults(run=_demo)

    topic = commands.add_parser("topic", help="topic operations").add_subparsers(dest="action", required=True)
    add = topic.add_parser("add", parents=[client], help="add a topic")
    add.add_argument("path")
    add.add_argument("--type", required=True)
    add.add_argument("--property", action="append", default=[], metavar="K=V")
    set_ = topic.add_parser("set", parents=[client], help="set a topic's value")
    set_.add_argument("path")
    set_.add_argument("value")
    set_.add_argument("--type")
    set_.add_argument("--no-retain", action="store_true",
                      help="deliver the value to the subscribers without keeping it as the topic's value")
    remove = topic.add_parser("remove", parents=[client], help="remove the topics a selector selects")
    remove.add_argument("selector")
    fetch = topic.add_parser("fetch", parents=[client], help="fetch topics")
    fetch.add_argument("selector")
    fetch.add_argument("--json", action="store_true")
    fetch.add_argument("--properties", action="store_true", help="include topic properties")
    fetch.add_argument("--no-values", action="store_true")
    fetch.add_argument("--type", dest="types", action="append", help="only topics of this type (repeatable)")
    fetch.add_argument("--limit", type=int)
    sub = topic.add_parser("subscribe", parents=[client], help="print a selector's events")
    sub.add_argument("selector")
    sub.add_argument("--count", type=int, help="stop after N values")
    sub.add_argument("--json", action="store_true")
    _reconnect_option(sub)
    for p in (add, set_, remove, fetch, sub):
        p.set_defaults(run=_topic)

    ts = commands.add_parser("ts", help="time series").add_subparsers(dest="action", required=True)
    append = ts.add_parser("append", parents=[client], help="append an event")
    append.add_argument("path")
    append.add_argument("value")
    append.add_argument("--timestamp", type=int, help="milliseconds since the epoch (default: the server's clock)")
    append.add_argument("--json", action="store_true")
    edit = ts.add_parser("edit", parents=[client], help="edit an event")
    edit.add_argument("path")
    edit.add_argument("sequence", type=int, help="sequence number of the original event")
    edit.add_argument("value")
    edit.add_argument("--json", action="store_true")
    query = ts.add_parser("query", parents=[client], help="query a range of events")
    query.add_argument("path")
    anchor = query.add_mutually_exclusive_group()
    for option in ("from_sequence", "from_time", "from_last", "from_last_ms"):
        anchor.add_argument("--" + option.replace("_", "-"), dest=option, type=int)
    span = query.add_mutually_exclusive_group()
    for option in ("to_sequence", "to_time", "next", "next_ms", "previous", "previous_ms", "until_last", "until_last_ms"):
        span.add_argument("--" + option.replace("_", "-"), dest=option, type=int)
    span.add_argument("--to-start", dest="to_start", action="store_true")
    query.add_argument("--edits", choices=["latest", "all"], help="the edit view instead of the value view")
    query.add_argument("--limit", type=int)
    query.add_argument("--json", action="store_true")
    for p in (append, edit, query):
        p.set_defaults(run=_ts)

    security = commands.add_parser("security", help="the security store").add_subparsers(dest="action", required=True)
    show = security.add_parser("show", parents=[client], help="roles, principals, anonymous settings")
    show.add_argument("--json", action="store_true")
    role = security.add_parser("role", parents=[client], help="change a role")
    role.add_argument("role")
    role.add_argument("--global", dest="global_", metavar="P1,P2", help="global permissions")
    role.add_argument("--default", metavar="P1,P2", help="default path permissions")
    role.add_argument("--path", action="append", default=[], metavar="PATH=P1,P2", help="assign at a path")
    role.add_argument("--remove-path", dest="remove_path", action="append", default=[], metavar="PATH")
    role.add_argument("--includes", metavar="R1,R2", help="roles this role includes")
    principal = security.add_parser("principal", help="principals").add_subparsers(dest="what", required=True)
    p_add = principal.add_parser("add", parents=[client])
    p_add.add_argument("name")
    p_add.add_argument("--new-password", dest="new_password", required=True)
    p_add.add_argument("--roles", default="")
    p_remove = principal.add_parser("remove", parents=[client])
    p_remove.add_argument("name")
    p_password = principal.add_parser("password", parents=[client])
    p_password.add_argument("name")
    p_password.add_argument("--new-password", dest="new_password", required=True)
    p_roles = principal.add_parser("roles", parents=[client])
    p_roles.add_argument("name")
    p_roles.add_argument("--roles", required=True)
    anonymous = security.add_parser("anonymous", parents=[client], help="allow or refuse anonymous sessions")
    choice = anonymous.add_mutually_exclusive_group(required=True)
    choice.add_argument("--allow", dest="allow", action="store_true")
    choice.add_argument("--deny", dest="allow", action="store_false")
    anonymous.add_argument("--roles", default="ANONYMOUS")
    for p in (show, role, p_add, p_remove, p_password, p_roles, anonymous):
        p.set_defaults(run=_security)

    tree = commands.add_parser("tree", help="session trees (branch mapping tables)").add_subparsers(
        dest="action", required=True
    )
    t_put = tree.add_parser("put", parents=[client], help="replace a branch mapping table")
    t_put.add_argument("branch", help="the session tree branch")
    t_put.add_argument("--map", nargs=2, action="append", default=[], metavar=("FILTER", "TOPIC_BRANCH"),
                       help="one mapping, in order; no --map removes the table")
    t_get = tree.add_parser("get", parents=[client])
    t_get.add_argument("branch")
    t_get.add_argument("--json", action="store_true")
    t_list = tree.add_parser("list", parents=[client])
    t_list.add_argument("--json", action="store_true")
    t_remove = tree.add_parser("remove", parents=[client])
    t_remove.add_argument("branch")
    for p in (t_put, t_get, t_list, t_remove):
        p.set_defaults(run=_tree)

    view = commands.add_parser("view", help="topic views").add_subparsers(dest="action", required=True)
    v_create = view.add_parser("create", parents=[client], help="create or replace a topic view")
    v_create.add_argument("name")
    v_create.add_argument("specification", nargs="?", help="the view specification (or --file)")
    v_create.add_argument("--file", help="read the specification from this file")
    v_list = view.add_parser("list", parents=[client], help="every view, in creation order")
    v_list.add_argument("--json", action="store_true")
    v_remove = view.add_parser("remove", parents=[client], help="remove a view (succeeds if absent)")
    v_remove.add_argument("name")
    for p in (v_create, v_list, v_remove):
        p.set_defaults(run=_view)

    sess = commands.add_parser("session", help="other sessions: their properties, closing them").add_subparsers(
        dest="action", required=True
    )
    s_get = sess.add_parser("get", parents=[client])
    s_set = sess.add_parser("set", parents=[client])
    s_close = sess.add_parser(
        "close", parents=[client],
        help="close sessions (VIEW_SESSION and MODIFY_SESSION); prints how many closed; their clients do not reconnect",
    )
    for p in (s_get, s_set, s_close):
        which = p.add_mutually_exclusive_group(required=True)
        if p is s_close:
            which.add_argument("session_id", nargs="?", metavar="ID", help="a session id")
        which.add_argument("--id", help="a session id")
        which.add_argument("--filter", help="a session filter")
        p.set_defaults(run=_sessions)
    s_get.add_argument("--json", action="store_true")
    s_set.add_argument("assignments", nargs="*", metavar="KEY=VALUE")
    s_set.add_argument("--unset", action="append", default=[], metavar="KEY")

    cluster = commands.add_parser("cluster", help="the cluster").add_subparsers(dest="action", required=True)
    status = cluster.add_parser(
        "status", parents=[client],
        help="nodes, partitions (primary, backup, epoch, lag) and gateways; exit status 2 when not healthy",
    )
    status.add_argument("--json", action="store_true")
    kill = cluster.add_parser(
        "kill-node", parents=[client],
        help="crash a node: SIGKILL its raylet and every process it started (--local-nodes clusters; "
             "elsewhere, or the controller's node, with --force)",
    )
    pause = cluster.add_parser(
        "pause-node", parents=[client],
        help="freeze a node: SIGSTOP its raylet and every process it started, SIGCONT after --seconds",
    )
    for p in (kill, pause):
        p.add_argument("node", help="the node's name, as `canopy cluster status` shows it")
        p.add_argument("--force", action="store_true", help="also on a real cluster, or the controller's node")
    pause.add_argument("--seconds", type=_pause_seconds, required=True,
                       help=f"how long it stays frozen (more than 0, at most {MAX_PAUSE:g})")
    add = cluster.add_parser(
        "add-node", parents=[client],
        help="start a simulated node (--local-nodes clusters); a dead node's name starts it again",
    )
    add.add_argument("node", nargs="?", help="its name (default: the next free node-<k>)")
    gcs = cluster.add_parser(
        "restart-gcs", parents=[client],
        help="kill Ray's GCS (the head's control store) and start it again, as when the head restarts "
             "(--local-nodes clusters with gcs_redis_address)",
    )
    gcs.add_argument("--seconds", type=_seconds, default=2.0, help="how long it stays down (default: 2)")
    for p in (status, kill, pause, add, gcs):
        p.set_defaults(run=_cluster)

    missing = commands.add_parser(
        "missing-topics", help="missing-topic handlers (subscriptions and fetches that match nothing)"
    ).add_subparsers(dest="action", required=True)
    handle = missing.add_parser(
        "handle", parents=[client], help="register a handler for PATH and print each notification until interrupted"
    )
    handle.add_argument("path", metavar="PATH")
    handle.add_argument("--create", metavar="TYPE", help="create the missing topic (the selector's path prefix) "
                        "with this type before answering proceed")
    handle.add_argument("--cancel", action="store_true", help="answer cancel: the request is abandoned")
    handle.add_argument("--count", type=int, default=None, metavar="N", help="stop after N notifications")
    handle.add_argument("--json", action="store_true", help="one JSON object per notification")
    _reconnect_option(handle)
    m_list = missing.add_parser("list", parents=[client], help="every registered handler")
    m_list.add_argument("--json", action="store_true")
    for p in (handle, m_list):
        p.set_defaults(run=_missing_topics)

    fan = commands.add_parser("fanout", help="fan-out connections of this server to its primaries").add_subparsers(
        dest="action", required=True)
    f_list = fan.add_parser("list", parents=[client], help="each connection's state and what its links mirror")
    f_list.add_argument("--json", action="store_true")
    f_add = fan.add_parser(
        "add", parents=[client_as_env], help="make this server a secondary of a primary for some selectors",
        description="The connection's own credentials are --principal/--password; this command itself "
        "connects as $CANOPY_PRINCIPAL/$CANOPY_PASSWORD.",
    )
    f_add.add_argument("name", metavar="NAME")
    f_add.add_argument("--primary", action="append", required=True, metavar="URL",
                       help="the primary (repeat for its other gateways, tried in turn)")
    f_add.add_argument("--link", action="append", required=True, metavar="SELECTOR", help="a selector to mirror")
    f_add.add_argument("--principal", dest="link_principal", metavar="P", help="whom to connect to the primary as")
    f_add.add_argument("--password", dest="link_password", metavar="W")
    f_add.add_argument("--retry-delay", type=_seconds, default=1.0, metavar="S",
                       help="seconds between connection attempts (default 1)")
    f_add.add_argument("--reconnect-timeout", dest="link_reconnect_timeout", type=_seconds, default=60.0,
                       metavar="S", help="how long a dropped session tries to resume (default 60)")
    f_remove = fan.add_parser("remove", parents=[client], help="remove a connection added at run time")
    f_remove.add_argument("name", metavar="NAME")
    for p in (f_list, f_add, f_remove):
        p.set_defaults(run=_fanout)

    # and for `server add`, whose --url is the remote server's: this command talks to $CANOPY_URL
    client_env_only = argparse.ArgumentParser(add_help=False)
    for action in client._actions:
        if action.dest not in ("principal", "password", "url", "help"):
            client_env_only._add_action(action)
    client_env_only.set_defaults(
        principal=os.environ.get("CANOPY_PRINCIPAL"), password=os.environ.get("CANOPY_PASSWORD"),
        url=os.environ.get("CANOPY_URL", "ws://127.0.0.1:8080"),
    )
    server = commands.add_parser(
        "server", help="remote servers: the sources of remote topic views (map ... from NAME ...)"
    ).add_subparsers(dest="action", required=True)
    r_add = server.add_parser(
        "add", parents=[client_env_only], help="define a remote server",
        description="--url, --principal and --password are the remote server's; this command itself talks to "
        "$CANOPY_URL as $CANOPY_PRINCIPAL/$CANOPY_PASSWORD.",
    )
    r_add.add_argument("name", metavar="NAME")
    r_add.add_argument("--url", dest="remote_url", action="append", required=True, metavar="URL",
                       help="the remote server (repeat for its other gateways, tried in turn)")
    r_add.add_argument("--principal", dest="remote_principal", metavar="P")
    r_add.add_argument("--password", dest="remote_password", metavar="W")
    r_add.add_argument("--retry-delay", type=_seconds, default=1.0, metavar="S")
    r_add.add_argument("--reconnect-timeout", dest="remote_reconnect_timeout", type=_seconds, default=60.0,
                       metavar="S")
    r_add.add_argument("--missing-topic-filter", metavar="SELECTOR", default=None)
    r_list = server.add_parser("list", parents=[client], help="every remote server, its state and its views")
    r_list.add_argument("--json", action="store_true")
    r_check = server.add_parser("check", parents=[client], help="connect to a remote server once, and say how it went")
    r_check.add_argument("name", metavar="NAME")
    r_remove = server.add_parser("remove", parents=[client], help="remove a remote server (its views go inactive)")
    r_remove.add_argument("name", metavar="NAME")
    for p in (r_add, r_list, r_check, r_remove):
        p.set_defaults(run=_server)

    metrics = commands.add_parser("metrics", help="what /metrics exports").add_subparsers(dest="what", required=True)
    collector = metrics.add_parser(
        "collector", help="metric collectors: labelled series over topics or sessions on every gateway's /metrics"
    ).add_subparsers(dest="action", required=True)
    c_add = collector.add_parser("add", parents=[client], help="define a metric collector (or replace one)")
    c_add.add_argument("name", metavar="NAME")
    over = c_add.add_mutually_exclusive_group(required=True)
    over.add_argument("--topics", metavar="SELECTOR", help="count the topics it selects and their subscriptions")
    over.add_argument("--sessions", metavar="FILTER", help="count the sessions this session filter matches")
    c_add.add_argument("--group-by-type", action="store_true", help="with --topics: a series per topic type")
    c_add.add_argument("--group-by", action="append", default=[], metavar="PROPERTY",
                       help="with --sessions: a series per value of this session property (repeat for more)")
    c_add.add_argument("--remove-metrics-with-no-matches", dest="remove_empty", action="store_true",
                       help="with --sessions: no series for a group no session matches now")
    c_list = collector.add_parser("list", parents=[client], help="every metric collector")
    c_list.add_argument("--json", action="store_true")
    c_remove = collector.add_parser("remove", parents=[client], help="remove a metric collector (its series go)")
    c_remove.add_argument("name", metavar="NAME")
    for p in (c_add, c_list, c_remove):
        p.set_defaults(run=_metrics)

    hub = commands.add_parser("hub", help="OpenAjax-style names").add_subparsers(dest="action", required=True)
    publish = hub.add_parser("publish", parents=[client], help="publish a value to a dotted name")
    publish.add_argument("name")
    publish.add_argument("value")
    hsub = hub.add_parser("subscribe", parents=[client], help="print events for a dotted pattern")
    hsub.add_argument("pattern")
    hsub.add_argument("--count", type=int)
    hsub.add_argument("--json", action="store_true")
    _reconnect_option(hsub)
    for p in (publish, hsub):
        p.set_defaults(run=_hub)
    return parser


def main(argv: Sequence[str] | None = None, extensions: Sequence[Extension] = ()) -> int:
    """Run one ``canopy`` command (a client verb or one of ``extensions``); return its exit status.

    A :class:`CanopyError` or a timeout is reported as one line on stderr, with status 1.
    """
    args = build_parser(*extensions).parse_args(argv)
    try:
        return int(args.run(args))
    except CanopyError as e:
        print(f"canopy: {e}", file=sys.stderr)
        return 1
    except TimeoutError:
        print("canopy: TIMEOUT: the server did not answer in time", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
