"""Requests downloaded around the scheduler wait here for their host's turn.

``engine.download_async`` sends a request straight to the downloader: Scrapy's
media pipelines (``FilesPipeline``, ``ImagesPipeline``) do for every file, and
callbacks that await a download inline do too. The add-on sets the
downloader's own delay to 0 and its per-slot concurrency to at least every
host's limit, so such a request would go at once, whatever its host's gap,
limit or pause, and its host would never hear of its answer. The feedback
middleware asks :class:`OutsideGate` for a turn instead: the request waits
until its host may start, then it takes a place of the host's (a ticket, as
the scheduler's own requests do), and its answer reaches the host's
controller like any other. Waiting requests go first when their host becomes
ready: they belong to pages already fetched.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from scrapy.exceptions import IgnoreRequest
from twisted.internet.defer import Deferred

from scrapy_aimd._compat import call_later_if_running

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.utils.asyncio import CallLaterResult

logger = logging.getLogger(__name__)

#: While requests wait, the gate looks this often (seconds) whether the crawl
#: is closing: a request waiting out a long pause must not hold the close up.
CLOSING_POLL = 1.0


class OutsideGate:
    """Requests that came around the scheduler, waiting per host for a place."""

    def __init__(
        self,
        *,
        host_of: Callable[[Request], str],
        ready_at: Callable[[str, float], float],
        start: Callable[[Request, str, float], None],
        clock: Callable[[], float],
        closing: Callable[[], bool],
    ) -> None:
        self._host_of = host_of
        self._ready_at = ready_at
        self._start = start
        self._clock = clock
        self._closing = closing
        self._waiting: dict[str, deque[tuple[Request, Deferred[None]]]] = {}
        self._timer: CallLaterResult | None = None
        self._timer_at = math.inf

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._waiting.values())

    def turn(self, request: Request) -> Deferred[None] | None:
        """None: the request took a place of its host's and may go now. Else a
        Deferred that fires once it has one (or fails with ``IgnoreRequest`` if
        the crawl closes first)."""
        host = self._host_of(request)
        now = self._clock()
        if host not in self._waiting and self._ready_at(host, now) <= now:
            self._start(request, host, now)
            return None
        waiter: Deferred[None] = Deferred()
        self._waiting.setdefault(host, deque()).append((request, waiter))
        self._arm(now)
        return waiter

    def serve(self) -> None:
        """Start the waiting requests whose host may start now; called when a
        host's state may have changed (an answer came back, a place was freed)."""
        if not self._waiting:
            return
        now = self._clock()
        for host in list(self._waiting):
            queue = self._waiting[host]
            while queue and self._ready_at(host, now) <= now:
                request, waiter = queue.popleft()
                self._start(request, host, now)
                waiter.callback(None)
            if not queue:
                del self._waiting[host]
        self._arm(now)

    def close(self) -> None:
        """Fail every waiting request: the crawl is closing."""
        self._cancel_timer()
        waiting, self._waiting = self._waiting, {}
        failed = 0
        for queue in waiting.values():
            for _, waiter in queue:
                waiter.errback(IgnoreRequest("Not started: the crawl is closing"))
                failed += 1
        if failed:
            logger.info("%d downloads around the scheduler were not started: closing", failed)

    def _arm(self, now: float) -> None:
        """One timer, at the earliest time a waiting host becomes ready (a host at
        its limit becomes ready on an answer, which calls :meth:`serve`), and at
        least every ``CLOSING_POLL`` seconds while requests wait."""
        if not self._waiting:
            self._cancel_timer()
            return
        at = min(self._ready_at(host, now) for host in self._waiting)
        at = min(at, now + CLOSING_POLL)
        if self._timer is not None and self._timer_at <= at:
            return
        self._cancel_timer()
        self._timer_at = at
        self._timer = call_later_if_running(max(0.0, at - now), self._fire)

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        if self._closing():
            self.close()
            return
        self.serve()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, math.inf
