"""Spiders and middlewares that test crawls load by import path."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any
from urllib.parse import urlsplit

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
    slot = "shared"

    async def start(self) -> Any:
        for url in self.start_urls:
            yield Request(url, meta={"download_slot": self.slot})

    def parse(self, response: Any) -> Any:
        for result in super().parse(response):
            if isinstance(result, Request):
                result.meta["download_slot"] = self.slot
            yield result


class OddSlotSpider(SharedSlotSpider):
    """One slot for every request, named as no host is (Scrapy takes any slot key)."""

    name = "oddslot"
    slot = "images/cdn pool"


class ProxiedSpider(SlotDelaySpider):
    """Fetches made-up host names through farm hosts used as HTTP proxies, so that
    subdomains need no DNS: ``FARM_PROXIES`` maps each hostname to its proxy's URL."""

    name = "proxied"

    def _proxied(self, request: Request) -> Request:
        proxies = self.settings.getdict("FARM_PROXIES")
        hostname = urlsplit(request.url).hostname
        if hostname in proxies:
            request.meta["proxy"] = proxies[hostname]
        return request

    async def start(self) -> Any:
        for url in self.start_urls:
            yield self._proxied(Request(url))

    def parse(self, response: Any) -> Any:
        for result in super().parse(response):
            yield self._proxied(result) if isinstance(result, Request) else result


class OwnFingerprinter:
    """A user's own fingerprinter: Scrapy's, under another name."""

    def __init__(self) -> None:
        from scrapy.utils.request import RequestFingerprinter

        self._inner = RequestFingerprinter()

    def fingerprint(self, request: Request) -> bytes:
        return self._inner.fingerprint(request)


class OwnScheduler(Scheduler):
    """A user's own scheduler, which scrapy-aimd cannot work under."""


class SwapRequests:
    """A downloader middleware before scrapy-aimd's that returns a new request in
    place of each one it sees first, as scrapy-splash does."""

    def process_request(self, request: Request) -> Request | None:
        if request.meta.get("swapped") or request.url.endswith("/robots.txt"):
            return None
        return request.replace(meta={**request.meta, "swapped": True}, dont_filter=True)


class NoRetrySpider(FarmSpider):
    """Its start requests say ``max_retry_times=0``, as a user's own spider may."""

    name = "no_retry"

    async def start(self) -> Any:
        for url in self.start_urls:
            yield Request(url, callback=self.parse, meta={"max_retry_times": 0})


class OneRetrySpider(FarmSpider):
    """Its start requests say ``max_retry_times=1``: two fetches at most."""

    name = "one_retry"

    async def start(self) -> Any:
        for url in self.start_urls:
            yield Request(url, callback=self.parse, meta={"max_retry_times": 1})


class BadPrioritySpider(FarmSpider):
    """Follows links, but gives the one to /p/3 a priority that is not a number."""

    name = "bad_priority"

    def parse(self, response: Any) -> Any:
        for output in super().parse(response):
            if isinstance(output, Request) and output.url.endswith("/p/3"):
                output.priority = None
            yield output


class ErrbackSpider(FarmSpider):
    """Each failure reaches its errback, which records what it was as an item."""

    name = "errback"

    async def start(self) -> Any:
        for url in self.start_urls:
            yield Request(url, callback=self.parse, errback=self.failed)

    def failed(self, failure: Any) -> Any:
        yield {"url": failure.request.url, "error": type(failure.value).__name__}


class TimedErrbackSpider(ErrbackSpider):
    """As ``ErrbackSpider``, each failure's item also saying when its errback ran."""

    name = "timed_errback"

    def failed(self, failure: Any) -> Any:
        yield {"url": failure.request.url, "error": type(failure.value).__name__, "t": time.time()}


class ReactorWatchingSpider(FarmSpider):
    """Says in each item whether a Twisted reactor is installed in the crawl."""

    name = "reactor_watching"

    def parse(self, response: Any) -> Any:
        for output in super().parse(response):
            if isinstance(output, dict):
                output["reactor"] = "twisted.internet.reactor" in sys.modules
            yield output


class UnserializableSpider(FarmSpider):
    """Its start requests carry a lambda in meta: a JOBDIR cannot store them."""

    name = "unserializable"

    async def start(self) -> Any:
        for url in self.start_urls:
            yield Request(url, callback=self.parse, meta={"callable": lambda: None})


class InlineDownloadSpider(FarmSpider):
    """Downloads its links inline, as Scrapy's docs show: ``await
    engine.download_async()`` in the callback, all at once; the requests never
    pass the scheduler."""

    name = "inline_download"

    async def parse(self, response: Any) -> Any:
        crawler = self.crawler
        assert crawler.engine is not None
        links = [response.urljoin(href) for href in response.css("a::attr(href)").getall()]
        answers = await asyncio.gather(
            *(crawler.engine.download_async(Request(url, dont_filter=True)) for url in links)
        )
        yield {"url": response.url, "inline": sorted(a.status for a in answers)}


class FallbackSpider(FarmSpider):
    """On a failure, asks the same path of the host in the ``FALLBACK_URL``
    setting (a mirror), from a copy of the failed request, as an errback may."""

    name = "fallback"

    async def start(self) -> Any:
        for url in self.start_urls:
            yield Request(url, callback=self.parse, errback=self.failed)

    def failed(self, failure: Any) -> Any:
        yield {"url": failure.request.url, "error": type(failure.value).__name__}
        path = failure.request.url.split("/", 3)[3]
        mirror = self.settings["FALLBACK_URL"]
        yield failure.request.replace(url=f"{mirror}/{path}", errback=None)


class FilesSpider(FarmSpider):
    """Yields one item whose ``file_urls`` are the links of each page: Scrapy's
    FilesPipeline downloads them around the scheduler."""

    name = "files"

    def parse(self, response: Any) -> Any:
        links = [response.urljoin(href) for href in response.css("a::attr(href)").getall()]
        yield {"url": response.url, "file_urls": links}


class InlineElsewhereSpider(FarmSpider):
    """Downloads the URLs of the ``INLINE_URLS`` setting inline from its first page."""

    name = "inline_elsewhere"

    async def parse(self, response: Any) -> Any:
        crawler = self.crawler
        assert crawler.engine is not None
        urls = self.settings.getlist("INLINE_URLS")
        try:
            await asyncio.gather(*(crawler.engine.download_async(Request(u)) for u in urls))
        except Exception as exc:
            yield {"url": response.url, "error": type(exc).__name__}


class DepthSpider(FarmSpider):
    """Says with each page the depth at which it was found (Scrapy's DepthMiddleware)."""

    name = "depth"

    def parse(self, response: Any) -> Any:
        for result in super().parse(response):
            if isinstance(result, dict):
                result = {**result, "depth": response.meta.get("depth")}
            yield result


class MetaCarryingSpider(FarmSpider):
    """Gives each link the meta of the page it was found on, ``download_slot``
    included, as spiders that pass context along do."""

    name = "meta_carrying"

    def parse(self, response: Any) -> Any:
        for result in super().parse(response):
            if isinstance(result, Request):
                result = result.replace(meta={**response.meta, **result.meta})
            yield result


class SlowCallbackSpider(FarmSpider):
    """Its callback for a start page (a path of ``/``) takes 10 s, awaiting: the
    reactor runs meanwhile."""

    name = "slow_callback"

    async def parse(self, response: Any) -> Any:
        if response.url.endswith("/"):
            await asyncio.sleep(10)
        for result in super().parse(response):
            yield result


class OtherNameSpider(FarmSpider):
    """The farm's spider under another name: a JOBDIR of the one is not the other's."""

    name = "other"


class MarkedElsewhereSpider(FarmSpider):
    """Asks for two pages as marked forbidden by another process (a fleet worker,
    the run before a JOBDIR restart): ``/p/5.html`` with another's token,
    ``/p/15.html`` with the mark of older versions (``True``)."""

    name = "marked_elsewhere"

    def parse(self, response: Any) -> Any:
        marks = {"/p/5.html": ["another-process", 0.0], "/p/15.html": True}
        for result in super().parse(response):
            if isinstance(result, Request) and urlsplit(result.url).path in marks:
                result.meta["aimd_forbidden_again"] = marks[urlsplit(result.url).path]
            yield result
