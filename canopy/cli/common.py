"""What the verbs share: connecting (``--url`` and the other connection options,
:func:`urls`), reading VALUE, printing (``--json`` records, subscriptions' events)."""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

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


def _reconnect_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reconnect-timeout", type=_seconds, default=60.0, metavar="SECONDS",
        help="how long to try to reconnect after the connection drops (default: 60; 0: never)",
    )


def connection_options() -> argparse.ArgumentParser:
    """The parent parser of the client verbs: ``--url``, ``--principal``, ``--password``,
    ``--timeout``, ``--ca-file`` (defaults from the environment, read now)."""
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
    return client


def connection_options_except(
    client: argparse.ArgumentParser, dests: tuple[str, ...], **defaults: Any
) -> argparse.ArgumentParser:
    """``client``'s options but those of ``dests``, for verbs whose own options of those names
    say something else; ``defaults`` gives the connection's values for them instead."""
    parent = argparse.ArgumentParser(add_help=False)
    for action in client._actions:
        if action.dest not in (*dests, "help"):
            parent._add_action(action)
    parent.set_defaults(**defaults)
    return parent
