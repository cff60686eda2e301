"""The one place that reaches into Scrapy's private engine state.

The engine only asks the scheduler for requests when something happens or on
its 5-second heartbeat. A scheduler that holds requests back until a host is
ready must wake it at that moment. ``tests/test_compat.py`` fails loudly if
Scrapy changes what this relies on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


def wake_engine(crawler: Crawler) -> bool:
    """Make the engine ask the scheduler for requests soon; False if it cannot.

    ``schedule()`` is called without a delay on purpose: a delayed
    ``CallLaterOnce.schedule(d)`` would swallow later immediate calls.
    """
    engine = crawler.engine
    slot = getattr(engine, "_slot", None) if engine is not None else None
    nextcall = getattr(slot, "nextcall", None)
    if nextcall is None:
        return False
    nextcall.schedule()
    return True
