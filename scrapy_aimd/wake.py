"""The wake timer: the engine asks again when the next host becomes ready.

After ``next_request()`` returns None, Scrapy's engine asks again only when
something happens or on its 5-second heartbeat. A scheduler that holds
requests back until their host is ready arms this timer for the earliest
ready time, so that no host waits for the heartbeat.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from scrapy.utils.asyncio import call_later

from scrapy_aimd._compat import wake_engine

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.utils.asyncio import CallLaterResult


class WakeTimer:
    """One pending wake-up at most, at the earliest time asked for."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._call: CallLaterResult | None = None
        self._at = math.inf

    def arm(self, at: float, now: float) -> None:
        """Wake the engine at ``at`` (inf: never), unless a wake-up comes sooner."""
        if math.isinf(at) or (self._call is not None and self._at <= at):
            return
        self.cancel()
        self._at = at
        self._call = call_later(max(0.0, at - now), self._fire)

    def now(self) -> None:
        """Wake the engine at once (requests became ready outside its loop)."""
        wake_engine(self.crawler)

    def cancel(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None
            self._at = math.inf

    def _fire(self) -> None:
        self._call = None
        self._at = math.inf
        wake_engine(self.crawler)
