"""Retry-After parsing: delta-seconds and the three HTTP-date forms of RFC 9110."""

from __future__ import annotations

import calendar
import email.utils
import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrapy_aimd.core.controller import ControllerConfig, HostController
from scrapy_aimd.core.retry_after import longest_retry_after, parse_retry_after

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


def test_a_value_too_large_for_a_float_is_capped_not_ignored() -> None:
    # float("9" * 400) is inf, which the controller ignores as it must ignore
    # any non-finite number: the host would not be paused at all.
    seconds = parse_retry_after("9" * 400, now=EXAMPLE)
    assert seconds is not None
    assert math.isfinite(seconds)
    host = HostController(ControllerConfig(max_retry_after=3600.0))
    host.finish(host.start(0.0), 0.1, status=429, latency=0.1, retry_after=seconds)
    assert host.paused_until == pytest.approx(0.1 + 3600.0)


def test_of_several_headers_the_longest_wins() -> None:
    assert longest_retry_after(["5", b"120", "30"], now=EXAMPLE) == 120.0
    # Whatever the order: a date and a delta, the later end wins.
    date = "Sun, 06 Nov 1994 08:49:37 GMT"
    assert longest_retry_after(["10", date], now=EXAMPLE - 90) == 90.0
    assert longest_retry_after([date, "100"], now=EXAMPLE - 90) == 100.0
    # Unreadable ones are left out; none readable is None.
    assert longest_retry_after(["soon", "7"], now=EXAMPLE) == 7.0
    assert longest_retry_after(["soon", b"\xff"], now=EXAMPLE) is None
    assert longest_retry_after([], now=EXAMPLE) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # A two-digit year is read relative to now, not pivoted at 1969:
        # "99" in 2050 is 2099, less than 50 years ahead.
        ("Thursday, 31-Dec-99 23:59:59 GMT", "2099-12-31 23:59:59"),
        # A four-digit year is the year as written, even below 100.
        ("Sun, 06 Nov 0094 08:49:37 GMT", None),
        # A leap second (RFC 9110 allows second 60).
        ("Sat, 31 Dec 2050 23:59:60 GMT", "2051-01-01 00:00:00"),
        # Numeric zero offsets are GMT by another name.
        ("Sat, 31 Dec 2050 23:59:59 +0000", "2050-12-31 23:59:59"),
        ("Sat, 31 Dec 2050 23:59:59 -0000", "2050-12-31 23:59:59"),
    ],
)
def test_dates_read_as_rfc_9110_says(value: str, expected: str | None) -> None:
    now_2050 = float(calendar.timegm((2050, 1, 1, 0, 0, 0)))
    seconds = parse_retry_after(value, now=now_2050)
    if expected is None:  # in the past
        assert seconds == 0.0
        return
    at = calendar.timegm(time.strptime(expected, "%Y-%m-%d %H:%M:%S"))
    assert seconds == at - now_2050


@pytest.mark.parametrize(
    "value",
    [
        "Sun, 06 Nov 1994 08:49:37 +0100",  # not GMT
        "Sun, 06 Nov 994 08:49:37 GMT",  # three-digit year
        "Sun, 06 Nov 1994 08:49:61 GMT",
        "Sun, 06 Nov 99999999999999999999 08:49:37 GMT",
        "١٢٠",  # Arabic-Indic digits are not delta-seconds
        "Sun, 06 Nov ١٩٩٤ 08:49:37 GMT",
    ],
)
def test_more_garbage_gives_none(value: str) -> None:
    assert parse_retry_after(value, now=EXAMPLE) is None


@given(st.lists(st.text(max_size=40) | st.binary(max_size=40), max_size=4))
def test_longest_never_raises(values: list[str | bytes]) -> None:
    result = longest_retry_after(values, now=EXAMPLE)
    assert result is None or 0.0 <= result < math.inf
