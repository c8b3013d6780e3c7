"""Binary deltas between two values of a topic: what delta streaming sends instead of a whole value.

A delta turns the value a subscriber has (the *source*) into the new one (the *target*). It is
worth sending when it is smaller than the target, which for a large JSON, STRING or BINARY value
where one field changed it nearly always is. :func:`diff` makes one, :func:`apply` applies it, and
a delta applied to any source but its own is detected rather than silently producing garbage.

Format (all integers unsigned LEB128 varints)::

    delta   = VERSION (1 byte) source-length target-length target-crc32 (4 bytes, big-endian) op*
    op      = 0x00 length bytes          insert these bytes
            | 0x01 offset length          copy length bytes of the source from offset

:func:`apply` checks the version, that the source has the length the delta was made for, that
every op stays inside the source and the target length, that the ops produce exactly the target
length, and the target's CRC-32; any failure is :class:`DeltaError` naming it, and the receiver
should fetch the whole value instead.

:func:`diff` keeps the common prefix and suffix, then covers the middle with copies of source
blocks found through an index of :data:`BLOCK`-byte blocks (every block-aligned block of the
source's middle, extended forwards and backwards once found) and inserts for the rest. It is
linear in the sizes but for the index, bounded by :data:`MAX_INDEXED` blocks.
"""

from __future__ import annotations

import zlib

__all__ = ["BLOCK", "MAX_INDEXED", "VERSION", "DeltaError", "apply", "diff"]

VERSION = 1
INSERT, COPY = 0, 1
#: the size of the source blocks :func:`diff` looks for in the target
BLOCK = 16
#: at most this many source blocks are indexed (a longer source's later blocks are not)
MAX_INDEXED = 65_536
#: a copy shorter than this costs more than inserting its bytes
_MIN_COPY = 8


class DeltaError(ValueError):
    """A delta that does not apply: malformed, or made for another source."""


def _varint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if at >= len(data):
            raise DeltaError(f"truncated delta: a number runs past its end (byte {at})")
        byte = data[at]
        at += 1
        n |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return n, at
        shift += 7
        if shift > 63:
            raise DeltaError(f"malformed delta: a number longer than 64 bits (byte {at})")


def _insert(out: bytearray, data: bytes) -> None:
    if data:
        out.append(INSERT)
        _varint(len(data), out)
        out += data


def _copy(out: bytearray, offset: int, length: int) -> None:
    out.append(COPY)
    _varint(offset, out)
    _varint(length, out)


def diff(source: bytes, target: bytes) -> bytes:
    """A delta that :func:`apply` turns ``source`` into ``target`` with."""
    out = bytearray([VERSION])
    _varint(len(source), out)
    _varint(len(target), out)
    out += zlib.crc32(target).to_bytes(4, "big")
    limit = min(len(source), len(target))
    prefix = _common_prefix(source, target, limit)
    suffix = _common_suffix(source, target, limit - prefix)
    if prefix:
        _copy(out, 0, prefix)
    _middle(out, source, target, prefix, len(source) - suffix, prefix, len(target) - suffix)
    if suffix:
        _copy(out, len(source) - suffix, suffix)
    return bytes(out)


def _common_prefix(a: bytes, b: bytes, limit: int) -> int:
    """How many leading bytes ``a`` and ``b`` share (at most ``limit``): a binary search
    over slice comparisons, so the bytes are compared in C, not one by one in Python."""
    low, high = 0, limit  # a[:low] == b[:low]; a[:high + 1] != b[:high + 1] unless high == limit
    if a[:limit] == b[:limit]:
        return limit
    while high - low > 4:
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    while low < high and a[low] == b[low]:
        low += 1
    return low


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """How many trailing bytes ``a`` and ``b`` share (at most ``limit``)."""
    la, lb = len(a), len(b)
    if a[la - limit:] == b[lb - limit:]:
        return limit
    low, high = 0, limit
    while high - low > 4:
        middle = (low + high) // 2
        if a[la - middle:la - low] == b[lb - middle:lb - low]:
            low = middle
        else:
            high = middle
    while low < high and a[la - low - 1] == b[lb - low - 1]:
        low += 1
    return low


def _middle(out: bytearray, source: bytes, target: bytes, s_start: int, s_end: int, t_start: int, t_end: int) -> None:
    """Ops for ``target[t_start:t_end]`` from ``source[s_start:s_end]``: copies of indexed blocks, inserts between."""
    index: dict[bytes, int] = {}
    for offset in range(s_start, min(s_end - BLOCK + 1, s_start + MAX_INDEXED * BLOCK), BLOCK):
        index.setdefault(source[offset:offset + BLOCK], offset)
    pending = t_start  # the first target byte no op covers yet
    at = t_start
    while at + BLOCK <= t_end and index:
        found = index.get(target[at:at + BLOCK])
        if found is None:
            at += 1
            continue
        back = 0  # extend the match backwards over bytes not yet covered
        while at - back > pending and found - back > s_start and source[found - back - 1] == target[at - back - 1]:
            back += 1
        length = BLOCK + back
        start, origin = at - back, found - back
        while start + length < t_end and origin + length < s_end and source[origin + length] == target[start + length]:
            length += 1
        if length >= _MIN_COPY:
            _insert(out, target[pending:start])
            _copy(out, origin, length)
            pending = at = start + length
        else:
            at += 1
    _insert(out, target[pending:t_end])


def apply(delta: bytes, source: bytes) -> bytes:
    """The target ``delta`` makes from ``source``; :class:`DeltaError` when it does not apply."""
    end = len(delta)
    if not end:
        raise DeltaError("empty delta")
    if delta[0] != VERSION:
        raise DeltaError(f"delta version {delta[0]}, not {VERSION}")
    if end > 4 and delta[1] & 0x80 and not delta[2] & 0x80 and delta[3] & 0x80 and not delta[4] & 0x80:
        # both lengths of two bytes (128 to 16,383: values worth a delta), read inline
        source_length = (delta[1] & 0x7F) | delta[2] << 7
        target_length = (delta[3] & 0x7F) | delta[4] << 7
        at = 5
    else:
        source_length, at = _read_varint(delta, 1)
        target_length, at = _read_varint(delta, at)
    if source_length != len(source):
        raise DeltaError(f"the delta is for a source of {source_length} bytes, not {len(source)}")
    if at + 4 > end:
        raise DeltaError("truncated delta: no checksum")
    crc = int.from_bytes(delta[at:at + 4], "big")
    at += 4
    chunks: list[bytes] = []
    append = chunks.append
    size = 0
    while at < end:
        op = delta[at]
        # numbers below 128 (one byte) are read inline: by far the most common
        if op == COPY:
            at += 1
            offset = delta[at] if at < end else 0x80
            if offset < 0x80:
                at += 1
            else:
                offset, at = _read_varint(delta, at)
            length = delta[at] if at < end else 0x80
            if length < 0x80:
                at += 1
            else:
                length, at = _read_varint(delta, at)
            stop = offset + length
            if stop > source_length:
                raise DeltaError(f"a copy of {length} bytes from {offset} runs past the source's {source_length}")
            append(source[offset:stop])
        elif op == INSERT:
            at += 1
            length = delta[at] if at < end else 0x80
            if length < 0x80:
                at += 1
            else:
                length, at = _read_varint(delta, at)
            stop = at + length
            if stop > end:
                raise DeltaError(f"truncated delta: an insert of {length} bytes at byte {at}")
            append(delta[at:stop])
            at = stop
        else:
            raise DeltaError(f"unknown delta operation {op} at byte {at}")
        size += length
        if size > target_length:
            raise DeltaError(f"the delta makes more than the {target_length} bytes it announces")
    if size != target_length:
        raise DeltaError(f"the delta makes {size} bytes, not the {target_length} it announces")
    out = b"".join(chunks)
    if zlib.crc32(out) != crc:
        raise DeltaError("the delta's result fails its checksum: it was made for another source")
    return out
