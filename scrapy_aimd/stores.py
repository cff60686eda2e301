"""The one place that chooses the frontier store (:mod:`scrapy_aimd.store`)
from the settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.job import job_dir

from scrapy_aimd.local_store import LocalStore
from scrapy_aimd.settings import AimdSettingsError, masked_url

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_aimd.store import FrontierStore

__all__ = ["build_store"]


def build_store(crawler: Crawler) -> FrontierStore:
    """The store that the settings ask for: Redis with ``AIMD_REDIS_URL`` (it
    connects now: an unreachable Redis is the one error shown), else SQLite
    with ``JOBDIR``, else memory."""
    if crawler.settings.get("AIMD_REDIS_URL"):
        try:
            from scrapy_aimd.fleet.worker import FleetStore
        except ImportError as exc:
            raise AimdSettingsError(
                "AIMD_REDIS_URL",
                masked_url(crawler.settings.get("AIMD_REDIS_URL")),
                f"the redis client installed: pip install 'scrapy-aimd[fleet]' ({exc})",
            ) from exc
        return FleetStore.from_crawler(crawler)
    return LocalStore(crawler, job_dir(crawler.settings))
