"""Integers longer than Python's int-string limit (4300 digits) in a URL.

``int()`` of such a string raises ValueError. The canonicalizer's promise is
that no input raises and that a URL it cannot parse is its own key after
stage 1; a port of 5,000 digits is no port (not 0-65535), and a host of 5,000
digits is no IPv4 address, so it is kept as written. Tested on the unguarded
stages too: the top-level guard would hide a raise and return the URL
without its stage 1.
"""

from __future__ import annotations

import pytest

from scrapy_aimd.core.canonical import (
    Canonicalizer,
    canonical_host,
    canonical_netloc,
    canonical_port,
    canonicalize_url,
    changed_stages,
)

BIG = "9" * 5000
_unguarded = Canonicalizer()._canonicalize


def test_a_port_past_the_limit_is_no_port() -> None:
    assert canonical_port("http", BIG) is None
    assert canonical_netloc("http", f"example.com:{BIG}") is None


def test_leading_zeros_however_many_still_read_as_the_port() -> None:
    assert canonical_port("http", "0" * 5000 + "80") == ""
    assert canonical_port("http", "0" * 5000 + "8080") == ":8080"
    assert canonical_port("http", "0" * 5000) == ":0"


@pytest.mark.parametrize(
    "host",
    [BIG, f"1.{BIG}", f"1.2.{BIG}", f"{BIG}.1", f"a.{BIG}", "1" + "0" * 5000],
)
def test_a_host_of_too_many_digits_is_kept_as_written(host: str) -> None:
    assert canonical_host(host) == host
    assert canonical_host(host.upper() + ".") == host


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # No port: the URL is its own key, after stage 1 (the scheme's case, the
        # surrounding space).
        (f" HTTP://Example.com:{BIG}/a ", f"http://Example.com:{BIG}/a"),
        # Hosts that are no IPv4 address: the other stages go on.
        (f"http://{BIG}/a/../b?b=1&a=2", f"http://{BIG}/b?a=2&b=1"),
        (f"http://1.{BIG}:80/", f"http://1.{BIG}/"),
        # A long number in the path or the query is no number to anyone.
        (f"http://example.com/{BIG}?n={BIG}", f"http://example.com/{BIG}?n={BIG}"),
    ],
)
def test_urls_with_long_integers_are_canonicalized_without_raising(url: str, expected: str) -> None:
    assert _unguarded(url) == expected
    assert canonicalize_url(url) == expected


def test_the_stages_that_change_such_a_url_are_named() -> None:
    assert changed_stages(f" http://example.com:{BIG}/a") == ("clean",)
    assert changed_stages(f"http://{BIG}./a") == ("host",)
