"""Parse the ``Retry-After`` response header (RFC 9110, section 10.2.3).

The header holds either delta-seconds or an HTTP-date in one of the three forms
of RFC 9110, section 5.6.7. A server that sends it is telling the crawler
exactly when to come back, so the parser reads every form a server may send and
never raises: a value it cannot read is ``None`` and the controller falls back to
its own back-off.
"""

from __future__ import annotations

import calendar
import re
import time

__all__ = ["parse_retry_after"]

_DELTA = re.compile(r"\d+(?:\.\d+)?")

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1
    )
}
_DAY = r"(?:mon|tue|wed|thu|fri|sat|sun)"
_LONG_DAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_MONTH = r"(?P<month>[a-z]{3})"
_TIME = r"(?P<hour>\d\d):(?P<minute>\d\d):(?P<second>\d\d)"

# Sun, 06 Nov 1994 08:49:37 GMT
_IMF_FIXDATE = re.compile(rf"{_DAY}, (?P<day>\d\d) {_MONTH} (?P<year>\d{{4}}) {_TIME} gmt")
# Sunday, 06-Nov-94 08:49:37 GMT
_RFC850 = re.compile(rf"{_LONG_DAY}, (?P<day>\d\d)-{_MONTH}-(?P<year>\d\d) {_TIME} gmt")
# Sun Nov  6 08:49:37 1994 (one space before the day is tolerated too)
_ASCTIME = re.compile(rf"{_DAY} {_MONTH} +(?P<day>\d{{1,2}}) {_TIME} (?P<year>\d{{4}})")


def parse_retry_after(value: str | bytes | None, now: float) -> float | None:
    """Seconds to wait from ``now`` (a POSIX timestamp), or ``None`` if unreadable.

    A date in the past gives 0. Negative numbers, garbage and empty values give
    ``None``. Absurdly large values are returned as they are: capping them is a
    policy decision that belongs to the controller.
    """
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip().lower()
    if not text:
        return None
    if _DELTA.fullmatch(text):
        return float(text)
    date = _parse_http_date(text, now)
    if date is None:
        return None
    return max(0.0, date - now)


def _parse_http_date(text: str, now: float) -> float | None:
    """The POSIX timestamp of an HTTP-date in any of its three forms."""
    match = _IMF_FIXDATE.fullmatch(text) or _ASCTIME.fullmatch(text)
    if match is not None:
        year = int(match["year"])
    else:
        match = _RFC850.fullmatch(text)
        if match is None:
            return None
        year = _full_year(int(match["year"]), now)
    month = _MONTHS.get(match["month"])
    day, hour, minute, second = (int(match[k]) for k in ("day", "hour", "minute", "second"))
    if month is None or not _valid(year, month, day, hour, minute, second):
        return None
    return float(calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)))


def _full_year(two_digits: int, now: float) -> int:
    """RFC 9110: a two-digit year more than 50 years ahead is in the last century."""
    current = time.gmtime(now).tm_year
    year = current - current % 100 + two_digits
    if year > current + 50:
        year -= 100
    return year


def _valid(year: int, month: int, day: int, hour: int, minute: int, second: int) -> bool:
    if year < 1:
        return False
    if not 1 <= day <= calendar.monthrange(year, month)[1]:
        return False
    # Second 60 is a leap second, which RFC 9110 allows.
    return hour <= 23 and minute <= 59 and second <= 60
