"""robots.txt as hostile or broken sites serve it, in real crawls: each case is
read, or skipped with a stat and a log line, and never loses its origin.

Each site is a tiny HTTP server on 127.0.0.1 (its own port: its own origin)
that answers robots.txt as the case needs; the pages are /p/0 to /p/3, and
rules that are read disallow /p/2. One crawl with the add-on holds every case
(module-scoped: a crawl takes seconds), one more has the robots.txt
middleware without the feedback middleware, as it may also be used.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import brotli
import local_http
import pytest

try:
    from compression import zstd  # Python 3.14
except ImportError:
    from backports import zstd
from crawling import AIMD, CrawlResult, run_crawl
from local_http import Answer
from scrapy.resolver import CachingThreadedResolver
from scrapy.settings import default_settings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from twisted.internet.defer import Deferred

RULES = b"User-agent: *\nDisallow: /p/2\n"
PAGES = [f"/p/{i}" for i in range(4)]
ALLOWED = {"/p/0", "/p/1", "/p/3"}
#: Well past what is parsed (500 KiB) and downloaded (1000 KiB) of robots.txt.
PADDING = b"# padding padding padding padding\n"
#: The crawls' DOWNLOAD_MAXSIZE: a robots.txt larger than this is still read.
MAXSIZE = 256 * 1024


def text_that_compresses_little(size: int) -> bytes:
    lines = (hashlib.sha256(str(i).encode()).hexdigest() for i in range(size // 67 + 1))
    return "".join(f"# {line}\n" for line in lines).encode()[:size]


def endless() -> Iterator[bytes]:
    """A robots.txt that never ends (64 MiB, to bound a test that fails)."""
    yield RULES
    chunk = PADDING * 2000
    for _ in range(64 * 1024 * 1024 // len(chunk)):
        yield chunk


PAGE: Answer = (200, [("Content-Type", "text/html")], b"<html><body>page</body></html>")


def robots(body: bytes, *headers: tuple[str, str]) -> Answer:
    return 200, [("Content-Type", "text/plain"), *headers], body


@dataclass
class Site:
    robots: Answer
    #: Other paths than the pages.
    extra: dict[str, Answer] = field(default_factory=dict)
    #: What was asked, as (path, Host header).
    asked: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""

    def answer(self, path: str) -> Answer:
        if path == "/robots.txt":
            return self.robots
        if path in self.extra:
            return self.extra[path]
        if path in PAGES:
            return PAGE
        return 404, [], b"not found\n"

    @property
    def paths(self) -> list[str]:
        return [path for path, _ in self.asked]

    @property
    def pages(self) -> set[str]:
        return {path for path in self.paths if path in PAGES}


@contextmanager
def serve(site: Site) -> Iterator[Site]:
    with local_http.serve(site.answer) as local:
        site.url, site.asked = local.url, local.asked
        yield site


def bomb() -> bytes:
    return RULES + PADDING * 1_500_000  # 51 MiB


def sites() -> dict[str, Site]:
    return {
        "bom": Site(robots(b"\xef\xbb\xbf" + RULES)),
        "huge": Site(robots(RULES + PADDING * 100_000)),  # 3.3 MiB, with its length
        "endless": Site((200, [("Content-Type", "text/plain")], endless)),
        "gzip_bomb": Site(robots(gzip.compress(bomb()), ("Content-Encoding", "gzip"))),
        "br": Site(robots(brotli.compress(RULES), ("Content-Encoding", "br"))),
        "br_bomb": Site(robots(brotli.compress(bomb()), ("Content-Encoding", "br"))),
        "zstd": Site(robots(zstd.compress(RULES), ("Content-Encoding", "zstd"))),
        "zstd_bomb": Site(robots(zstd.compress(bomb()), ("Content-Encoding", "zstd"))),
        # Compressed, and longer than the download bound: the stream is cut short.
        "br_cut": Site(
            robots(
                brotli.compress(RULES + text_that_compresses_little(3 * 1024 * 1024)),
                ("Content-Encoding", "br"),
            )
        ),
        "gzip_br": Site(
            robots(brotli.compress(gzip.compress(RULES)), ("Content-Encoding", "gzip, br"))
        ),
        "broken_gzip": Site(robots(b"\x1f\x8b\x08 not gzip at all", ("Content-Encoding", "gzip"))),
        "broken_br": Site(robots(b"not brotli at all, no", ("Content-Encoding", "br"))),
        "broken_zstd": Site(robots(b"not zstd at all", ("Content-Encoding", "zstd"))),
        "bad_redirect": Site((301, [("Location", "http://[bad")], b"moved\n")),
        "soon": Site(robots(b"User-agent: *\nCrawl-delay: soon\nDisallow: /p/2\n")),
        "spelled": Site(robots(RULES)),
        "mapped": Site(
            robots(
                RULES
                + b"Sitemap: /sitemap.xml\nSitemap: maps/more.xml\n"
                + b"Sitemap: http://[bad\nSitemap: ftp://example.com/x.xml\n"
            )
        ),
        "big_page": Site(
            robots(RULES),
            extra={"/big": (200, [("Content-Type", "text/html")], b"x" * (4 * MAXSIZE))},
        ),
    }


def sitemap(*urls: str) -> Answer:
    locs = "".join(f"<url><loc>{url}</loc></url>" for url in urls)
    body = f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'
    return 200, [("Content-Type", "application/xml")], body.encode()


def start_urls(name: str, site: Site) -> list[str]:
    if name == "spelled":  # one site, spelled several ways
        port = site.url.rpartition(":")[2]
        hosts = ["localhost", "localhost.", "user:secret@localhost.", "LOCALHOST"]
        return [f"http://{host}:{port}{page}" for host, page in zip(hosts, PAGES, strict=True)]
    if name == "mapped":
        return [site.url + "/p/0"]  # the others come from its sitemaps
    urls = [site.url + page for page in PAGES]
    if name == "big_page":
        urls.append(site.url + "/big")
    return urls


@dataclass
class Crawl:
    result: CrawlResult
    sites: dict[str, Site]


def crawl_all(out: Path, settings: dict[str, object], spider: str | None = None) -> Crawl:
    every = sites()
    with ExitStack() as stack:
        for site in every.values():
            stack.enter_context(serve(site))
        mapped = every["mapped"]
        mapped.extra["/sitemap.xml"] = sitemap(mapped.url + "/p/0", mapped.url + "/p/1")
        mapped.extra["/maps/more.xml"] = sitemap(mapped.url + "/p/2", mapped.url + "/p/3")
        urls = [url for name, site in every.items() for url in start_urls(name, site)]
        result = run_crawl(urls, out, settings, follow=False, spider=spider, timeout=120)
    return Crawl(result, every)


class TrailingDotResolver(CachingThreadedResolver):
    """Scrapy's resolver, for a host name with a trailing dot as DNS resolves it
    (this machine's resolver knows "localhost" only without)."""

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> Deferred[str]:
        return super().getHostByName(name.rstrip("."), timeout)


SETTINGS: dict[str, object] = {
    # Named DNS_RESOLVER before Scrapy 2.19, which still reads that name.
    "TWISTED_DNS_RESOLVER"
    if "TWISTED_DNS_RESOLVER" in default_settings.__dict__
    else "DNS_RESOLVER": (f"{__name__}.TrailingDotResolver"),
    "ROBOTSTXT_OBEY": True,
    "AIMD_ROBOTS_RETRIES": 1,
    "DOWNLOAD_MAXSIZE": MAXSIZE,
    "AIMD_ROBOTS_SITEMAPS": True,
}


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> Crawl:
    out = tmp_path_factory.mktemp("robots_input")
    return crawl_all(out, {**AIMD, **SETTINGS}, spider="components.SitemapFollowingSpider")


#: The robots.txt middleware alone: no add-on, no feedback middleware, Scrapy's scheduler.
ALONE: dict[str, object] = {
    **SETTINGS,
    "DOWNLOADER_MIDDLEWARES": {
        "scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": None,
        "scrapy_aimd.robots_middleware.RobotsTxtMiddleware": 100,
    },
}


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> Crawl:
    out = tmp_path_factory.mktemp("robots_input_alone")
    return crawl_all(out, ALONE, spider="components.SitemapFollowingSpider")


BOTH = ["crawl", "alone"]


@pytest.fixture(params=BOTH)
def either(request: pytest.FixtureRequest) -> Crawl:
    crawl: Crawl = request.getfixturevalue(request.param)
    return crawl


def assert_rules_obeyed(crawl: Crawl, name: str) -> None:
    site = crawl.sites[name]
    assert site.pages == ALLOWED, (name, site.paths)
    assert site.paths.count("/robots.txt") == 1, (name, site.paths)


def assert_all_allowed(crawl: Crawl, name: str) -> None:
    site = crawl.sites[name]
    assert site.pages == set(PAGES), (name, site.paths)
    assert site.paths.count("/robots.txt") == 1, (name, site.paths)


def test_every_crawl_ends_well(either: Crawl) -> None:
    stats = either.result.stats
    assert stats.get("finish_reason") == "finished"
    assert "aimd/robots/origins_skipped" not in stats
    assert "aimd/robots/callback_errors" not in stats
    assert "aimd/robots/errors" not in stats
    # The one error: the page past DOWNLOAD_MAXSIZE.
    assert stats.get("log_count/ERROR") == 1
    assert "Error downloading <GET http://127.0.0.1:" in either.result.log


def test_a_bom_does_not_hide_the_first_line(either: Crawl) -> None:
    assert_rules_obeyed(either, "bom")


@pytest.mark.parametrize("name", ["huge", "endless"])
def test_a_robots_txt_past_download_maxsize_is_read_to_its_bound(either: Crawl, name: str) -> None:
    assert_rules_obeyed(either, name)
    assert either.result.stats.get("aimd/robots/truncated", 0) >= 2


@pytest.mark.parametrize("name", ["gzip_bomb", "br_bomb", "zstd_bomb", "br_cut"])
def test_a_compressed_robots_txt_is_read_to_its_bound(either: Crawl, name: str) -> None:
    assert_rules_obeyed(either, name)


@pytest.mark.parametrize("name", ["br", "zstd", "gzip_br"])
def test_br_and_zstd_are_read(either: Crawl, name: str) -> None:
    assert_rules_obeyed(either, name)


@pytest.mark.parametrize("name", ["broken_gzip", "broken_br", "broken_zstd"])
def test_a_body_that_cannot_be_decoded_allows_all(either: Crawl, name: str) -> None:
    assert_all_allowed(either, name)


def test_undecodable_bodies_are_counted_and_logged(either: Crawl) -> None:
    assert either.result.stats.get("aimd/robots/undecodable") == 3
    for name in ("broken_gzip", "broken_br", "broken_zstd"):
        url = either.sites[name].url
        assert f"{url}/robots.txt cannot be decoded" in either.result.log


def test_a_redirect_to_an_invalid_location_allows_all(either: Crawl) -> None:
    assert_all_allowed(either, "bad_redirect")
    assert either.result.stats.get("aimd/robots/redirect_invalid") == 1
    url = either.sites["bad_redirect"].url
    assert f"WARNING: {url}/robots.txt redirects to 'http://[bad'" in either.result.log


def test_an_invalid_crawl_delay_is_named_and_counted(either: Crawl) -> None:
    assert_rules_obeyed(either, "soon")
    url = either.sites["soon"].url
    assert f"WARNING: {url}/robots.txt asks for Crawl-delay 'soon'" in either.result.log
    assert either.result.stats.get("aimd/robots/crawl_delay_invalid") == 1


def test_one_site_spelled_several_ways_has_its_robots_txt_fetched_once(either: Crawl) -> None:
    assert_rules_obeyed(either, "spelled")
    hosts = {host for path, host in either.sites["spelled"].asked if path in PAGES}
    assert {host.partition(":")[0] for host in hosts} == {"localhost", "localhost."}


def test_relative_sitemaps_are_followed_and_invalid_ones_counted(either: Crawl) -> None:
    site = either.sites["mapped"]
    assert sorted(p for p in site.paths if p.endswith(".xml")) == ["/maps/more.xml", "/sitemap.xml"]
    assert site.pages == ALLOWED  # robots.txt still decides
    stats = either.result.stats
    assert stats.get("aimd/robots/sitemaps") == 2
    assert stats.get("aimd/robots/sitemaps_invalid") == 2


def test_download_maxsize_still_applies_to_pages(either: Crawl) -> None:
    assert_rules_obeyed(either, "big_page")
    assert "/big" in either.sites["big_page"].paths  # asked for ...
    assert not any(url.endswith("/big") for url in either.result.urls)  # ... and cut
    assert f"{either.sites['big_page'].url}/big" in either.result.log  # Scrapy's warning


class FlakyRobotsSite(Site):
    """robots.txt answers 503 twice, then its rules."""

    def answer(self, path: str) -> Answer:
        if path == "/robots.txt" and self.paths.count("/robots.txt") <= 2:
            return 503, [("Content-Type", "text/plain")], b"busy\n"
        return super().answer(path)


def test_alone_a_robots_txt_retried_while_requests_hold_every_place(tmp_path: Path) -> None:
    """Without the add-on's scheduler, the requests waiting for their origin's
    rules wait inside the downloader, where each counts against
    ``CONCURRENT_REQUESTS``: a robots.txt fetch that went through the
    scheduler again was never asked for (the engine had no room), and the
    crawl waited forever. Three origins, four pages each, four places."""
    settings = {**ALONE, "CONCURRENT_REQUESTS": 4, "AIMD_ROBOTS_RETRIES": 3}
    with ExitStack() as stack:
        every = [stack.enter_context(serve(FlakyRobotsSite(robots(RULES)))) for _ in range(3)]
        urls = [site.url + page for site in every for page in PAGES]
        result = run_crawl(urls, tmp_path / "crawl", settings, follow=False, timeout=60)
    assert result.stats.get("finish_reason") == "finished"
    for site in every:
        assert site.pages == ALLOWED, site.paths
        assert site.paths.count("/robots.txt") == 3, site.paths
