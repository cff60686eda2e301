"""Host keys of URLs whose port no server could listen on: never an exception.

The module's convention for input it cannot read is the empty key (an
unparseable URL gives ""), and so it is for a port that is no port: not ASCII
digits, or a number past 65535 (Python's own ``urlsplit(...).port`` refuses
each of them).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrapy_aimd.core.hosts import host_key, host_key_from_netloc

BAD_PORTS = [
    "\u0661\u0662",  # Arabic-Indic digits: str.isdigit() is true, int() reads them
    "\u00b2",  # a superscript two: isdigit() is true, int() raises
    "9" * 5000,  # past Python's 4300-digit int conversion limit
    "99999",  # past 65535
    "abc",
    "80abc",
    " 80",
]


@pytest.mark.parametrize("port", BAD_PORTS)
def test_a_port_that_is_no_port_gives_the_empty_key(port: str) -> None:
    assert host_key(f"http://example.com:{port}/a") == ""
    assert host_key_from_netloc("http", f"example.com:{port}") == ""
    assert host_key_from_netloc("https", f"user:pw@[::1]:{port}") == ""


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://example.com:0080/", "example.com"),  # leading zeros: still port 80
        ("http://example.com:" + "0" * 5000 + "8080/", "example.com:8080"),
        ("http://example.com:65535/", "example.com:65535"),
        ("http://example.com:/", "example.com"),  # empty: the default, as before
    ],
)
def test_ports_that_are_ports_keep_their_keys(url: str, key: str) -> None:
    assert host_key(url) == key


@given(st.text(max_size=30))
def test_host_key_never_raises_on_any_port(port: str) -> None:
    key = host_key_from_netloc("http", f"example.com:{port}")
    assert isinstance(key, str)
