"""Every path a request can take releases its host's place; settings per spider;
redirects throttled under their new host; bad settings stop the crawl at startup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from crawling import AIMD, run_crawl, start_gaps

from sitefarm import HostSpec, Redirect, start_farm


def assert_nothing_in_flight(stats: dict[str, object]) -> None:
    assert stats.get("aimd/in_flight_at_close") == 0
    assert stats.get("aimd/in_flight_after_close") == 0


def test_ignored_cached_and_disallowed_requests_release_their_place(tmp_path: Path) -> None:
    specs = [HostSpec(name="site", pages=20, robots="User-agent: *\nDisallow: /p/5\n")]
    settings = {
        **AIMD,
        "ROBOTSTXT_OBEY": True,
        "DOWNLOADER_MIDDLEWARES": {"components.DropPageThree": 500},
        "HTTPCACHE_ENABLED": True,
        "HTTPCACHE_DIR": str(tmp_path / "cache"),
        "AIMD_MAX_CONCURRENCY": 2,
    }
    with start_farm(specs, max_seconds=120) as farm:
        urls = [url + "/" for url in farm.urls.values()]
        first = run_crawl(urls, tmp_path / "first", settings)
        second = run_crawl(urls, tmp_path / "second", settings)  # every page from the cache
        log = farm.read_log()
    for result in (first, second):
        assert_nothing_in_flight(result.stats)
        assert result.stats.get("aimd/robots/disallowed", 0) >= 1
        assert not any(url.endswith(("/p/3", "/p/5")) for url in result.urls)
    assert second.stats.get("httpcache/hit", 0) >= 15
    assert second.stats.get("aimd/cancelled", 0) >= 15  # cached: the host learnt nothing
    assert len(second.urls) == len(first.urls)
    assert not any(r["path"] == "/p/3" for r in log)


def test_closing_spider_mid_crawl_releases_what_is_in_flight(tmp_path: Path) -> None:
    specs = [HostSpec(name="slow", pages=60, latency=0.3)]
    with start_farm(specs, max_seconds=120) as farm:
        result = run_crawl(
            [url + "/" for url in farm.urls.values()],
            tmp_path / "crawl",
            {**AIMD, "CLOSESPIDER_PAGECOUNT": 8, "AIMD_MAX_CONCURRENCY": 4},
        )
    assert result.stats.get("finish_reason") == "closespider_pagecount"
    # Scrapy lets the downloads in flight finish before it closes the scheduler.
    assert_nothing_in_flight(result.stats)


def test_cross_domain_redirect_is_throttled_under_its_new_host(tmp_path: Path) -> None:
    specs = [
        HostSpec(name="old", pages=6, redirects=[Redirect("/moved", "@new/p/1")]),
        HostSpec(name="new", pages=3, links_per_page=0),
    ]
    events = tmp_path / "events.jsonl"
    with start_farm(specs, max_seconds=120) as farm:
        old_url = farm.urls["old"]
        new_host = farm.urls["new"].split("://", 1)[1]
        result = run_crawl(
            [old_url + "/"], tmp_path / "crawl", {**AIMD, "AIMD_EVENTS_FILE": str(events)}
        )
        log = farm.read_log()
    assert any(r["host"] == "new" and r["path"] == "/p/1" for r in log)
    starts = [json.loads(line) for line in events.read_text().splitlines()]
    new_starts = [e for e in starts if e["event"] == "start" and e.get("host") == new_host]
    assert len(new_starts) == sum(1 for r in log if r["host"] == "new")
    assert_nothing_in_flight(result.stats)


def test_custom_settings_of_a_spider_apply(tmp_path: Path) -> None:
    specs = [HostSpec(name="site", pages=6, links_per_page=1)]
    events = tmp_path / "events.jsonl"
    with start_farm(specs, max_seconds=120) as farm:
        result = run_crawl(
            [url + "/" for url in farm.urls.values()],
            tmp_path / "crawl",
            {"AIMD_EVENTS_FILE": str(events)},
            spider="components.SpacedSpider",
        )
    assert "scrapy_aimd.scheduler.AimdScheduler" in result.log
    gaps = start_gaps(events)
    assert len(gaps) >= 5
    assert min(gaps) >= 0.3 - 1e-3  # AIMD_MIN_DELAY from the spider's custom_settings
    assert_nothing_in_flight(result.stats)


@pytest.mark.parametrize(
    ("name", "value"),
    [("AIMD_MAX_DELAY", -1), ("AIMD_MAX_CONCURRENCY", 0), ("AIMD_HOSTS", {"a.com": {"nope": 1}})],
)
def test_invalid_setting_stops_the_crawl_naming_it(
    tmp_path: Path, name: str, value: object
) -> None:
    with pytest.raises(AssertionError, match=f"Invalid setting {name}"):
        run_crawl(["http://127.0.0.1:9/"], tmp_path / "crawl", {**AIMD, name: value})
    assert not (tmp_path / "crawl" / "items.jsonl").exists()


def test_an_events_file_that_cannot_be_written_does_not_stop_the_crawl(tmp_path: Path) -> None:
    specs = [HostSpec(name="site", pages=8, links_per_page=1)]
    with start_farm(specs, max_seconds=120) as farm:
        result = run_crawl(
            [url + "/" for url in farm.urls.values()],
            tmp_path / "crawl",
            {**AIMD, "AIMD_EVENTS_FILE": "/dev/full", "AIMD_MIN_DELAY": 0.3},
        )
    assert "Stopped writing AIMD_EVENTS_FILE /dev/full" in result.log
    assert result.stats.get("finish_reason") == "finished"
    assert len(result.urls) == 9
    assert_nothing_in_flight(result.stats)
