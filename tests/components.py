"""Spiders and middlewares that test crawls load by import path."""

from __future__ import annotations

from typing import Any

from crawlrunner import FarmSpider
from scrapy import Request
from scrapy.core.scheduler import Scheduler
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.sitemap import Sitemap


class DropPageThree:
    """A downloader middleware before scrapy-aimd's that drops some requests."""

    def process_request(self, request: Request) -> None:
        if request.url.endswith("/p/3"):
            raise IgnoreRequest("dropped by a test middleware")


class SpacedSpider(FarmSpider):
    """Enables scrapy-aimd and sets its own floor, per spider."""

    name = "spaced"
    custom_settings: dict[str, Any] = {
        "ADDONS": {"scrapy_aimd.Addon": 500},
        "AIMD_MIN_DELAY": 0.3,
    }


class SitemapFollowingSpider(FarmSpider):
    """Follows no links: its pages come from the sitemaps robots.txt lists."""

    name = "sitemaps"

    def sitemap(self, response: Any) -> Any:
        for entry in Sitemap(response.body):
            yield Request(entry["loc"], callback=self.parse)


class SlotDelaySpider(FarmSpider):
    """Records, with each page, the delay of the downloader's own slot that fetched it."""

    name = "slotdelay"

    def parse(self, response: Any) -> Any:
        slot = response.meta.get("download_slot")
        engine = self.crawler.engine
        delay = (
            engine.downloader.slots[slot].delay
            if engine and slot in engine.downloader.slots
            else None
        )
        for result in super().parse(response):
            if isinstance(result, dict):
                result = {**result, "slot": slot, "slot_delay": delay}
            yield result


class DelayAttributeSpider(SlotDelaySpider):
    """Scrapy's spider attribute, which Scrapy applies after the add-ons ran."""

    name = "delayattribute"
    download_delay = 0.4


class SharedSlotSpider(SlotDelaySpider):
    """Puts every request, whatever its host, in one download slot."""

    name = "sharedslot"

    async def start(self) -> Any:
        for url in self.start_urls:
            yield Request(url, meta={"download_slot": "shared"})

    def parse(self, response: Any) -> Any:
        for result in super().parse(response):
            if isinstance(result, Request):
                result.meta["download_slot"] = "shared"
            yield result


class OwnFingerprinter:
    """A user's own fingerprinter: Scrapy's, under another name."""

    def __init__(self) -> None:
        from scrapy.utils.request import RequestFingerprinter

        self._inner = RequestFingerprinter()

    def fingerprint(self, request: Request) -> bytes:
        return self._inner.fingerprint(request)


class OwnScheduler(Scheduler):
    """A user's own scheduler, which scrapy-aimd cannot work under."""
