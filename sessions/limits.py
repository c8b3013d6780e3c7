"""How much a request may name: the longest path, the most segments, the longest selector.

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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from topics import paths
from topics.errors import PathError, SelectorError
from topics.selectors import PathSelector, Selector, SplitPathSelector, parse_selector

__all__ = ["Limits"]

#: characters of a refused path or selector the error shows
_SHOWN = 40


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text):,} characters)"


@dataclass(frozen=True)
class Limits:
    """Limits on what one request may name; each field is the server setting of its name."""

    max_path_length: int = 1024
    max_path_segments: int = 64
    max_selector_length: int = 4096

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Limits:
        """The limits among the server settings (a missing one keeps its default)."""
        return cls(**{f.name: settings[f.name] for f in fields(cls) if f.name in settings})

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
                _shown(path),
            )
        segments = paths.depth(path)
        if segments > self.max_path_segments:
            raise PathError(
                f"path has {segments:,} segments; at most {self.max_path_segments:,} (max_path_segments)",
                _shown(path),
            )

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
                _shown(text),
                self.max_selector_length,
            )

    def _check_members(self, selector: Selector) -> None:
        expression = selector.expression
        for member in selector.members:
            if isinstance(member, PathSelector):
                try:
                    self.check_path(member.path)
                except PathError as e:
                    raise SelectorError(e.reason, _shown(expression), 0) from None
            elif isinstance(member, SplitPathSelector) and len(member.patterns) > self.max_path_segments:
                raise SelectorError(
                    f"split-path pattern has {len(member.patterns):,} segments; at most "
                    f"{self.max_path_segments:,} (max_path_segments)",
                    _shown(expression),
                    0,
                )
