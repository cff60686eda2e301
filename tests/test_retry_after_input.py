"""Retry-After headers folded into one line, as a proxy or a framework may join
two headers: ``120, 120``. Read value by value; when they disagree, the
largest wait wins, as between separate headers (coming back before one of
them said to would be refused again)."""

from __future__ import annotations

import calendar
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrapy_aimd.core.retry_after import longest_retry_after, parse_retry_after

# 1994-11-06 08:49:37 UTC, the example date of RFC 9110 section 5.6.7.
EXAMPLE = float(calendar.timegm((1994, 11, 6, 8, 49, 37)))
DATE = "Sun, 06 Nov 1994 08:49:37 GMT"  # EXAMPLE
LATER = "Sun, 06 Nov 1994 08:51:37 GMT"  # EXAMPLE + 120


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120, 120", 120.0),
        ("120,120", 120.0),
        (b"120, 120", 120.0),
        (" 120 ,\t120 ", 120.0),
        ("30, 120", 120.0),  # they disagree: the largest
        ("120, 30", 120.0),
        ("1.5, 0", 1.5),
        ("120, , 120", 120.0),  # empty list elements are ignored (RFC 9110 5.6.1)
        (",120", 120.0),
        (f"{DATE}, {DATE}", 90.0),  # dates carry a comma of their own
        (f"{DATE}, {LATER}", 210.0),
        (f"{LATER}, {DATE}", 210.0),
        (f"60, {LATER}", 210.0),
        (f"{DATE}, 300", 300.0),
        ("Sunday, 06-Nov-94 08:49:37 GMT, 10", 90.0),  # RFC 850, comma too
        ("Sun Nov  6 08:49:37 1994, 10", 90.0),  # asctime, no comma
        ("soon, 120", 120.0),  # an unreadable element is left out, as a header would be
        ("120, soon", 120.0),
    ],
)
def test_a_folded_header_is_read_value_by_value(value: str | bytes, expected: float) -> None:
    assert parse_retry_after(value, now=EXAMPLE - 90) == expected


@pytest.mark.parametrize("value", [",", " , ", "soon, later", "-5, -6", "Sun, Mon", "1 2, 3 4"])
def test_a_folded_header_with_nothing_readable_is_none(value: str) -> None:
    assert parse_retry_after(value, now=EXAMPLE) is None


def test_folded_and_separate_headers_together() -> None:
    assert longest_retry_after(["5, 7", "6"], now=EXAMPLE) == 7.0
    assert longest_retry_after(["5", b"120, 120"], now=EXAMPLE) == 120.0


@given(st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=5))
def test_a_folded_list_of_deltas_reads_as_its_largest(seconds: list[int]) -> None:
    value = ", ".join(str(s) for s in seconds)
    assert parse_retry_after(value, now=EXAMPLE) == float(max(seconds))


@given(st.text(alphabet=st.sampled_from("0123456789,. -:GMTSunNov"), max_size=60))
def test_never_raises_on_comma_lists(value: str) -> None:
    result = parse_retry_after(value, now=EXAMPLE)
    assert result is None or 0.0 <= result < math.inf
