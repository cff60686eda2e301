"""Faults a user meets with Scrapy itself around the add-on (issue 12): real crawls
against local servers that behave this way."""

from __future__ import annotations

import time
from pathlib import Path

from crawling import AIMD, run_crawl

from sitefarm import HostSpec, start_farm


def test_a_request_swapping_middleware_does_not_stall_the_host(tmp_path: Path) -> None:
    specs = [HostSpec(name="site", pages=3, links_per_page=0)]
    settings = {
        **AIMD,
        "DOWNLOADER_MIDDLEWARES": {"components.SwapRequests": 500},
        "DOWNLOAD_TIMEOUT": 5,
        "AIMD_MAX_CONCURRENCY": 1,
    }
    with start_farm(specs, max_seconds=120) as farm:
        urls = [f"{farm.urls['site']}/p/{i}" for i in range(3)]
        began = time.monotonic()
        result = run_crawl(urls, tmp_path / "crawl", settings, follow=False, timeout=100)
        took = time.monotonic() - began
    assert sorted(result.urls) == sorted(urls)
    # Without the fix each swapped original held the place until the sweep: 70 s and more.
    assert took < 40, took
    assert "aimd/in_flight/expired" not in result.stats
    assert result.stats.get("aimd/in_flight/no_feedback") == 3
    assert result.stats.get("aimd/in_flight_at_close") == 0
