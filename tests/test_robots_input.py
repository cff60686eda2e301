"""robots.txt as hostile or broken sites serve it, read without a crash and
without losing the origin: what the pure parts make of it (the real crawls
are in tests/test_crawl_robots_input.py)."""

from __future__ import annotations

import gzip
import hashlib
import zlib

import brotli
import pytest

try:
    from compression import zstd  # Python 3.14
except ImportError:
    from backports import zstd
from scrapy import Request

from scrapy_aimd.core.robots import (
    MAX_BYTES,
    RobotsBook,
    Verdict,
    content_codings,
    decoded_body,
    decoded_prefix,
    parse_rules,
    resolve_sitemaps,
)
from scrapy_aimd.crawl import request_origin

ORIGIN = "http://a.test"
UA = "aimdbot"
RULES = b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\n"


def fetched(body: bytes, origin: str = ORIGIN) -> tuple[RobotsBook, object]:
    book = RobotsBook()
    book.started(origin)
    return book, book.fetched(origin, 0.0, 200, body, UA)


# -- a byte order mark ------------------------------------------------------------


def test_a_utf8_bom_is_dropped_so_the_first_line_is_read() -> None:
    book, result = fetched(b"\xef\xbb\xbf" + RULES)
    assert book.verdict(ORIGIN, f"{ORIGIN}/private", UA) is Verdict.DENY
    assert book.verdict(ORIGIN, f"{ORIGIN}/public", UA) is Verdict.ALLOW
    assert result.crawl_delay == 2.0  # type: ignore[attr-defined]
    assert not parse_rules(b"\xef\xbb\xbf" + RULES).can_fetch(f"{ORIGIN}/private", UA)


def test_only_a_leading_bom_is_dropped() -> None:
    book, _ = fetched(b"\xef\xbb\xbf" + b"\xef\xbb\xbfUser-agent: *\nDisallow: /x\n")
    # A second BOM is text of the first line, as any other character would be.
    assert book.verdict(ORIGIN, f"{ORIGIN}/x", UA) is Verdict.ALLOW


# -- Crawl-delay that is no delay ---------------------------------------------------


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "NaN", "inf", "-inf", "1e400", "2s"])
def test_an_invalid_crawl_delay_of_the_agents_group_is_reported(value: str) -> None:
    _, result = fetched(f"User-agent: *\nCrawl-delay: {value}\nDisallow: /x\n".encode())
    assert result.crawl_delay is None  # type: ignore[attr-defined]
    assert result.crawl_delay_invalid == value  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "line", ["Crawl-delay:soon", "crawl delay: soon", "Crawl-Delay soon", "CRAWL-DELAY: soon # x"]
)
def test_every_spelling_protego_reads_is_seen(line: str) -> None:
    _, result = fetched(f"User-agent: *\n{line}\n".encode())
    assert result.crawl_delay_invalid == "soon"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "body",
    [
        b"User-agent: otherbot\nCrawl-delay: soon\n\nUser-agent: *\nDisallow: /x\n",
        b"User-agent: *\nCrawl-delay: 3\nCrawl-delay: soon\n",  # the valid one is used
        b"User-agent: *\nCrawl-delay:\n",  # no value: no Crawl-delay at all
        b"Crawl-delay: soon\nUser-agent: *\n",  # before any group: Protego reads none
    ],
)
def test_an_invalid_crawl_delay_that_does_not_apply_is_not_reported(body: bytes) -> None:
    _, result = fetched(body)
    assert result.crawl_delay_invalid is None  # type: ignore[attr-defined]


def test_many_invalid_crawl_delays_name_the_one_that_applies() -> None:
    lines = "".join(f"User-agent: bot{i}\nCrawl-delay: bad{i}\n\n" for i in range(50))
    body = f"{lines}User-agent: {UA}\nCrawl-delay: mine\n".encode()
    _, result = fetched(body)
    assert result.crawl_delay_invalid == "mine"  # type: ignore[attr-defined]


# -- Sitemap lines -----------------------------------------------------------------


def test_sitemaps_are_resolved_against_the_robots_url_and_invalid_ones_set_apart() -> None:
    values = [
        "https://o.test/a.xml",
        "/s.xml",
        "s2.xml",
        "//cdn.test/s.xml",
        "http://[bad",
        "ftp://a.test/s.xml",
        "javascript:alert(1)",
        "http://a.test:99999/s.xml",
        "http:///s.xml",
        "  /padded.xml  ",
    ]
    valid, invalid = resolve_sitemaps("https://a.test:8443", values)
    assert valid == [
        "https://o.test/a.xml",
        "https://a.test:8443/s.xml",
        "https://a.test:8443/s2.xml",
        "https://cdn.test/s.xml",
        "https://a.test:8443/padded.xml",
    ]
    assert invalid == [
        "http://[bad",
        "ftp://a.test/s.xml",
        "javascript:alert(1)",
        "http://a.test:99999/s.xml",
        "http:///s.xml",
    ]
    for url in valid:
        Request(url)  # each can be requested


# -- Content-Encoding --------------------------------------------------------------

BIG = RULES + b"# padding padding padding\n" * 400_000  # 10 MiB


def test_br_and_zstd_are_inflated_to_just_past_the_limit() -> None:
    for encoding, packed in (("br", brotli.compress(BIG)), ("zstd", zstd.compress(BIG))):
        assert len(packed) < 100_000
        prefix = decoded_prefix(packed, encoding)
        assert prefix is not None and len(prefix) == MAX_BYTES + 1, encoding
        assert prefix.startswith(RULES)
        assert decoded_prefix(packed, encoding.upper() + " ") is not None
    assert decoded_prefix(brotli.compress(RULES), "br") == RULES
    assert decoded_prefix(zstd.compress(RULES), "zstd") == RULES


@pytest.mark.parametrize(
    ("encoding", "pack"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("br", brotli.compress),
        ("zstd", zstd.compress),
    ],
)
def test_a_stream_cut_short_gives_what_it_holds(encoding: str, pack: object) -> None:
    # Text that compresses little, so that half the stream holds whole blocks.
    lines = (hashlib.sha256(str(i).encode()).hexdigest() for i in range(40_000))
    packed = pack(RULES + "".join(f"# {line}\n" for line in lines).encode())  # type: ignore[operator]
    prefix = decoded_prefix(packed[: len(packed) // 2], encoding)
    assert prefix is not None and prefix.startswith(RULES), encoding


@pytest.mark.parametrize("encoding", ["gzip", "x-gzip", "deflate", "br", "zstd"])
def test_a_broken_stream_is_none(encoding: str) -> None:
    assert decoded_prefix(b"\x00\x01 this is no compressed stream at all " * 10, encoding) is None


def test_codings_are_listed_in_the_order_applied() -> None:
    assert content_codings([b"gzip"]) == ["gzip"]
    assert content_codings([b"gzip, br"]) == ["gzip", "br"]
    assert content_codings([b"gzip", b" BR "]) == ["gzip", "br"]
    assert content_codings([b"identity"]) == []
    assert content_codings([b", identity ,"]) == []


def test_several_codings_are_undone_in_reverse() -> None:
    packed = brotli.compress(gzip.compress(RULES))
    assert decoded_body(packed, ["gzip", "br"]) == RULES
    assert decoded_body(RULES, []) == RULES
    assert decoded_body(gzip.compress(RULES), ["compress"]) is None  # unknown: unreadable
    assert decoded_body(b"garbage", ["gzip"]) is None


# -- the origin of a request ---------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://example.com:80/a", "http://example.com"),
        ("https://example.com:443/a", "https://example.com"),
        ("http://example.com:443/a", "http://example.com:443"),
        ("https://example.com:80/a", "https://example.com:80"),
        ("http://example.com./a", "http://example.com"),
        ("http://Example.COM/a", "http://example.com"),
        ("HTTP://EXAMPLE.com.:0080/a", "http://example.com"),
        ("http://user:secret@Example.com.:80/", "http://example.com"),
        ("http://[::1]:80/", "http://[::1]"),
        ("http://[::1]:8080/", "http://[::1]:8080"),
        ("http://example.com:8080/", "http://example.com:8080"),
    ],
)
def test_one_site_is_one_origin(url: str, origin: str) -> None:
    assert request_origin(Request(url)) == origin
