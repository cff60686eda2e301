"""Real crawls with scrapy-aimd against local sites that push back.

Each test starts a farm of hosts on 127.0.0.x (a separate process), crawls it
with ``scrapy_aimd.Addon`` in another process, and checks what the sites saw in
their request logs. Timing assertions are orderings and generous bounds: the
machines are shared and noisy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crawling import AIMD, CrawlResult, arrival_gaps, run_crawl, start_gaps
from scrapy import signals
from scrapy.crawler import Crawler

from scrapy_aimd.crawl import crawl_parts
from sitefarm import HostSpec, start_farm, summarize


def crawl_farm(
    specs: list[HostSpec], tmp_path: Path, settings: dict[str, Any] | None = None
) -> tuple[CrawlResult, list[dict[str, Any]]]:
    with start_farm(specs, max_seconds=300) as farm:
        result = run_crawl(
            [url + "/" for url in farm.urls.values()],
            tmp_path / "crawl",
            {**AIMD, **(settings or {})},
        )
        log = farm.read_log()
    assert result.stats.get("aimd/in_flight_at_close") == 0
    return result, log


def pages(log: list[dict[str, Any]], host: str) -> list[dict[str, Any]]:
    return [r for r in log if r["host"] == host and r["reason"] != "robots"]


def assert_all_pages(log: list[dict[str, Any]], specs: list[HostSpec]) -> None:
    for name, summary in summarize(log, specs).items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)


def test_retry_after_pauses_one_host_while_others_go_on(tmp_path: Path) -> None:
    specs = [
        HostSpec(name="paused", pages=8, pause_first=3.0, pause_retry_after=3),
        HostSpec(name="fast", pages=80, latency=0.05),
    ]
    result, log = crawl_farm(specs, tmp_path)
    assert_all_pages(log, specs)
    paused = pages(log, "paused")
    first_429 = next(r for r in paused if r["status"] == 429)
    pause_end = first_429["finished"] + 3.0
    later = [r for r in paused if r["arrived"] > first_429["arrived"]]
    assert later, "the paused host was never asked again"
    assert min(r["arrived"] for r in later) >= pause_end - 0.01
    during = [r for r in pages(log, "fast") if first_429["finished"] < r["arrived"] < pause_end]
    assert len(during) >= 5, "the fast host waited for the paused one"
    assert result.stats.get("aimd/pauses", 0) >= 1


def test_capacity_host_converges_without_losing_pages(tmp_path: Path) -> None:
    specs = [HostSpec(name="narrow", pages=60, latency=0.1, capacity=2)]
    _result, log = crawl_farm(specs, tmp_path, {"AIMD_MAX_CONCURRENCY": 8})
    assert_all_pages(log, specs)
    requests = pages(log, "narrow")
    refused = [r for r in requests if r["status"] == 503]
    assert len(refused) <= 0.15 * len(requests), f"{len(refused)} 503s of {len(requests)}"
    served = [r for r in requests if r["status"] == 200]
    assert max(r["in_flight"] for r in served) == 2, "never used the host's capacity"


def test_token_bucket_host_gets_its_rate_with_few_429s(tmp_path: Path) -> None:
    rate = 8.0
    specs = [HostSpec(name="bucket", pages=80, rate=rate, burst=1, latency=0.01)]
    _, log = crawl_farm(specs, tmp_path)
    assert_all_pages(log, specs)
    requests = pages(log, "bucket")
    limited = [r for r in requests if r["status"] == 429]
    assert len(limited) <= 0.05 * len(requests), f"{len(limited)} 429s of {len(requests)}"
    # The pace it settles at: the first half also holds the search for the limit.
    settled = requests[len(requests) // 2 :]
    achieved = (len(settled) - 1) / (settled[-1]["arrived"] - settled[0]["arrived"])
    assert achieved >= 0.6 * rate, f"{achieved:.1f} requests/s against a limit of {rate}"


def test_slow_host_does_not_slow_a_fast_one(tmp_path: Path) -> None:
    specs = [
        HostSpec(name="slow", pages=12, latency=1.0),
        HostSpec(name="fast", pages=100, latency=0.02),
    ]
    _, log = crawl_farm(specs, tmp_path, {"CONCURRENT_REQUESTS": 4, "AIMD_MAX_CONCURRENCY": 2})
    assert_all_pages(log, specs)
    fast_done = max(r["finished"] for r in pages(log, "fast"))
    slow_done = max(r["finished"] for r in pages(log, "slow"))
    start = min(r["arrived"] for r in log)
    # The slow host needs at least 6 s at its limit of 2; the fast one about 2 s.
    assert fast_done - start < 0.6 * (slow_done - start)


def test_concurrency_grows_from_one_and_the_global_cap_holds(tmp_path: Path) -> None:
    specs = [HostSpec(name="healthy", pages=150, latency=0.1)]
    _, log = crawl_farm(specs, tmp_path, {"CONCURRENT_REQUESTS": 4, "AIMD_MAX_CONCURRENCY": 16})
    assert_all_pages(log, specs)
    requests = pages(log, "healthy")
    assert [r["in_flight"] for r in requests[:2]] == [1, 1], "did not start at one"
    assert max(r["in_flight"] for r in requests) == 4, "grew past CONCURRENT_REQUESTS or not at all"


def test_engine_is_woken_when_a_host_becomes_ready(tmp_path: Path) -> None:
    """A 1.5 s gap: without the scheduler's wake-up the engine would only ask
    again on its 5 s heartbeat."""
    specs = [HostSpec(name="gap", pages=4, links_per_page=1)]
    events = tmp_path / "events.jsonl"
    _, log = crawl_farm(specs, tmp_path, {"AIMD_MIN_DELAY": 1.5, "AIMD_EVENTS_FILE": str(events)})
    starts = start_gaps(events)
    assert len(starts) >= 4
    assert min(starts) >= 1.5 - 1e-3  # the gap, as the scheduler keeps it
    arrivals = arrival_gaps(pages(log, "gap"))
    assert max(arrivals) < 3.5, arrivals  # and the site saw no heartbeat-long wait


class FlightsAtClose:
    """An extension: how many requests the crawl's in-flight registry still
    follows when the spider closes (stat ``test/flights_at_close``)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        crawler.signals.connect(self.closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FlightsAtClose:
        return cls(crawler)

    def closed(self) -> None:
        assert self.crawler.stats is not None
        left = len(crawl_parts(self.crawler).flights)
        self.crawler.stats.set_value("test/flights_at_close", left)


def test_a_request_swapped_after_the_feedback_middleware_is_forgotten(tmp_path: Path) -> None:
    """A downloader middleware after scrapy-aimd's (950) that returns a new
    request from ``process_request``: the original passed the feedback
    middleware, which noted when, but no answer will come for it. Once the
    engine is done with it, its in-flight entry goes; it used to stay for the
    whole crawl, holding the request."""
    specs = [HostSpec(name="site", pages=3, links_per_page=0)]
    settings = {
        **AIMD,
        "DOWNLOADER_MIDDLEWARES": {"components.SwapRequests": 960},
        "EXTENSIONS": {f"{__name__}.FlightsAtClose": 0},
    }
    with start_farm(specs, max_seconds=120) as farm:
        urls = [f"{farm.urls['site']}/p/{i}" for i in range(3)]
        result = run_crawl(urls, tmp_path / "crawl", settings, follow=False, timeout=60)
    assert sorted(result.urls) == sorted(urls)
    assert result.stats.get("aimd/in_flight/no_feedback") == 3
    assert result.stats.get("aimd/in_flight_at_close") == 0
    assert result.stats.get("test/flights_at_close") == 0


def test_depth_priority_orders_the_frontier_through_the_request_priority(
    tmp_path: Path,
) -> None:
    """Scrapy's DepthMiddleware turns DEPTH_PRIORITY into ``Request.priority``, which
    the frontier orders by first: -1 crawls deepest first, 0 shallowest first."""
    depths: dict[int, list[int]] = {}
    for depth_priority in (0, -1):
        with start_farm([HostSpec(name="tree", pages=30, links_per_page=4)]) as farm:
            result = run_crawl(
                [farm.urls["tree"] + "/p/0"],
                tmp_path / f"crawl{depth_priority}",
                {**AIMD, "DEPTH_PRIORITY": depth_priority, "CONCURRENT_REQUESTS": 1},
                spider="components.DepthSpider",
            )
        depths[depth_priority] = [item["depth"] for item in result.items]
        assert len(depths[depth_priority]) >= 30
    assert depths[0] == sorted(depths[0]), depths
    assert depths[-1] != sorted(depths[-1]), depths
