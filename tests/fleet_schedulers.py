"""Fleet schedulers (``AimdScheduler`` over the Redis store) opened in this
process against a real redis-server, without a crawl: for tests that drive
them call by call (``scheduler.store`` is the ``FleetStore``)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterator
from typing import Any

from scrapy import Spider
from scrapy.core.engine import ExecutionEngine
from scrapy.utils.test import get_crawler

from scrapy_aimd.scheduler import AimdScheduler

Workers = Callable[..., AimdScheduler]


class _Spider(Spider):
    name = "fleet-scheduler"

    def parse(self, response: Any) -> None:
        pass


def fleet_schedulers(url: str, prefix: str, **defaults: Any) -> Iterator[Workers]:
    """For a fixture: a maker of opened schedulers of one fleet (each call
    another, with ``defaults`` and its own settings over them), closed after."""
    made: list[AimdScheduler] = []

    def make(**settings: Any) -> AimdScheduler:
        crawler = get_crawler(
            _Spider,
            {
                "AIMD_REDIS_URL": url,
                "AIMD_FLEET_KEY": prefix,
                "ADDONS": {"scrapy_aimd.Addon": 500},
                "ROBOTSTXT_OBEY": False,
                "DOWNLOAD_HANDLERS": {"http": None, "https": None},  # nothing is sent
                "DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter",
                **defaults,
                **settings,
            },
        )
        crawler.spider = crawler._create_spider()
        crawler.engine = ExecutionEngine(crawler, lambda _: None)
        scheduler = AimdScheduler.from_crawler(crawler)
        scheduler.open(crawler.spider)
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        scheduler.store.shut()


def in_a_loop(test: Callable[..., None]) -> Callable[..., None]:
    """The test, run inside a running asyncio loop (Scrapy's call_later needs one)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        async def main() -> None:
            test(*args, **kwargs)

        asyncio.run(main())

    return run
