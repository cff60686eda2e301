"""The site farm: each behaviour hit with http.client or raw sockets, the log, the child
process's lifecycle, the presets and the possible-time bound."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit

import pytest
from sitefarm.urls import VARIANT_KINDS, link_variant, parse_target

from sitefarm import (
    HostSpec,
    Redirect,
    SpecError,
    benchmark_farm,
    demo_farm,
    farm_in_thread,
    farm_page_ids,
    host_possible_seconds,
    limiter_farm,
    over_capacity_seconds,
    possible_crawl_seconds,
    read_log_file,
    requests_needed,
    specs_from_json,
    specs_to_json,
    start_farm,
    summarize,
    totals,
)

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Fetched:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def fetch(url: str, method: str = "GET", timeout: float = 5.0) -> Fetched:
    """One request with the target sent exactly as given (no client-side normalization)."""
    parts = urlsplit(url)
    target = url[url.index("/", len(parts.scheme) + 3) :] if parts.path else "/"
    target = urldefrag(target)[0]
    connection = http.client.HTTPConnection(*address(url), timeout=timeout)
    started = time.monotonic()
    try:
        connection.request(method, target, headers={"User-Agent": "farm-test"})
        response = connection.getresponse()
        body = response.read()
        headers = {k.lower(): v for k, v in response.getheaders()}
        return Fetched(response.status, headers, body, time.monotonic() - started)
    finally:
        connection.close()


def raw_exchange(url: str, payload: bytes, timeout: float = 3.0) -> bytes:
    with socket.create_connection(address(url), timeout=timeout) as sock:
        sock.sendall(payload)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def parallel(calls: list[tuple[str, float]]) -> list[Fetched]:
    """Fetch urls at once from threads (each (url, timeout))."""
    results: list[Fetched | None] = [None] * len(calls)

    def run(index: int, url: str, timeout: float) -> None:
        results[index] = fetch(url, timeout=timeout)

    threads = [
        threading.Thread(target=run, args=(i, url, timeout))
        for i, (url, timeout) in enumerate(calls)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


# -- specs


def full_spec() -> HostSpec:
    return HostSpec(
        name="all",
        address="127.0.0.9",
        pages=12,
        tracking_links=True,
        query_pages=2,
        latency=0.01,
        jitter=0.01,
        capacity=4,
        capacity_retry_after="soon",
        rate=50.0,
        burst=5,
        rate_retry_after="date",
        pause_first=0.5,
        error_rate=0.1,
        hang_paths=["/p/9"],
        hang_seconds=1.0,
        reset_paths=["/p/8"],
        redirects=[Redirect("/p/5/", "/p/5"), Redirect("/away", "https://example.org/", 302)],
        robots="User-agent: *\nDisallow: /private/\n",
        robots_mode="503_then_200",
        crawl_delay=0.5,
        sitemap=True,
    )


def test_spec_round_trips_through_json() -> None:
    specs = [full_spec(), HostSpec(name="plain"), HostSpec(name="gone", refused=True)]
    text = json.dumps(specs_to_json(specs))
    again = specs_from_json(json.loads(text))
    assert again == specs
    assert HostSpec(name="plain").to_dict() == {"name": "plain"}
    assert isinstance(again[0].redirects[0], Redirect)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "a", "pagez": 3}, "unknown field"),
        ({"name": "a", "address": "10.0.0.1"}, "outside 127.0.0.0/8"),
        ({"name": "a", "robots_mode": "teapot"}, "robots_mode"),
        ({"name": "a b"}, "name"),
        ({"name": "a", "error_rate": 2}, "error_rate"),
        ({"name": "a", "pages": 2, "query_pages": 3}, "query_pages"),
        ({"name": "a", "redirects": [{"source": "x", "target": "/"}]}, "must start with"),
        ({"pages": 3}, "needs a name"),
    ],
)
def test_spec_rejects_what_cannot_be_served(data: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        HostSpec.from_dict(data)


def test_farm_config_rejects_unknown_and_duplicate_hosts() -> None:
    with pytest.raises(SpecError, match="unknown host 'nope'"):
        specs_from_json([{"name": "a", "cross_links": ["nope"]}])
    with pytest.raises(SpecError, match="unknown host 'b'"):
        specs_from_json([{"name": "a", "redirects": [{"source": "/x", "target": "@b/p/1"}]}])
    with pytest.raises(SpecError, match="duplicate"):
        specs_from_json({"hosts": [{"name": "a"}, {"name": "a"}]})


# -- URL handling (pure)


@pytest.mark.parametrize(
    "raw",
    [
        "/p/3",
        "/p/3/",
        "/p/3?utm_source=x&utm_medium=y",
        "/p/3?fbclid=abc#frag",
        "/p/3?gclid=1&&",
        "/%70/3",
        "/p/%33",
        "/x/../p/3",
        "/p/./3",
        "/p/3?",
        "http://127.0.0.2:1234/p/3?UTM_Campaign=z",
    ],
)
def test_targets_of_one_page_share_its_key(raw: str) -> None:
    target = parse_target(raw)
    assert target is not None
    assert target.page_key == "/p/3"


def test_real_query_and_reserved_escapes_stay_distinct() -> None:
    def key(raw: str) -> str | None:
        target = parse_target(raw)
        return target.page_key if target else None

    assert key("/p/3?view=full&lang=en&utm_source=a") == "/p/3?lang=en&view=full"
    assert key("/p/3?lang=%65n&view=full") == "/p/3?lang=en&view=full"
    assert key("/p%2F3") == "/p%2F3"
    assert key("/p%2f3") == "/p%2F3"
    assert key("/P/3") == "/P/3"
    assert key("*") is None


@pytest.mark.parametrize("kind", ["plain", *VARIANT_KINDS])
@pytest.mark.parametrize("base", ["http://127.0.0.2:4321", "http://127.0.0.2", "http://vm:99"])
def test_every_link_variant_names_the_same_page(kind: str, base: str) -> None:
    for query in ((), (("lang", "en"), ("view", "full"))):
        for token in range(6):
            href = link_variant(base, "/p/3", query, kind, token)
            url = urldefrag(urljoin(base + "/", href))[0]
            target = parse_target(url[url.index("/", 8) :] if "/" in url[8:] else "/")
            assert target is not None
            expected = "/p/3" + ("?lang=en&view=full" if query else "")
            assert target.page_key == expected, (kind, href)
            assert urlsplit(url).port == urlsplit(base).port or urlsplit(url).port == 80


def test_variants_spell_hosts_and_ports_as_asked() -> None:
    assert link_variant("http://vm:99", "/p/3", (), "upper_host", 1) == "http://VM:99/p/3"
    assert link_variant("http://127.0.0.2:99", "/p/3", (), "upper_host", 1).startswith("HTTP://")
    assert link_variant("http://127.0.0.2", "/p/3", (), "default_port", 1) == (
        "http://127.0.0.2:80/p/3"
    )
    assert "utm_" in link_variant("http://127.0.0.2:99", "/p/3", (), "default_port", 1)
    shuffled = link_variant(
        "http://h:1", "/p/3", (("lang", "en"), ("view", "full")), "query_order", 0
    )
    assert shuffled == "/p/3?view=full&lang=en"


# -- serving


def crawl(start_urls: list[str], limit: int = 3000) -> list[str]:
    """A naive crawler: every distinct URL string once, redirects followed."""
    seen = set(start_urls)
    queue = deque(start_urls)
    fetched: list[str] = []
    while queue and len(fetched) < limit:
        url = queue.popleft()
        response = fetch(url)
        fetched.append(url)
        hrefs = []
        if response.status in (301, 302):
            hrefs.append(response.headers["location"])
        elif response.status == 200:
            text = response.body.decode()
            hrefs += [chunk.split('"', 1)[0] for chunk in text.split('href="')[1:]]
        for href in hrefs:
            link = urldefrag(urljoin(url, href.replace("&amp;", "&")))[0]
            if link not in seen:
                seen.add(link)
                queue.append(link)
    return fetched


def test_a_crawl_from_the_roots_reaches_every_page_through_every_variant() -> None:
    specs = [
        HostSpec(
            name="main",
            pages=40,
            tracking_links=True,
            query_pages=8,
            cross_links=["other"],
            redirects=[Redirect("/p/5/", "/p/5"), Redirect("/moved", "@other/p/1", 302)],
            seed=7,
        ),
        HostSpec(name="other", pages=15, links_per_page=2, cross_links=["main"]),
    ]
    with farm_in_thread(specs) as farm:
        fetched = crawl([farm.url("main")])
        records = farm.read_log(len(fetched))
    served = {(r["host"], r["page"]) for r in records if r["status"] == 200}
    expected = {(name, page) for name, pages in farm_page_ids(specs).items() for page in pages}
    assert served == expected
    assert {r["status"] for r in records} <= {200, 301, 302}
    main_paths = {r["path"] for r in records if r["host"] == "main" and r["status"] == 200}
    main_pages = {r["page"] for r in records if r["host"] == "main" and r["status"] == 200}
    assert len(main_paths) > len(main_pages) + 20  # the same pages under many spellings
    assert any("utm_" in p for p in main_paths)
    assert any("fbclid=" in p or "gclid=" in p for p in main_paths)
    assert any("%" in p for p in main_paths)
    assert any(p.endswith("/") and p != "/" for p in main_paths)
    assert any("view=full&lang=en" in p for p in main_paths)


def test_pages_are_deterministic_and_link_other_hosts_by_their_url() -> None:
    specs = [
        HostSpec(name="a", pages=6, cross_links=["b"], tracking_links=True, seed=3),
        HostSpec(name="b", pages=2),
    ]
    bodies = []
    for _ in range(2):
        with farm_in_thread(specs) as farm:
            body = fetch(farm.url("a", "/p/2")).body.decode()
            assert farm.urls["b"] + "/p/" in body
            for name, url in farm.urls.items():
                body = body.replace(url, f"<{name}>")
            bodies.append(body)
    assert bodies[0] == bodies[1]


def test_get_head_keep_alive_and_not_found() -> None:
    with farm_in_thread([HostSpec(name="a", pages=3, page_bytes=3000)]) as farm:
        connection = http.client.HTTPConnection(*address(farm.url("a")), timeout=5)
        connection.request("GET", "/p/1")
        response = connection.getresponse()
        body = response.read()
        assert response.status == 200
        assert int(response.getheader("Content-Length", "")) == len(body) >= 3000
        connection.request("HEAD", "/p/1")
        head = connection.getresponse()
        assert head.status == 200
        assert int(head.getheader("Content-Length", "")) == len(body)
        assert head.read() == b""
        connection.request("GET", "/p/3")
        missing = connection.getresponse()
        missing.read()
        assert missing.status == 404
        assert int(missing.getheader("Content-Length", "")) > 0
        connection.close()
        assert fetch(farm.url("a", "/p/1"), method="POST").status == 405
        records = farm.read_log(4)
    assert len({r["connection"] for r in records[:3]}) == 1
    assert [r["method"] for r in records] == ["GET", "HEAD", "GET", "POST"]
    assert [r["in_flight"] for r in records] == [1, 1, 1, 1]


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        (b"GARBAGE\r\n\r\n", b"400"),
        (b"OPTIONS * HTTP/1.1\r\n\r\n", b"400"),
        (b"GET p/0 HTTP/1.1\r\n\r\n", b"400"),
        (b"GET /\r\n\r\n", b"400"),
        (b"GET / HTTP/9.9\r\n\r\n", b"400"),
        (b"GET /p/0 HTTP/1.1\r\nno colon here\r\n\r\n", b"400"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)) + b"\r\n\r\n", b"400"),
        (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n", b"431"),
        (b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n", b"431"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"501"),
        (b"POST / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", b"413"),
        (b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nHost: a", b"400"),
    ],
)
def test_malformed_requests_get_an_error_and_the_server_lives_on(
    payload: bytes, status: bytes
) -> None:
    with farm_in_thread([HostSpec(name="a", pages=1)]) as farm:
        if payload.endswith(b"Host: a"):
            with socket.create_connection(address(farm.url("a"))) as sock:
                sock.sendall(payload)
                sock.shutdown(socket.SHUT_WR)
                reply = sock.recv(1000)
        else:
            reply = raw_exchange(farm.url("a"), payload)
        assert reply.split(b" ")[1] == status
        assert b"Content-Length:" in reply
        assert fetch(farm.url("a", "/p/0")).status == 200
        records = farm.read_log(2)
    assert records[0]["status"] == int(status)


def test_latency_and_seeded_jitter_delay_the_headers() -> None:
    spec = HostSpec(name="a", pages=2, latency=0.15, jitter=0.1, seed=5)
    durations = []
    for _ in range(2):
        with farm_in_thread([spec]) as farm:
            times = [fetch(farm.url("a", "/p/0")).seconds for _ in range(3)]
            records = farm.read_log(3)
        assert all(0.15 <= t < 0.6 for t in times)
        durations.append([round(r["finished"] - r["arrived"], 2) for r in records])
    assert all(0.15 <= d < 0.3 for d in durations[0])
    assert durations[0] == pytest.approx(durations[1], abs=0.03)


def test_capacity_answers_503_at_once_above_the_limit() -> None:
    spec = HostSpec(name="a", pages=2, latency=0.4, capacity=2, capacity_retry_after=1)
    with farm_in_thread([spec]) as farm:
        results = parallel([(farm.url("a", "/p/0"), 5.0)] * 4)
        records = farm.read_log(4)
    statuses = sorted(r.status for r in results)
    assert statuses == [200, 200, 503, 503]
    rejected = [r for r in results if r.status == 503]
    assert all(r.headers["retry-after"] == "1" and r.seconds < 0.3 for r in rejected)
    assert sorted(r["in_flight"] for r in records if r["status"] == 503) == [3, 3]
    assert {r["reason"] for r in records if r["status"] == 503} == {"capacity"}


def test_soft_capacity_slows_responses_instead_of_refusing() -> None:
    spec = HostSpec(name="a", pages=2, latency=0.1, soft_capacity=1)
    with farm_in_thread([spec]) as farm:
        results = parallel([(farm.url("a", "/p/0"), 5.0)] * 3)
    assert all(r.status == 200 for r in results)
    assert max(r.seconds for r in results) >= 0.2


@pytest.mark.parametrize(
    ("setting", "check"),
    [
        ("auto", lambda v: v == "1"),
        (3, lambda v: v == "3"),
        (None, lambda v: v is None),
        ("soon", lambda v: v == "soon"),
        ("date", lambda v: parsedate_to_datetime(v).timestamp() >= time.time()),
    ],
)
def test_token_bucket_answers_429_with_retry_after(setting: object, check: object) -> None:
    spec = HostSpec(name="a", pages=2, rate=4.0, burst=2, rate_retry_after=setting)  # type: ignore[arg-type]
    with farm_in_thread([spec]) as farm:
        statuses = [fetch(farm.url("a", "/p/0")) for _ in range(3)]
        assert [s.status for s in statuses] == [200, 200, 429]
        assert check(statuses[2].headers.get("retry-after"))  # type: ignore[operator]
        time.sleep(0.3)
        assert fetch(farm.url("a", "/p/1")).status == 200
        records = farm.read_log(4)
    assert [r["reason"] for r in records] == ["page", "page", "rate", "page"]
    assert records[2]["retry_after"] == statuses[2].headers.get("retry-after")


def test_auto_retry_after_is_the_wait_for_a_token_rounded_up() -> None:
    spec = HostSpec(name="a", pages=1, rate=0.25, burst=1)
    with farm_in_thread([spec]) as farm:
        assert fetch(farm.url("a", "/p/0")).status == 200
        assert fetch(farm.url("a", "/p/0")).headers["retry-after"] == "4"


def test_pause_first_answers_429_until_the_pause_ends_but_not_for_robots() -> None:
    specs = [
        HostSpec(name="auto", pages=2, pause_first=1.0),
        HostSpec(name="fixed", pages=2, pause_first=1.0, pause_retry_after=7),
        HostSpec(name="free", pages=2),
    ]
    with farm_in_thread(specs) as farm:
        paused = fetch(farm.url("auto", "/p/0"))
        assert paused.status == 429
        assert paused.headers["retry-after"] == "1"
        assert fetch(farm.url("fixed", "/p/0")).headers["retry-after"] == "7"
        assert fetch(farm.url("auto", "/robots.txt")).status == 404
        assert fetch(farm.url("free", "/p/0")).status == 200
        time.sleep(max(0.0, farm.started + 1.05 - time.time()))
        assert fetch(farm.url("auto", "/p/0")).status == 200


def test_error_rate_is_seeded() -> None:
    spec = HostSpec(name="a", pages=5, error_rate=0.5, seed=9)
    runs = []
    for _ in range(2):
        with farm_in_thread([spec]) as farm:
            runs.append([fetch(farm.url("a", f"/p/{i % 5}")).status for i in range(40)])
    assert runs[0] == runs[1]
    assert 10 <= runs[0].count(500) <= 30
    assert set(runs[0]) == {200, 500}


def test_a_hanging_path_times_the_client_out() -> None:
    spec = HostSpec(name="a", pages=3, hang_paths=["/p/1"], hang_seconds=0.5)
    with farm_in_thread([spec]) as farm:
        with pytest.raises(TimeoutError):
            fetch(farm.url("a", "/p/1"), timeout=0.15)
        assert fetch(farm.url("a", "/p/2")).status == 200
        records = farm.read_log(2)
    hung = next(r for r in records if r["path"] == "/p/1")
    assert hung["reason"] == "hang"
    assert hung["client_closed"] is True
    assert hung["finished"] - hung["arrived"] >= 0.5


def test_a_client_that_leaves_mid_response_is_still_logged() -> None:
    spec = HostSpec(name="a", pages=1, latency=0.2, page_bytes=4 << 20, pause_first=0.0)
    with farm_in_thread([spec]) as farm:
        with socket.create_connection(address(farm.url("a"))) as sock:
            sock.sendall(b"GET /p/0 HTTP/1.1\r\nHost: a\r\n\r\n")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        records = farm.read_log(1)
        assert fetch(farm.url("a", "/p/0")).status == 200
    assert records[0]["client_closed"] is True
    assert records[0]["page"] == "/p/0"


def test_bad_targets_get_400_even_during_a_pause() -> None:
    with farm_in_thread([HostSpec(name="a", pages=1, pause_first=5)]) as farm:
        reply = raw_exchange(farm.url("a"), b"GET * HTTP/1.1\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 400 ")
        assert fetch(farm.url("a", "/p/0")).status == 429


def test_hang_rate_hangs_a_fraction() -> None:
    spec = HostSpec(name="a", pages=3, hang_rate=1.0, hang_seconds=0.1)
    with farm_in_thread([spec]) as farm:
        response = fetch(farm.url("a", "/p/0"))
    assert response.status == 200
    assert response.seconds >= 0.1


def test_a_reset_path_resets_the_connection() -> None:
    with farm_in_thread([HostSpec(name="a", pages=3, reset_paths=["/p/2"])]) as farm:
        with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected)):
            fetch(farm.url("a", "/p/2/?utm_source=x"))
        assert fetch(farm.url("a", "/p/1")).status == 200
        records = farm.read_log(2)
    assert (records[0]["status"], records[0]["reason"]) == (0, "reset")


def test_redirects_same_key_and_cross_host() -> None:
    specs = [
        HostSpec(
            name="a",
            pages=8,
            redirects=[
                Redirect("/p/5/", "/p/5"),
                Redirect("/old", "@b/p/1", 302),
                Redirect("/p/7", "http://127.0.0.1:9/x", 307),
            ],
        ),
        HostSpec(name="b", pages=2),
    ]
    with farm_in_thread(specs) as farm:
        slash = fetch(farm.url("a", "/p/5/?utm_source=x"))
        assert (slash.status, slash.headers["location"]) == (301, farm.url("a", "/p/5"))
        assert fetch(farm.url("a", "/p/5")).status == 200
        cross = fetch(farm.url("a", "/old"))
        assert (cross.status, cross.headers["location"]) == (302, farm.url("b", "/p/1"))
        assert fetch(farm.url("a", "/p/7")).headers["location"] == "http://127.0.0.1:9/x"
        root = fetch(farm.url("a")).body.decode()
    assert 'href="/old"' in root
    assert 'href="/p/5/"' in root
    assert "/p/7" not in farm_page_ids(specs)["a"]


def test_refused_host_reserves_an_address_that_refuses_connections() -> None:
    specs = [HostSpec(name="up", pages=1), HostSpec(name="down", refused=True)]
    with farm_in_thread(specs) as farm:
        assert farm.urls["down"].startswith("http://127.0.0.3:")
        with pytest.raises(ConnectionRefusedError):
            fetch(farm.url("down"))
        assert fetch(farm.url("up")).status == 200


def test_hosts_get_their_own_loopback_address_unless_given_one() -> None:
    specs = [HostSpec(name="a"), HostSpec(name="b", address="127.0.0.3"), HostSpec(name="c")]
    with farm_in_thread(specs) as one, farm_in_thread(specs) as two:
        for farm in (one, two):
            hosts = [urlsplit(farm.urls[n]).hostname for n in "abc"]
            assert hosts == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        assert one.urls != two.urls
        assert fetch(two.url("b")).status == 200


# -- robots.txt and sitemap


def robots_farm(**fields: object) -> HostSpec:
    return HostSpec(name="r", pages=3, **fields)  # type: ignore[arg-type]


def test_robots_body_gets_crawl_delay_in_the_star_group_and_a_sitemap_line() -> None:
    body = "User-agent: other\nDisallow: /\n\nUser-agent: *\nDisallow: /private/\n"
    spec = robots_farm(robots=body, crawl_delay=1.5, sitemap=True)
    assert spec.robots_crawl_delay() == 1.5
    with farm_in_thread([spec]) as farm:
        robots = fetch(farm.url("r", "/robots.txt"))
        sitemap = fetch(farm.url("r", "/sitemap.xml"))
    lines = robots.body.decode().splitlines()
    assert lines[lines.index("User-agent: *") + 1] == "Crawl-delay: 1.5"
    assert lines[-1] == f"Sitemap: {farm.url('r', '/sitemap.xml')}"
    assert robots.headers["content-type"].startswith("text/plain")
    assert sitemap.status == 200
    assert sitemap.body.count(b"<loc>") == 4


def test_crawl_delay_alone_makes_a_star_group_and_body_crawl_delay_is_read() -> None:
    with farm_in_thread([robots_farm(crawl_delay=2)]) as farm:
        assert fetch(farm.url("r", "/robots.txt")).body == b"User-agent: *\nCrawl-delay: 2\n"
        assert fetch(farm.url("r", "/sitemap.xml")).status == 404
    body = "User-agent: bot\nCrawl-delay: 9\n\nUser-agent: *\nCrawl-delay: 3 # slow\n"
    assert robots_farm(robots=body).robots_crawl_delay() == 3.0
    assert robots_farm(robots="User-agent: *\nCrawl-delay: soon\n").robots_crawl_delay() is None


@pytest.mark.parametrize(
    ("fields", "statuses"),
    [
        ({}, [404, 404]),
        ({"robots": ""}, [200, 200]),
        ({"robots_mode": "404", "robots": "User-agent: *\n"}, [404, 404]),
        ({"robots_mode": "503"}, [503, 503, 503, 503]),
        ({"robots_mode": "429"}, [429, 429]),
        ({"robots_mode": "503_then_200", "robots_fail_first": 2}, [503, 503, 200, 200]),
    ],
)
def test_robots_status_cases(fields: dict[str, object], statuses: list[int]) -> None:
    with farm_in_thread([robots_farm(**fields)]) as farm:
        got = [fetch(farm.url("r", "/robots.txt")).status for _ in statuses]
        assert fetch(farm.url("r", "/p/0")).status == 200
    assert got == statuses


def test_robots_redirect_chain_has_the_asked_number_of_hops() -> None:
    spec = robots_farm(robots="User-agent: *\nDisallow: /p/2\n", robots_mode="redirect")
    with farm_in_thread([spec]) as farm:
        url = farm.url("r", "/robots.txt")
        hops = 0
        response = fetch(url)
        while response.status == 301:
            hops += 1
            url = response.headers["location"]
            response = fetch(url)
        assert fetch(farm.url("r", "/robots/hop/9")).status == 404
    assert hops == 3
    assert response.status == 200
    assert response.body == b"User-agent: *\nDisallow: /p/2\n"


def test_huge_robots_hides_its_tail_past_500_kib() -> None:
    spec = robots_farm(robots="User-agent: *\nCrawl-delay: 1\n", robots_mode="huge")
    with farm_in_thread([spec]) as farm:
        response = fetch(farm.url("r", "/robots.txt"))
    assert response.status == 200
    assert len(response.body) == 1 << 20
    assert response.body.startswith(b"User-agent: *\nCrawl-delay: 1\n")
    assert response.body.endswith(b"\nDisallow: /p/1\n")
    assert b"Disallow" not in response.body[: 500 * 1024]


def test_garbage_robots_keeps_its_rules_among_junk() -> None:
    rules = "User-agent: *\nDisallow: /p/2\nCrawl-delay: 1"
    spec = robots_farm(robots=rules, robots_mode="garbage")
    with farm_in_thread([spec]) as farm:
        body = fetch(farm.url("r", "/robots.txt")).body
    lines = body.split(b"\n")
    for rule in rules.splitlines():
        assert rule.encode() in lines
    with pytest.raises(UnicodeDecodeError):
        body.decode("utf-8")
    assert len(lines) > 6


def test_slow_robots_and_pages_unaffected() -> None:
    with farm_in_thread([robots_farm(robots="", robots_delay=0.3)]) as farm:
        assert fetch(farm.url("r", "/robots.txt")).seconds >= 0.3
        assert fetch(farm.url("r", "/p/0")).seconds < 0.25


# -- what real sites answer fast, and outages


def test_robots_redirects_404s_and_static_pages_answer_fast_while_pages_are_slow() -> None:
    spec = HostSpec(
        name="d",
        pages=20,
        latency=0.5,
        fast_latency=0.0,
        static_share=0.5,
        broken_links=2,
        redirects=[Redirect("/old/1", "/p/1")],
        robots="User-agent: *\nDisallow: /private/\n",
        sitemap=True,
        seed=4,
    )
    static = spec.static_page_indices()
    assert len(static) == 10
    assert static == spec.static_page_indices()  # seeded: the benchmark's bound agrees
    dynamic = sorted(set(range(20)) - static)
    with farm_in_thread([spec]) as farm:
        root = fetch(farm.url("d"))
        fast = {
            path: fetch(farm.url("d", path))
            for path in ("/robots.txt", "/sitemap.xml", "/old/1", "/missing/0", "/nothing")
        }
        fast[f"/p/{min(static)}"] = fetch(farm.url("d", f"/p/{min(static)}?utm_source=x"))
        slow = fetch(farm.url("d", f"/p/{dynamic[0]}"))
    assert root.status == 200
    assert root.seconds >= 0.5
    assert 'href="/missing/0"' in root.body.decode()
    assert 'href="/missing/1"' in root.body.decode()
    assert 'href="/missing/2"' not in root.body.decode()
    assert [r.status for r in fast.values()] == [200, 200, 301, 404, 404, 200]
    assert all(r.seconds < 0.25 for r in fast.values()), {p: r.seconds for p, r in fast.items()}
    assert (slow.status, slow.seconds >= 0.5) == (200, True)


def test_without_fast_latency_every_answer_takes_the_page_latency() -> None:
    spec = HostSpec(name="d", pages=2, latency=0.3, broken_links=1, static_share=1.0)
    with farm_in_thread([spec]) as farm:
        times = [fetch(farm.url("d", path)).seconds for path in ("/robots.txt", "/missing/0")]
        times.append(fetch(farm.url("d", "/p/0")).seconds)
    assert all(t >= 0.3 for t in times)


def wait_until(farm_started: float, seconds: float) -> None:
    time.sleep(max(0.0, farm_started + seconds - time.time()))


def test_an_outage_answers_503_for_its_seconds_then_the_host_is_healthy() -> None:
    outage = {"outage_start": 0.5, "outage_seconds": 1.0}
    specs = [
        HostSpec(name="o", pages=2, robots="", **outage),  # type: ignore[arg-type]
        HostSpec(name="a", pages=2, outage_retry_after="auto", **outage),  # type: ignore[arg-type]
    ]
    with farm_in_thread(specs) as farm:
        before = fetch(farm.url("o", "/p/0"))
        wait_until(farm.started, 0.8)
        during = [fetch(farm.url("o", "/p/0")), fetch(farm.url("a", "/p/0"))]
        robots = fetch(farm.url("o", "/robots.txt"))
        wait_until(farm.started, 1.7)
        after = fetch(farm.url("o", "/p/1"))
        records = farm.read_log(5)
    assert before.status == 200
    assert [r.status for r in during] == [503, 503]
    assert "retry-after" not in during[0].headers  # an outage, not a rate limit
    assert during[1].headers["retry-after"] == "1"
    assert robots.status == 200  # the crawl's rules stay those it read
    assert after.status == 200
    assert [r["reason"] for r in records] == ["page", "outage", "outage", "robots", "page"]
    summary = summarize(records, specs)
    assert (summary["o"].throttled, summary["o"].outage_refused) == (1, 1)
    assert totals(summary)["outage_refused"] == 2


def test_the_clock_can_start_at_the_first_request() -> None:
    spec = HostSpec(name="p", pages=2, pause_first=0.5)
    with farm_in_thread([spec], clock="first_request") as farm:
        wait_until(farm.started, 0.7)
        assert fetch(farm.url("p", "/p/0")).status == 429  # the pause starts now
        time.sleep(0.6)
        assert fetch(farm.url("p", "/p/0")).status == 200
    with start_farm([spec], max_seconds=30, clock="first_request") as farm:
        wait_until(farm.started, 0.7)
        assert fetch(farm.url("p", "/p/0")).status == 429
    with farm_in_thread([spec]) as farm:  # the default: from when the farm listens
        wait_until(farm.started, 0.7)
        assert fetch(farm.url("p", "/p/0")).status == 200
    with pytest.raises(SpecError, match="clock"), farm_in_thread([spec], clock="soon"):
        pass


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "a", "fast_latency": -1}, "fast_latency"),
        ({"name": "a", "static_share": 1.5}, "static_share"),
        ({"name": "a", "outage_seconds": -2}, "outage_seconds"),
        ({"name": "a", "broken_links": -1}, "broken_links"),
    ],
)
def test_spec_rejects_bad_latencies_and_outages(data: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        HostSpec.from_dict(data)


# -- the log


def test_log_file_has_one_json_line_per_request(tmp_path: Path) -> None:
    log = tmp_path / "farm.jsonl"
    with farm_in_thread([HostSpec(name="a", pages=2)], log_path=log) as farm:
        fetch(farm.url("a", "/p/0?utm_source=x"))
        fetch(farm.url("a", "/nothing"))
        in_memory = farm.read_log(2)
        deadline = time.monotonic() + 2
        while len(read_log_file(log)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert read_log_file(log) == in_memory  # readable while the farm runs
    first, second = in_memory
    assert set(first) == {
        "host", "method", "path", "page", "status", "reason", "arrived", "finished",
        "in_flight", "retry_after", "bytes", "connection", "client_closed", "user_agent",
    }  # fmt: skip
    assert (first["path"], first["page"], first["status"]) == ("/p/0?utm_source=x", "/p/0", 200)
    assert (second["page"], second["status"], second["reason"]) == (None, 404, "not_found")
    assert first["arrived"] <= first["finished"] <= second["arrived"]
    assert abs(first["arrived"] - time.time()) < 10
    assert first["user_agent"] == "farm-test"


# -- the child process


def test_start_farm_runs_a_child_that_serves_and_stops() -> None:
    specs = [HostSpec(name="a", pages=2), HostSpec(name="b", pages=1, latency=0.05)]
    with start_farm(specs, max_seconds=30) as farm:
        assert set(farm.urls) == {"a", "b"}
        assert abs(farm.started - time.time()) < 10
        assert fetch(farm.url("a", "/p/1")).status == 200
        assert fetch(farm.url("b", "/p/0")).status == 200
        records = farm.read_log(2)
        pid = farm.pid
        log_path = farm.log_path
    assert [r["host"] for r in records] == ["a", "b"]
    assert not farm.running()
    assert farm.process.returncode == 0
    assert not log_path.exists()  # its temporary directory is gone
    assert farm.read_log() == records
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_start_farm_keeps_a_given_log(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    with start_farm([HostSpec(name="a", pages=1)], log_path=log, max_seconds=30) as farm:
        fetch(farm.url("a"))
        farm.read_log(1)
    assert len(read_log_file(log)) == 1


def test_start_farm_reports_a_failed_start() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.2", 0))
    port = taken.getsockname()[1]
    taken.listen()
    try:
        with pytest.raises(Exception, match="exited with 1"):
            start_farm([HostSpec(name="a", address="127.0.0.2", port=port)])
    finally:
        taken.close()


def child(config: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "sitefarm", str(config), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "farm.json"
    path.write_text(json.dumps({"hosts": [{"name": "a", "pages": 2}]}))
    return path


def ready_line(process: subprocess.Popen[bytes]) -> dict[str, object]:
    assert process.stdout is not None
    line = process.stdout.readline()
    data: dict[str, object] = json.loads(line)
    return data


def test_cli_prints_one_ready_line_and_exits_when_stdin_closes(
    config: Path, tmp_path: Path
) -> None:
    log = tmp_path / "requests.jsonl"
    process = child(config, "--log", str(log), "--max-seconds", "30")
    try:
        ready = ready_line(process)
        urls = ready["hosts"]
        assert isinstance(urls, dict)
        assert fetch(urls["a"] + "/p/0").status == 200
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(5) == 0
        assert process.stdout is not None
        assert process.stdout.read() == b""  # exactly one line on stdout
        assert len(read_log_file(log)) == 1
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_cli_stops_on_signals(config: Path, signum: int) -> None:
    process = child(config, "--max-seconds", "30")
    try:
        ready_line(process)
        process.send_signal(signum)
        assert process.wait(5) == 0
    finally:
        process.kill()
        process.wait()


def test_cli_stops_after_max_seconds(config: Path) -> None:
    process = child(config, "--max-seconds", "0.3")
    try:
        ready_line(process)
        started = time.monotonic()
        assert process.wait(5) == 0
        assert time.monotonic() - started < 3
    finally:
        process.kill()
        process.wait()


def test_cli_rejects_a_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hosts": [{"name": "a", "latenzy": 1}]}))
    process = child(bad)
    _, err = process.communicate(timeout=10)
    assert process.returncode == 2
    assert b"latenzy" in err


def test_cli_serves_a_preset_and_prints_configs() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "sitefarm", "--preset", "demo"]
    printed = subprocess.run(
        [*command, "--print-config"], capture_output=True, env=env, timeout=20, check=True
    )
    assert specs_from_json(json.loads(printed.stdout)) == demo_farm()


# -- presets and the possible crawl time


def test_demo_preset_has_what_the_demo_shows() -> None:
    specs = demo_farm()
    pages = sum(len(ids) for ids in farm_page_ids(specs).values())
    assert 150 <= pages <= 300
    assert any(s.latency >= 0.5 for s in specs)
    assert any(s.rate is not None and s.rate_retry_after is not None for s in specs)
    assert any(s.robots_crawl_delay() for s in specs)
    assert any(s.tracking_links for s in specs)
    assert possible_crawl_seconds(specs) < 30
    with farm_in_thread(specs) as farm:
        for name in farm.urls:
            assert fetch(farm.url(name)).status == 200


def test_benchmark_preset_spreads_the_bound_over_many_hosts() -> None:
    specs = benchmark_farm()
    assert 8 <= len(specs) <= 16
    pages = sum(len(ids) for ids in farm_page_ids(specs).values())
    assert 1000 <= pages <= 2000
    bound = possible_crawl_seconds(specs)
    assert 5 <= bound <= 20
    near = [s.name for s in specs if host_possible_seconds(s) > 0.75 * bound]
    assert len(near) >= 3
    assert sum(1 for s in specs if s.robots_crawl_delay()) == 1
    assert any(s.capacity for s in specs)
    assert any(s.rate for s in specs)
    assert any(s.pause_first for s in specs)


def test_possible_seconds_takes_the_tightest_limit_of_each_host() -> None:
    def bound(**fields: object) -> float:
        return host_possible_seconds(HostSpec(name="h", pages=99, **fields), robots=False)  # type: ignore[arg-type]

    # 100 requests: the 99 pages and the root.
    assert bound(latency=0.1) == pytest.approx(0.1)
    assert bound(latency=0.1, capacity=4) == pytest.approx(2.5)
    assert bound(latency=0.1, jitter=0.2, soft_capacity=10, capacity=20) == pytest.approx(2.0)
    assert bound(latency=0.1, rate=10.0, burst=10) == pytest.approx(9.1)
    assert bound(latency=0.1, crawl_delay=0.5, capacity=4) == pytest.approx(49.6)
    assert bound(latency=0.1, capacity=4, pause_first=3) == pytest.approx(5.5)
    assert bound(latency=0.1, capacity=4, error_rate=0.5) == pytest.approx(5.0)
    assert host_possible_seconds(HostSpec(name="x", refused=True)) == 0.0
    specs = [HostSpec(name="a", pages=9, latency=1.0, capacity=1), HostSpec(name="b", pages=1)]
    assert possible_crawl_seconds(specs) == pytest.approx(11.0)
    assert possible_crawl_seconds(specs, robots=False) == pytest.approx(10.0)


def test_possible_seconds_of_fast_answers_static_pages_and_outages() -> None:
    def bound(**fields: object) -> float:
        return host_possible_seconds(HostSpec(name="h", pages=99, **fields), robots=False)  # type: ignore[arg-type]

    # 100 pages (the root and 99) and 3 broken links, one request at a time.
    assert bound(latency=0.5, capacity=1, broken_links=3) == pytest.approx(51.5)
    assert bound(latency=0.5, capacity=1, broken_links=3, fast_latency=0.0) == pytest.approx(50)
    assert requests_needed(HostSpec(name="h", pages=99, broken_links=3)) == 104
    # Half the pages static: the 50 dynamic ones take 13 rounds of 4.
    assert bound(latency=0.4, capacity=4, fast_latency=0.0, static_share=0.5) == pytest.approx(5.2)
    assert bound(latency=0.4, capacity=4, fast_latency=0.4, static_share=0.5) == pytest.approx(10.0)
    # An outage costs its length unless the work is done before it starts.
    assert bound(latency=0.1, capacity=4, outage_start=1.0, outage_seconds=5.0) == pytest.approx(
        7.5
    )
    assert bound(latency=0.1, capacity=4, outage_start=3.0, outage_seconds=5.0) == pytest.approx(
        2.5
    )


def test_possible_crawl_seconds_counts_the_crawlers_slots() -> None:
    specs = [
        HostSpec(name="a", pages=39, latency=1.0, capacity=10),
        HostSpec(name="b", pages=39, latency=1.0, capacity=10),
    ]
    # Each host alone: 40 requests (robots.txt aside) in 4 rounds of 10.
    assert possible_crawl_seconds(specs, robots=False) == pytest.approx(4.0)
    assert possible_crawl_seconds(specs, robots=False, concurrency=20) == pytest.approx(4.0)
    # 80 s to the first byte in all, 8 at once at most: 10 s.
    assert possible_crawl_seconds(specs, robots=False, concurrency=8) == pytest.approx(10.0)


def test_benchmark_preset_models_the_hosts_real_sites_are() -> None:
    specs = {spec.name: spec for spec in benchmark_farm()}
    dynamic = specs["dynamic"]
    assert (dynamic.capacity, dynamic.latency) == (1, 0.5)
    assert dynamic.fast_latency is not None and dynamic.fast_latency <= 0.01
    assert dynamic.robots and dynamic.redirects and dynamic.broken_links
    mixed = specs["mixed"]
    assert mixed.fast_latency is not None and mixed.latency >= 10 * mixed.fast_latency
    assert 0.2 <= mixed.static_share <= 0.8
    outage = specs["outage"]
    assert 2 <= outage.outage_seconds <= 10 and outage.outage_retry_after is None
    assert host_possible_seconds(outage) > outage.outage_start + outage.outage_seconds
    slow = specs["slow"]
    assert 0.8 <= slow.latency + slow.jitter / 2 <= 1.2 and slow.soft_capacity == 10
    bursty = specs["bursty"]
    assert (bursty.rate, bursty.burst, bursty.rate_retry_after) == (20.0, 20, 2)
    assert specs["polite"].robots_crawl_delay()
    assert specs["fast"].tracking_links and specs["narrow"].capacity


def test_the_server_is_not_the_bottleneck() -> None:
    with start_farm([HostSpec(name="a", pages=20)], max_seconds=30) as farm:
        connection = http.client.HTTPConnection(*address(farm.url("a")), timeout=5)
        started = time.monotonic()
        for i in range(1000):
            connection.request("GET", f"/p/{i % 20}?utm_source=x")
            connection.getresponse().read()
        seconds = time.monotonic() - started
        connection.close()
    assert 1000 / seconds > 500, f"{1000 / seconds:.0f} responses/s on one connection"


# -- reading a crawl from the log


def record(
    page: str | None, status: int, arrived: float, finished: float, reason: str = "page"
) -> dict[str, object]:
    return {
        "host": "h",
        "page": page,
        "status": status,
        "reason": reason,
        "arrived": arrived,
        "finished": finished,
        "in_flight": 1,
    }


def test_over_capacity_counts_only_time_above_the_limit_of_admitted_requests() -> None:
    records = [
        record("/", 200, 0.0, 2.0),
        record("/", 200, 1.0, 3.0),
        record("/", 200, 1.5, 2.5),
        record(None, 503, 1.6, 1.6, reason="capacity"),
    ]
    assert over_capacity_seconds(records, 2) == pytest.approx(0.5)
    assert over_capacity_seconds(records, 1) == pytest.approx(1.5)
    assert over_capacity_seconds(records, None) == 0.0


def test_summary_counts_pages_duplicates_throttles_and_crawl_delay_violations() -> None:
    spec = HostSpec(name="h", pages=2, crawl_delay=1.0, soft_capacity=1)
    records = [
        record(None, 200, 0.0, 0.1, reason="robots"),
        record("/", 200, 1.0, 1.1),
        record("/p/0", 200, 2.0, 2.1),
        record("/p/0", 200, 2.5, 2.6),  # a tracking variant, too soon
        record("/p/1", 429, 4.0, 4.0, reason="rate"),
        record("/p/1", 503, 5.0, 5.0, reason="capacity"),
        record(None, 404, 6.0, 6.2, reason="not_found"),
    ]
    summary = summarize(records, [spec])["h"]
    assert summary.requests == 7
    assert summary.statuses == {200: 4, 404: 1, 429: 1, 503: 1}
    assert (summary.pages_total, summary.pages_fetched) == (3, 2)
    assert summary.duplicate_fetches == 1
    assert summary.throttled == 2
    assert summary.crawl_delay_violations == 1
    assert summary.min_gap_seconds == pytest.approx(0.5)
    assert (summary.first_arrival, summary.last_finish) == (0.0, 6.2)
    total = totals({"h": summary})
    assert total["span_seconds"] == pytest.approx(6.2)
    assert json.loads(json.dumps(summary.to_dict()))["pages_fetched"] == 2


def test_summary_of_a_real_crawl() -> None:
    specs = [HostSpec(name="a", pages=20, tracking_links=True, query_pages=2, seed=2)]
    with farm_in_thread(specs) as farm:
        fetched = crawl([farm.url("a")])
        records = farm.read_log(len(fetched))
    summary = summarize(records, specs)["a"]
    assert summary.pages_fetched == summary.pages_total == 23
    assert summary.duplicate_fetches == len(fetched) - 23
    assert summary.throttled == 0
    assert summary.max_in_flight == 1


def test_a_hostname_is_used_in_urls_only_when_it_resolves_to_the_host() -> None:
    spec = HostSpec(name="named", address="127.0.0.1", hostname="localhost", pages=1)
    with farm_in_thread([spec]) as farm:
        assert farm.urls["named"].startswith("http://localhost:")
        assert fetch(farm.url("named", "/p/0")).status == 200
    wrong = HostSpec(name="named", address="127.0.0.5", hostname="localhost")
    with (
        pytest.raises(Exception, match="not only to the host's address"),
        farm_in_thread([wrong]),
    ):
        pass


def test_the_farm_imports_no_scrapy_or_twisted() -> None:
    code = (
        "import sys, sitefarm, sitefarm.__main__\n"
        "assert not {'scrapy', 'twisted'} & set(sys.modules), sorted(sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=20)


# -- the limiters of the wild (DESIGN.md): windows, a queue, a block, told quotas


def test_a_fixed_window_refuses_until_its_edge_and_counts_no_refusal() -> None:
    spec = HostSpec(name="a", pages=2, window_limit=3, window_seconds=2.0)
    with farm_in_thread([spec]) as farm:
        first = [fetch(farm.url("a", "/p/0")) for _ in range(5)]
        assert [f.status for f in first] == [200, 200, 200, 429, 429]
        assert first[3].headers["retry-after"] in ("1", "2")  # to the window's edge
        wait_until(farm.started, 2.05)
        second = [fetch(farm.url("a", "/p/0")).status for _ in range(4)]
        records = farm.read_log(9)
    assert second == [200, 200, 200, 429]  # the refused ones of the first window did not count
    assert {r["reason"] for r in records if r["status"] == 429} == {"window"}


def test_a_sliding_window_counts_denied_requests_so_a_knocking_client_stays_denied() -> None:
    spec = HostSpec(name="a", pages=2, sliding_limit=3, sliding_seconds=1.0, sliding_status=403)
    with farm_in_thread([spec]) as farm:
        started = time.time()
        assert [fetch(farm.url("a", "/p/0")).status for _ in range(4)] == [200, 200, 200, 403]
        knocks = []
        while time.time() < started + 1.8:  # past the window of the first three
            time.sleep(0.1)
            knocks.append(fetch(farm.url("a", "/p/0")).status)
        assert set(knocks) == {403}
        time.sleep(1.1)  # quiet for a whole window
        assert fetch(farm.url("a", "/p/0")).status == 200
        records = farm.read_log(6 + len(knocks))
    summary = summarize(records, [spec])["a"]
    assert summary.blocked == 1 + len(knocks)
    assert summary.throttled == 0  # a 403 is no 429 or 503


def test_a_queueing_origin_never_refuses_and_serves_first_come_first_served() -> None:
    spec = HostSpec(name="a", pages=2, latency=0.3, workers=2)
    with farm_in_thread([spec]) as farm:
        results = parallel([(farm.url("a", "/p/0"), 5.0)] * 6)
        records = farm.read_log(6)
    assert all(r.status == 200 for r in results)
    seconds = sorted(r.seconds for r in results)
    assert seconds[1] < 0.55 and seconds[-1] >= 0.85  # three rounds of two
    by_arrival = sorted(records, key=lambda r: r["arrived"])
    for earlier, later in zip(by_arrival, by_arrival[2:], strict=False):
        assert earlier["finished"] <= later["finished"] + 0.05
    summary = summarize(records, [spec])["a"]
    assert summary.mean_waiting > 0.5  # four wait, then two, over about 0.9 s
    assert summary.over_capacity_seconds > 0.4


def test_a_block_answers_403_and_every_hit_renews_it() -> None:
    spec = HostSpec(name="a", pages=2, block_limit=3, block_interval=1.0, block_seconds=1.0)
    with farm_in_thread([spec]) as farm:
        assert [fetch(farm.url("a", "/p/0")).status for _ in range(4)] == [200, 200, 200, 403]
        blocked_at = time.time()
        knocks = []
        while time.time() < blocked_at + 2.0:  # far past 1 s: each knock renews it
            time.sleep(0.2)
            knocks.append(fetch(farm.url("a", "/robots.txt")).status)
        assert set(knocks) == {403}
        time.sleep(1.2)  # quiet for longer than the block
        assert fetch(farm.url("a", "/p/1")).status == 200
        records = farm.read_log(5 + len(knocks))
    assert {r["reason"] for r in records if r["status"] == 403} == {"block"}
    assert summarize(records, [spec])["a"].blocked == 1 + len(knocks)


def test_a_told_quota_in_githubs_headers_counts_down_to_its_429() -> None:
    from scrapy_aimd.core.rate_limit_headers import quota_pace, read_quota

    spec = HostSpec(name="a", pages=2, window_limit=3, window_seconds=4.0, quota_headers="github")
    with farm_in_thread([spec]) as farm:
        answers = [fetch(farm.url("a", "/p/0")) for _ in range(4)]
    assert [a.status for a in answers] == [200, 200, 200, 429]
    assert [a.headers["x-ratelimit-remaining"] for a in answers] == ["2", "1", "0", "0"]
    assert [a.headers["x-ratelimit-used"] for a in answers] == ["1", "2", "3", "3"]
    edge = farm.started + 4.0
    for answer in answers:
        assert answer.headers["x-ratelimit-limit"] == "3"
        assert edge <= int(answer.headers["x-ratelimit-reset"]) <= edge + 1  # epoch seconds
    reading = read_quota(answers[0].headers, time.time(), 60.0)
    assert reading is not None and reading.quota is not None and not reading.garbled
    assert reading.quota.limit == 3 and reading.quota.remaining == 2
    assert 0.0 < reading.quota.resets_in <= 5.0
    spent = read_quota(answers[3].headers, time.time(), 60.0)
    assert spent is not None and spent.quota is not None
    assert quota_pace(spent.quota).pause > 0.0  # nothing left: wait for the reset


def test_a_told_quota_in_the_ietf_fields() -> None:
    from scrapy_aimd.core.rate_limit_headers import read_quota

    spec = HostSpec(name="a", pages=2, window_limit=2, window_seconds=3.0, quota_headers="ietf")
    with farm_in_thread([spec]) as farm:
        answers = [fetch(farm.url("a", "/p/0")) for _ in range(3)]
    assert [a.status for a in answers] == [200, 200, 429]
    assert {a.headers["ratelimit-policy"] for a in answers} == {'"window";q=2;w=3'}
    assert [a.headers["ratelimit"].split(";t=")[0] for a in answers] == [
        '"window";r=1',
        '"window";r=0',
        '"window";r=0',
    ]
    assert answers[2].headers["retry-after"] in ("1", "2", "3")
    reading = read_quota(answers[1].headers, time.time(), 60.0)
    assert reading is not None and reading.quota is not None
    assert (reading.quota.limit, reading.quota.remaining, reading.quota.window) == (2, 0, 3.0)
    assert 1.0 <= reading.quota.resets_in <= 3.0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"window_limit": 0}, "window_limit must be at least 1"),
        ({"workers": 0}, "workers must be at least 1"),
        ({"block_limit": 5, "block_seconds": 0}, "block_seconds must be positive"),
        ({"sliding_limit": 5, "sliding_seconds": -1}, "sliding_seconds must be positive"),
        ({"quota_headers": "github"}, "set window_limit"),
        ({"window_limit": 5, "quota_headers": "x"}, "quota_headers 'x'"),
        ({"sliding_limit": 5, "sliding_status": 200}, "not an error status"),
    ],
)
def test_limiter_fields_are_checked(fields: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        HostSpec(name="h", pages=1, **fields)  # type: ignore[arg-type]


def test_possible_seconds_of_windows_queues_and_blocks() -> None:
    def bound(**fields: object) -> float:
        return host_possible_seconds(HostSpec(name="h", pages=99, **fields), robots=False)  # type: ignore[arg-type]

    # 100 requests: 30 a window of 5 s is four windows, the last begun at 15 s.
    assert bound(latency=0.1, window_limit=30, window_seconds=5.0) == pytest.approx(15.1)
    assert bound(latency=0.1, sliding_limit=25, sliding_seconds=5.0) == pytest.approx(15.1)
    assert bound(latency=0.1, block_limit=50, block_interval=2.0) == pytest.approx(2.1)
    assert bound(latency=0.5, workers=4) == pytest.approx(12.5)  # 25 rounds of 4


def test_limiter_preset_has_one_host_of_each_kind() -> None:
    specs = {spec.name: spec for spec in limiter_farm()}
    assert set(specs) == {"window", "sliding", "queue", "block", "github", "ietf"}
    assert specs["github"].quota_headers == "github" and specs["ietf"].quota_headers == "ietf"
    for spec in specs.values():
        assert 6.0 <= host_possible_seconds(spec) <= 15.0
    assert possible_crawl_seconds(list(specs.values()), concurrency=32) < 15.0
    assert specs_from_json(json.loads(json.dumps(specs_to_json(list(specs.values()))))) == list(
        specs.values()
    )
    with farm_in_thread(list(specs.values())) as farm:
        for name in farm.urls:
            assert fetch(farm.url(name)).status == 200
