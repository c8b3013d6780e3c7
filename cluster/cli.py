"""The ``canopy`` console script: the client verbs (:mod:`canopy.cli`), ``canopy serve``,
``canopy history`` (:mod:`history.cli`) and ``canopy journal`` (:mod:`replication.cli`).

::

    canopy serve [--config FILE] [--address auto|HOST:PORT] [--namespace NAME] [--port N] ...

The ``serve`` flags are derived from the settings declaration
(:mod:`cluster.config`): one per setting that is not file-only, named after
it (``--queue-limit`` for ``queue_limit``), with its help, default and
bounds. Settings come from the defaults, then ``--config FILE``, then the
environment (``$CANOPY_<SETTING>``: ``$CANOPY_PORT``...), then the flags. A bad setting or a
refused start prints one line and exits with status 1.

This module imports no Ray, so a client-only install (``pip install canopy``)
runs it as its ``canopy`` command: every client verb works, and
``canopy serve`` says the server is not installed and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import textwrap
from collections.abc import Sequence

from canopy import cli as client_cli
from cluster import config as settings

NOT_INSTALLED = "canopy serve: the server is not installed: pip install 'canopy[server]'"


def server_installed() -> bool:
    """Whether the ``server`` extra is installed (Ray is what serve cannot start without)."""
    return importlib.util.find_spec("ray") is not None


def _escaped(text: str) -> str:
    return text.replace("%", "%%")  # argparse formats help text with %


def add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve`` to the ``canopy`` subcommands (a :data:`canopy.cli.Extension`)."""
    file_only = tuple(s for s in settings.SETTINGS if s.flag is None)
    serve = commands.add_parser(
        "serve",
        help="run the broker" + ("" if server_installed() else " (not installed: pip install 'canopy[server]')"),
        description=textwrap.fill(
            "Run the broker until Ctrl-C (SIGINT) or SIGTERM. Settings come from the defaults, "
            "then the --config file, then the environment, then these flags.", 78
        ),
        epilog="settings only in the configuration file:\n"
        + textwrap.indent(_escaped(settings.settings_table(file_only, width=76)), "  "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "--config", metavar="FILE", default=os.environ.get("CANOPY_CONFIG") or None,
        help="TOML file giving any setting as a top-level key with underscores (queue_limit = 5000); "
        "also $CANOPY_CONFIG",
    )
    for s in settings.SETTINGS:
        if s.flag is None:
            continue
        if s.kind is bool:
            serve.add_argument(s.flag, dest=s.name, action=argparse.BooleanOptionalAction, help=_escaped(s.description))
        else:
            metavar = s.metavar or ("N" if s.kind is int else s.name.upper())
            serve.add_argument(s.flag, dest=s.name, type=s.kind, metavar=metavar, help=_escaped(s.description))
    serve.set_defaults(run=_serve)


def _serve(args: argparse.Namespace) -> int:
    if not server_installed():
        print(NOT_INSTALLED, file=sys.stderr)
        return 2
    from cluster.serve import ServeError, serve

    flags = {s.name: getattr(args, s.name) for s in settings.SETTINGS if s.flag is not None}
    try:
        return serve(settings.load(args.config, flags, os.environ))
    except (settings.ConfigError, ServeError) as e:
        print(f"canopy serve: {e}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``canopy`` command, a client verb or ``serve``; return its exit status."""
    # stdlib only until a command runs; not loaded by importing this module
    from history.cli import add_history
    from replication.cli import add_journal

    return client_cli.main(argv, extensions=(add_serve, add_history, add_journal))


if __name__ == "__main__":
    sys.exit(main())
