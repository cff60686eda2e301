"""The 8 canonicalization stages, one by one, then together.

w3lib's ``tests/test_url.py`` (TestCanonicalizeUrl) is the model: its cases
appear below, as agreements or, where our rules differ, with the reason.
"""

from __future__ import annotations

import subprocess
import sys
import time
from importlib.metadata import version

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from w3lib.url import canonicalize_url as w3lib_canonicalize_url

from scrapy_aimd.core.canonical import (
    FRAGMENT,
    PATH,
    QUERY,
    STAGES,
    USERINFO,
    Canonicalizer,
    TrackingRules,
    canonical_fragment,
    canonical_host,
    canonical_netloc,
    canonical_port,
    canonicalize_url,
    changed_stages,
    clean,
    normalize_path,
    normalize_percent_encoding,
    query_keys,
    remove_dot_segments,
    sort_query,
    split_query,
)

# --- Stage 1: clean -----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://example.com/", "http://example.com/"),
        (" http://example.com/ ", "http://example.com/"),
        ("\x00\x1f http://example.com/\x7f", "http://example.com/\x7f"),  # DEL is not C0
        ("http://exa\tmple.com/a\nb\rc", "http://example.com/abc"),
        ("HTTP://Example.COM/Path", "http://Example.COM/Path"),  # host is stage 2
        ("HtTpS://x/", "https://x/"),
        ("Mailto:Someone@Example.com", "mailto:Someone@Example.com"),
        ("no scheme here", "no scheme here"),
        ("", ""),
        ("\u00a0http://x/", "\u00a0http://x/"),  # only C0 and space are "surrounding"
    ],
)
def test_clean(url: str, expected: str) -> None:
    assert clean(url) == expected
    assert clean(expected) == expected


# --- Stage 2: host ------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("www.EXAMPLE.com", "www.example.com"),
        ("example.com.", "example.com"),
        ("example.com..", "example.com"),
        ("", ""),
        # IDN (w3lib's test_safe_url_idna cases): UTS #46 to Punycode
        ("www.färgbolaget.nu", "www.xn--frgbolaget-q5a.nu"),
        ("www.räksmörgås.se", "www.xn--rksmrgs-5wao1o.se"),
        ("www.brændendekærlighed.com", "www.xn--brndendekrlighed-vobh.com"),
        ("www.예비교사.com", "www.xn--9d0bm53a3xbzui.com"),
        ("理容ナカムラ.com", "xn--lck1c3crb1723bpq4a.com"),
        ("あーるいん.com", "xn--l8je6s7a45b.com"),
        ("www.bücher.de", "www.xn--bcher-kva.de"),
        ("はじめよう.みんな", "xn--p8j9a0d9c9a.xn--q9jyb4c"),
        ("кто.рф", "xn--j1ail.xn--p1ai"),
        ("내도메인.한국", "xn--220b31d95hq8o.xn--3e0b707e"),
        ("nic.شبكة", "nic.xn--ngbc5azd"),
        ("www.贷款.在线", "www.xn--0kwr83e.xn--3ds443g"),
        ("www2.xn--0kwr83e.在线", "www2.xn--0kwr83e.xn--3ds443g"),
        ("WWW.Bücher.DE", "www.xn--bcher-kva.de"),  # case folds before Punycode
        # UTS #46 maps full-width forms
        ("\uff25\uff38\uff21\uff2d\uff30\uff2c\uff25.com", "example.com"),
        ("bücher.de。", "xn--bcher-kva.de"),  # ideographic full stop as trailing dot
        # Non-transitional UTS #46: "ß" stays "ß" (IDNA 2003, w3lib's, made it "ss")
        ("straße.de", "xn--strae-oqa.de"),
        # IPv4 forms that the URL Standard (and so browsers) read as addresses
        ("127.0.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0x7F.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("1.2.3.4.", "1.2.3.4"),
        ("0x", "0.0.0.0"),
        # Not IPv4: left as names
        ("1.2.3.256.5", "1.2.3.256.5"),
        ("256.1.1.1", "256.1.1.1"),
        ("4294967296", "4294967296"),
        ("08.1.1.1", "08.1.1.1"),
        ("1_0.0.0.1", "1_0.0.0.1"),
        ("cafe", "cafe"),
        ("example.0xg", "example.0xg"),
        # IPv6, compressed (RFC 5952)
        ("[::0:1]", "[::1]"),
        ("[2001:DB8:0:0:0:0:0:1]", "[2001:db8::1]"),
        ("[not-ipv6]", "[not-ipv6]"),
        ("[V1.Future]", "[v1.future]"),
    ],
)
def test_canonical_host(host: str, expected: str) -> None:
    assert canonical_host(host) == expected
    assert canonical_host(expected) == expected


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        # IDNA 2008 refuses these; UTS #46 mapping then Punycode still names
        # the host a browser reaches.
        ("my_host.bücher.de", "my_host.xn--bcher-kva.de"),
        ("é..com", "xn--9ca..com"),
        ("x" * 70 + "é.com", "xn--" + "x" * 70 + "-9eg.com"),
        # U+FF0F maps to "/": written percent-encoded, never as a delimiter
        ("a\uff0fb.com", "a%ef%bc%8fb.com"),
        ("\udc80x.com", "%ed%b2%80x.com"),
    ],
)
def test_canonical_host_fallbacks_are_stable(host: str, expected: str) -> None:
    assert canonical_host(host) == expected
    assert canonical_host(expected) == expected


def test_host_cache_is_bounded() -> None:
    info = canonical_host.cache_info()
    assert info.maxsize is not None
    assert canonical_netloc.cache_info().maxsize is not None


# --- Stage 3: port ------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "port", "expected"),
    [
        ("http", "", ""),
        ("http", "80", ""),
        ("http", "0080", ""),
        ("https", "443", ""),
        ("https", "80", ":80"),
        ("http", "443", ":443"),
        ("ws", "80", ""),
        ("wss", "443", ""),
        ("ftp", "21", ""),
        ("http", "8080", ":8080"),
        ("http", "08080", ":8080"),
        ("http", "0", ":0"),
        ("http", "65535", ":65535"),
        ("http", "65536", None),
        ("http", "8o", None),
        ("http", "٨٠", None),  # Arabic-Indic digits are not a port
        ("foo", "80", ":80"),
    ],
)
def test_canonical_port(scheme: str, port: str, expected: str | None) -> None:
    assert canonical_port(scheme, port) == expected


@pytest.mark.parametrize(
    ("netloc", "expected"),
    [
        ("Example.COM:80", "example.com"),
        ("example.com:", "example.com"),
        ("User:PaSs@Example.com", "User:PaSs@example.com"),  # userinfo keeps its case
        ("@example.com", "example.com"),  # empty userinfo sends the same request
        ("us%65r:p%3aw@example.com", "user:p%3Aw@example.com"),
        ("us er@example.com", "us%20er@example.com"),
        ("[::0:1]:80", "[::1]"),
        ("[::1]x", None),
        ("[::1", None),
        ("a:b:c", None),
        ("example.com:http", None),
    ],
)
def test_canonical_netloc(netloc: str, expected: str | None) -> None:
    assert canonical_netloc("http", netloc) == expected


# --- Stage 4: percent-encoding ----------------------------------------------


@pytest.mark.parametrize(
    ("text", "component", "expected"),
    [
        ("/already/clean", PATH, "/already/clean"),
        ("/a%2fb", PATH, "/a%2Fb"),  # uppercase hex, reserved escape kept
        ("/%7Euser/%41%42%2D%2e%5F", PATH, "/~user/AB-._"),  # unreserved decoded
        ("/%3F%23%25%26%3D%2B%2C", PATH, "/%3F%23%25%26%3D%2B%2C"),  # reserved kept
        ("/r%c3%a9sum%c3%a9", PATH, "/r%C3%A9sum%C3%A9"),
        ("/résumé", PATH, "/r%C3%A9sum%C3%A9"),  # non-ASCII as UTF-8
        ("/caf%E9", PATH, "/caf%E9"),  # non-UTF-8 escapes kept
        ("/a b", PATH, "/a%20b"),
        ('/<>"{}|\\^`[]', PATH, "/%3C%3E%22%7B%7D%7C%5C%5E%60%5B%5D"),
        ("/!$&'()*+,;=:@", PATH, "/!$&'()*+,;=:@"),  # sub-delims, ":" and "@" stay
        ("/a?b", PATH, "/a%3Fb"),
        ("a=b?c/d", QUERY, "a=b?c/d"),
        ("q=a+b&r=a%20b", QUERY, "q=a+b&r=a%20b"),  # "+" and "%20" stay distinct
        ("q=a b", QUERY, "q=a%20b"),
        ("x#y", FRAGMENT, "x%23y"),
        ("us:er@", USERINFO, "us:er%40"),
        # invalid escapes stay as they are
        ("/%", PATH, "/%"),
        ("/%zz", PATH, "/%zz"),
        ("/%4", PATH, "/%4"),
        ("/%4g", PATH, "/%4g"),
        ("/100%", PATH, "/100%"),
        ("/%%41", PATH, "/%%41"),
        # decoding must not make an invalid "%" valid ("%%34%31" is not "%41")
        ("/%%34%31", PATH, "/%%341"),
        ("/%4%31", PATH, "/%4%31"),
        ("/%%2d", PATH, "/%-"),
        ("/%%e9", PATH, "/%%E9"),
        ("/\udc80", PATH, "/%ED%B2%80"),  # lone surrogates never raise
    ],
)
def test_normalize_percent_encoding(text: str, component: str, expected: str) -> None:
    assert normalize_percent_encoding(text, component) == expected
    assert normalize_percent_encoding(expected, component) == expected


# --- Stage 5: path ------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        # RFC 3986, 5.4 examples, as paths
        ("/a/b/c/./../../g", "/a/g"),
        ("/mid/content=5/../6", "/mid/6"),
        ("/b/c/./g", "/b/c/g"),
        ("/b/c/../../../g", "/g"),
        ("/.", "/"),
        ("/..", "/"),
        ("/a/.", "/a/"),
        ("/a/..", "/"),
        ("/a/b/..", "/a/"),
        ("/a/.b/..c/", "/a/.b/..c/"),  # not dot segments
        ("/a//b/../c", "/a//c"),
        ("/no/dots", "/no/dots"),
    ],
)
def test_remove_dot_segments(path: str, expected: str) -> None:
    assert remove_dot_segments(path) == expected


@pytest.mark.parametrize(
    ("path", "trailing_slash", "expected"),
    [
        ("", "strip", "/"),
        ("/", "strip", "/"),
        ("//", "strip", "/"),
        ("/a/", "strip", "/a"),
        ("/a//", "strip", "/a"),
        ("/a/", "keep", "/a/"),
        ("/a/b/./", "strip", "/a/b"),
        ("/a/b/../", "keep", "/a/"),
        ("/a/..", "strip", "/"),
        ("/A/b", "strip", "/A/b"),  # path case is kept
        ("/a%2F", "strip", "/a%2F"),  # an encoded slash is not a trailing slash
        ("/a/%2E%2E/b", "strip", "/a/%2E%2E/b"),  # stage 4 decodes first; see below
        ("a/b", "strip", "/a/b"),
    ],
)
def test_normalize_path(path: str, trailing_slash: str, expected: str) -> None:
    assert normalize_path(path, trailing_slash) == expected


def test_encoded_dot_segments_resolve_after_stage_4() -> None:
    assert canonicalize_url("http://x/a/%2E%2e/b/%2e/c") == "http://x/b/c"


# --- Stages 6 and 7: query ----------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", []),
        ("a=1", ["a=1"]),
        ("a=1&&b=2&", ["a=1", "b=2"]),
        ("&a", ["a"]),
        ("&&", []),
        ("a&a=&=a", ["a", "a=", "=a"]),
    ],
)
def test_split_query(query: str, expected: list[str]) -> None:
    assert split_query(query) == expected


def test_query_keys() -> None:
    assert query_keys(["a=1", "b", "c=", "=d", "e=f=g"]) == ["a", "b", "c", "", "e"]


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        (["c=1", "b=2", "a=3"], ["a=3", "b=2", "c=1"]),
        (["b=5", "a=50", "b=2"], ["a=50", "b=5", "b=2"]),  # stable: b keeps 5 before 2
        (["a1=x", "a=y"], ["a=y", "a1=x"]),  # by key: "a" before "a1"
        (["a!=x", "a=y"], ["a=y", "a!=x"]),
        (["b", "a="], ["a=", "b"]),
        (["B=1", "a=2"], ["B=1", "a=2"]),  # code point order: keys are case-sensitive
    ],
)
def test_sort_query(pairs: list[str], expected: list[str]) -> None:
    assert sort_query(pairs) == expected
    assert sort_query(pairs, query_keys(pairs)) == expected


@pytest.mark.parametrize(
    "name",
    [
        "utm_source",
        "UTM_Source",
        "utm_anything_new",  # utm_ is a prefix
        "fbclid",
        "FBCLID",
        "gclid",
        "msclkid",
        "_ga",
        "mc_eid",
        "hsCtaTracking",
        "mtm_campaign",
        "pk_source",
        "spm",
    ],
)
def test_tracking_parameters_tiers_a_and_b(name: str) -> None:
    assert TrackingRules().is_tracking(name)


@pytest.mark.parametrize(
    "name", ["ref", "source", "sessionid", "sid", "s", "id", "page", "utm", "xfbclid"]
)
def test_tier_c_and_content_parameters_are_kept(name: str) -> None:
    assert not TrackingRules().is_tracking(name)


def test_tracking_rules_extra_and_exempt() -> None:
    rules = TrackingRules(strip=["SessionID", "trk_*"], keep=["utm_id", "gclid"])
    assert rules.is_tracking("sessionid")
    assert rules.is_tracking("trk_x")
    assert not rules.is_tracking("utm_id")
    assert rules.is_tracking("utm_source")
    assert not rules.is_tracking("gclid")
    assert TrackingRules(keep=["utm_*"]).is_tracking("utm_x") is False


def test_tracking_filter_keeps_other_pairs_in_order() -> None:
    pairs = ["b=1", "utm_source=x", "a=2", "FbClId=3", "b=0"]
    assert TrackingRules().filter(pairs) == ["b=1", "a=2", "b=0"]
    clean_pairs = ["b=1", "a=2"]
    assert TrackingRules().filter(clean_pairs) is clean_pairs


def test_tracking_names_compare_after_percent_normalization() -> None:
    assert canonicalize_url("http://x/?utm%5Fsource=1&a=1") == "http://x/?a=1"
    assert canonicalize_url("http://x/?utm%5fsource=1") == "http://x/"


# --- Stage 8: fragment --------------------------------------------------------


@pytest.mark.parametrize(
    ("fragment", "mode", "expected"),
    [
        ("top", "drop", None),
        ("!/app", "drop", None),
        ("top", "keep", "top"),
        ("", "keep", None),
        (None, "keep", None),
        ("a b", "keep", "a%20b"),
        ("top", "hashbang", None),
        ("!/app/view", "hashbang", "!/app/view"),
    ],
)
def test_canonical_fragment(fragment: str | None, mode: str, expected: str | None) -> None:
    assert canonical_fragment(fragment, mode) == expected


# --- All stages together ------------------------------------------------------


def test_one_page_one_key() -> None:
    variants = [
        "http://www.example.com/a/b",
        "HTTP://WWW.EXAMPLE.COM/a/b",
        "http://www.example.com:80/a/b",
        "http://www.example.com./a/b",
        "http://www.example.com/a/b/",
        "http://www.example.com/a/./b",
        "http://www.example.com/a/c/../b",
        "http://www.example.com/%61/b",
        "http://www.example.com/a/b#top",
        "http://www.example.com/a/b?utm_source=news&utm_medium=email",
        "http://www.example.com/a/b?fbclid=IwAR0&gclid=xyz",
        "  http://www.example.com/a/b\n",
        "http://www.example.com/a/b?",
        "http://www.example.com/a/b?&",
    ]
    assert {canonicalize_url(url) for url in variants} == {"http://www.example.com/a/b"}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("http://x/a%2Fb", "http://x/a/b"),  # an encoded slash is not a slash
        ("http://x/?a", "http://x/?a="),  # no value is not an empty value
        ("http://x/Page", "http://x/page"),  # path case
        ("http://x/?a=1&a=2", "http://x/?a=2&a=1"),  # order of repeated keys
        ("http://x/?q=a+b", "http://x/?q=a%20b"),  # "+" is a sub-delimiter
        ("http://x/?q=%26", "http://x/?q=&"),
        ("http://x/a;b", "http://x/a%3Bb"),
        ("http://x/", "https://x/"),
        ("http://x/", "http://x:8080/"),
        ("http://u@x/", "http://x/"),
        ("http://x/?ref=a", "http://x/"),  # tier C is not stripped
    ],
)
def test_never_merges_what_a_server_can_tell_apart(first: str, second: str) -> None:
    assert canonicalize_url(first) != canonicalize_url(second)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # RFC 3986, 6.2.2: case, percent-encoding and path segment normalization
        ("example://a/b/c/%7Bfoo%7D", "eXAMPLE://a/./b/../b/%63/%7bfoo%7d"),
        ("HTTP://www.Example.com/", "http://www.example.com/"),
        ("http://example.com/%7Esmith/home.html", "http://example.com/~smith/home.html"),
        ("http://example.com/data", "http://example.com/a/../data"),
        # RFC 3986, 6.2.3: scheme-based normalization
        ("http://example.com", "http://example.com/"),
        ("http://example.com/", "http://example.com:/"),
        ("http://example.com:/", "http://example.com:80/"),
        ("https://example.com:443/", "https://example.com/"),
    ],
)
def test_rfc_3986_section_6_equivalences(first: str, second: str) -> None:
    assert canonicalize_url(first) == canonicalize_url(second)


@pytest.mark.parametrize(
    "url",
    [
        "mailto:someone@example.com",
        "data:text/plain,hello",
        "javascript:void(0)",
        "/relative/path",
        "//example.com/no-scheme",
        "http:/one-slash",
        "http://example.com:99999/",
        "http://example.com:port/",
        "http://[::1/",
        "http://a:b:c/",
        "not a url at all",
        "",
        "://",
        "%",
    ],
)
def test_unparseable_url_is_its_own_key(url: str) -> None:
    assert canonicalize_url(url) == clean(url)


def test_special_schemes_read_backslash_as_slash() -> None:
    assert canonicalize_url("http://example.com\\a\\b?x=\\") == "http://example.com/a/b?x=%5C"
    assert canonicalize_url("http://evil.com\\@good.com/") == "http://evil.com/@good.com"
    assert canonicalize_url("foo://h\\a") == "foo://h\\a/"


def test_options() -> None:
    url = "http://x/a/?b=1#!/route"
    assert Canonicalizer().canonicalize(url) == "http://x/a?b=1"
    assert Canonicalizer(trailing_slash="keep").canonicalize(url) == "http://x/a/?b=1"
    assert Canonicalizer(fragments="keep").canonicalize(url) == "http://x/a?b=1#!/route"
    assert Canonicalizer(fragments="hashbang").canonicalize(url) == "http://x/a?b=1#!/route"
    assert Canonicalizer(fragments="hashbang").canonicalize("http://x/#top") == "http://x/"
    assert Canonicalizer(fragments="keep").canonicalize("http://x/#") == "http://x/"
    with pytest.raises(ValueError, match="trailing_slash"):
        Canonicalizer(trailing_slash="add")
    with pytest.raises(ValueError, match="fragments"):
        Canonicalizer(fragments="all")


def test_rules_id_changes_with_every_option() -> None:
    ids = {
        Canonicalizer().rules_id,
        Canonicalizer(trailing_slash="keep").rules_id,
        Canonicalizer(fragments="keep").rules_id,
        Canonicalizer(strip_params=["x"]).rules_id,
        Canonicalizer(keep_params=["fbclid"]).rules_id,
        Canonicalizer(strip_params=["x*"]).rules_id,
    }
    assert len(ids) == 6
    assert (
        Canonicalizer(strip_params=["X", "x"]).rules_id
        == Canonicalizer(strip_params=["x"]).rules_id
    )


# --- w3lib's canonicalize_url cases -------------------------------------------

W3LIB_AGREES = [
    ("http://www.example.com/", "http://www.example.com/"),
    ("http://www.example.com", "http://www.example.com/"),
    ("http://www.example.com/do?a=1&b=2&c=3", "http://www.example.com/do?a=1&b=2&c=3"),
    ("http://www.example.com/do?c=1&b=2&a=3", "http://www.example.com/do?a=3&b=2&c=1"),
    ("http://www.example.com/do?&a=1", "http://www.example.com/do?a=1"),
    (
        "http://www.example.com:8888/do?a=1&b=2&c=3",
        "http://www.example.com:8888/do?a=1&b=2&c=3",
    ),
    ("http://www.example.com:/do?a=1&b=2&c=3", "http://www.example.com/do?a=1&b=2&c=3"),
    ("http://www.example.com/do?b=&a=2", "http://www.example.com/do?a=2&b="),
    ("http://www.example.com/do?q=a+space&a=1", "http://www.example.com/do?a=1&q=a+space"),
    ("http://www.example.com/résumé", "http://www.example.com/r%C3%A9sum%C3%A9"),
    (
        "http://www.example.com/résumé?q=résumé",
        "http://www.example.com/r%C3%A9sum%C3%A9?q=r%C3%A9sum%C3%A9",
    ),
    ("http://www.example.com/r%c3%a9sum%c3%a9", "http://www.example.com/r%C3%A9sum%C3%A9"),
    ("http://www.example.com/a%a3do", "http://www.example.com/a%A3do"),
    (
        "http://www.example.com/a%a3do?q=r%c3%a9sum%c3%a9",
        "http://www.example.com/a%A3do?q=r%C3%A9sum%C3%A9",
    ),
    ("http://www.example.com/a%a3do?q=r%e9sum%e9", "http://www.example.com/a%A3do?q=r%E9sum%E9"),
    ("http://www.example.com/do?k=b%a3", "http://www.example.com/do?k=b%A3"),
    (
        "http://www.example.com/do?k=r%c3%a9sum%c3%a9",
        "http://www.example.com/do?k=r%C3%A9sum%C3%A9",
    ),
    ("http://www.example.com/a do?a=1", "http://www.example.com/a%20do?a=1"),
    ("http://www.example.com/a %20do?a=1", "http://www.example.com/a%20%20do?a=1"),
    ("http://www.example.com/a do£.html?a=1", "http://www.example.com/a%20do%C2%A3.html?a=1"),
    (
        "http://www.example.com/do?price=£500&a=5&z=3",
        "http://www.example.com/do?a=5&price=%C2%A3500&z=3",
    ),
    (
        "http://user:pass@www.example.com:81/do?now=1",
        "http://user:pass@www.example.com:81/do?now=1",
    ),
    ("http://user:pass@www.example.com/do?a=1#frag", "http://user:pass@www.example.com/do?a=1"),
    (
        "http://www.simplybedrooms.com/White-Bedroom-Furniture/Bedroom-Mirror:-Josephine-Cheval-Mirror.html",
        "http://www.simplybedrooms.com/White-Bedroom-Furniture/Bedroom-Mirror:-Josephine-Cheval-Mirror.html",
    ),
    ("http://www.example.com/caf%E9-con-leche.htm", "http://www.example.com/caf%E9-con-leche.htm"),
    ("http://www.EXAMPLE.com/", "http://www.example.com/"),
    ("sftp://UsEr:PaSsWoRd@www.EXAMPLE.com/", "sftp://UsEr:PaSsWoRd@www.example.com/"),
    ("http://www.bücher.de?q=bücher", "http://www.xn--bcher-kva.de/?q=b%C3%BCcher"),
    (
        "http://はじめよう.みんな/?query=サ&maxResults=5",
        "http://xn--p8j9a0d9c9a.xn--q9jyb4c/?maxResults=5&query=%E3%82%B5",
    ),
    (
        "http://.example.com/résumé?q=résumé",
        "http://.example.com/r%C3%A9sum%C3%A9?q=r%C3%A9sum%C3%A9",
    ),
    (
        f"http://www.{'example' * 11}.com/résumé?q=résumé",
        f"http://www.{'example' * 11}.com/r%C3%A9sum%C3%A9?q=r%C3%A9sum%C3%A9",
    ),
    ("http://www.example.com/path/to/%23/foo/bar", "http://www.example.com/path/to/%23/foo/bar"),
    (
        "http://www.example.com/path/to/%23/foo/bar#frag",
        "http://www.example.com/path/to/%23/foo/bar",
    ),
    (
        "http://www.example.com/path/to/%23/foo/bar?url=http%3A%2F%2Fwww.example.com%2Fpath%2Fto%2F%23%2Fbar%2Ffoo",
        "http://www.example.com/path/to/%23/foo/bar?url=http%3A%2F%2Fwww.example.com%2Fpath%2Fto%2F%23%2Fbar%2Ffoo",
    ),
    (" https://example.com", "https://example.com/"),
    ("https://example.com ", "https://example.com/"),
    ("http://[::0:1]/a/../b", "http://[::1]/b"),
]


@pytest.mark.parametrize(("url", "expected"), W3LIB_AGREES)
def test_w3lib_cases_where_rules_agree(url: str, expected: str) -> None:
    assert canonicalize_url(url) == expected
    assert w3lib_canonicalize_url(url) == expected


W3LIB_KEEP_AGREES = [
    ("http://foo.com/AC%2FDC+rocks%3f/?yeah=1", "http://foo.com/AC%2FDC+rocks%3F/?yeah=1"),
    ("http://foo.com/AC%2FDC/", "http://foo.com/AC%2FDC/"),
]


@pytest.mark.parametrize(("url", "expected"), W3LIB_KEEP_AGREES)
def test_w3lib_trailing_slash_cases_agree_with_trailing_slash_keep(url: str, expected: str) -> None:
    assert Canonicalizer(trailing_slash="keep").canonicalize(url) == expected
    assert w3lib_canonicalize_url(url) == expected


def test_w3lib_keep_fragments_agrees_with_fragments_keep() -> None:
    url = "http://user:pass@www.example.com/do?a=1#frag"
    assert Canonicalizer(fragments="keep").canonicalize(url) == url
    assert w3lib_canonicalize_url(url, keep_fragments=True) == url


# (url, ours, w3lib's, the reason they differ)
W3LIB_DIFFERS = [
    (
        "http://www.example.com/do?c=3&b=5&b=2&a=50",
        "http://www.example.com/do?a=50&b=5&b=2&c=3",
        "http://www.example.com/do?a=50&b=2&b=5&c=3",
        "repeated keys keep their order: servers read lists in order",
    ),
    (
        "http://www.example.com/do?b=&c&a=2",
        "http://www.example.com/do?a=2&b=&c",
        "http://www.example.com/do?a=2&b=&c=",
        "'?c' stays distinct from '?c=': a server can tell a flag from an empty value",
    ),
    (
        "http://www.example.com/do?1750,4",
        "http://www.example.com/do?1750,4",
        "http://www.example.com/do?1750%2C4=",
        "',' is a sub-delimiter, kept as it is, and no '=' is added to a bare key",
    ),
    (
        "http://www.example.com/do?q=a space&a=1",
        "http://www.example.com/do?a=1&q=a%20space",
        "http://www.example.com/do?a=1&q=a+space",
        "a space is encoded as %20, and '+' stays distinct from %20 (RFC 3986 sub-delimiter)",
    ),
    (
        "http://www.example.com/do?q=a%20space&a=1",
        "http://www.example.com/do?a=1&q=a%20space",
        "http://www.example.com/do?a=1&q=a+space",
        "'+' stays distinct from %20: only form decoding reads '+' as a space",
    ),
    (
        "http://www.example.com/do?price(£)=500&a=1",
        "http://www.example.com/do?a=1&price(%C2%A3)=500",
        "http://www.example.com/do?a=1&price%28%C2%A3%29=500",
        "'(' and ')' are sub-delimiters: kept as they are, never encoded",
    ),
    (
        "https://example.com/a%23b%2cc#bash",
        "https://example.com/a%23b%2Cc",
        "https://example.com/a%23b,c",
        "escapes of reserved characters are kept: %2C and ',' may differ for a server",
    ),
    (
        "http://foo.com/AC%2FDC+rocks%3f/?yeah=1",
        "http://foo.com/AC%2FDC+rocks%3F?yeah=1",
        "http://foo.com/AC%2FDC+rocks%3F/?yeah=1",
        "the trailing slash of a non-root path is dropped (stage 5)",
    ),
    (
        "http://www.example.com:80/a?utm_source=x&fbclid=y&id=1",
        "http://www.example.com/a?id=1",
        "http://www.example.com:80/a?fbclid=y&id=1&utm_source=x",
        "default ports and tracking parameters are dropped (stages 3 and 6)",
    ),
]

#: w3lib 2.6 moved from IDNA 2003 to UTS #46 non-transitional hosts, as ours are.
W3LIB_UTS46 = tuple(int(n) for n in version("w3lib").split(".")[:2]) >= (2, 6)


def test_sharp_s_is_kept_and_w3lib_kept_it_from_2_6() -> None:
    """UTS #46 non-transitional keeps 'ß' (IDNA 2003 mapped it to 'ss', another host)."""
    assert canonicalize_url("http://straße.de/") == "http://xn--strae-oqa.de/"
    theirs = "http://xn--strae-oqa.de/" if W3LIB_UTS46 else "http://strasse.de/"
    assert w3lib_canonicalize_url("http://straße.de/") == theirs


@pytest.mark.parametrize(("url", "ours", "theirs", "reason"), W3LIB_DIFFERS)
def test_w3lib_cases_where_rules_differ(url: str, ours: str, theirs: str, reason: str) -> None:
    assert canonicalize_url(url) == ours, reason
    assert w3lib_canonicalize_url(url) == theirs, reason


# --- Properties ---------------------------------------------------------------

_unguarded = Canonicalizer(fragments="keep")._canonicalize
_default_unguarded = Canonicalizer()._canonicalize

_TRICKY = "aZ09-._~!$&'()*+,;=:@/?#[]%\\ \t\n\x00\x7féß日\u3002\uff0f\udc80"
_host_chars = st.text(alphabet="aZ09.-_%[]:éß\u3002\uff0f\uff21\udc80 ", max_size=12)
_part = st.text(alphabet=_TRICKY + "2Ffe", max_size=16)


@st.composite
def url_like(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "HTTPS", "ws", "ftp", "foo", "file"]))
    userinfo = draw(st.sampled_from(["", "u@", "u:p@", "@", "%41@"]))
    host = draw(
        st.one_of(
            _host_chars,
            st.sampled_from(["0x7f.1", "127.0.0.1", "[::1]", "[::0:1]", "bücher.de.", "EX.com"]),
        )
    )
    port = draw(st.sampled_from(["", ":", ":80", ":443", ":0080", ":8080", ":99999", ":x"]))
    path = draw(_part)
    query = draw(st.one_of(st.just(""), _part.map(lambda q: "?" + q)))
    fragment = draw(st.one_of(st.just(""), _part.map(lambda f: "#" + f)))
    return f"{scheme}://{userinfo}{host}{port}{path}{query}{fragment}"


@settings(max_examples=400, deadline=None)
@given(url_like())
def test_idempotent_and_never_raises_on_url_like_text(url: str) -> None:
    for canonicalize in (_unguarded, _default_unguarded):
        once = canonicalize(url)
        assert canonicalize(once) == once


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_idempotent_and_never_raises_on_any_text(text: str) -> None:
    once = _default_unguarded(text)
    assert _default_unguarded(once) == once
    assert canonicalize_url("http://x/" + text) == _default_unguarded("http://x/" + text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=_TRICKY + "0123456789abcdefABCDEF", max_size=24))
def test_percent_encoding_stage_is_idempotent(text: str) -> None:
    for component in (PATH, QUERY, FRAGMENT, USERINFO):
        once = normalize_percent_encoding(text, component)
        assert normalize_percent_encoding(once, component) == once


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="aZ09.-_%xX[]:éß\u3002\uff0e\uff0f\udc80", max_size=16))
def test_host_stage_is_idempotent(host: str) -> None:
    once = canonical_host(host)
    assert canonical_host(once) == once


def test_canonical_module_does_not_import_scrapy() -> None:
    code = (
        "import sys, scrapy_aimd.core.canonical\n"
        "assert 'scrapy' not in sys.modules and 'twisted' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- Which stages changed a URL (for the duplicates' kinds) -------------------


def test_the_stages_are_named_as_the_module_names_them() -> None:
    assert STAGES == (
        "clean",
        "host",
        "port",
        "percent_encoding",
        "path",
        "query_filter",
        "query_order",
        "fragment",
    )


@pytest.mark.parametrize(
    ("url", "stage"),
    [
        (" http://example.com/a\n", "clean"),
        ("HTTP://example.com/a", "clean"),
        ("http://exa\tmple.com/a", "clean"),
        ("http://example.com\\a", "clean"),  # read as "/" before the query
        ("http://EXAMPLE.com/a", "host"),
        ("http://example.com./a", "host"),
        ("http://bücher.de/a", "host"),
        ("http://0x7f.1/a", "host"),
        ("http://[2001:DB8:0:0:0:0:0:1]/a", "host"),
        ("http://@example.com/a", "host"),  # an empty userinfo goes with its "@"
        ("http://example.com:80/a", "port"),
        ("http://example.com:/a", "port"),
        ("http://example.com:08080/a", "port"),
        ("http://example.com/%7euser", "percent_encoding"),
        ("http://example.com/a%2fb", "percent_encoding"),
        ("http://example.com/caf\u00e9", "percent_encoding"),
        ("http://example.com/a?q=%e2%82%ac", "percent_encoding"),
        ("http://%41@example.com/a", "percent_encoding"),
        ("http://example.com/a/", "path"),
        ("http://example.com/a/./b", "path"),
        ("http://example.com/a/../b", "path"),
        ("http://example.com", "path"),
        ("http://example.com/a?utm_source=x", "query_filter"),
        ("http://example.com/a?id=3&fbclid=abc", "query_filter"),
        ("http://example.com/a?UTM_Campaign=spring", "query_filter"),
        ("http://example.com/a?a=1&&b=2&", "query_filter"),
        ("http://example.com/a?", "query_filter"),
        ("http://example.com/a?b=2&a=1", "query_order"),
        ("http://example.com/a#top", "fragment"),
        ("http://example.com/a#", "fragment"),
    ],
)
def test_one_stage_alone(url: str, stage: str) -> None:
    assert changed_stages(url) == (stage,)
    assert canonicalize_url(url) != url


@pytest.mark.parametrize(
    ("url", "stages"),
    [
        ("http://example.com/a?utm_source=x#top", ("query_filter", "fragment")),
        (
            " HTTP://Example.COM:80/a/./b/?utm_source=x&b=2&a=1#top",
            ("clean", "host", "port", "path", "query_filter", "query_order", "fragment"),
        ),
        ("http://example.com/%7Ea/?b=1&a=%7e", ("percent_encoding", "path", "query_order")),
        # an escape inside a tracking pair is not counted: the pair is dropped
        ("http://example.com/a?utm_source=caf%c3%a9", ("query_filter",)),
        ("http://example.com/a?utm%5Fsource=x&b=%7e", ("percent_encoding", "query_filter")),
    ],
)
def test_several_stages_in_stage_order(url: str, stages: tuple[str, ...]) -> None:
    assert changed_stages(url) == stages


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/a",
        "http://example.com/",
        "http://example.com/a?a=1&b=2",
        "http://example.com/a%2Fb",
        "http://example.com:8080/a",
        "http://u@example.com/a",
        "http://example.com/a?ref=x",  # tier C is not tracking
    ],
)
def test_a_canonical_url_changes_in_no_stage(url: str) -> None:
    assert changed_stages(url) == ()


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "",
        "%",
        "http://example.com:99999/",
        "http://example.com:port/",
        "http://[::1/",
        "mailto:someone@example.com",
        "http:/one-slash",
    ],
)
def test_an_unparseable_url_changes_at_most_in_stage_1(url: str) -> None:
    assert changed_stages(url) == ()
    assert changed_stages(f" {url.upper()}\t") == ("clean",)


def test_the_options_decide_the_stages() -> None:
    keep = Canonicalizer(trailing_slash="keep", fragments="keep", keep_params=["utm_source"])
    assert keep.changed_stages("http://x/a/?utm_source=1#top") == ()
    assert keep.changed_stages("http://x/a/?utm_medium=1#%7e") == (
        "percent_encoding",
        "query_filter",
    )
    hashbang = Canonicalizer(fragments="hashbang")
    assert hashbang.changed_stages("http://x/#!/inbox") == ()
    assert hashbang.changed_stages("http://x/#top") == ("fragment",)
    strip = Canonicalizer(strip_params=["ref"])
    assert strip.changed_stages("http://x/?ref=a") == ("query_filter",)


def test_a_hostile_url_is_judged_quickly() -> None:
    """100 KB in each part that a stage walks: bounded like canonicalize itself."""
    hostile = [
        "http://x/" + "a/../" * 20_000,
        "http://x/?" + "&".join(f"k{i % 97}=%e2%82%ac" for i in range(10_000)),
        "http://x/?" + "utm_a=1&" * 12_500,
        "http://x/" + "%" * 100_000,
        "http://" + "a." * 50_000 + "/",
        "http://" + "\u00e9" * 100_000 + "/",
        " \t" * 50_000,
    ]
    canonicalizer = Canonicalizer()
    for url in hostile:
        # as in the dupefilter: the URL was canonicalized (its key) just before
        started = time.perf_counter()
        canonicalizer.canonicalize(url)
        canonicalized = time.perf_counter() - started
        started = time.perf_counter()
        canonicalizer.changed_stages(url)
        judged = time.perf_counter() - started
        assert judged < 2.0, (url[:40], judged)
        assert judged < 20 * canonicalized + 0.2, (url[:40], judged, canonicalized)


_unguarded_stages = Canonicalizer()._changed_stages
_OTHER_OPTIONS = [
    Canonicalizer(fragments="keep", trailing_slash="keep"),
    Canonicalizer(fragments="hashbang", strip_params=["ref", "x*"], keep_params=["utm_id"]),
]


@settings(max_examples=400, deadline=None)
@given(url_like())
def test_no_stage_changed_iff_the_url_is_canonical_on_url_like_text(url: str) -> None:
    assert (not _unguarded_stages(url)) == (_default_unguarded(url) == url), url
    for other in _OTHER_OPTIONS:
        assert (not other._changed_stages(url)) == (other._canonicalize(url) == url), url
    assert not _unguarded_stages(_default_unguarded(url))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_no_stage_changed_iff_the_url_is_canonical_on_any_text(text: str) -> None:
    for url in (text, "http://x/" + text, "http://x/?" + text):
        assert (not _unguarded_stages(url)) == (_default_unguarded(url) == url), url
        assert (changed_stages(url) == ()) == (canonicalize_url(url) == url)


_pair = st.builds(
    "{}{}".format,
    st.sampled_from(["a", "b", "B", "utm_source", "UTM_x", "utm%5Fsource", "fbclid", "ref", "xq"]),
    st.sampled_from(["", "=", "=1", "=%7e", "=%2F", "=caf\u00e9", "=a+b", "=%"]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(_pair, st.just("")), max_size=6).map("&".join),
    st.sampled_from(["", "#", "#top", "#!/r", "#%7e"]),
)
def test_no_stage_changed_iff_the_url_is_canonical_with_tracking_queries(
    query: str, fragment: str
) -> None:
    url = f"http://x/p?{query}{fragment}"
    assert (not _unguarded_stages(url)) == (_default_unguarded(url) == url), url
    for other in _OTHER_OPTIONS:
        assert (not other._changed_stages(url)) == (other._canonicalize(url) == url), url
