"""How much a request may name: the longest path, the most segments, the longest
selector, and how many session properties of what size a session may carry.

:class:`Limits` holds the three server settings of the same names
(``max_path_length``, ``max_path_segments``, ``max_selector_length``) with
the same defaults. The request checks (:mod:`sessions.requests`,
:mod:`views.requests`) read paths and selectors from a client through
:meth:`Limits.path` and :meth:`Limits.selector`, which parse them and refuse
one over a limit with the topic model's error for it
(:class:`~topics.errors.PathError`, code ``INVALID_PATH``;
:class:`~topics.errors.SelectorError`, code ``INVALID_SELECTOR``), naming the
limit and its setting. The refused text is not echoed whole: the error shows
its start.

:meth:`Limits.properties` holds a session's user properties (those a HELLO
brings, and those a session ends up with after changes) to
``max_session_properties`` properties, names of at most
``max_property_name_length`` characters and values of at most
``max_property_value_length``; over a limit it raises
:class:`PropertyLimitError` (code ``INVALID_PROPERTIES``). At the defaults a
session's user properties hold at most 32 x (64 + 1,024) characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from topics import paths
from topics.errors import PathError, SelectorError
from topics.selectors import PathSelector, Selector, SplitPathSelector, parse_selector

__all__ = ["Limits", "PropertyLimitError", "shown"]

#: characters of a refused path or selector the error shows
_SHOWN = 40


def shown(text: str) -> str:
    """``text``, or its start and its length when it is long: how errors show what a client sent."""
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text):,} characters)"


class PropertyLimitError(ValueError):
    """Session properties over a limit; says which limit and its setting."""

    code = "INVALID_PROPERTIES"


@dataclass(frozen=True)
class Limits:
    """Limits on what one request may name; each field is the server setting of its name."""

    max_path_length: int = 1024
    max_path_segments: int = 64
    max_selector_length: int = 4096
    max_session_properties: int = 32
    max_property_name_length: int = 64
    max_property_value_length: int = 1024

    @classmethod
    def from_settings(cls, settings: object) -> Limits:
        """The limits among the server settings: the attributes of ``settings`` (a
        :class:`cluster.config.ServerConfig`, say) named after them; a missing one keeps its default."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls) if hasattr(settings, f.name)})

    def path(self, text: Any) -> str:
        """``text`` as a normal topic path, or :class:`PathError` if invalid or over a limit."""
        path = paths.normalise(text)
        self.check_path(path)
        return path

    def check_path(self, path: str) -> None:
        """Refuse a normal ``path`` over a limit (:class:`PathError`)."""
        if len(path) > self.max_path_length:
            raise PathError(
                f"path has {len(path):,} characters; at most {self.max_path_length:,} (max_path_length)",
                shown(path),
            )
        segments = paths.depth(path)
        if segments > self.max_path_segments:
            raise PathError(
                f"path has {segments:,} segments; at most {self.max_path_segments:,} (max_path_segments)",
                shown(path),
            )

    def properties(self, properties: Mapping[Any, Any], *, extra: int = 0) -> None:
        """Refuse user session ``properties`` over a limit (names and values are strings,
        checked by the caller); ``extra`` more may come with a forwarded session's own
        (``$``) properties."""
        most = self.max_session_properties + extra
        if len(properties) > most:
            raise PropertyLimitError(
                f"{len(properties):,} session properties; at most {most:,} (max_session_properties)")
        for name, value in properties.items():
            if len(name) > self.max_property_name_length:
                raise PropertyLimitError(
                    f"session property name {shown(name)!r} has {len(name):,} characters; at most "
                    f"{self.max_property_name_length:,} (max_property_name_length)")
            if value is not None and len(value) > self.max_property_value_length:
                raise PropertyLimitError(
                    f"session property {shown(name)!r} has a value of {len(value):,} characters; at most "
                    f"{self.max_property_value_length:,} (max_property_value_length)")

    def user_properties(self, properties: Mapping[str, str | None]) -> None:
        """Refuse ``properties`` a client names for its own session (a HELLO's, an MQTT
        CONNECT's user properties) when one is over a limit or its name is empty or starts
        with ``$`` (those are the server's: ``$Principal``, ``$ClientIP`` and the rest)."""
        for name in properties:
            if not name or name.startswith("$"):
                raise PropertyLimitError(f"user session property {shown(name)!r} may not be empty or start with '$'")
        self.properties(properties)

    def selector(self, text: Any) -> Selector:
        """``text`` parsed as a selector, or :class:`SelectorError` if invalid or over a limit.

        Besides its length, no member may name a path over the path limits
        (a path selector's path, a split-path pattern's segment count): no
        topic could ever be there.
        """
        if isinstance(text, str):
            self._check_length(text)  # before parsing: parsing costs
        selector = parse_selector(text)
        self._check_members(selector)
        return selector

    def check_selector(self, selector: Selector) -> None:
        """Refuse a parsed ``selector`` (one inside a view specification) over a
        limit; its length is that of its canonical expression."""
        self._check_length(selector.expression)
        self._check_members(selector)

    def _check_length(self, text: str) -> None:
        if len(text) > self.max_selector_length:
            raise SelectorError(
                f"selector has {len(text):,} characters; at most {self.max_selector_length:,} "
                "(max_selector_length)",
                shown(text),
                self.max_selector_length,
            )

    def _check_members(self, selector: Selector) -> None:
        expression = selector.expression
        for member in selector.members:
            if isinstance(member, PathSelector):
                try:
                    self.check_path(member.path)
                except PathError as e:
                    raise SelectorError(e.reason, shown(expression), 0) from None
            elif isinstance(member, SplitPathSelector) and len(member.patterns) > self.max_path_segments:
                raise SelectorError(
                    f"split-path pattern has {len(member.patterns):,} segments; at most "
                    f"{self.max_path_segments:,} (max_path_segments)",
                    shown(expression),
                    0,
                )
