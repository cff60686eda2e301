"""``scrapy crawl demo``: crawl the bundled demo site, which runs on this machine.

The spider starts the demo site itself: four hosts on loopback addresses
(127.0.0.2 to 127.0.0.5, ports chosen by the system), each behaving like a
kind of real site:

- ``fast`` answers in 20 ms and slows down above 8 requests at once; its links
  carry tracking parameters, fragments and other spellings of the same pages;
- ``slow`` answers in 0.5 to 0.7 s and slows down above 4 requests at once;
- ``limited`` lets through 4 requests a second and answers the others with
  429 and a Retry-After header;
- ``polite`` asks for ``Crawl-delay: 0.5`` in its robots.txt.

No host needs the internet. The site stops when the spider closes.

Arguments: ``-a farm_log=FILE`` keeps the demo site's own log, one JSON line
per request it received (see ``sitefarm``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import scrapy
from scrapy import signals

from aimd_example.items import Page
from sitefarm import demo_farm, start_farm

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from sitefarm import FarmProcess


class DemoSpider(scrapy.Spider):
    name = "demo"

    custom_settings = {
        # Settings for this spider's sites belong here rather than in
        # settings.py, as with any Scrapy setting. The demo hosts are small
        # servers, so this spider asks no host for more than 4 requests at
        # once (the default is 8). Each host still starts at 1 and earns the
        # rest round by round.
        "AIMD_MAX_CONCURRENCY": 4,
        # Per-host overrides: say the owner of the slow host asked for at most
        # 2 connections at once. Its limit then stops at 2, whatever it answers.
        # The key is the host's address (the demo site numbers its hosts from
        # 127.0.0.2 up, in the order above); a key without a port applies to
        # every port, and a name such as "example.com" to its subdomains too.
        "AIMD_HOSTS": {"127.0.0.3": {"max_concurrency": 2}},
    }

    def __init__(self, farm_log: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.farm_log = farm_log
        self.farm: FarmProcess | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> DemoSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.spider_closed, signal=signals.spider_closed)
        return spider

    async def start(self) -> AsyncIterator[scrapy.Request]:
        self.farm = start_farm(demo_farm(), self.farm_log, max_seconds=3600)
        for name, url in self.farm.urls.items():
            self.logger.info("Demo host %-8s %s", name, url)
            yield scrapy.Request(url + "/")

    def parse(self, response: Response) -> Iterator[Page | scrapy.Request]:
        title = response.css("title::text").get(default="")
        yield Page(url=response.url, status=response.status, title=title)
        yield from response.follow_all(css="a", callback=self.parse)

    def spider_closed(self, spider: scrapy.Spider, reason: str) -> None:
        if self.farm is not None:
            self.farm.stop()
            self.farm = None
        events = self.settings.get("AIMD_EVENTS_FILE")
        if events:
            html = Path(events).with_suffix(".html")
            self.logger.info(
                "The crawl's events are in %s. Draw them with:\n"
                "    python -m scrapy_aimd.report %s -o %s",
                events,
                events,
                html,
            )
