"""The request codec stores and restores exactly what ``Request.to_dict`` keeps,
with or without its shortcut for a plain ``Request`` of the spider's methods.

``reference_encode`` is the codec as it was before the shortcut (``to_dict``,
defaults dropped, pickle protocol 5): the codec must write the same bytes, and
read back what that one wrote (JOBDIR files already on disk, a fleet's queues
already in Redis).
"""

from __future__ import annotations

import pickle
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scrapy import FormRequest, Request, Spider
from scrapy.http import JsonRequest
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.request import request_from_dict
from scrapy.utils.test import get_crawler
from test_jobdir import PagesSpider

from scrapy_aimd import request_codec
from scrapy_aimd.request_codec import RequestCodec

SPIDER = PagesSpider.from_crawler(get_crawler(PagesSpider))
CODEC = RequestCodec(SPIDER)

#: What the codec dropped before the shortcut, as it was then (a copy on
#: purpose: a change to the codec's own table must fail these tests).
REFERENCE_DEFAULTS: dict[str, Any] = {
    "callback": None,
    "errback": None,
    "headers": {},
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "flags": [],
    "cb_kwargs": {},
    "dont_filter": False,
    "method": "GET",
    "priority": 0,
}


def reference_encode(request: Request, spider: Spider = SPIDER) -> bytes:
    data = request.to_dict(spider=spider)
    for name, default in REFERENCE_DEFAULTS.items():
        if name in data and type(data[name]) is type(default) and data[name] == default:
            del data[name]
    return pickle.dumps(data, protocol=5)


def snapshot(request: Request) -> tuple[Any, ...]:
    """Every attribute that ``to_dict`` keeps, headers in order with repeats."""
    return (
        type(request),
        request.url,
        request.callback,
        request.errback,
        request.method,
        list(request.headers.items()),
        request.body,
        request.cookies,
        request.meta,
        request.encoding,
        request.priority,
        type(request.priority),
        request.dont_filter,
        request.flags,
        request.cb_kwargs,
        getattr(request, "dumps_kwargs", None),
    )


# -- bytes written by the codec before its shortcut ------------------------------

#: Written by the codec before the shortcut (``reference_encode``), with the
#: request each stands for.
PINNED: list[tuple[bytes, Request]] = [
    (
        b"\x80\x05\x95<\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x03url\x94\x8c\x16"
        b"http://example.com/p/1\x94\x8c\x08callback\x94\x8c\nparse_page\x94u.",
        Request("http://example.com/p/1", callback=SPIDER.parse_page),
    ),
    (
        b"\x80\x05\x95h\x01\x00\x00\x00\x00\x00\x00}\x94(\x8c\x03url\x94\x8c+"
        b"https://h.example:8443/a%20b/%C3%A9?q=1&q=2\x94\x8c\x08callback\x94\x8c\n"
        b"parse_page\x94\x8c\x07errback\x94\x8c\x08on_error\x94\x8c\x07headers\x94}\x94("
        b"C\x03X-A\x94]\x94(C\x011\x94C\x012\x94eC\x07Referer\x94]\x94C\x13"
        b"http://example.com/\x94au\x8c\x04body\x94C\x06name=\xe9\x94\x8c\x07cookies\x94}"
        b"\x94\x8c\x01s\x94\x8c\x011\x94s\x8c\x04meta\x94}\x94(\x8c\x05depth\x94K\x02\x8c"
        b"\x15aimd_throttle_retries\x94K\x01u\x8c\x08encoding\x94\x8c\x07latin-1\x94\x8c"
        b"\x05flags\x94]\x94\x8c\x01f\x94a\x8c\tcb_kwargs\x94}\x94\x8c\x04page\x94K\x02s"
        b"\x8c\x0bdont_filter\x94\x88\x8c\x06method\x94\x8c\x04POST\x94\x8c\x08priority"
        b"\x94J\xfd\xff\xff\xffu.",
        Request(
            "https://h.example:8443/a b/\u00e9?q=1&q=2",
            callback=SPIDER.parse_page,
            errback=SPIDER.on_error,
            method="post",
            headers=[("X-A", "1"), ("X-A", "2"), ("Referer", "http://example.com/")],
            body="name=\u00e9",
            cookies={"s": "1"},
            meta={"depth": 2, "aimd_throttle_retries": 1},
            encoding="latin-1",
            priority=-3,
            dont_filter=True,
            flags=["f"],
            cb_kwargs={"page": 2},
        ),
    ),
    (
        b"\x80\x05\x95\xd2\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x03url\x94\x8c\x18"
        b"http://example.com/login\x94\x8c\x08callback\x94\x8c\nparse_page\x94\x8c\x07"
        b"headers\x94}\x94C\x0cContent-Type\x94]\x94C!application/x-www-form-urlencoded"
        b"\x94as\x8c\x04body\x94C\x07u=a&p=b\x94\x8c\x06method\x94\x8c\x04POST\x94\x8c\x06"
        b"_class\x94\x8c$scrapy.http.request.form.FormRequest\x94u.",
        FormRequest(
            "http://example.com/login", formdata={"u": "a", "p": "b"}, callback=SPIDER.parse_page
        ),
    ),
    (
        b"\x80\x05\x95\x12\x01\x00\x00\x00\x00\x00\x00}\x94(\x8c\x03url\x94\x8c\x16"
        b"http://example.com/api\x94\x8c\x07headers\x94}\x94(C\x0cContent-Type\x94]\x94C"
        b"\x10application/json\x94aC\x06Accept\x94]\x94C.application/json, text/javascript,"
        b' */*; q=0.01\x94au\x8c\x04body\x94C\r{"k": [1, 2]}\x94\x8c\x06method\x94\x8c'
        b"\x04POST\x94\x8c\x0cdumps_kwargs\x94}\x94\x8c\tsort_keys\x94\x88s\x8c\x06_class"
        b"\x94\x8c,scrapy.http.request.json_request.JsonRequest\x94u.",
        JsonRequest("http://example.com/api", data={"k": [1, 2]}, dumps_kwargs={"sort_keys": True}),
    ),
]


@pytest.mark.parametrize(("data", "request_"), PINNED, ids=["plain", "every", "form", "json"])
def test_bytes_written_before_the_shortcut_load(data: bytes, request_: Request) -> None:
    assert snapshot(CODEC.decode(data)) == snapshot(request_)
    # ... and the codec still writes exactly these bytes.
    assert CODEC.encode(request_) == data


# -- round trips, any request -----------------------------------------------------

HOSTS = [
    "example.com",
    "u%25x:p@example.com",
    "h.example:8443",
    "b\u00fccher.example",
    "127.0.0.1:8080",
    "[::1]:81",
]
PATH_CHARS = string.ascii_letters + string.digits + "/-._~%?&=#+ :;,@!$'()*[]\u00e9\u4e2d"
NAME_CHARS = string.ascii_letters + string.digits + "-_"
names = st.text(NAME_CHARS, min_size=1, max_size=8)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=10),
    st.binary(max_size=10),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
urls = st.builds(
    lambda scheme, host, path: f"{scheme}://{host}/{path}",
    st.sampled_from(["http", "https", "HTTP"]),
    st.sampled_from(HOSTS),
    st.text(PATH_CHARS, max_size=20),
)
cookies = st.one_of(
    st.dictionaries(names, st.text(NAME_CHARS, max_size=5), max_size=2),
    st.lists(
        st.fixed_dictionaries(
            {"name": names, "value": st.text(NAME_CHARS, max_size=5)},
            optional={"domain": st.sampled_from(["example.com", ".h.example"])},
        ),
        max_size=2,
    ),
)
common = st.fixed_dictionaries(
    {},
    optional={
        "callback": st.sampled_from(["parse_page", "parse", None]),
        "errback": st.sampled_from(["on_error", None]),
        "method": st.sampled_from(["GET", "POST", "get", "Put", "HEAD"]),
        "headers": st.lists(
            st.tuples(
                st.sampled_from(["X-A", "x-a", "Referer", "Accept", "X-Long-Name"]),
                st.one_of(st.text(max_size=8), st.binary(max_size=8)),
            ),
            max_size=4,
        ),
        "body": st.one_of(st.binary(max_size=12), st.text(max_size=12)),
        "cookies": cookies,
        "meta": st.dictionaries(st.text(max_size=8), values, max_size=3),
        "encoding": st.sampled_from(["utf-8", "latin-1", "cp1252"]),
        "priority": st.one_of(st.integers(-(2**40), 2**40), st.just(0)),
        "dont_filter": st.booleans(),
        "flags": st.lists(st.text(max_size=5), max_size=2),
        "cb_kwargs": st.dictionaries(st.text(NAME_CHARS, max_size=5), values, max_size=2),
    },
)


@st.composite
def requests(draw: st.DrawFn) -> Request:
    kind = draw(st.sampled_from(["plain", "plain", "plain", "form", "json"]))
    kwargs = dict(draw(common))
    for name in ("callback", "errback"):
        if kwargs.get(name) is not None:
            kwargs[name] = getattr(SPIDER, kwargs[name])
    url = draw(urls)
    try:
        if kind == "form":
            kwargs.pop("body", None)
            formdata = draw(st.dictionaries(names, st.text(max_size=5), max_size=2))
            return FormRequest(url, formdata=formdata, **kwargs)
        if kind == "json":
            kwargs.pop("body", None)
            data = draw(st.dictionaries(names, st.integers(), max_size=2))
            return JsonRequest(url, data=data, dumps_kwargs={"sort_keys": True}, **kwargs)
        return Request(url, **kwargs)
    except (ValueError, UnicodeError):  # a body or header not in the encoding
        assume(False)
        raise


EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@EXAMPLES
@given(requests())
def test_a_request_comes_back_exactly(request_: Request) -> None:
    before = snapshot(request_)
    data = CODEC.encode(request_)
    assert data is not None
    assert snapshot(request_) == before  # encoding changes nothing that to_dict keeps
    assert snapshot(CODEC.decode(data)) == before


@EXAMPLES
@given(requests())
def test_the_codec_writes_the_bytes_it_wrote_before(request_: Request) -> None:
    assert CODEC.encode(request_) == reference_encode(request_)


@EXAMPLES
@given(requests())
def test_decoding_is_request_from_dict(request_: Request) -> None:
    data = reference_encode(request_)
    expected = request_from_dict(pickle.loads(data), spider=SPIDER)
    assert snapshot(CODEC.decode(data)) == snapshot(expected)


# -- the shortcut and its fallbacks -----------------------------------------------


def test_the_shortcut_knows_this_scrapys_request() -> None:
    """If Scrapy's Request gains or loses an attribute, the shortcut turns off
    (every request then goes through to_dict): this fails loudly to say so."""
    assert RequestCodec.shortcut
    assert Request.attributes == request_codec.PLAIN_ATTRIBUTES


def test_a_plain_request_skips_to_dict_and_request_from_dict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    request = Request("http://example.com/p/1", callback=SPIDER.parse_page, meta={"depth": 1})
    data = reference_encode(request)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the shortcut was not taken")

    monkeypatch.setattr(Request, "to_dict", refuse)
    monkeypatch.setattr(request_codec, "request_from_dict", refuse)
    assert CODEC.encode(request) == data
    assert snapshot(CODEC.decode(data)) == snapshot(request)


def test_without_the_shortcut_the_codec_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RequestCodec, "shortcut", False)
    for data, request in PINNED:
        assert CODEC.encode(request) == data
        assert snapshot(CODEC.decode(data)) == snapshot(request)


def test_unusual_callbacks_go_through_to_dict() -> None:
    other = PagesSpider.from_crawler(get_crawler(PagesSpider))
    # A method of another instance of the spider's class: stored by name, as
    # to_dict does, and restored as this spider's.
    request = Request("http://example.com/", callback=other.parse_page)
    data = CODEC.encode(request)
    assert data == reference_encode(request)
    assert CODEC.decode(data).callback == SPIDER.parse_page
    # Not a method of the spider: not stored (logged by the codec).
    assert CODEC.encode(Request("http://example.com/", callback=NO_CALLBACK)) is None
    assert CODEC.encode(Request("http://example.com/", errback=print)) is None
    # A name set in place of a callable: to_dict keeps it as it is.
    named = Request("http://example.com/")
    named.callback = "parse_page"  # type: ignore[assignment]
    data = CODEC.encode(named)
    assert data == reference_encode(named)
    assert CODEC.decode(data).callback == SPIDER.parse_page


def test_an_alias_of_a_method_is_stored_under_the_methods_name() -> None:
    class Aliased(PagesSpider):
        a_first_name = PagesSpider.parse_page

    spider = Aliased.from_crawler(get_crawler(Aliased))
    codec = RequestCodec(spider)
    request = Request("http://example.com/", callback=spider.a_first_name)
    data = codec.encode(request)
    assert data is not None
    assert pickle.loads(data)["callback"] == "parse_page"
    assert codec.decode(data).callback == spider.parse_page


def test_odd_values_of_a_plain_request_are_kept_as_to_dict_keeps_them() -> None:
    """A value equal to a default but of another type is not a default."""
    request = Request("http://example.com/", priority=True)
    request.flags = ()  # type: ignore[assignment]
    request.method = "GET "
    data = CODEC.encode(request)
    assert data == reference_encode(request)
    assert pickle.loads(data) == {
        "url": "http://example.com/",
        "flags": (),
        "method": "GET ",
        "priority": True,
    }


def test_unusual_stored_dicts_are_decoded_by_request_from_dict() -> None:
    def stored(d: dict[str, Any]) -> bytes:
        return pickle.dumps(d, protocol=5)

    # A key that is not an attribute is ignored, as request_from_dict does.
    decoded = CODEC.decode(stored({"url": "http://example.com/", "extra": 1}))
    assert snapshot(decoded) == snapshot(Request("http://example.com/"))
    # A callback that the spider does not have: request_from_dict's error.
    with pytest.raises(ValueError, match="not found"):
        CODEC.decode(stored({"url": "http://example.com/", "callback": "gone"}))
    with pytest.raises(ValueError, match="not found"):
        CODEC.decode(
            stored({"url": "http://example.com/", "callback": "parse_page", "errback": "gone"})
        )
    # A class by name.
    decoded = CODEC.decode(
        stored({"url": "http://example.com/", "_class": "scrapy.http.request.form.FormRequest"})
    )
    assert type(decoded) is FormRequest
