"""The real-server benchmark: its sites, its configs and its log reading on hand-made
input, then real nginx, HAProxy and Apache + mod_evasive (the limits mean what the
config says) and real crawls of tiny sites. The figures are not judged, only that they
are the servers' own; of the crawls, only what holds today: the servers really limit.

The tests that run a server skip, saying so, when it is not installed; CI installs them."""

from __future__ import annotations

import json
import os
import sys
import time
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
        import bench_servers
        from servers import accesslog, apache, haproxy, hosts, limiters, site
        from servers import nginx as server

        yield SimpleNamespace(
            main=bench_servers,
            accesslog=accesslog,
            hosts=hosts,
            server=server,
            site=site,
            haproxy=haproxy,
            apache=apache,
            limiters=limiters,
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
        "bench_nginx.py",  # bench_servers.py --server nginx, as the README's commands run it
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


# -- HAProxy and Apache + mod_evasive ---------------------------------------------------


def haproxy_or_skip(bench: Any) -> tuple[str, str]:
    found: str | None = bench.haproxy.find_haproxy()
    nginx: str | None = bench.server.find_nginx()
    if found is None or nginx is None:
        pytest.skip(
            "HAPROXY OR NGINX IS NOT INSTALLED: the HAProxy tests need Debian's haproxy in"
            " front of nginx (apt-get install haproxy nginx); they did not run"
        )
    return found, nginx


def apache_or_skip(bench: Any) -> str:
    found: str | None = bench.apache.find_apache()
    if found is None:
        pytest.skip(
            "APACHE OR MOD_EVASIVE IS NOT INSTALLED: the mod_evasive tests need Debian's"
            " apache2 and libapache2-mod-evasive; they did not run"
        )
    return found


def test_the_static_site_is_walked_whole(bench: Any, tmp_path: Path) -> None:
    site = bench.site.build_static_site(tmp_path / "site", pages=30, broken=3)
    assert len(site.pages) == 32  # 30 pages, "/" and /index.html
    assert site.broken == {"/missing/0.html", "/missing/1.html", "/missing/2.html"}
    assert len(site.requests()) == 1 + 32 + 3
    assert (tmp_path / "site" / "p" / "29.html").stat().st_size > 2000
    again = bench.site.build_static_site(tmp_path / "again", pages=30, broken=3)
    assert again.links == site.links  # seeded


def test_limiters_configs_and_ideal_times(bench: Any, tmp_path: Path) -> None:
    site = bench.site.build_static_site(tmp_path / "site", pages=120, broken=12)
    by_name = {host.name: host for host in bench.limiters.LIMITED}
    assert len(site.requests()) == 135
    # HAProxy holds a client to 80 (40) a 10 s period past the first burst.
    assert by_name["haproxy-429"].possible_seconds(site) == pytest.approx(135 * 10 / 80)
    assert by_name["haproxy-403"].possible_seconds(site) == pytest.approx(135 * 10 / 40)
    assert by_name["evasive"].possible_seconds(site) == pytest.approx(6 * 2.0)
    frontends = [
        bench.haproxy.Frontend(by_name["haproxy-429"], "127.0.0.3", 9001),
        bench.haproxy.Frontend(by_name["haproxy-403"], "127.0.0.4", 9002),
    ]
    config = bench.haproxy.render_config(frontends, ("127.0.0.2", 9000))
    assert "store http_req_rate(10s)" in config
    assert "http-request track-sc0 src" in config  # before the deny: denied ones count
    assert "http-request deny deny_status 429 if { sc_http_req_rate(0) gt 80 }" in config
    assert "http-request deny if { sc_http_req_rate(0) gt 40 }" in config
    assert "server static 127.0.0.2:9000" in config
    listener = bench.apache.Listener(by_name["evasive"], "127.0.0.5", 9003)
    config = bench.apache.render_config(tmp_path, listener, tmp_path / "site")
    for line in ("DOSSiteCount 20", "DOSSiteInterval 2", "DOSBlockingPeriod 5", "ServerLimit 1"):
        assert line in config
    assert ("User www-data" in config) == (os.geteuid() == 0)


def test_haproxy_and_apache_log_lines(bench: Any) -> None:
    line = "1796639663.797 0 12 250 429 127.0.0.3 9001 225 50494 /p/1.html?x=1"
    entry = bench.haproxy.parse_line(line)
    assert entry.arrived == pytest.approx(1796639663.809)
    assert entry.ended == pytest.approx(1796639664.059)
    assert (entry.status, entry.address, entry.port) == (429, "127.0.0.3", 9001)
    assert (entry.request_uri, entry.path, entry.connection) == (
        "/p/1.html?x=1",
        "/p/1.html",
        50494,
    )
    line = "1796639670.452 403 290000 127.0.0.5 9003 239 33574 GET /p/2.html HTTP/1.1"
    entry = bench.apache.parse_line(line)
    assert entry.ended == pytest.approx(1796639670.452)
    assert entry.seconds == pytest.approx(0.29)
    assert (entry.status, entry.path, entry.port) == (403, "/p/2.html", 9003)


def test_real_haproxy_refuses_above_its_rate_and_counts_denied_requests(
    bench: Any, tmp_path: Path
) -> None:
    found, nginx = haproxy_or_skip(bench)
    site = bench.site.build_static_site(tmp_path / "site", pages=5, broken=1)
    hosts = [
        bench.limiters.LimitedHost("h429", "haproxy", "", limit=3, period=10.0, status=429),
        bench.limiters.LimitedHost("h403", "haproxy", "", limit=3, period=10.0),
    ]
    origin_host = bench.main.ORIGIN
    with bench.server.run_nginx(
        tmp_path / "origin", (origin_host,), {"origin": site.root}, nginx
    ) as listening:
        origin = (listening[0].address, listening[0].port)
        with bench.haproxy.run_haproxy(tmp_path / "hp", hosts, origin, found, 3) as frontends:
            url = {item.host.name: item.url for item in frontends}
            assert [get(url["h429"] + "/p/0.html")[0] for _ in range(5)] == [
                200, 200, 200, 429, 429
            ]  # fmt: skip
            statuses = [get(url["h403"] + "/")[0] for _ in range(4)]
            assert statuses == [200, 200, 200, 403]
            assert get(url["h403"] + "/missing/0.html")[0] == 403  # still over: denied count
    log = bench.haproxy.read_log(tmp_path / "hp" / "access.log")
    by_frontend: dict[str, list[int]] = {}
    for entry in log:  # in the order HAProxy's threads wrote them: sorted below
        by_frontend.setdefault(entry.address, []).append(entry.status)
    assert {address: sorted(found) for address, found in by_frontend.items()} == {
        "127.0.0.3": [200, 200, 200, 429, 429],
        "127.0.0.4": [200, 200, 200, 403, 403],
    }


def test_real_mod_evasive_blocks_with_403_and_renews_the_block(bench: Any, tmp_path: Path) -> None:
    found = apache_or_skip(bench)
    site = bench.site.build_static_site(tmp_path / "site", pages=5, broken=1)
    host = bench.limiters.LimitedHost("ev", "apache", "", limit=3, period=2.0, block_seconds=2)
    with bench.apache.run_apache(tmp_path / "ap", host, site.root, found, 5) as listener:
        assert get(listener.url + "/p/0.html")[0] == 200
        statuses = [get(listener.url + f"/p/{i}.html")[0] for i in range(1, 5)]
        assert 403 in statuses and statuses[0] == 200
        for _ in range(6):  # knocking through 3 s keeps a 2 s block on
            time.sleep(0.5)
            assert get(listener.url + "/index.html")[0] == 403
    # Apache logs a request after its answer, so two in a row may be logged out of order.
    log = sorted(bench.apache.read_log(tmp_path / "ap" / "access.log"), key=lambda e: e.ended)
    assert len(log) == 11
    assert (200, "/p/0.html") in [(e.status, e.path) for e in log[:2]]
    assert [e.status for e in log[-6:]] == [403] * 6
    if os.geteuid() == 0:  # served by www-data's children, from a copy they can read
        assert "User www-data" in (tmp_path / "ap" / "apache2.conf").read_text()


def test_real_crawls_of_haproxy_and_mod_evasive(bench: Any, tmp_path: Path) -> None:
    """Stock Scrapy is refused past the limits (429 and 403); scrapy-aimd requeues
    the stick table's 429s, and waits out the blocks (403) of the stick table's deny
    and of mod_evasive, probing one request at a time: its crawls complete."""
    haproxy, nginx = haproxy_or_skip(bench)
    apache = apache_or_skip(bench)
    binaries = bench.main.Binaries(nginx, haproxy, apache)
    site = bench.site.build_static_site(tmp_path / "site", pages=30, broken=3)
    hosts = [
        bench.limiters.LimitedHost("h429", "haproxy", "", limit=20, period=2.0, status=429),
        bench.limiters.LimitedHost("h403", "haproxy", "", limit=20, period=2.0),
        bench.limiters.LimitedHost("ev", "apache", "", limit=10, period=1.0, block_seconds=2),
    ]
    runs = {}
    for name in ("defaults", "aimd"):
        contender = bench.main.CONTENDERS[name]
        out = tmp_path / name
        runs[name] = bench.main.run_limited(contender, hosts, site, 90.0, out, binaries)
    stock, aimd = runs["defaults"].hosts, runs["aimd"].hosts
    assert stock["h429"]["statuses"].get(429, 0) > 0
    assert stock["h403"]["statuses"].get(403, 0) > 0
    assert stock["ev"]["statuses"].get(403, 0) > 0
    assert stock["h429"]["pages_fetched"] < stock["h429"]["pages_total"]
    assert aimd["h429"]["pages_fetched"] == aimd["h429"]["pages_total"] == 32
    for name in ("h403", "ev"):  # blocked, and the pages answered 403 fetched again
        # All of them as a rule; HAProxy's deny mixes 403s with pages, and a page
        # refetched into a second 403 that looks alone is read as forbidden.
        assert aimd[name]["pages_fetched"] >= aimd[name]["pages_total"] - 2, aimd[name]
        assert aimd[name]["pages_fetched"] > stock[name]["pages_fetched"], (aimd, stock)
        assert aimd[name]["statuses"].get(403, 0) <= 0.3 * aimd[name]["requests"], aimd[name]
    assert not runs["aimd"].capped
    # Recount from HAProxy's own log, independently of the figures.
    log = bench.haproxy.read_log(tmp_path / "aimd" / "haproxy" / "access.log")
    assert sum(e.address == "127.0.0.3" for e in log) == aimd["h429"]["requests"]


def test_servers_not_installed_are_left_out(bench: Any) -> None:
    every = ["nginx", "haproxy", "apache"]
    binaries = bench.main.Binaries
    assert bench.main.limited_hosts(every, binaries(None, None, None)) == []
    # HAProxy needs nginx behind it; Apache stands alone.
    names = [h.name for h in bench.main.limited_hosts(every, binaries(None, "hp", "ap"))]
    assert names == ["evasive"]
    names = [h.name for h in bench.main.limited_hosts(["haproxy"], binaries("ng", "hp", "ap"))]
    assert names == ["haproxy-429", "haproxy-403"]
