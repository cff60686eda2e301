"""``AIMD_SHUTDOWN_GRACE``: how long a stopping crawl waits for the requests in flight.

When the crawl stops (a ``CLOSESPIDER_*`` limit, Ctrl-C, an error), Scrapy's
engine starts nothing new and waits for every request in flight, however long
a slow host takes. With ``AIMD_SHUTDOWN_GRACE`` set to a number of seconds, the
downloads still running that long after the stop began are cancelled: each
fails with ``IgnoreRequest``, the scheduler does not count it as done, and with
a JOBDIR it stays in the frontier for the next run. Unset (the default), the
crawl waits for all of them, as Scrapy does.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import IgnoreRequest
from scrapy.utils.asyncio import call_later, create_looping_call
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future

from scrapy_aimd._compat import Download, spider_closing, wrap_downloads
from scrapy_aimd.settings import SettingsLike, read_float

if TYPE_CHECKING:
    from scrapy_aimd.inflight import InFlight

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.utils.asyncio import CallLaterResult
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

SETTING = "AIMD_SHUTDOWN_GRACE"
#: Seconds between two looks at whether the spider began to close.
WATCH_INTERVAL = 0.1


def read_grace(settings: SettingsLike) -> float | None:
    """Seconds, or None to wait for every request in flight."""
    if settings.get(SETTING) in (None, ""):
        return None
    return read_float(settings, SETTING, None, minimum=0.0)


class ShutdownGrace:
    """Cancels the downloads still running ``grace`` seconds after the spider began to close."""

    def __init__(
        self, crawler: Crawler, grace: float, flights: InFlight[Request], *, resumable: bool
    ) -> None:
        self.crawler = crawler
        self.grace = grace
        self.resumable = resumable
        #: The running downloads and the cancelled ones (never done, whatever the
        #: engine says) are marked in the crawl's in-flight registry.
        self.flights = flights
        self._expired = False
        self._deadline: CallLaterResult | None = None
        self._watch: Any = None

    def start(self) -> None:
        if not wrap_downloads(self.crawler, self._wrap):
            logger.warning(
                "%s=%s is ignored: this Scrapy's downloader cannot be wrapped",
                SETTING,
                self.grace,
            )
            return
        self._watch = create_looping_call(self._look)
        self._watch.start(WATCH_INTERVAL, now=False)

    def stop(self) -> None:
        if self._watch is not None and self._watch.running:
            self._watch.stop()
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _look(self) -> None:
        if not spider_closing(self.crawler):
            return
        self._watch.stop()
        running = len(self.flights.downloads())
        if running:
            logger.info(
                "Stopping: %d downloads in flight get %ss to finish (%s)",
                running,
                self.grace,
                SETTING,
            )
        self._deadline = call_later(self.grace, self._expire)

    def _expire(self) -> None:
        self._deadline = None
        self._expired = True
        cancelled = self.flights.downloads()
        for _, flight in cancelled:
            flight.cancelled = True
            flight.download.cancel()
        if cancelled:
            self.crawler.stats.inc_value("aimd/shutdown/cancelled", len(cancelled))  # type: ignore[union-attr]
            logger.info(
                "Cancelled %d downloads still in flight after %s=%ss; %s",
                len(cancelled),
                SETTING,
                self.grace,
                "they stay queued for the next run"
                if self.resumable
                else "they are not fetched (no JOBDIR)",
            )

    def _wrap(self, download: Download) -> Download:
        async def cancellable_download(request: Request) -> Response:
            flight = self.flights.open(request)
            if self._expired:
                flight.cancelled = True
                self.crawler.stats.inc_value("aimd/shutdown/cancelled")  # type: ignore[union-attr]
                raise IgnoreRequest(f"Not started: the crawl is stopping ({SETTING})")
            started = time.monotonic()
            running: Deferred[Response] = deferred_from_coro(download(request))
            flight.download = running
            try:
                return await maybe_deferred_to_future(running)
            except BaseException:
                if flight.cancelled:
                    raise IgnoreRequest(
                        f"Cancelled after {time.monotonic() - started:.1f}s: the crawl "
                        f"is stopping ({SETTING})"
                    ) from None
                raise
            finally:
                flight.download = None
                self.flights.settle(request)

        return cancellable_download
