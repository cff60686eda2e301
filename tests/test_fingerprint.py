"""AimdRequestFingerprinter: 8-byte keys over canonical URLs, rules included."""

from __future__ import annotations

import gc

import pytest
from scrapy import Request
from scrapy.utils.request import RequestFingerprinter
from scrapy.utils.test import get_crawler

from scrapy_aimd.core.canonical import Canonicalizer
from scrapy_aimd.fingerprint import (
    CANONICAL_SETTINGS,
    AimdRequestFingerprinter,
    canonicalizer_from_settings,
    request_key_function,
    rules_id_of,
)
from scrapy_aimd.settings import AimdSettingsError


@pytest.fixture
def fingerprinter() -> AimdRequestFingerprinter:
    return AimdRequestFingerprinter()


def test_eight_bytes_and_the_int_key(fingerprinter: AimdRequestFingerprinter) -> None:
    request = Request("http://example.com/a")
    digest = fingerprinter.fingerprint(request)
    assert isinstance(digest, bytes)
    assert len(digest) == 8
    assert fingerprinter.request_key(request) == int.from_bytes(digest, "big")
    assert 0 <= fingerprinter.request_key(request) < 1 << 64


def test_stable_across_instances() -> None:
    url = "http://example.com/a?b=1"
    first = AimdRequestFingerprinter().fingerprint(Request(url))
    second = AimdRequestFingerprinter().fingerprint(Request(url))
    assert first == second


def test_canonical_variants_share_a_fingerprint(fingerprinter: AimdRequestFingerprinter) -> None:
    urls = [
        "http://example.com/a",
        "http://EXAMPLE.com:80/a/",
        "http://example.com/a?utm_source=x#top",
        "http://example.com/./a?fbclid=1",
    ]
    assert len({fingerprinter.fingerprint(Request(url)) for url in urls}) == 1


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (Request("http://example.com/a"), Request("http://example.com/b")),
        (Request("http://example.com/a"), Request("http://example.com/a", method="POST")),
        (
            Request("http://example.com/a", method="POST", body=b"x=1"),
            Request("http://example.com/a", method="POST", body=b"x=2"),
        ),
        # the URL's length keeps URL and body apart
        (
            Request("http://example.com/a", method="POST", body=b"b"),
            Request("http://example.com/ab", method="POST", body=b""),
        ),
    ],
)
def test_method_url_and_body_count(
    fingerprinter: AimdRequestFingerprinter, first: Request, second: Request
) -> None:
    assert fingerprinter.fingerprint(first) != fingerprinter.fingerprint(second)


def test_verbatim_url_skips_canonicalization(fingerprinter: AimdRequestFingerprinter) -> None:
    plain = Request("http://example.com/a/?utm_source=x")
    verbatim = Request("http://example.com/a/?utm_source=x", meta={"verbatim_url": True})
    canonical = Request("http://example.com/a")
    assert fingerprinter.fingerprint(plain) == fingerprinter.fingerprint(canonical)
    assert fingerprinter.fingerprint(verbatim) != fingerprinter.fingerprint(canonical)
    # meta changed after a first fingerprint: the cache follows the flag
    plain.meta["verbatim_url"] = True
    assert fingerprinter.fingerprint(plain) == fingerprinter.fingerprint(verbatim)
    plain.meta["verbatim_url"] = False
    assert fingerprinter.fingerprint(plain) == fingerprinter.fingerprint(canonical)


def test_rules_are_part_of_the_digest() -> None:
    # "/a" canonicalizes to "/a" under both rules, yet the keys differ: keys
    # from other rules must never pass for ours.
    request = Request("http://example.com/a")
    default = AimdRequestFingerprinter()
    keep = AimdRequestFingerprinter(canonicalizer=Canonicalizer(trailing_slash="keep"))
    assert default.canonicalizer.canonicalize(request.url) == keep.canonicalizer.canonicalize(
        request.url
    )
    assert default.fingerprint(request) != keep.fingerprint(request)
    assert default.rules_id != keep.rules_id


def test_cached_per_request_object(fingerprinter: AimdRequestFingerprinter) -> None:
    calls: list[str] = []
    real = fingerprinter._canonicalize

    def counting(url: str) -> str:
        calls.append(url)
        return real(url)

    fingerprinter._canonicalize = counting
    request = Request("http://example.com/a")
    first = fingerprinter.request_key(request)
    assert fingerprinter.request_key(request) == first
    assert fingerprinter.fingerprint(request) == first.to_bytes(8, "big")
    assert len(calls) == 1
    fingerprinter.request_key(Request("http://example.com/a"))
    assert len(calls) == 2
    del request
    gc.collect()
    assert len(fingerprinter._cache) == 0


def test_url_key_matches_request_key(fingerprinter: AimdRequestFingerprinter) -> None:
    request = Request("http://example.com/a/", method="POST", body=b"x")
    assert fingerprinter.url_key("POST", "http://example.com/a", b"x") == (
        fingerprinter.request_key(request)
    )


def test_from_crawler_reads_the_settings() -> None:
    crawler = get_crawler(
        settings_dict={
            "REQUEST_FINGERPRINTER_CLASS": "scrapy_aimd.fingerprint.AimdRequestFingerprinter",
            "AIMD_CANONICAL_TRAILING_SLASH": "keep",
            "AIMD_KEEP_PARAMS": ["utm_source"],
        }
    )
    fingerprinter = crawler.request_fingerprinter
    assert isinstance(fingerprinter, AimdRequestFingerprinter)
    assert fingerprinter.canonicalizer.canonicalize("http://x/a/?utm_source=1&fbclid=2") == (
        "http://x/a/?utm_source=1"
    )


def test_lazy_import_from_the_package() -> None:
    import scrapy_aimd

    assert scrapy_aimd.AimdRequestFingerprinter is AimdRequestFingerprinter


def test_key_function_and_rules_id_for_other_fingerprinters() -> None:
    ours = AimdRequestFingerprinter()
    assert request_key_function(ours) == ours.request_key
    assert rules_id_of(ours) == ours.rules_id
    stock = RequestFingerprinter()
    request = Request("http://example.com/a")
    key = request_key_function(stock)(request)
    assert key == int.from_bytes(stock.fingerprint(request)[:8], "big")
    assert rules_id_of(stock) == "fingerprinter:scrapy.utils.request.RequestFingerprinter"


# --- Settings -----------------------------------------------------------------


def test_from_settings_defaults() -> None:
    canonicalizer = canonicalizer_from_settings({})
    assert canonicalizer.rules_id == Canonicalizer().rules_id
    assert set(CANONICAL_SETTINGS) == {
        "AIMD_CANONICAL_TRAILING_SLASH",
        "AIMD_CANONICAL_FRAGMENTS",
        "AIMD_STRIP_PARAMS",
        "AIMD_KEEP_PARAMS",
    }


def test_from_settings_values() -> None:
    canonicalizer = canonicalizer_from_settings(
        {
            "AIMD_CANONICAL_TRAILING_SLASH": "keep",
            "AIMD_CANONICAL_FRAGMENTS": "hashbang",
            "AIMD_STRIP_PARAMS": "sessionid, trk_*",  # as from -s on the command line
            "AIMD_KEEP_PARAMS": ["utm_id"],
        }
    )
    url = "http://x/a/?utm_id=1&sessionid=2&trk_a=3&utm_source=4#!/r"
    assert canonicalizer.canonicalize(url) == "http://x/a/?utm_id=1#!/r"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AIMD_CANONICAL_TRAILING_SLASH", "add"),
        ("AIMD_CANONICAL_FRAGMENTS", True),
        ("AIMD_STRIP_PARAMS", [1, 2]),
        ("AIMD_STRIP_PARAMS", ["a=b"]),
        ("AIMD_STRIP_PARAMS", ["*"]),
        ("AIMD_KEEP_PARAMS", ["a*b"]),
        ("AIMD_KEEP_PARAMS", 5),
    ],
)
def test_from_settings_rejects_invalid_values(name: str, value: object) -> None:
    with pytest.raises(AimdSettingsError, match=name):
        canonicalizer_from_settings({name: value})


def redirect(url: str, *sources: str) -> Request:
    return Request(url, meta={"redirect_urls": list(sources)})


def test_a_redirect_to_a_url_of_the_same_key_has_a_fingerprint_of_its_own() -> None:
    """The HTTP cache's key: under its source's fingerprint, the hop from /a to
    /a/ would be answered from the cache with the redirect it follows."""
    fp = AimdRequestFingerprinter()
    source, hop = (
        Request("http://example.com/a"),
        redirect("http://example.com/a/", "http://example.com/a"),
    )
    assert fp.request_key(hop) == fp.request_key(source)  # one page for duplicates
    assert fp.fingerprint(hop) != fp.fingerprint(source)
    # its own and steady: the same hop in the next crawl finds its cached answer
    again = redirect("http://example.com/a/", "http://example.com/a")
    assert fp.fingerprint(again) == fp.fingerprint(hop)
    # a redirect to another page, and a loop back, keep the plain fingerprint
    other = redirect("http://example.com/b", "http://example.com/a")
    assert fp.fingerprint(other) == fp.fingerprint(Request("http://example.com/b"))
    loop = redirect("http://example.com/a", "http://example.com/a", "http://example.com/a/")
    assert fp.fingerprint(loop) == fp.fingerprint(source)
