"""``canopy message``: send requests to other sessions, and handle them.

::

    canopy message send PATH VALUE [--type T] [--response-type T] [--session ID | --filter FILTER]
                        [--timeout SECONDS] [--json]
    canopy message handle PATH [--count N] [--reply-with VALUE [--type T] | --echo] [--json]

``send`` prints the response; with ``--filter``, one line per session it went to
(its response or its error), then how many on stderr, and exits with status 1
when any failed. VALUE is read by ``--type`` as ``topic set`` reads it; without
it, JSON text, or plain text (a STRING) when VALUE is not JSON.
``handle`` registers a request handler for PATH's branch and prints each request
as it answers it, echoing the request (the default) or replying with VALUE,
until ``--count`` requests were answered or it is interrupted.
"""

from __future__ import annotations

import argparse
import queue
import sys
from typing import Any

from canopy.cli.common import (
    _json_line,
    _parse_json,
    _parse_value,
    _reconnect_option,
    _render,
    _seconds,
    _session,
    _text,
    connection_options_except,
)


def _value(text: str, type_name: str | None) -> Any:
    if type_name is not None:
        return _parse_value(text, type_name)
    try:
        return _parse_json(text)
    except ValueError:  # not JSON: plain text
        return text


def _send(args: argparse.Namespace) -> int:
    value = _value(args.value, args.type)
    with _session(args) as session:
        messaging = session.messaging
        if args.filter is None:
            if args.session is None:
                response = messaging.send_request(args.path, value, args.type, args.response_type, args.request_timeout)
            else:
                response = messaging.send_request_to_session(
                    args.session, args.path, value, args.type, args.response_type, args.request_timeout)
            print(_json_line({"path": args.path, "response": _render(response)}) if args.json else _text(response))
            return 0
        answers: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
        count = messaging.send_request_to_filter(
            args.filter, args.path, value, lambda sid, response, error: answers.put((sid, response, error)),
            args.type, args.response_type, args.request_timeout)
        failed = 0
        for _ in range(count):
            sid, response, error = answers.get()
            failed += error is not None
            if args.json:
                record: dict[str, Any] = {"session": sid}
                if error is None:
                    record["response"] = _render(response)
                else:
                    record["error"] = {"code": error.code, "message": error.message}
                print(_json_line(record), flush=True)
            else:
                print(f"{sid}\t{_text(response) if error is None else f'error {error}'}", flush=True)
        print(f"canopy: sent to {count} session{'s' if count != 1 else ''}"
              + (f", {failed} failed" if failed else ""), file=sys.stderr)
        return 1 if failed else 0


def _handle(args: argparse.Namespace) -> int:
    reply = None if args.reply_with is None else _value(args.reply_with, args.type)
    answered: queue.Queue[int] = queue.Queue()
    with _session(args) as session:
        def handle(request: Any, context: Any) -> Any:
            response = request if reply is None else reply
            if args.json:
                print(_json_line({"path": context.path, "session": context.session_id,
                                  "properties": context.properties, "request": _render(request),
                                  "response": _render(response)}), flush=True)
            else:
                print(f"{context.path}\t{context.session_id}\t{_text(request)}", flush=True)
            answered.put(1)
            return response

        registration = session.messaging.add_request_handler(
            args.path, handle, response_type=args.type if reply is not None else None)
        print(f"canopy: handling requests on {args.path}", file=sys.stderr, flush=True)
        count = 0
        while args.count is None or count < args.count:
            answered.get()
            count += 1
        session.messaging.drain()  # the last response reaches the server before the session ends
        session.messaging.remove_request_handler(registration)
    return 0


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy message``."""
    message = commands.add_parser(
        "message", help="request/response messaging between sessions",
        description="Send a request to whichever session handles a path, to one session or to every session "
        "a filter matches, and print the response(s); or handle requests on a path.",
    ).add_subparsers(dest="action", required=True)
    own_timeout = connection_options_except(client, ("timeout",), timeout=30.0)
    send = message.add_parser(
        "send", parents=[own_timeout], help="send a request and print the response(s)",
        description="Send VALUE on PATH: to the session handling PATH (SEND_TO_MESSAGE_HANDLER), or with "
        "--session/--filter to those sessions' request streams (SEND_TO_SESSION); print each response.",
    )
    send.add_argument("path", metavar="PATH", help="the message path")
    send.add_argument("value", metavar="VALUE", help="the request: read by --type, else JSON text or plain text")
    send.add_argument("--type", metavar="T", help="the request's type: STRING, INT64, DOUBLE, JSON or BINARY "
                      "(base64); default: from VALUE")
    send.add_argument("--response-type", metavar="T", help="the type the response must have")
    target = send.add_mutually_exclusive_group()
    target.add_argument("--session", metavar="ID", help="send to this session (by id)")
    target.add_argument("--filter", metavar="FILTER", help="send to every session this session filter matches")
    send.add_argument("--timeout", dest="request_timeout", type=_seconds, default=None, metavar="SECONDS",
                      help="how long to wait for the response(s) (default: the server's message_timeout_ms)")
    send.add_argument("--json", action="store_true", help="one JSON object per response")
    send.set_defaults(run=_send)

    handle = message.add_parser(
        "handle", parents=[client], help="handle requests on PATH, printing each, until --count",
        description="Register a request handler for PATH's branch (REGISTER_HANDLER) and answer each request "
        "with its own value (--echo, the default) or with --reply-with VALUE, printing each one.",
    )
    handle.add_argument("path", metavar="PATH", help="the message path whose branch to handle")
    handle.add_argument("--count", type=int, default=None, metavar="N", help="stop after answering N requests")
    reply = handle.add_mutually_exclusive_group()
    reply.add_argument("--reply-with", metavar="VALUE", help="answer every request with VALUE")
    reply.add_argument("--echo", action="store_true", help="answer each request with its own value (the default)")
    handle.add_argument("--type", metavar="T", help="the type of --reply-with's VALUE")
    handle.add_argument("--json", action="store_true", help="one JSON object per request")
    _reconnect_option(handle)
    handle.set_defaults(run=_handle)
