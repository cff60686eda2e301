"""One crawl of a site farm, in a fresh process, for bench_farm.py.

Every crawl gets its own interpreter and reactor, as ``scrapy crawl`` would, so that
one crawl's leftovers (timers, connections, settings) cannot slow or help the next.

    python benchmarks/farm_crawl.py CONFIG.json

CONFIG holds ``start_urls``, ``settings`` and ``out`` (a directory). The crawl writes
``crawl.json`` there: when the spider opened and closed (wall clock, comparable with
the farm's log), why it closed, and Scrapy's stats.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import scrapy
from scrapy import signals
from scrapy.crawler import AsyncCrawlerProcess


class FollowAllSpider(scrapy.Spider):
    """Follows every link on every page, as a whole-site crawl does; yields nothing,
    so that the crawl's cost is fetching and link extraction, not item export."""

    name = "bench_farm"

    def __init__(self, start_urls: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = start_urls

    async def start(self) -> AsyncIterator[Any]:
        # Filterable, unlike Scrapy's default start requests (dont_filter=True): a link
        # back to a start page must not count as a duplicate fetch of any crawler.
        for url in self.start_urls:
            yield scrapy.Request(url, callback=self.parse)

    def parse(self, response: scrapy.http.Response) -> Any:
        if isinstance(response, scrapy.http.TextResponse):
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, self.parse)


def jsonable(value: Any) -> Any:
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


def main(config_path: str) -> None:
    config = json.loads(Path(config_path).read_text())
    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)
    moments: dict[str, Any] = {}
    settings = {
        "LOG_LEVEL": "INFO",
        "LOG_FILE": str(out / "crawl.log"),
        "TELNETCONSOLE_ENABLED": False,
        **config.get("settings", {}),
    }
    process = AsyncCrawlerProcess(settings)
    crawler = process.create_crawler(FollowAllSpider)

    def opened(spider: scrapy.Spider) -> None:
        moments["opened"] = time.time()
        # Written now too, so that a crawl killed at its cap still tells when it began.
        (out / "crawl.json").write_text(json.dumps(moments))

    def closed(spider: scrapy.Spider, reason: str) -> None:
        moments["closed"] = time.time()
        moments["reason"] = reason

    crawler.signals.connect(opened, signal=signals.spider_opened)
    crawler.signals.connect(closed, signal=signals.spider_closed)
    process.crawl(crawler, start_urls=config["start_urls"])
    process.start()
    stats = crawler.stats.get_stats() if crawler.stats else {}
    result = {**moments, "stats": {k: jsonable(v) for k, v in sorted(stats.items())}}
    (out / "crawl.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
