"""The nginx benchmark: its sites, its config and its log reading on hand-made input,
then real nginx (the limits mean what the config says) and one real crawl of a tiny
documentation tree. The figures are not judged, only that they are nginx's own.

The tests that run nginx skip when it is not installed; CI installs it."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.benchmarking import run_benchmark

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def bench() -> Iterator[Any]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_nginx
        from nginx import accesslog, hosts, server, site

        yield SimpleNamespace(
            main=bench_nginx, accesslog=accesslog, hosts=hosts, server=server, site=site
        )
    finally:
        sys.path.remove(str(BENCHMARKS))


def nginx_or_skip(bench: Any) -> str:
    found: str | None = bench.server.find_nginx()
    if found is None:
        pytest.skip(
            "NGINX IS NOT INSTALLED: the nginx benchmark's tests need Debian's stock nginx"
            " (apt-get install nginx, or $NGINX); they did not run"
        )
    return found


def page(*hrefs: str) -> str:
    links = "".join(f'<a class="reference" href="{href}">link</a>\n' for href in hrefs)
    return f"<!DOCTYPE html><html><body>\n{links}</body></html>\n"


def tiny_docs(root: Path, sections: list[str]) -> Path:
    """Two pages a section, linked as Sphinx links them: within the section, to the
    top level, to another section and off-site."""
    for section in sections:
        (root / section).mkdir(parents=True)
        (root / section / "index.html").write_text(
            page(
                "a.html",
                "a.html#part",
                "windows.html",
                "../genindex.html",
                "../index.html",
                "../library/os.html",
                "https://www.python.org/",
                "mailto:docs@python.org",
            )
        )
        (root / section / "a.html").write_text(page("index.html", "../search.html"))
        (root / section / "windows.html").write_text(page("a.html"))
    return root


def test_a_site_is_closed_and_walked_as_a_spider_follows_links(bench: Any, tmp_path: Path) -> None:
    docs = tiny_docs(tmp_path / "docs", ["faq"])
    site = bench.site.build_site(
        tmp_path / "site",
        ["faq"],
        robots_txt="User-agent: *\nDisallow: /faq/windows\n",
        disallowed=("/faq/windows",),
        docs=docs,
    )
    served = (tmp_path / "site" / "faq" / "index.html").read_text()
    assert 'href="a.html"' in served
    assert 'href="../genindex.html"' in served  # kept: answers 404, as a broken link
    for gone in ("../library/os.html", "https://www.python.org/", "mailto:"):
        assert gone not in served
    assert served.count("<a ") == 8  # the links stay, without an href
    assert site.pages == {"/", "/index.html", "/faq/index.html", "/faq/a.html"}
    assert site.broken == {"/genindex.html", "/search.html"}
    assert not site.allowed("/faq/windows.html")
    assert site.requests()[0] == "/robots.txt"
    assert len(site.requests()) == 1 + 4 + 2
    assert (tmp_path / "site" / "robots.txt").read_text().startswith("User-agent: *")
    assert (tmp_path / "site" / "404.html").exists()
    # A second a fetch: the longest of the shortest chains is robots.txt, /,
    # faq/index.html, then faq/a.html or /index.html (the home page links the 404s).
    assert site.longest_chain(lambda size: 1.0) == 4.0
    # A second a byte: the 404 page costs its own size.
    assert site.size("/search.html") == site.not_found_bytes
    assert site.longest_chain(float) >= sum(
        site.size(p) for p in ("/robots.txt", "/", "/faq/index.html", "/faq/a.html")
    )


def test_possible_times_follow_the_configured_limits(bench: Any, tmp_path: Path) -> None:
    docs = tiny_docs(tmp_path / "docs", ["s"])
    site = bench.site.build_site(tmp_path / "site", ["s"], docs=docs)
    n = len(site.requests())
    host = bench.hosts.NginxHost
    assert host("r", "", ("s",), rate=2).possible_seconds(site) == (n - 1) / 2
    assert host("b", "", ("s",), rate=2, burst=3).possible_seconds(site) == (n - 4) / 2
    queued = host("q", "", ("s",), rate=2, burst=3, nodelay=False)
    assert queued.possible_seconds(site) == (n - 1) / 2  # a queued burst still waits
    assert host("p", "", ("s",), crawl_delay=0.5).possible_seconds(site) == (n - 1) * 0.5
    assert host("o", "", ("s",)).possible_seconds(site) == 0.0
    slow = host("l", "", ("s",), bytes_per_second=100)
    assert slow.body_seconds(99) == 0.0  # the first second's worth goes at once
    assert slow.body_seconds(250) == 2.0
    assert slow.possible_seconds(site) == max(
        sum(slow.body_seconds(site.size(p)) for p in site.requests()) / 8,
        site.longest_chain(slow.body_seconds),
    )


def test_server_blocks_say_what_the_hosts_do(bench: Any) -> None:
    by_name = {host.name: host for host in bench.hosts.HOSTS}
    assert len(by_name) == 7
    rate = by_name["rate"].server_block("127.0.0.2", 8000, "/srv")
    assert "listen 127.0.0.2:8000 default_server;" in rate
    assert "limit_req zone=rate_req;" in rate
    assert "limit_req_status 429;" in rate
    assert "add_header Retry-After $rate_retry_after always;" in rate
    assert "limit_req zone=burst_req burst=10 nodelay;" in by_name["burst"].server_block(
        "a", 1, "r"
    )
    assert "limit_req zone=queue_req burst=10;" in by_name["queue"].server_block("a", 1, "r")
    conn = by_name["conn"].server_block("a", 1, "r")
    assert "limit_conn conn_conn 2;" in conn
    assert "limit_conn_status 503;" in conn
    assert "limit_rate" in by_name["slow"].server_block("a", 1, "r")
    assert "Crawl-delay: 0.5" in (by_name["polite"].robots_txt() or "")
    assert by_name["open"].robots_txt() is None


def test_figures_from_a_hand_made_access_log(bench: Any, tmp_path: Path) -> None:
    docs = tiny_docs(tmp_path / "docs", ["faq"])
    site = bench.site.build_site(
        tmp_path / "site", ["faq"], disallowed=("/faq/windows",), docs=docs
    )
    lines = [
        # $msec $status $request_time $host $server_addr $server_port $body_bytes_sent
        # $connection $request_uri $uri
        "100.000 404 0.000 127.0.0.7 127.0.0.7 9000 154 1 /robots.txt /404.html",
        "100.600 200 0.100 127.0.0.7 127.0.0.7 9000 300 1 / /index.html",
        "100.900 429 0.000 127.0.0.7 127.0.0.7 9000 162 2 /faq/index.html /faq/index.html",
        # arrived at 100.95: 0.05 s after the last arrival, and in flight with the next
        "101.300 200 0.350 127.0.0.7 127.0.0.7 9000 900 2 /faq/index.html /faq/index.html",
        "101.200 200 0.100 127.0.0.7 127.0.0.7 9000 900 3 /faq/index.html?x=1 /faq/index.html",
        "101.900 200 0.000 127.0.0.7 127.0.0.7 9000 900 3 /faq/windows.html /faq/windows.html",
        "102.500 503 0.000 127.0.0.7 127.0.0.7 9000 190 3 /faq/a.html /faq/a.html",
    ]
    (tmp_path / "access.log").write_text("\n".join(lines) + "\n")
    entries = bench.accesslog.read_log(tmp_path / "access.log")
    assert entries[1].arrived == pytest.approx(100.5)
    assert entries[4].path == "/faq/index.html"
    figures = bench.accesslog.host_figures(entries, site, 0.5)
    assert figures.requests == 7
    assert figures.statuses == {200: 4, 404: 1, 429: 1, 503: 1}
    assert figures.throttled == 2
    assert (figures.pages_fetched, figures.pages_total) == (2, 4)  # / and faq/index.html
    assert figures.duplicate_fetches == 1
    assert figures.disallowed_fetched == 1
    # Arrivals 100.0, 100.5, 100.9, 100.95, 101.1, 101.9, 102.5.
    assert figures.min_gap_seconds == pytest.approx(0.05)
    assert figures.crawl_delay_violations == 3  # 0.4, 0.05 and 0.15 s
    assert figures.max_in_flight == 2
    assert figures.first_arrival == pytest.approx(100.0)
    assert figures.last_end == pytest.approx(102.5)


def test_hosts_on_the_same_port_of_their_own_addresses_keep_their_entries(bench: Any) -> None:
    """Each host listens on its own address, on a free port of that address: two may
    get the same port, and the log's entries go by address and port."""
    polite, conn = bench.hosts.HOSTS[0], bench.hosts.HOSTS[1]
    listening = [
        bench.server.Listening(polite, "127.0.0.5", 36803),
        bench.server.Listening(conn, "127.0.0.7", 36803),
    ]
    lines = [
        "100.000 200 0.010 127.0.0.5 127.0.0.5 36803 100 1 / /index.html",
        "100.100 200 0.010 127.0.0.7 127.0.0.7 36803 100 2 / /index.html",
        "100.200 200 0.010 127.0.0.7 127.0.0.7 36803 100 2 /a.html /a.html",
    ]
    entries = [bench.accesslog.parse_line(line) for line in lines]
    by_host = bench.main.entries_by_host(entries, listening)
    assert [e.ended for e in by_host[polite.name]] == [100.0]
    assert [e.ended for e in by_host[conn.name]] == [100.1, 100.2]


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.headers


def test_real_nginx_enforces_the_configured_limits(bench: Any, tmp_path: Path) -> None:
    nginx = nginx_or_skip(bench)
    sections = sorted({s for host in bench.hosts.HOSTS for s in host.sections})
    docs = tiny_docs(tmp_path / "docs", sections)
    sites = bench.main.build_sites(tmp_path / "sites", docs)
    roots = {name: site.root for name, site in sites.items()}
    with bench.server.run_nginx(tmp_path / "run", bench.hosts.HOSTS, roots, nginx) as listening:
        url = {item.host.name: item.url for item in listening}
        assert get(url["rate"] + "/")[0] == 200
        # At once, above 3 r/s with no burst: refused (a few tries, for a busy machine).
        refused = [get(url["rate"] + "/") for _ in range(5)]
        assert (429, "1") in [(status, headers["Retry-After"]) for status, headers in refused]
        assert get(url["open"] + "/genindex.html")[0] == 404
        assert get(url["open"] + "/")[1]["Retry-After"] is None
        assert get(url["polite"] + "/robots.txt")[0] == 200
    log = bench.accesslog.read_log(tmp_path / "run" / "access.log")
    assert [(e.status, e.path) for e in log[:1] + log[-3:]] == [
        (200, "/"),
        (404, "/genindex.html"),
        (200, "/"),
        (200, "/robots.txt"),
    ]
    assert {e.host for e in log} == {"127.0.0.2", "127.0.0.8", "127.0.0.7"}
    assert log[-3].uri == "/404.html"  # nginx's error_page, with the 404 kept


def test_bench_nginx_on_a_tiny_tree(bench: Any, tmp_path: Path) -> None:
    nginx_or_skip(bench)
    sections = sorted({s for host in bench.hosts.HOSTS for s in host.sections})
    docs = tiny_docs(tmp_path / "docs", sections)
    out = run_benchmark(
        "bench_nginx.py",
        "--only", "defaults", "aimd",
        "--docs", str(docs),
        "--cap", "40",
        "--deadline", "140",
        "--json", str(tmp_path / "out.json"),
        "--keep", str(tmp_path / "logs"),
    )  # fmt: skip
    assert "|  | Scrapy defaults | scrapy-aimd |" in out
    for label in ("pages fetched of reachable", "429+503", "Crawl-delay violations"):
        assert f"| {label} |" in out
    assert "| polite | " in out
    report = json.loads((tmp_path / "out.json").read_text())
    for run in report["runs"]:
        # Recount from nginx's own log, independently of the figures.
        log = bench.accesslog.read_log(
            tmp_path / "logs" / run["contender"] / "nginx" / "access.log"
        )
        assert run["requests"] == len(log) > 0
        assert run["throttled"] == sum(e.status in (429, 503) for e in log)
        first = min(e.arrived for e in log)
        for host in run["hosts"].values():
            if host["requests"]:
                assert host["actual_seconds"] == pytest.approx(host["last_end"] - first)
        assert run["efficiency"] == pytest.approx(run["possible_seconds"] / run["wall_seconds"])
        assert not run["capped"], run["contender"]
    aimd = next(run for run in report["runs"] if run["contender"] == "aimd")
    assert aimd["pages_fetched"] == aimd["pages_total"]
    assert aimd["disallowed_fetched"] == 0
