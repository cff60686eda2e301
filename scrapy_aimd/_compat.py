"""The one place that reaches into Scrapy's private engine state.

The engine only asks the scheduler for requests when something happens or on
its 5-second heartbeat: a scheduler that holds requests back until a host is
ready must wake it at that moment. Scrapy also has no public signal for "the
engine is done with a request" (its callback or errback ran and every request
that it yielded reached the scheduler), none for "the spider began to close",
and no public handle on a running download; the crash-safe JOBDIR and the
shutdown grace need them. ``tests/test_compat.py`` and
``tests/test_jobdir_engine.py`` fail loudly if Scrapy changes what these
functions rely on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING

from scrapy.utils.asyncio import CallLaterResult, call_later
from scrapy.utils.reactor import is_reactor_installed

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response


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


Download = Callable[["Request"], Awaitable["Response"]]


def requests_in_progress(crawler: Crawler) -> Collection[Request] | None:
    """The requests that the engine has taken from the scheduler and not finished.

    The engine adds a request to this set as it takes it from ``next_request()``
    (in the same call), and removes it only once the downloader's result has been
    handled: a request or a redirect that a middleware returned is in the
    scheduler, and the spider's output for a response or a failure has been
    processed to the end, so every request that it yielded is in the scheduler.
    None when the engine has no open spider.
    """
    engine = crawler.engine
    slot = getattr(engine, "_slot", None) if engine is not None else None
    inprogress: Collection[Request] | None = getattr(slot, "inprogress", None)
    return inprogress


def spider_closing(crawler: Crawler) -> bool:
    """True once the engine has begun to close the spider: nothing new starts."""
    engine = crawler.engine
    if engine is None:
        return False
    slot = getattr(engine, "_slot", None)
    return slot is None or getattr(slot, "closing", None) is not None


def wrap_downloads(crawler: Crawler, wrap: Callable[[Download], Download]) -> bool:
    """Route every download through ``wrap(original)``; False if it cannot be done.

    The downloader calls ``handlers.download_request_async(request)`` for each
    request that leaves its slot queue; it is the one place where a download
    is a single awaitable that can be cancelled.
    """
    engine = crawler.engine
    downloader = getattr(engine, "downloader", None)
    handlers = getattr(downloader, "handlers", None)
    original = getattr(handlers, "download_request_async", None)
    if original is None:
        return False
    setattr(handlers, "download_request_async", wrap(original))  # noqa: B010
    return True


def call_later_if_running(delay: float, func: Callable[[], object]) -> CallLaterResult | None:
    """Scrapy's ``call_later`` when something can run the call; None when nothing
    can: Scrapy without a Twisted reactor (``TWISTED_ENABLED=False``) outside its
    asyncio loop, where ``call_later`` raises (a component driven directly, as
    Scrapy's own tests do). The caller then does the work at once."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        if not is_reactor_installed():
            return None
    return call_later(delay, func)
