"""Retry-After parsing: delta-seconds and the three HTTP-date forms of RFC 9110."""

from __future__ import annotations

import calendar
import email.utils

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrapy_aimd.core.retry_after import parse_retry_after

# 1994-11-06 08:49:37 UTC, the example date of RFC 9110 section 5.6.7.
EXAMPLE = float(calendar.timegm((1994, 11, 6, 8, 49, 37)))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (b"120", 120.0),
        ("0", 0.0),
        ("  7 ", 7.0),
        ("007", 7.0),
        ("1.5", 1.5),
        (b"\t30\r\n", 30.0),
    ],
)
def test_delta_seconds(value: str | bytes, expected: float) -> None:
    assert parse_retry_after(value, now=EXAMPLE) == expected


@pytest.mark.parametrize(
    "value",
    [
        "Sun, 06 Nov 1994 08:49:37 GMT",  # IMF-fixdate
        "Sunday, 06-Nov-94 08:49:37 GMT",  # obsolete RFC 850
        "Sun Nov  6 08:49:37 1994",  # obsolete asctime
        "Sun Nov 6 08:49:37 1994",  # asctime with a single space, as some servers send
        b"Sun, 06 Nov 1994 08:49:37 GMT",
        "sun, 06 nov 1994 08:49:37 gmt",
    ],
)
def test_http_date_forms(value: str | bytes) -> None:
    assert parse_retry_after(value, now=EXAMPLE - 90) == 90.0


def test_date_in_the_past_gives_zero() -> None:
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now=EXAMPLE + 3600) == 0.0


def test_rfc850_two_digit_year_is_read_relative_to_now() -> None:
    # RFC 9110: a two-digit year more than 50 years in the future is the most
    # recent past year with the same last two digits.
    now_2030 = float(calendar.timegm((2030, 1, 1, 0, 0, 0)))
    date_2031 = float(calendar.timegm((2031, 1, 1, 0, 0, 0)))
    assert parse_retry_after("Wednesday, 01-Jan-31 00:00:00 GMT", now=now_2030) == (
        date_2031 - now_2030
    )
    # "94" read in 2030 is 1994 (2094 would be more than 50 years ahead): in the past.
    assert parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now=now_2030) == 0.0


@pytest.mark.parametrize(
    "value",
    [
        "",
        b"",
        "   ",
        None,
        "-5",
        "-0.5",
        "soon",
        "1e3",
        "12abc",
        "0x10",
        "nan",
        "inf",
        "1 2",
        "Sun, 32 Nov 1994 08:49:37 GMT",  # no such day
        "Sun, 06 Foo 1994 08:49:37 GMT",  # no such month
        "Sun, 06 Nov 1994 25:49:37 GMT",  # no such hour
        "Sun, 06 Nov 1994 08:49:37 PST",  # HTTP dates are always GMT
        "06 Nov 1994",
        "Sun Nov  6 08:49:37 0000",  # no year 0
        "Thu, 29 Feb 1900 00:00:00 GMT",  # 1900 was not a leap year
        b"\xff\xfe",
    ],
)
def test_garbage_gives_none(value: str | bytes | None) -> None:
    assert parse_retry_after(value, now=EXAMPLE) is None


def test_absurd_values_are_returned_as_they_are() -> None:
    # The controller caps them; the parser only reads.
    assert parse_retry_after("999999999", now=EXAMPLE) == 999999999.0
    far = parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now=EXAMPLE)
    assert far is not None
    assert far > 2e11
    huge = parse_retry_after("9" * 400, now=EXAMPLE)
    assert huge is not None
    assert huge > 1e300


@given(st.integers(min_value=0, max_value=10**12))
def test_any_delta_seconds_round_trips(seconds: int) -> None:
    assert parse_retry_after(str(seconds), now=EXAMPLE) == float(seconds)


@given(st.text(max_size=40))
def test_never_raises_on_text(value: str) -> None:
    result = parse_retry_after(value, now=EXAMPLE)
    assert result is None or result >= 0.0


@given(st.binary(max_size=40))
def test_never_raises_on_bytes(value: bytes) -> None:
    result = parse_retry_after(value, now=EXAMPLE)
    assert result is None or result >= 0.0


@given(
    st.integers(min_value=0, max_value=253402300799),  # up to 9999-12-31 23:59:59
    st.integers(min_value=0, max_value=10**6),
)
def test_any_imf_fixdate_round_trips(timestamp: int, ahead: int) -> None:
    value = email.utils.formatdate(timestamp, usegmt=True)
    assert parse_retry_after(value, now=float(timestamp - ahead)) == float(ahead)
