"""Parse the ``Retry-After`` response header (RFC 9110, section 10.2.3).

The header holds either delta-seconds or an HTTP-date in one of the three forms
of RFC 9110, section 5.6.7. A server that sends it is telling the crawler
exactly when to come back, so the parser reads every form a server may send and
never raises: a value it cannot read is ``None`` and the controller falls back to
its own back-off.

Dates are read by :func:`email.utils.parsedate_to_datetime`, which knows the
three forms; what RFC 9110 adds is checked here: the zone is GMT, a two-digit
year is read relative to now, a four-digit one as written.
"""

from __future__ import annotations

import datetime
import email.utils
import sys
import time
from collections.abc import Iterable

__all__ = ["longest_retry_after", "parse_retry_after"]

#: What a value too large for a float becomes: finite, so the controller caps it.
LARGEST: float = sys.float_info.max


#: Day names, which the comma of an HTTP-date follows ("Sun, 06 Nov 1994 ...",
#: RFC 850's "Sunday, 06-Nov-94 ..."): that comma separates no list elements.
_DAY_NAMES = frozenset(
    ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
) | frozenset(("mon", "tue", "wed", "thu", "fri", "sat", "sun"))


def parse_retry_after(value: str | bytes | None, now: float) -> float | None:
    """Seconds to wait from ``now`` (a POSIX timestamp), or ``None`` if unreadable.

    A date in the past gives 0. Negative numbers, garbage and empty values give
    ``None``. Absurdly large values are returned as they are, and one too large
    for a float (400 digits) as the largest finite float: capping them is a
    policy decision that belongs to the controller, which ignores infinities.

    A value that is a comma-separated list (two headers folded into one line by
    a proxy or a framework: ``120, 120``) is read element by element, as
    :func:`longest_retry_after` reads several headers: the elements that can be
    read count and the others are left out; when they agree that is the wait,
    and when they disagree the largest wait wins, since coming back before one
    of them said to would only be refused again. Empty elements are ignored
    (RFC 9110, section 5.6.1), and the comma after an HTTP-date's day name
    separates nothing.
    """
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    if "," not in text:
        return _parse_one(text, now)
    waits = [w for w in (_parse_one(e, now) for e in _elements(text)) if w is not None]
    return max(waits) if waits else None


def _elements(text: str) -> list[str]:
    """The elements of a comma-separated header value, an HTTP-date whole."""
    pieces = [piece.strip() for piece in text.split(",")]
    elements: list[str] = []
    index = 0
    while index < len(pieces):
        piece = pieces[index]
        if piece.lower() in _DAY_NAMES and index + 1 < len(pieces):
            elements.append(f"{piece}, {pieces[index + 1]}")
            index += 2
            continue
        if piece:
            elements.append(piece)
        index += 1
    return elements


def _parse_one(text: str, now: float) -> float | None:
    """:func:`parse_retry_after` of one value, not a list."""
    text = text.strip()
    if not text:
        return None
    if _is_delta(text):
        return min(float(text), LARGEST)
    date = _parse_http_date(text, now)
    if date is None:
        return None
    return max(0.0, date - now)


def longest_retry_after(values: Iterable[str | bytes], now: float) -> float | None:
    """The longest wait that several ``Retry-After`` headers ask for (the
    readable ones), or ``None`` if none is readable: of two headers, taking the
    shorter would come back before the server said to."""
    waits = [w for w in (parse_retry_after(v, now) for v in values) if w is not None]
    return max(waits) if waits else None


def _is_delta(text: str) -> bool:
    """Digits, optionally with a fraction ("1.5", as some servers send)."""
    whole, dot, fraction = text.partition(".")
    return _digits(whole) and (not dot or _digits(fraction))


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _parse_http_date(text: str, now: float) -> float | None:
    """The POSIX timestamp of an HTTP-date in any of its three forms."""
    leap = False
    try:
        parsed = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        # A leap second (second 60, which RFC 9110 allows) is one second after :59.
        if ":60" not in text:
            return None
        try:
            parsed = email.utils.parsedate_to_datetime(text.replace(":60", ":59", 1))
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        leap = True
    if parsed.tzinfo is not None and parsed.utcoffset() != datetime.timedelta(0):
        return None  # HTTP dates are always GMT
    year = _year(text, parsed.year, now)
    if year is None:
        return None
    try:
        parsed = parsed.replace(year=year, tzinfo=datetime.timezone.utc)
    except ValueError:  # year 0, or 29 February of a year without one
        return None
    return parsed.timestamp() + leap


def _year(text: str, parsed_year: int, now: float) -> int | None:
    """The year as written: email.utils reads any year below 100 as two digits
    (0000 as 2000) and pivots two-digit years at 1969, where RFC 9110 reads
    four digits as they are and two digits relative to now."""
    tokens: list[str] = []
    for token in text.replace(",", " ").split():
        # "06-Nov-94" (RFC 850) holds the year; "-0000" is a zone.
        tokens.extend(token.split("-") if token[0] not in "+-" else [token])
    numbers = [token for token in tokens if _digits(token)]
    if not numbers:
        return None
    written = numbers[-1]  # the day comes before the year in every form
    value = int(written)
    as_read = value if value >= 100 else value + (1900 if value > 68 else 2000)
    if as_read != parsed_year:
        return None  # not the token email.utils read as the year
    if len(written) == 4:
        return value
    if len(written) == 2:
        return _full_year(value, now)
    return None


def _full_year(two_digits: int, now: float) -> int:
    """RFC 9110: a two-digit year more than 50 years ahead is in the last century."""
    current = time.gmtime(now).tm_year
    year = current - current % 100 + two_digits
    if year > current + 50:
        year -= 100
    return year
