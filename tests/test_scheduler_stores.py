"""The same behaviour tests of the one scheduler, ``AimdScheduler``, over the
three stores of its frontier: memory, SQLite (``JOBDIR``) and Redis (a fleet of
one worker, a real ``redis-server``), which the settings alone choose.

Each test is a real crawl of a farm (``tests/crawlrunner.py`` in its own
process) whose request log is the judge. What the scheduler promises does not
depend on where its frontier lives: every page once, duplicates dropped, the
per-host limit and the Crawl-delay kept, a paused host never holding up
another, robots.txt obeyed, Scrapy's own scheduler stats written.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crawling import AIMD, CrawlResult, arrival_gaps, run_crawl
from redis_server import REDIS_SERVER, SKIP_REASON, serve_url

from sitefarm import HostSpec, start_farm, summarize

STORES = ["memory", "sqlite", "redis"]


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str | None]:
    if REDIS_SERVER is None:
        yield None
    else:
        yield from serve_url()


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path, redis_url: str | None) -> dict[str, Any]:
    """The settings that put the frontier in the store."""
    if request.param == "sqlite":
        return {"JOBDIR": str(tmp_path / "job")}
    if request.param == "redis":
        if redis_url is None:
            pytest.skip(SKIP_REASON)
        key = f"aimd:stores:{request.node.name}"
        return {"AIMD_REDIS_URL": redis_url, "AIMD_FLEET_KEY": key, "AIMD_FLEET_IDLE_CLOSE": 0.5}
    return {}


def crawl(
    specs: list[HostSpec], tmp_path: Path, store: dict[str, Any], **settings: Any
) -> tuple[CrawlResult, list[dict[str, Any]]]:
    with start_farm(specs, max_seconds=300) as farm:
        result = run_crawl(
            [url + "/" for url in farm.urls.values()],
            tmp_path / "crawl",
            {**AIMD, **store, **settings},
        )
        log = farm.read_log()
    assert result.stats.get("finish_reason") == "finished", result.log[-3000:]
    assert result.stats.get("aimd/in_flight_at_close") == 0
    return result, log


def pages(log: list[dict[str, Any]], host: str) -> list[dict[str, Any]]:
    return [r for r in log if r["host"] == host and r["reason"] != "robots"]


def assert_every_page_once(log: list[dict[str, Any]], specs: list[HostSpec]) -> None:
    for name, summary in summarize(log, specs).items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)
        assert summary.duplicate_fetches == 0, (name, summary)


def test_every_page_once_and_scrapys_scheduler_stats(tmp_path: Path, store: dict[str, Any]) -> None:
    """Links to the same pages from every page, tracking parameters on some:
    each page is fetched once, and the stock scheduler's stats add up."""
    specs = [
        HostSpec(name="linked", pages=40, links_per_page=6, tracking_links=True),
        HostSpec(name="other", pages=20, links_per_page=4),
    ]
    result, log = crawl(specs, tmp_path, store)
    assert_every_page_once(log, specs)
    stats = result.stats
    assert stats["scheduler/enqueued"] == stats["scheduler/dequeued"] > 0
    assert stats.get("dupefilter/filtered", 0) > 0 or stats.get("aimd/fleet/duplicates", 0) > 0


def test_a_hosts_limit_holds_and_a_slow_host_does_not_slow_a_fast_one(
    tmp_path: Path, store: dict[str, Any]
) -> None:
    specs = [
        HostSpec(name="slow", pages=12, latency=1.0),
        HostSpec(name="fast", pages=60, latency=0.02),
    ]
    _, log = crawl(
        specs,
        tmp_path,
        store,
        CONCURRENT_REQUESTS=4,
        AIMD_MAX_CONCURRENCY=2,
    )
    assert_every_page_once(log, specs)
    assert max(r["in_flight"] for r in log) <= 2
    fast_done = max(r["finished"] for r in pages(log, "fast"))
    slow_done = max(r["finished"] for r in pages(log, "slow"))
    start = min(r["arrived"] for r in log)
    # The slow host needs at least 6 s at its limit of 2; the fast one about 1 s.
    assert fast_done - start < 0.6 * (slow_done - start)


def test_retry_after_pauses_one_host_while_others_go_on(
    tmp_path: Path, store: dict[str, Any]
) -> None:
    specs = [
        HostSpec(name="paused", pages=8, pause_first=3.0, pause_retry_after=3),
        HostSpec(name="fast", pages=60, latency=0.05),
    ]
    _, log = crawl(specs, tmp_path, store)
    assert all(s.pages_fetched == s.pages_total for s in summarize(log, specs).values())
    paused = pages(log, "paused")
    first_429 = next(r for r in paused if r["status"] == 429)
    pause_end = first_429["finished"] + 3.0
    later = [r for r in paused if r["arrived"] > first_429["arrived"]]
    assert later and min(r["arrived"] for r in later) >= pause_end - 0.05
    during = [r for r in pages(log, "fast") if first_429["finished"] < r["arrived"] < pause_end]
    assert len(during) >= 5, "the fast host waited for the paused one"


def test_robots_txt_is_obeyed_with_its_crawl_delay(tmp_path: Path, store: dict[str, Any]) -> None:
    rules = "User-agent: *\nDisallow: /p/2\n"
    specs = [
        HostSpec(name="rules", pages=8, robots=rules, crawl_delay=0.4),
        HostSpec(name="open", pages=20, robots="User-agent: *\n"),
    ]
    result, log = crawl(specs, tmp_path, store, ROBOTSTXT_OBEY=True)
    records = [r for r in log if r["host"] == "rules"]
    assert records[0]["path"] == "/robots.txt"
    fetched = {r["page"] for r in records if r["status"] == 200 and r["page"]}
    assert "/p/2" not in fetched and {"/", "/p/0", "/p/1", "/p/3"} <= fetched
    gaps = arrival_gaps(records)
    assert min(gaps) >= 0.4 - 0.01, f"Crawl-delay 0.4 s violated: {min(gaps):.3f} s"
    assert result.stats.get("aimd/robots/disallowed", 0) >= 1
    open_host = summarize(log, specs)["open"]
    assert open_host.pages_fetched == open_host.pages_total
