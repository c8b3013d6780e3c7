"""Checking a session's topic view requests (pure; see :mod:`sessions.requests`).

The permissions each request needs first are in the authorization matrix
(:mod:`sessions.authorization`: MODIFY_TOPIC_VIEWS to create or remove a view,
READ_TOPIC_VIEWS to list them); creating or removing one also needs
SELECT_TOPIC on the path prefix of the view's source selector, checked here.

A view's source selector is held to the registry's limits
(:meth:`~sessions.limits.Limits.check_selector`) when the view is created.
"""

from __future__ import annotations

from typing import Any

from sessions.registry import SessionRegistry
from sessions.requests import RequestError, expect
from sessions.security import PathPermission
from views.parser import parse_view

__all__ = ["check_create", "check_remove", "check_remove_source", "view_name"]


def view_name(name: Any) -> str:
    expect(name, str, "view name")
    if not name or not name.isprintable():
        raise RequestError("INVALID_REQUEST", f"a view name is non-empty printable text, not {name!r}")
    return str(name)


def check_create(r: SessionRegistry, sid: str, name: Any, specification: Any) -> tuple[str, str]:
    """The checked name and specification text of a view to create or replace."""
    checked = view_name(name)
    spec = parse_view(expect(specification, str, "specification"))
    r.limits.check_selector(spec.selector)
    r.check(sid, PathPermission.SELECT_TOPIC, spec.selector.path_prefix)
    return checked, str(specification)


def check_remove(r: SessionRegistry, sid: str, name: Any) -> str:
    return view_name(name)


def check_remove_source(r: SessionRegistry, sid: str, specification: str) -> None:
    """Removing a view also needs SELECT_TOPIC on its source selector's prefix."""
    r.check(sid, PathPermission.SELECT_TOPIC, parse_view(specification).selector.path_prefix)
