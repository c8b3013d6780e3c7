"""RFC 1123 dates (``Tue, 3 Jun 2008 11:05:30 GMT``), as removal policies write times (pure)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

__all__ = ["MAX_TIME_MS", "format_rfc1123", "parse_rfc1123"]

#: the latest time accepted, in ms since the epoch: the end of the year 9999 (UTC)
MAX_TIME_MS = 253_402_300_799_999

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_RFC1123 = re.compile(
    r"\s*(?:(?P<dow>[a-z]{3})\s*,\s*)?(?P<day>\d{1,2})\s+(?P<month>[a-z]{3})\s+(?P<year>\d{4})\s+"
    r"(?P<hour>\d{2}):(?P<minute>\d{2})(?::(?P<second>\d{2}))?\s+(?P<zone>GMT|[+-]\d{4})\s*",
    re.IGNORECASE | re.ASCII,
)


def parse_rfc1123(text: str) -> int:
    """Milliseconds since the epoch of an RFC 1123 date (``Tue, 3 Jun 2008 11:05:30 GMT``:
    the day name and the seconds may be left out; the zone is ``GMT`` or ``+HHMM``)."""
    m = _RFC1123.fullmatch(text)
    if m is None:
        raise ValueError("expected an RFC 1123 date such as 'Tue, 3 Jun 2008 11:05:30 GMT'")
    month = m["month"].title()
    if month not in _MONTHS:
        raise ValueError(f"unknown month {m['month']!r}")
    zone = m["zone"].upper()
    offset = 0 if zone == "GMT" else (int(zone[1:3]) * 60 + int(zone[3:])) * (1 if zone[0] == "+" else -1)
    try:
        when = datetime(
            int(m["year"]), _MONTHS.index(month) + 1, int(m["day"]), int(m["hour"]), int(m["minute"]),
            int(m["second"] or 0), tzinfo=timezone(timedelta(minutes=offset)),
        )
    except ValueError as e:
        raise ValueError(f"no such date and time: {e}") from None
    if m["dow"] is not None and m["dow"].title() != _DAYS[when.weekday()]:
        raise ValueError(f"{m['day']} {month} {m['year']} is a {_DAYS[when.weekday()]}, not a {m['dow']}")
    ms = (when - _EPOCH) // timedelta(milliseconds=1)
    if not 0 <= ms <= MAX_TIME_MS:
        raise ValueError("a time must lie between 1970 and the end of 9999 (UTC)")
    return ms


def format_rfc1123(ms: int) -> str:
    """The RFC 1123 date (GMT, whole seconds) of ``ms`` milliseconds since the epoch."""
    when = _EPOCH + timedelta(milliseconds=ms)
    return (
        f"{_DAYS[when.weekday()]}, {when.day} {_MONTHS[when.month - 1]} {when.year:04d} "
        f"{when.hour:02d}:{when.minute:02d}:{when.second:02d} GMT"
    )
