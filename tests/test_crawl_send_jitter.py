"""A Crawl-delay holds at the server while the spider's callbacks keep the reactor busy.

A request that reaches the downloader is written to its socket only when the
reactor next turns; a parse callback that takes 40 ms delays that write by up
to 40 ms. If the next request to the host is then written at once, the server
sees the two closer than the Crawl-delay. The gap must count from the write.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import scrapy
from crawling import AIMD, arrival_gaps, run_crawl
from slow_link import SlowLink

from scrapy_aimd.feedback_middleware import closes_connection
from sitefarm import HostSpec, start_farm

CRAWL_DELAY = 0.2
#: How long each page of the busy host keeps the reactor: well above the 2 %
#: margin of a 0.2 s Crawl-delay (4 ms).
BUSY_SECONDS = 0.03


class BusySpider(scrapy.Spider):
    """Follows every link; a page of the last start URL's host costs BUSY_SECONDS of CPU."""

    name = "busy"

    def __init__(self, start_urls: list[str], follow: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = start_urls
        self.busy_host = urlsplit(start_urls[-1]).hostname

    def parse(self, response: scrapy.http.Response) -> Any:
        if urlsplit(response.url).hostname == self.busy_host:
            end = time.perf_counter() + BUSY_SECONDS
            while time.perf_counter() < end:
                pass
        yield {"url": response.url, "status": response.status}
        if isinstance(response, scrapy.http.TextResponse):
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, self.parse)


def test_crawl_delay_holds_at_the_server_while_callbacks_block_the_reactor(
    tmp_path: Path,
) -> None:
    specs = [
        HostSpec(name="polite", pages=20, crawl_delay=CRAWL_DELAY, latency=0.01),
        HostSpec(name="busy", pages=150, latency=0.01),
    ]
    with start_farm(specs, max_seconds=120) as farm:
        result = run_crawl(
            [farm.urls["polite"] + "/", farm.urls["busy"] + "/"],
            tmp_path,
            {**AIMD, "ROBOTSTXT_OBEY": True},
            spider="test_crawl_send_jitter.BusySpider",
        )
        log = farm.read_log()
    polite = [r for r in log if r["host"] == "polite"]
    assert {r["page"] for r in polite if r["status"] == 200 and r["page"]} >= {"/p/19"}
    assert len([r for r in log if r["host"] == "busy" and r["status"] == 200]) >= 150
    gaps = arrival_gaps(polite)
    assert min(gaps) >= CRAWL_DELAY, (
        f"Crawl-delay {CRAWL_DELAY} s broken at the server: {min(gaps):.4f} s "
        f"({sum(g < CRAWL_DELAY for g in gaps)} of {len(gaps)} gaps)"
    )
    assert result.stats.get("aimd/in_flight_at_close") == 0


#: Seconds a new connection's first request takes to reach the host after the
#: connect: a TLS handshake with a distant site.
HANDSHAKE = 0.1
#: The Crawl-delay behind the handshake: its 2 % margin (8 ms) takes the relay's
#: own jitter, so the gaps are held to the delay itself.
SLOW_CRAWL_DELAY = 0.4


def test_crawl_delay_holds_when_a_new_connection_is_slow_to_carry_its_request(
    tmp_path: Path,
) -> None:
    """A request on a new connection is written only once the connection is up
    (TCP, then TLS on the way to a distant host): robots.txt reaches the host a
    handshake after its send, and the home page, on the connection then open,
    must still come a Crawl-delay after it."""
    specs = [HostSpec(name="polite", pages=6, crawl_delay=SLOW_CRAWL_DELAY, latency=0.01)]
    with start_farm(specs, max_seconds=120) as farm:
        site = urlsplit(farm.urls["polite"])
        assert site.hostname is not None and site.port is not None
        with SlowLink((site.hostname, site.port), handshake=HANDSHAKE) as link:
            result = run_crawl(
                [f"http://127.0.0.1:{link.port}/"], tmp_path, {**AIMD, "ROBOTSTXT_OBEY": True}
            )
        log = farm.read_log()
    # One connection, kept: only robots.txt's send was taken for a new one.
    assert result.stats.get("aimd/new_connections") == 1, result.stats
    assert [r["path"] for r in log[:2]] == ["/robots.txt", "/"]
    assert {r["page"] for r in log if r["status"] == 200 and r["page"]} >= {"/p/5"}
    gaps = arrival_gaps(log)
    assert min(gaps) >= SLOW_CRAWL_DELAY, (
        f"Crawl-delay {SLOW_CRAWL_DELAY} s broken at the server: {min(gaps):.4f} s "
        f"({sum(g < SLOW_CRAWL_DELAY for g in gaps)} of {len(gaps)} gaps: "
        f"{[round(g, 4) for g in gaps]})"
    )


@pytest.mark.parametrize(
    ("headers", "flags", "closes"),
    [
        ({}, [], False),
        ({"Connection": "keep-alive"}, [], False),
        ({"Connection": "Close"}, [], True),  # a handler that keeps the header
        ({}, ["partial"], True),  # the body was read until the server closed
        ({}, ["dataloss"], True),
        ({}, ["download_stopped"], True),  # StopDownload: the handler drops it
        ({}, ["cached"], False),
    ],
)
def test_a_response_whose_connection_ends_is_told_apart(
    headers: dict[str, str], flags: list[str], closes: bool
) -> None:
    """Scrapy's HTTP/1.1 handler keeps ``Connection`` out of the response's
    headers: a connection that ends shows in the response's flags."""
    response = scrapy.http.Response("http://a.example/", headers=headers, flags=flags)
    assert closes_connection(response) is closes


def test_an_http_1_0_answer_ends_its_connection() -> None:
    for protocol, closes in [("HTTP/1.0", True), ("HTTP/1.1", False)]:
        response = scrapy.http.Response("http://a.example/", protocol=protocol)
        assert closes_connection(response) is closes
