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
    canopy lock list [--json]
    canopy lock hold NAME [--seconds S] [--scope session|connection] [--wait S]
    canopy message send PATH VALUE [--type T] [--response-type T] [--session ID | --filter F] [--timeout S] [--json]
    canopy message handle PATH [--count N] [--reply-with VALUE [--type T] | --echo] [--json]
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

The package holds one module per verb group, each with its sub-parser builder
(``add_commands``) beside its handler: :mod:`~canopy.cli.topics`, ``timeseries``
(``ts``), ``hub``, ``security``, ``trees`` (``tree``), ``views`` (``view``),
``sessions`` (``session``), ``cluster``, ``missing_topics``, ``messaging`` (``message``), ``fanout``,
``remote_servers`` (``server``), ``metrics`` and ``locks`` (``lock``); :mod:`~canopy.cli.common` holds
what they share (the connection options, :func:`urls`, reading VALUE, ``--json``
output). This module puts them together: :func:`build_parser` and :func:`main`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from canopy import __version__
from canopy.cli import (
    cluster,
    fanout,
    hub,
    locks,
    metrics,
    messaging,
    missing_topics,
    remote_servers,
    security,
    sessions,
    timeseries,
    topics,
    trees,
    views,
)
from canopy.cli.cluster import MAX_DELAY_MS, MAX_PAUSE, format_status
from canopy.cli.common import Extension, connection_options, urls
from canopy.cli.common import _json_line as _json_line  # what the tests read VALUE and print records with
from canopy.cli.common import _parse_value as _parse_value
from canopy.cli.common import _render as _render
from canopy.errors import CanopyError

__all__ = ["MAX_DELAY_MS", "MAX_PAUSE", "Extension", "build_parser", "format_status", "main", "urls"]
#: the client verb groups, in the order ``canopy --help`` lists them (after ``demo``)
_GROUPS = (topics, timeseries, security, trees, views, sessions, cluster, missing_topics, messaging, fanout,
           remote_servers, metrics, locks, hub)


def _demo(args: argparse.Namespace) -> int:
    from canopy.demo import run

    return run()


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


def build_parser(*extensions: Extension) -> argparse.ArgumentParser:
    """The ``canopy`` parser: the verbs of ``extensions`` (listed first), then the client verbs."""
    parser: argparse.ArgumentParser = _Parser(prog="canopy", description="canopy real-time data broker")
    parser.add_argument("--version", action="version", version=f"canopy {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for extend in extensions:
        extend(commands)

    client = connection_options()
    commands.add_parser("demo", help="walk through the pure topic model").set_defaults(run=_demo)
    for group in _GROUPS:
        group.add_commands(commands, client)
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

