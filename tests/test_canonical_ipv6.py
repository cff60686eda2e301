"""IPv6 hosts take one text on every Python: hexadecimal pieces, the first
longest run of two or more zero pieces as ``::`` (RFC 5952 §4.2), as the URL
Standard writes them. Python 3.13's ``ipaddress`` writes an IPv4-mapped
address with a dotted IPv4 tail (``::ffff:1.2.3.4``) where 3.10 to 3.12 write
``::ffff:102:304``: keys made from it would differ between the workers of a
fleet, or across a JOBDIR resumed after an upgrade."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrapy_aimd.core.canonical import canonical_host, canonicalize_url, ipv6_text


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("[::ffff:1.2.3.4]", "[::ffff:102:304]"),
        ("[::FFFF:102:304]", "[::ffff:102:304]"),
        ("[0:0:0:0:0:ffff:0102:0304]", "[::ffff:102:304]"),
        ("[::1.2.3.4]", "[::102:304]"),
        ("[1:0:0:2:0:0:0:3]", "[1:0:0:2::3]"),
        ("[1:0:0:2:0:0:3:4]", "[1::2:0:0:3:4]"),
        ("[0:0:1:0:0:0:0:0]", "[0:0:1::]"),
        ("[1:0:2:3:4:5:6:7]", "[1:0:2:3:4:5:6:7]"),
        ("[::]", "[::]"),
        ("[::0:1]", "[::1]"),
    ],
)
def test_ipv6_hosts_are_written_one_way(host: str, expected: str) -> None:
    assert canonical_host(host) == expected


def test_an_ipv4_mapped_url_has_one_key() -> None:
    assert canonicalize_url("http://[::ffff:1.2.3.4]:80/a") == "http://[::ffff:102:304]/a"


@given(st.integers(min_value=0, max_value=2**128 - 1))
def test_the_text_is_the_address_compressed(number: int) -> None:
    address = ipaddress.IPv6Address(number)
    text = ipv6_text(address)
    assert ipaddress.IPv6Address(text) == address
    assert "." not in text
    pieces = address.exploded.split(":")
    runs = [
        (start, end)
        for start in range(8)
        for end in range(start + 2, 9)
        if all(piece == "0000" for piece in pieces[start:end])
    ]
    if runs:
        longest = max(end - start for start, end in runs)
        start, end = min((s, e) for s, e in runs if e - s == longest)
        head = ":".join(f"{int(piece, 16):x}" for piece in pieces[:start])
        tail = ":".join(f"{int(piece, 16):x}" for piece in pieces[end:])
        assert text == f"{head}::{tail}"
    else:
        assert text == ":".join(f"{int(piece, 16):x}" for piece in pieces)
