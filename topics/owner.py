"""The OWNER topic property: the principal a topic belongs to (pure).

The reference system writes an owner as a session filter on the principal, ``$Principal is
'name'``, and gives that principal READ_TOPIC, UPDATE_TOPIC and MODIFY_TOPIC on the topic on top
of what the security store grants its roles. canopy accepts exactly that form — the keyword
``$Principal`` (its case as written), ``is`` (any case), and the name in single or double quotes,
where a backslash makes the next character literal — and refuses any other filter when the topic
is created (:class:`~topics.errors.SpecificationError` with the column), because only a principal
can be checked where the permission is decided.
"""

from __future__ import annotations

from topics.errors import SpecificationError

__all__ = ["MAX_OWNER_LENGTH", "parse_owner"]

#: the longest OWNER value accepted
MAX_OWNER_LENGTH = 512
_KEY = "$Principal"


def _refuse(text: str, at: int, expected: str) -> SpecificationError:
    return SpecificationError(
        f"property OWNER: expected {expected} at column {at + 1} (the form is $Principal is 'name')\n"
        f"  {text}\n  {' ' * at}^"
    )


def _skip_spaces(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def parse_owner(text: str) -> str:
    """The principal an OWNER value names."""
    if len(text) > MAX_OWNER_LENGTH:
        raise SpecificationError(f"property OWNER is longer than {MAX_OWNER_LENGTH} characters")
    at = _skip_spaces(text, 0)
    if not text.startswith(_KEY, at):
        raise _refuse(text, at, _KEY)
    at = _skip_spaces(text, at + len(_KEY))
    if text[at:at + 2].lower() != "is" or (at + 2 < len(text) and not text[at + 2].isspace()):
        raise _refuse(text, at, "'is'")
    at = _skip_spaces(text, at + 2)
    if at >= len(text) or text[at] not in "'\"":
        raise _refuse(text, at, "a quoted principal name")
    quote, start = text[at], at
    at += 1
    name: list[str] = []
    while True:
        if at >= len(text):
            raise _refuse(text, start, "a closing quote for the name that starts here")
        char = text[at]
        if char == "\\" and at + 1 < len(text):
            name.append(text[at + 1])
            at += 2
            continue
        if char == quote:
            break
        name.append(char)
        at += 1
    end = _skip_spaces(text, at + 1)
    if end != len(text):
        raise _refuse(text, end, "the end of the value")
    if not name:
        raise _refuse(text, start, "a principal name that is not empty")
    return "".join(name)
