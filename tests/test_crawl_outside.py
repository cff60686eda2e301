"""Real crawls: requests downloaded around the scheduler (``engine.download_async``:
Scrapy's media pipelines, inline downloads in callbacks) wait for their host's
turn and are heard by its controller, as the scheduler's own requests are."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from crawling import AIMD, CrawlResult, run_crawl, start_gaps

from sitefarm import HostSpec, start_farm


def pages(log: list[dict[str, Any]], host: str) -> list[dict[str, Any]]:
    return [r for r in log if r["host"] == host and r["reason"] != "robots"]


def crawl_root(
    tmp_path: Path, specs: list[HostSpec], settings: dict[str, Any], spider: str
) -> tuple[CrawlResult, list[dict[str, Any]]]:
    """Crawl the first host's root page with ``spider``, following no links."""
    with start_farm(specs, max_seconds=120) as farm:
        root = farm.urls[specs[0].name] + "/"
        result = run_crawl([root], tmp_path / "crawl", settings, follow=False, spider=spider)
        log = farm.read_log()
    return result, log


def test_inline_downloads_keep_the_hosts_gap_and_limit(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    specs = [HostSpec(name="site", pages=12, links_per_page=6)]
    settings = {
        **AIMD,
        "AIMD_MIN_DELAY": 0.3,
        "AIMD_MAX_CONCURRENCY": 1,
        "AIMD_EVENTS_FILE": str(events),
    }
    result, log = crawl_root(tmp_path, specs, settings, "components.InlineDownloadSpider")
    [item] = result.items
    links = len(item["inline"])
    assert links >= 6
    assert item["inline"] == [200] * links
    assert result.stats.get("aimd/outside_scheduler") == links
    assert len(pages(log, "site")) == 1 + links
    assert max(r["in_flight"] for r in pages(log, "site")) == 1
    gaps = start_gaps(events)
    assert len(gaps) == links  # every inline download started on the host's controller
    assert min(gaps) >= 0.3 - 1e-3


def test_a_media_pipelines_refused_file_pauses_its_host_and_comes_later(
    tmp_path: Path,
) -> None:
    # A bucket of 2 requests a second answering 429 with Retry-After: 1.
    specs = [HostSpec(name="files", pages=10, links_per_page=8, rate=2.0, rate_retry_after=1)]
    settings = {
        **AIMD,
        "ITEM_PIPELINES": {"scrapy.pipelines.files.FilesPipeline": 1},
        "FILES_STORE": str(tmp_path / "files"),
    }
    result, log = crawl_root(tmp_path, specs, settings, "components.FilesSpider")
    [item] = result.items
    assert len(item["file_urls"]) >= 8
    assert [f["status"] for f in item["files"]] == ["downloaded"] * len(item["file_urls"])
    served = pages(log, "files")
    fetched = {r["path"] for r in served if r["status"] == 200}
    assert {urlsplit(f["url"]).path for f in item["files"]} <= fetched
    refusals = [r for r in served if r["status"] == 429]
    assert refusals, "the bucket never refused: the test shows nothing"
    for refused in refusals:
        until = refused["finished"] + float(refused["retry_after"])
        early = [r for r in served if refused["finished"] + 0.05 < r["arrived"] < until - 0.05]
        assert not early, (refused, early)
    # The host's controller heard every refusal, whoever sent the request.
    assert result.stats.get("aimd/throttle/429") == len(refusals)


def test_a_given_up_hosts_flag_does_not_follow_an_errbacks_fallback(tmp_path: Path) -> None:
    # 429s without Retry-After for 30 s: the host is given up on after 1.5 s of them.
    specs = [
        HostSpec(name="down", pages=3, links_per_page=0, pause_first=30, pause_retry_after=None),
        HostSpec(name="mirror", pages=3, links_per_page=0),
    ]
    with start_farm(specs, max_seconds=120) as farm:
        urls = [f"{farm.urls['down']}/p/{i}" for i in range(3)]
        result = run_crawl(
            urls,
            tmp_path / "crawl",
            {**AIMD, "AIMD_HOST_GIVE_UP": 1.5, "FALLBACK_URL": farm.urls["mirror"]},
            follow=False,
            spider="components.FallbackSpider",
            timeout=60,
        )
        log = farm.read_log()
    errors = [item for item in result.items if "error" in item]
    assert {item["error"] for item in errors} == {"HostGaveUp"}
    mirror = pages(log, "mirror")
    assert sorted(r["path"] for r in mirror) == ["/p/0", "/p/1", "/p/2"]
    assert {r["status"] for r in mirror} == {200}
    assert result.stats.get("aimd/host_gave_up/hosts") == 1


def test_a_download_waiting_out_a_long_pause_does_not_hold_up_the_close(
    tmp_path: Path,
) -> None:
    # 429 with a Retry-After to the end of its first 60 s; the crawl stops after 3.
    specs = [
        HostSpec(name="site", pages=2, links_per_page=1),
        HostSpec(name="closed", pages=2, links_per_page=0, pause_first=60),
    ]
    with start_farm(specs, max_seconds=120) as farm:
        began = time.monotonic()
        result = run_crawl(
            [farm.urls["site"] + "/"],
            tmp_path / "crawl",
            {
                **AIMD,
                "CLOSESPIDER_TIMEOUT": 3,
                "INLINE_URLS": [farm.urls["closed"] + "/p/0"],
            },
            follow=False,
            spider="components.InlineElsewhereSpider",
            timeout=90,
        )
        took = time.monotonic() - began
        log = farm.read_log()
    assert took < 30, took
    assert result.stats.get("finish_reason") == "closespider_timeout"
    assert [item["error"] for item in result.items] == ["IgnoreRequest"]
    assert [r["status"] for r in pages(log, "closed")] == [429]  # never sent again
