"""Run one real Scrapy crawl in this process and write what happened as JSON.

Tests start it in a subprocess (``python tests/crawlrunner.py CONFIG.json``) so
that every crawl gets a fresh reactor, as ``scrapy crawl`` would. CONFIG holds
``start_urls``, ``settings``, ``out`` (a directory) and optionally
``spider`` (an import path; default ``FarmSpider``): the runner writes
``stats.json`` and ``items.jsonl`` there. Items are the pages the spider parsed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import scrapy
from scrapy.crawler import AsyncCrawlerProcess
from scrapy.utils.misc import load_object


class FarmSpider(scrapy.Spider):
    """Follows every link on every page, like a site crawl would."""

    name = "farm"

    def __init__(self, start_urls: list[str], follow: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = start_urls
        self.follow = follow

    def parse(self, response: scrapy.http.Response) -> Any:
        yield {"url": response.url, "status": response.status, "t": time.time()}
        if self.follow and isinstance(response, scrapy.http.TextResponse):
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, self.parse)


def main(config_path: str) -> None:
    config = json.loads(Path(config_path).read_text())
    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)
    settings = {
        "LOG_LEVEL": "INFO",
        "LOG_FILE": str(out / "crawl.log"),
        "TELNETCONSOLE_ENABLED": False,
        "FEEDS": {str(out / "items.jsonl"): {"format": "jsonlines"}},
        **config.get("settings", {}),
    }
    process = AsyncCrawlerProcess(settings)
    spider_class = load_object(config["spider"]) if config.get("spider") else FarmSpider
    crawler = process.create_crawler(spider_class)
    process.crawl(crawler, start_urls=config["start_urls"], follow=config.get("follow", True))
    process.start()
    stats = {
        k: (v if isinstance(v, (int, float, str)) else str(v))
        for k, v in (crawler.stats.get_stats() if crawler.stats else {}).items()
    }
    (out / "stats.json").write_text(json.dumps(stats, indent=1, sort_keys=True))
    if process.bootstrap_failed:  # as ``scrapy crawl`` does
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1])
