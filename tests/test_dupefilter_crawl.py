"""Real crawls: the stock scheduler with our fingerprinter and dupefilter
against a local site whose links carry tracking parameters, fragments,
default ports, case and percent-encoding variants, and redirects whose target
has the same key as their source. Each page is fetched once; stock Scrapy,
run on the same site, fetches duplicates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pytest
from crawling import AIMD as ADDON
from crawling import run_crawl
from fleetcrawl import FLEET, assert_finished, start_worker, wait_for
from local_http import running
from redis_server import REDIS_SERVER, SKIP_REASON, redis_server

from scrapy_aimd.dupefilter import AimdDupeFilter
from scrapy_aimd.report import read_events_files

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parent.parent


class Site(ThreadingHTTPServer):
    """A small site that records the path and query of every request."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, SiteHandler)
        self.requests: list[str] = []
        self.lock = threading.Lock()

    @property
    def base(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}" + ("" if port == 80 else f":{port}")


class Replying(BaseHTTPRequestHandler):
    """Answers with a status, a body and perhaps a Location; logs nothing."""

    def reply(self, status: int, body: bytes, location: str | None = None) -> None:
        self.send_response(status)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class SiteHandler(Replying):
    server: Site

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.requests.append(self.path)
        path, _, query = self.path.partition("?")
        if path == "/":
            self.reply(200, index_page(self.server))
        elif path == "/old/":
            self.reply(301, b"", location="/old")
        elif path == "/moved" and query:
            self.reply(302, b"", location="/moved")
        else:
            self.reply(200, b"<html><title>" + path.encode() + b"</title></html>")


def index_page(site: Site) -> bytes:
    host, port = site.server_address[:2]
    links = [
        "/article",
        "/article?utm_source=newsletter&utm_medium=email",
        "/article?fbclid=IwAR0abc",
        "/article?UTM_Campaign=spring&gclid=xyz",
        "/article#comments",
        "/article/",
        "/./article",
        "/%61rticle",
        "/list?b=2&a=1",
        "/list?a=1&b=2&utm_content=x",
        "/caf%c3%a9",
        "/café",
        "/caf%C3%A9#top",
        "/old/",  # answers 301 to /old, the same key
        "/old",
        "/moved?utm_source=feed",  # answers 302 to /moved, the same key
        "/Article",  # path case: another page
        "/q?x=a+b",
        "/q?x=a%20b",  # "+" and "%20": two pages to a server
    ]
    if port == 80:
        links.append(f"http://{host}:80/article")  # default port
    anchors = "".join(f'<a href="{link}">{link}</a>' for link in links)
    return f"<html><body>{anchors}</body></html>".encode()


def bind_site() -> Site:
    """Port 80 on a loopback address of its own if it is free (for the default
    port variant); any port otherwise."""
    for last in range(83, 91):
        try:
            return Site((f"127.0.0.{last}", 80))
        except OSError:
            continue
    return Site(("127.0.0.83", 0))


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    server = bind_site()
    with running(server):
        yield server


SPIDER = textwrap.dedent(
    """
    import json
    import scrapy

    class SiteSpider(scrapy.Spider):
        name = "site"

        def __init__(self, start: str, report: str, **kwargs):
            super().__init__(**kwargs)
            self.start_urls = [start]
            self.report = report
            self.pages = []

        def parse(self, response):
            if response.url.rstrip("/") == self.start_urls[0].rstrip("/"):
                yield from response.follow_all(css="a")
            else:
                self.pages.append(response.url)

        def closed(self, reason):
            stats = {k: v for k, v in self.crawler.stats.get_stats().items()
                     if isinstance(v, int)}
            with open(self.report, "w") as file:
                json.dump({"pages": self.pages, "stats": stats}, file)
    """
)


def crawl(site: Site, tmp_path: Path, name: str, settings: dict[str, str]) -> dict[str, Any]:
    """Run one crawl in a subprocess; the site's requests and the spider's report."""
    spider = tmp_path / "site_spider.py"
    spider.write_text(SPIDER)
    report = tmp_path / f"{name}.json"
    base_settings = {
        "ROBOTSTXT_OBEY": "False",
        "TELNETCONSOLE_ENABLED": "False",
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": "4",
        "DOWNLOAD_TIMEOUT": "20",
    }
    arguments = [sys.executable, "-m", "scrapy", "runspider", str(spider)]
    for key, value in {**base_settings, **settings}.items():
        arguments += ["-s", f"{key}={value}"]
    arguments += ["-a", f"start={site.base}/", "-a", f"report={report}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    with site.lock:
        site.requests.clear()
    result = subprocess.run(
        arguments, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, Any] = json.loads(report.read_text())
    with site.lock:
        data["requests"] = list(site.requests)
    data["log"] = result.stderr
    return data


AIMD = {
    "DUPEFILTER_CLASS": "scrapy_aimd.dupefilter.AimdDupeFilter",
    "REQUEST_FINGERPRINTER_CLASS": "scrapy_aimd.fingerprint.AimdRequestFingerprinter",
}


def page_counts(requests: list[str]) -> Counter[str]:
    """Fetches per page, by the path the server serves (query aside, escapes
    decoded as the server decodes them)."""
    return Counter(unquote(request.partition("?")[0]) for request in requests)


@pytest.fixture(scope="module")
def crawls(site: Site, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """One crawl with our fingerprinter and dupefilter (and a JOBDIR), one
    with stock Scrapy."""
    ours = tmp_path_factory.mktemp("aimd")
    result = crawl(site, ours, "aimd", {**AIMD, "JOBDIR": str(ours / "job")})
    result["jobdir"] = str(ours / "job")
    return {"aimd": result, "stock": crawl(site, tmp_path_factory.mktemp("stock"), "stock", {})}


def test_each_page_is_fetched_once(site: Site, crawls: dict[str, dict[str, Any]]) -> None:
    result = crawls["aimd"]
    requests = result["requests"]
    fetches = page_counts(requests)
    assert fetches["/article"] == 1, requests
    assert fetches["/article/"] == 0, requests
    assert fetches["/list"] == 1, requests
    assert fetches["/café"] == 1, requests
    assert fetches["/Article"] == 1, requests  # path case kept
    assert sorted(r for r in requests if r.startswith("/q?")) == ["/q?x=a%20b", "/q?x=a+b"]
    assert fetches["/"] == 1
    assert len(requests) == len(set(requests))
    # the redirects: one request to the source, one to the target, page reached
    assert fetches["/old/"] == 1
    assert fetches["/old"] == 1
    assert fetches["/moved"] == 2  # "/moved?utm_source=feed", then "/moved"
    pages = {url.removeprefix(site.base) for url in result["pages"]}
    assert {"/old", "/moved", "/article"} <= pages
    stats = result["stats"]
    assert stats["aimd/dupefilter/redirect_same_key"] == 2
    assert stats["dupefilter/filtered"] >= 12
    # 11 requests: the start request is not filtered (dont_filter), and each
    # redirect target shares its source's key
    assert len(requests) == 11
    assert stats["aimd/dupefilter/keys"] == 8


def test_jobdir_keeps_the_keys_of_the_crawl(crawls: dict[str, dict[str, Any]]) -> None:
    resumed = AimdDupeFilter(crawls["aimd"]["jobdir"])
    assert len(resumed) == 8
    resumed.close("finished")


def test_stock_scrapy_fetches_the_duplicates(site: Site, crawls: dict[str, dict[str, Any]]) -> None:
    ours, stock = crawls["aimd"], crawls["stock"]
    stock_fetches = page_counts(stock["requests"])
    # the plain link, two with utm_* (and gclid), one with fbclid, and with
    # port 80 one with ":80"; fragments, dot segments and %61 it merges too
    variants = 5 if site.server_address[1] == 80 else 4
    assert stock_fetches["/article"] == variants, stock["requests"]
    assert stock_fetches["/article/"] == 1, stock["requests"]
    assert page_counts(ours["requests"])["/article"] == 1
    assert len(stock["requests"]) > len(ours["requests"])
    # both reach the pages behind the redirects
    for page in ("/old", "/moved"):
        assert any(url.endswith(page) for url in stock["pages"])
        assert any(url.endswith(page) for url in ours["pages"])


# --- The duplicates by kind, through the add-on, to the report ----------------


class LinkSite(ThreadingHTTPServer):
    """Pages that are lists of links: ``pages`` maps a path to its links."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], pages: dict[str, list[str]]) -> None:
        super().__init__(address, LinkHandler)
        self.pages = pages

    @property
    def base(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class LinkHandler(Replying):
    server: LinkSite

    def do_GET(self) -> None:
        links = self.server.pages.get(self.path.partition("?")[0])
        if links is None:
            self.reply(404, b"")
            return
        anchors = "".join(f'<a href="{link}">{link}</a>' for link in links)
        self.reply(200, f"<html><body>{anchors}</body></html>".encode())


#: Each of three pages links the target exactly, with utm_ parameters, with a
#: fragment, with both, and itself: 15 links, of which only the first target
#: link is new. Duplicates: 5 exact (2 target links, 3 self links), 6 with a
#: tracking parameter, 6 with a fragment (the 3 with both count under each).
TRACKING_SITE = {
    "/": ["/p/1", "/p/2", "/p/3"],
    **{
        f"/p/{n}": [
            "/target",
            f"/target?utm_source=p{n}&utm_medium=email",
            f"/target#section-{n}",
            "/target?fbclid=IwAR0#top",
            f"/p/{n}",
        ]
        for n in (1, 2, 3)
    },
    "/target": [],
}
#: One page twice, and once with a fragment: 2 duplicates (1 exact, 1 fragment).
SMALL_SITE = {"/": ["/x", "/x", "/x#y"], "/x": []}


@pytest.fixture(scope="module")
def link_sites() -> Iterator[tuple[LinkSite, LinkSite]]:
    sites = (LinkSite(("127.0.0.85", 0), TRACKING_SITE), LinkSite(("127.0.0.86", 0), SMALL_SITE))
    with running(sites[0]), running(sites[1]):
        yield sites


def test_a_crawl_counts_its_duplicates_by_kind_and_host(
    link_sites: tuple[LinkSite, LinkSite], tmp_path: Path
) -> None:
    tracking, small = link_sites
    events = tmp_path / "events.jsonl"
    result = run_crawl(
        [f"{tracking.base}/", f"{small.base}/"],
        tmp_path / "crawl",
        {**ADDON, "AIMD_EVENTS_FILE": str(events)},
    )
    assert sorted(result.urls) == sorted(
        [f"{tracking.base}{p}" for p in TRACKING_SITE] + [f"{small.base}{p}" for p in SMALL_SITE]
    )
    stats = result.stats
    assert stats["dupefilter/filtered"] == 14 + 2
    by_kind = {
        key.removeprefix("aimd/dupefilter/filtered/"): value
        for key, value in stats.items()
        if key.startswith("aimd/dupefilter/filtered/")
    }
    assert by_kind == {"exact": 5 + 1, "query_filter": 6, "fragment": 6 + 1}
    tracking_host, small_host = (s.base.removeprefix("http://") for s in link_sites)
    assert (
        "Filtered 16 duplicate requests: 6 exact, 6 query_filter, 7 fragment "
        "(a request changed by several stages counts under each); "
        f"the most on {tracking_host} (14), {small_host} (2)\n" in result.log
    )
    close = json.loads(events.read_text().splitlines()[-1])
    assert close["duplicates"] == {"total": 16, **by_kind}
    assert close["duplicate_hosts"] == {tracking_host: 14, small_host: 2}

    page = tmp_path / "crawl.html"
    subprocess.run(
        [sys.executable, "-m", "scrapy_aimd.report", str(events), "-o", str(page)],
        check=True,
        cwd=ROOT,
        timeout=60,
    )
    html = page.read_text(encoding="utf-8")
    assert "16 requests dropped as duplicates of a page already seen" in html
    assert ">tracking parameters or empty pairs</th><td>6</td><td>38%</td>" in html
    assert ">a fragment</th><td>7</td><td>44%</td>" in html
    assert ">nothing: the same URL again</th><td>6</td><td>38%</td>" in html
    assert f'<th scope="row">{tracking_host}</th><td>14</td><td>88%</td>' in html


def test_a_fleet_counts_its_duplicates_by_kind_and_host(
    link_sites: tuple[LinkSite, LinkSite], tmp_path: Path
) -> None:
    """Two workers on one Redis: each counts the duplicates it met (its own
    links, and the start requests that the other sent first); the report adds
    up their close lines."""
    if REDIS_SERVER is None:
        pytest.skip(SKIP_REASON)
    tracking, small = link_sites
    starts = [f"{tracking.base}/", f"{small.base}/"]
    with redis_server() as server:
        fleet = [start_worker(starts, tmp_path / f"w{n}", server.url, {**FLEET}) for n in range(2)]
        wait_for(fleet)
    assert_finished(fleet)
    total: Counter[str] = Counter()
    for worker in fleet:
        total.update(
            {
                key: value
                for key, value in worker.stats().items()
                if key.startswith(("dupefilter/", "aimd/dupefilter/filtered/", "aimd/fleet/dup"))
            }
        )
    # 25 requests made (2 x 2 start requests, 21 links) for 7 pages; a start
    # request is an exact duplicate in the worker that sent it second
    assert total == {
        "dupefilter/filtered": 18,
        "aimd/fleet/duplicates": 18,
        "aimd/dupefilter/filtered/exact": 6 + 2,
        "aimd/dupefilter/filtered/query_filter": 6,
        "aimd/dupefilter/filtered/fragment": 7,
    }
    tracking_host, small_host = (s.base.removeprefix("http://") for s in link_sites)
    files = [str(worker.out / "events.jsonl") for worker in fleet]
    crawl = read_events_files(files)
    kinds = {
        key.removeprefix("aimd/dupefilter/filtered/"): n
        for key, n in total.items()
        if key.startswith("aimd/dupefilter/")
    }
    assert crawl.duplicates == {"total": 18, **kinds}
    assert crawl.duplicate_hosts == {tracking_host: 14 + 1, small_host: 2 + 1}
