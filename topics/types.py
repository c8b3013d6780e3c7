"""Topic types and the value codecs.

A topic's value is held as ``bytes``:

* STRING, INT64, DOUBLE and JSON values are one CBOR data item each. Map
  key order is kept exactly as given (JSON patch ``test`` compares the CBOR
  bytes, so ``{"a":1,"b":2}`` and ``{"b":2,"a":1}`` are different values).
* BINARY values are the raw bytes.
* A TIME_SERIES topic holds an event log (:mod:`topics.timeseries`); each
  event value is encoded with the topic's *event value type*, one of the
  five types above.

STRING, INT64 and DOUBLE topics may hold ``None`` (CBOR null), as in the
reference system; a JSON value may be ``null`` like any other JSON value.

:func:`encode` turns a Python value into the stored bytes, :func:`decode`
does the reverse and :func:`validate` checks stored or received bytes.
Each raises :class:`~topics.errors.InvalidValueError` saying what is wrong.

What a value must be to be accepted at all is what :func:`decode` can read
as the type (cbor2's reading: a bignum or a self-described item that comes
out as an ``int`` or ``str`` will do). A topic with VALIDATE_VALUES ``true``
asks more, :func:`check_plain`: one CBOR item of exactly the type's shape,
with no tags, no ``undefined`` or other simple values and, except in BINARY,
no byte strings, so that every client's codec reads it as the type says.
"""

from __future__ import annotations

import enum
import io
import json
import math
import re
import reprlib
from typing import Any

import cbor2

from topics.errors import InvalidValueError, TopicTypeError

__all__ = [
    "EVENT_VALUE_TYPES",
    "TopicType",
    "decode",
    "encode",
    "validate",
    "accept",
    "check_json_text_depth",
    "check_plain",
    "encode_any",
    "infer",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
# CBOR's native integers (major types 0 and 1); larger ones need bignum tags.
_CBOR_INT_MIN = -(2**64)
_CBOR_INT_MAX = 2**64 - 1
#: the most arrays and objects a JSON value may nest: deep enough for any real
#: document, shallow enough that nothing on the way recurses near Python's limit
#: (about 1,000 frames; ``json.loads``, ``copy.deepcopy``, pickle and ``repr`` all
#: recurse once or twice per level). Decoders are stopped at it before they recurse
#: further: cbor2 by its ``max_depth`` (else 400), JSON text by
#: :func:`check_json_text_depth` (``json.loads`` would run into RecursionError).
MAX_JSON_DEPTH = 256


class TopicType(enum.Enum):
    """The topic types canopy stores."""

    STRING = "STRING"
    INT64 = "INT64"
    DOUBLE = "DOUBLE"
    JSON = "JSON"
    BINARY = "BINARY"
    TIME_SERIES = "TIME_SERIES"

    @classmethod
    def parse(cls, name: object) -> TopicType:
        """The type named ``name`` (case-insensitive), or :class:`TopicTypeError`."""
        if isinstance(name, TopicType):
            return name
        if isinstance(name, str):
            try:
                return cls[name.strip().upper()]
            except KeyError:
                pass
            if name.strip().upper().replace("_", "") in _REFUSED_TYPES:
                raise TopicTypeError(
                    f"{name.strip().upper()} topics are not supported: RecordV2 is the reference system's "
                    "legacy record model; use a JSON topic (with VALIDATE_VALUES true to refuse malformed values)"
                )
        raise TopicTypeError(
            f"unknown topic type {name!r}; expected one of "
            + ", ".join(t.value for t in cls)
        )

    def __str__(self) -> str:
        return self.value


#: types of the reference system canopy refuses by name, with a reason (compared without ``_``)
_REFUSED_TYPES = frozenset({"RECORDV2", "RECORD"})

#: the types a time series event may have
EVENT_VALUE_TYPES = frozenset(
    {TopicType.STRING, TopicType.INT64, TopicType.DOUBLE, TopicType.JSON, TopicType.BINARY}
)


def _value_type(value_type: TopicType) -> TopicType:
    if value_type is TopicType.TIME_SERIES:
        raise InvalidValueError(
            "a TIME_SERIES topic has no single value: encode events with its event value type"
        )
    return value_type


# repr() of a deeply nested value recurses past Python's limit; this one stops early
_short = reprlib.Repr()
_short.maxlevel, _short.maxstring, _short.maxother, _short.maxlong = 3, 40, 40, 40


def _describe(value: object) -> str:
    text = _short.repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _check_json(value: object, depth: int = 0) -> None:
    """Raise unless ``value`` is a JSON-compatible Python object nested at most
    :data:`MAX_JSON_DEPTH` arrays and objects deep (``depth``: the containers
    around ``value``)."""
    if isinstance(value, (dict, list, tuple)) and depth >= MAX_JSON_DEPTH:
        raise InvalidValueError(f"JSON value nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects")
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if not _CBOR_INT_MIN <= value <= _CBOR_INT_MAX:
            raise InvalidValueError(f"JSON integer {value} is outside the 64-bit CBOR range")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidValueError(f"JSON numbers must be finite, got {value!r}")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidValueError(f"JSON object keys must be strings, got {_describe(key)}")
            _check_json(item, depth + 1)
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_json(item, depth + 1)
        return
    raise InvalidValueError(f"not a JSON value: {_describe(value)}")


# a JSON string (to its closing quote, or to the end of unterminated text) or a bracket
_JSON_NESTING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


def check_json_text_depth(text: str) -> None:
    """Raise :class:`InvalidValueError` if JSON ``text`` opens more than
    :data:`MAX_JSON_DEPTH` arrays and objects inside one another.

    Call it before ``json.loads``, which recurses once per level and would
    raise RecursionError on ``'[' * 100000``. Brackets inside strings do not
    count. Text that is not JSON is left for the decoder to refuse, with its
    own message, unless it nests too deeply before its first error.
    """
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return  # too few brackets to nest too deeply
    depth = 0
    for token in _JSON_NESTING.finditer(text):
        bracket = token.group()
        if bracket in ("[", "{"):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise InvalidValueError(
                    f"JSON text nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects "
                    f"at position {token.start()}"
                )
        elif bracket in ("]", "}"):
            depth -= 1
            if depth < 0:
                return  # not JSON: the decoder stops here, before any deeper nesting


def _dumps(value: object) -> bytes:
    try:
        return bytes(cbor2.dumps(value))
    except (UnicodeEncodeError, cbor2.CBOREncodeError, ValueError, TypeError) as e:
        raise InvalidValueError(f"cannot encode {_describe(value)}: {e}") from None


def encode(value_type: TopicType, value: Any) -> bytes:
    """Encode a Python value for a topic (or event) of ``value_type``."""
    t = _value_type(value_type)
    if t is TopicType.BINARY:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        raise InvalidValueError(f"a BINARY value must be bytes, got {_describe(value)}")
    if t is TopicType.JSON:
        _check_json(value)
        return _dumps(value)
    if value is None:
        return b"\xf6"
    if t is TopicType.STRING:
        if isinstance(value, str):
            return _dumps(value)
        raise InvalidValueError(f"a STRING value must be str, got {_describe(value)}")
    if t is TopicType.INT64:
        if isinstance(value, int) and not isinstance(value, bool):
            if INT64_MIN <= value <= INT64_MAX:
                return _dumps(value)
            raise InvalidValueError(f"{value} is outside the INT64 range")
        raise InvalidValueError(f"an INT64 value must be int, got {_describe(value)}")
    # DOUBLE: ints are accepted and widened, as a user would expect of "1"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidValueError(f"a DOUBLE value must be float, got {_describe(value)}")
    try:
        return _dumps(float(value))
    except OverflowError:
        raise InvalidValueError(f"{value} is too large for a DOUBLE") from None


def _loads(data: bytes) -> object:
    if not data:
        raise InvalidValueError("empty value: expected one CBOR data item")
    stream = io.BytesIO(data)
    try:
        # max_depth: cbor2 counts the arrays, maps and tags around an item, so a JSON
        # value within MAX_JSON_DEPTH always decodes (and _check_json has the last word)
        item = cbor2.CBORDecoder(stream, allow_duplicate_keys=False, max_depth=MAX_JSON_DEPTH).decode()
    except (cbor2.CBORDecodeError, RecursionError, ValueError) as e:
        if "nesting depth" in str(e):  # cbor2's words for exceeding max_depth
            raise InvalidValueError(
                f"CBOR data item nested deeper than {MAX_JSON_DEPTH} levels of arrays, maps and tags"
            ) from None
        raise InvalidValueError(f"malformed CBOR: {e}") from None
    if stream.tell() != len(data):
        raise InvalidValueError(
            f"trailing bytes after the CBOR data item ({len(data) - stream.tell()} bytes)"
        )
    return item


def decode(value_type: TopicType, data: bytes) -> Any:
    """Decode stored bytes of a topic (or event) of ``value_type`` to a Python value."""
    t = _value_type(value_type)
    if t is TopicType.BINARY:
        return bytes(data)
    item = _loads(data)
    if t is TopicType.JSON:
        _check_json(item)
        return item
    if item is None:
        return None
    if t is TopicType.STRING:
        if isinstance(item, str):
            return item
    elif t is TopicType.INT64:
        if isinstance(item, int) and not isinstance(item, bool):
            if INT64_MIN <= item <= INT64_MAX:
                return item
            raise InvalidValueError(f"{item} is outside the INT64 range")
    elif isinstance(item, float):
        return item
    elif isinstance(item, int) and not isinstance(item, bool):
        return float(item)
    raise InvalidValueError(f"a {t.value} value cannot hold {_describe(item)}")


def validate(value_type: TopicType, data: object) -> bytes:
    """Check that ``data`` is a valid encoded value of ``value_type`` and return it as bytes."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidValueError(f"an encoded value must be bytes, got {_describe(data)}")
    raw = bytes(data)
    decode(value_type, raw)
    return raw


def accept(value_type: TopicType, data: bytes, *, raw: bool) -> bytes:
    """Check bytes received for a topic of ``value_type`` and return what to store.

    ``raw`` says the sender meant the bytes literally (a BINARY value) rather
    than as one CBOR item. A DOUBLE received as a CBOR integer is stored as a
    CBOR float, so every stored DOUBLE decodes to ``float``.
    """
    t = _value_type(value_type)
    if t is TopicType.BINARY:
        if not raw:
            raise InvalidValueError("a BINARY topic takes raw bytes, not an encoded value")
        return bytes(data)
    if raw:
        raise InvalidValueError(f"a {t.value} topic cannot take raw bytes")
    value = decode(t, data)
    if t is TopicType.DOUBLE and value is not None and not _is_cbor_float(data):
        return _dumps(float(value))
    return bytes(data)


# the major types of a CBOR initial byte's top three bits
_UINT, _NINT, _BYTES, _TEXT, _ARRAY, _MAP, _TAG, _SIMPLE = range(8)
_FALSE, _TRUE, _NULL = 20, 21, 22
_FLOATS = (25, 26, 27)


def check_plain(value_type: TopicType, data: bytes) -> None:
    """Raise :class:`InvalidValueError` unless ``data`` (which :func:`accept` took as the
    type) is plain: see the module's docstring. BINARY values are always plain.

    It walks the encoded item once, without decoding it again."""
    t = _value_type(value_type)
    if t is TopicType.BINARY:
        return
    end = _plain_item(t, data, 0, 0)
    if end != len(data):  # cannot happen after accept(): one item, nothing after it
        raise InvalidValueError("trailing bytes after the CBOR data item")
    shape = {
        TopicType.STRING: (_TEXT,),
        TopicType.INT64: (_UINT, _NINT),
        TopicType.DOUBLE: (_UINT, _NINT),
    }.get(t)
    major = data[0] >> 5 if data else None
    if shape is not None and data != b"\xf6" and major not in shape and not (
        t is TopicType.DOUBLE and data[:1] in (b"\xf9", b"\xfa", b"\xfb")
    ):
        raise InvalidValueError(
            f"a {t.value} value must be one plain CBOR "
            + {TopicType.STRING: "text string", TopicType.INT64: "integer"}.get(t, "number")
            + f" (VALIDATE_VALUES), got {_shown_bytes(data)}"
        )


def _argument(data: bytes, pos: int, info: int) -> tuple[int, int]:
    """The argument of the head at ``pos`` whose low bits are ``info``, and where it ends."""
    if info < 24:
        return info, pos + 1
    width = 1 << (info - 24)
    return int.from_bytes(data[pos + 1:pos + 1 + width], "big"), pos + 1 + width


def _plain_item(t: TopicType, data: bytes, pos: int, depth: int) -> int:
    """Check the item at ``pos`` (well formed: :func:`accept` read it); return where it ends."""
    if depth > MAX_JSON_DEPTH:
        raise InvalidValueError(f"CBOR data item nested deeper than {MAX_JSON_DEPTH} levels")
    head = data[pos]
    major, info = head >> 5, head & 0x1F
    if major == _TAG:
        tag, _ = _argument(data, pos, info)
        raise InvalidValueError(f"a {t.value} value may not carry CBOR tag {tag} (VALIDATE_VALUES)")
    if major == _SIMPLE:
        if info in (_FALSE, _TRUE, _NULL):
            return pos + 1
        if info in _FLOATS:
            return pos + 1 + (1 << (info - 24))
        raise InvalidValueError(
            f"a {t.value} value may not hold the CBOR simple value {_shown_bytes(data[pos:pos + 2])} "
            "(VALIDATE_VALUES)"
        )
    if major == _BYTES:
        raise InvalidValueError(f"a {t.value} value may not hold a CBOR byte string (VALIDATE_VALUES)")
    if info == 31:  # indefinite length: items (or chunks) up to the break byte
        pos += 1
        count = 0
        while data[pos] != 0xFF:
            if major == _MAP and count % 2 == 0 and data[pos] >> 5 != _TEXT:
                raise InvalidValueError("a JSON object's keys must be text strings (VALIDATE_VALUES)")
            pos = _plain_item(t, data, pos, depth + 1)
            count += 1
        return pos + 1
    argument, pos = _argument(data, pos, info)
    if major in (_UINT, _NINT):
        return pos
    if major == _TEXT:
        return pos + argument
    count = argument * 2 if major == _MAP else argument
    for i in range(count):
        if major == _MAP and i % 2 == 0 and data[pos] >> 5 != _TEXT:
            raise InvalidValueError("a JSON object's keys must be text strings (VALIDATE_VALUES)")
        pos = _plain_item(t, data, pos, depth + 1)
    return pos


def _is_cbor_float(data: bytes) -> bool:
    return data[:1] in (b"\xf9", b"\xfa", b"\xfb")


def infer(data: bytes, *, raw: bool) -> TopicType:
    """The topic type a value suggests when none is given: raw bytes are
    BINARY; a CBOR text string STRING, integer INT64, float DOUBLE, anything
    else JSON."""
    if raw:
        return TopicType.BINARY
    item = _loads(data)
    if isinstance(item, str):
        return TopicType.STRING
    if isinstance(item, int) and not isinstance(item, bool) and INT64_MIN <= item <= INT64_MAX:
        return TopicType.INT64
    if isinstance(item, float):
        return TopicType.DOUBLE
    return TopicType.JSON


def encode_any(value: Any, value_type: TopicType | None = None) -> tuple[bytes, bool]:
    """Encode a Python value for sending: ``(data, raw)``.

    With ``value_type`` the value is checked and encoded for that type;
    without it bytes are sent raw and everything else as one CBOR item, for
    the receiver to check against the topic's type.
    """
    if value_type is not None:
        return encode(value_type, value), value_type is TopicType.BINARY
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), True
    if not isinstance(value, float):  # a non-finite float is fine for DOUBLE topics
        _check_json(value)
    return _dumps(value), False


#: ``raw`` as a value's form: the value as text, for protocols whose payloads are text
#: (MQTT): see :func:`from_text`
TEXT = "text"
# ASCII whitespace, allowed around INT64 and DOUBLE text (``echo 42 | mosquitto_pub -s``
# sends ``42\n``): space, tab, LF, CR, VT, FF; what ``bytes.strip()`` strips
_ASCII_SPACE = b" \t\n\r\x0b\x0c"
_INT_TEXT = re.compile(rb"[+-]?[0-9]+")
# 2**63 has 19 digits: an integer with more significant digits is outside the INT64 range
_INT64_DIGITS = 19
# a JSON integer with more digits is outside CBOR's 64 bits (2**64 has 20 digits; JSON
# allows no leading zeros); checked before int() converts it, which refuses over 4300 digits
_CBOR_INT_DIGITS = 20
# the DOUBLE words, lower case, with the sign they may have
_DOUBLE_WORDS = {b"nan": math.nan, b"+nan": math.nan, b"-nan": math.nan, b"inf": math.inf, b"+inf": math.inf,
                 b"-inf": -math.inf, b"infinity": math.inf, b"+infinity": math.inf, b"-infinity": -math.inf}
# no nested quantifiers: matching (and failing) takes time linear in the text's length
_DOUBLE_TEXT = re.compile(rb"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SHOWN = 40


def from_text(value_type: TopicType, data: bytes) -> bytes:
    """The stored bytes of a value given as text (an MQTT payload); the one rule for
    every protocol whose values are text (:mod:`mqtt.mapping` delegates here).

    An empty text is no value: CBOR ``null`` for STRING, INT64, DOUBLE and JSON, no
    bytes for BINARY. Otherwise:

    STRING
        UTF-8 text, strictly decoded; a byte order mark is kept.
    INT64
        ``[+-]?[0-9]+`` in ASCII (leading zeros allowed), within the INT64 range.
    DOUBLE
        ``[+-]?([0-9]+(.[0-9]*)?|.[0-9]+)([eE][+-]?[0-9]+)?`` in ASCII, or ``NaN``,
        ``Infinity`` or ``inf`` in any letter case with an optional sign. A number beyond
        the float range (``1e999``) is refused; one below it rounds to zero.
    JSON
        Strict JSON text in UTF-8 (no byte order mark): no ``NaN`` or ``Infinity``, no
        member name twice in an object, numbers within a float's range and integers
        within CBOR's 64 bits, nested at most :data:`MAX_JSON_DEPTH` deep; stored as
        :func:`encode` stores the value, member order kept.
    BINARY
        The bytes as they are.

    INT64 and DOUBLE text may be surrounded by ASCII whitespace (space, tab, CR, LF,
    VT, FF); nothing else is tolerated (no ``_`` separators, no non-ASCII digits, no
    hex). Anything else raises :class:`InvalidValueError` saying why, as does
    TIME_SERIES (give the event value type).
    """
    t = _value_type(value_type)
    data = bytes(data)
    if t is TopicType.BINARY:
        return data
    if not data:
        return b"\xf6"
    if t is TopicType.STRING:
        return _dumps(_utf8(t, data))
    if t is TopicType.JSON:
        return encode(t, _json_text(_utf8(t, data)))
    number = data.strip(_ASCII_SPACE)
    if t is TopicType.INT64:
        if _INT_TEXT.fullmatch(number) is None:
            raise InvalidValueError(
                f"an INT64 value as text must be a decimal integer (ASCII digits with an optional sign), "
                f"got {_shown_bytes(data)}"
            )
        if len(number.lstrip(b"+-").lstrip(b"0")) > _INT64_DIGITS:
            raise InvalidValueError(f"{_shown_bytes(number)} is outside the INT64 range")
        return encode(t, int(number))  # encode refuses the rest of the values out of range
    word = _DOUBLE_WORDS.get(number.lower())
    if word is not None:
        return _dumps(word)
    if _DOUBLE_TEXT.fullmatch(number) is None:
        raise InvalidValueError(
            f"a DOUBLE value as text must be a decimal number, NaN or Infinity, got {_shown_bytes(data)}"
        )
    parsed = float(number)
    if math.isinf(parsed):
        raise InvalidValueError(f"{_shown_bytes(number)} is outside the DOUBLE range")
    return _dumps(parsed)


def _utf8(t: TopicType, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidValueError(
            f"a {t.value} value as text must be UTF-8: {e.reason} at byte {e.start} of {_shown_bytes(data)}"
        ) from None


def _json_text(text: str) -> Any:
    """The value of strict JSON ``text`` (see :func:`from_text`); its depth is checked
    before ``json.loads`` recurses."""
    if text.startswith("\ufeff"):
        raise InvalidValueError("not JSON text: it starts with a byte order mark")
    check_json_text_depth(text)
    try:
        return json.loads(
            text, parse_constant=_no_constant, parse_float=_json_float, parse_int=_json_int,
            object_pairs_hook=_json_object,
        )
    except json.JSONDecodeError as e:
        raise InvalidValueError(f"not JSON text: {e.msg} at line {e.lineno} column {e.colno}") from None
    except InvalidValueError:
        raise
    except RecursionError:  # check_json_text_depth should have stopped it first
        raise InvalidValueError(f"JSON text nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:  # from the hooks below
        raise InvalidValueError(f"not JSON text: {e}") from None


def _no_constant(word: str) -> None:
    raise ValueError(f"{word} is not a JSON number")


def _json_float(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise InvalidValueError(f"JSON number {shown_text(text)} is outside the range of a 64-bit float")
    return number


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > _CBOR_INT_DIGITS:
        raise InvalidValueError(f"JSON integer {shown_text(text)} is outside the 64-bit CBOR range")
    return int(text)


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members: dict[str, Any] = {}
    for name, value in pairs:
        if name in members:
            raise ValueError(f"an object has the member {shown_text(name)} twice")
        members[name] = value
    return members


def to_text(value_type: TopicType, data: bytes | None) -> bytes:
    """A stored value as text, :func:`from_text`'s reverse: UTF-8 for STRING; decimal
    for INT64 (``-12``); ``repr(float)`` for DOUBLE (``1.5``, ``1e+300``, ``-0.0``),
    ``NaN``, ``Infinity``, ``-Infinity``; compact JSON for JSON (``","`` and ``":"``
    separators, non-ASCII characters as they are; JSON ``null`` is ``null``); the bytes
    for BINARY. No value (``None``, or a ``null`` STRING, INT64 or DOUBLE) is the empty
    text.

    So ``to_text(t, from_text(t, x)) == x`` for every text ``x`` already in the spelling
    ``to_text`` writes, and ``from_text(t, to_text(t, v))`` is ``v`` for every stored
    value ``v`` (NaN for NaN), except the empty STRING, whose empty text reads back as
    ``null``. Raises :class:`InvalidValueError` when ``data`` is not a valid value of
    ``value_type``, and for TIME_SERIES (give the event value type).
    """
    t = _value_type(value_type)
    if data is None:
        return b""
    if t is TopicType.BINARY:
        return bytes(data)
    value = decode(t, data)
    if t is TopicType.JSON:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    if value is None:
        return b""
    if t is TopicType.STRING:
        return str(value).encode()
    if t is TopicType.DOUBLE:
        if math.isnan(value):
            return b"NaN"
        if math.isinf(value):
            return b"Infinity" if value > 0 else b"-Infinity"
        return repr(value).encode()
    return str(value).encode()


def shown_text(text: str, limit: int = _SHOWN) -> str:
    """``text`` quoted for an error message, cut at ``limit`` characters."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _shown_bytes(data: bytes, limit: int = _SHOWN) -> str:
    """Text given as ``data`` quoted for an error message, cut at ``limit`` characters;
    as bytes (``b'\\xff'``) if it is not UTF-8."""
    try:  # a character is at most 4 bytes: more than 4 * limit bytes are more than limit characters
        return shown_text(data[: 4 * limit + 4].decode("utf-8"), limit)
    except UnicodeDecodeError:
        return repr(data if len(data) <= limit else data[:limit] + b"...")
