"""The frontier of one process: in memory, or with ``JOBDIR`` on disk.

The core :class:`~scrapy_aimd.core.frontier.Frontier` orders the hosts and asks
each one's controller; its queues live in a ``QueueStore`` that its *keeper*
gives: :class:`~scrapy_aimd.memory_keeper.MemoryKeeper` (nothing saved) or
:class:`~scrapy_aimd.jobdir.Jobdir` (SQLite, checkpoints, the hosts' and
robots' state). The keepers answer the same calls: nothing here asks which.
Here too: the tickets of the requests in flight, and what frees a host's place
when no feedback comes (a request swapped by a middleware, a lost one).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy_aimd._compat import requests_in_progress, spider_closing
from scrapy_aimd.core.controller import HostController
from scrapy_aimd.core.frontier import Frontier
from scrapy_aimd.crawl import (
    FORBIDDEN_META,
    assign_slot,
    crawl_parts,
    request_depth,
    request_host,
    request_origin,
    when_written,
)
from scrapy_aimd.jobdir import (
    FRONTIER_FILENAME,
    Jobdir,
    check_frontier,
    check_jobdir,
    check_not_stock,
)
from scrapy_aimd.memory_keeper import MemoryKeeper
from scrapy_aimd.outside import OutsideGate
from scrapy_aimd.reporter import Reporter
from scrapy_aimd.robots_middleware import ROBOTS_META, is_exempt
from scrapy_aimd.settings import read_float
from scrapy_aimd.sqlite_store import StoreError
from scrapy_aimd.store import Handout

if TYPE_CHECKING:
    from collections.abc import Mapping

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter

    from scrapy_aimd.live import QueuedHosts
    from scrapy_aimd.robots_middleware import RobotsListener
    from scrapy_aimd.scheduler import AimdScheduler

__all__ = ["LocalStore"]

logger = logging.getLogger(__name__)

#: How often in-flight entries that never got feedback are looked for.
SWEEP_INTERVAL = 30.0


class LocalStore:
    """The frontier in this process, over its keeper's queue store."""

    def __init__(self, crawler: Crawler, jobdir: str | None) -> None:
        parts = self._parts = crawl_parts(crawler)
        self.crawler = crawler
        self.stats = crawler.stats
        self.configs = parts.configs
        self.flights = parts.flights
        self.clock = parts.clock
        self.jobdir = jobdir
        if jobdir:
            # Before the dupefilter opens its file: a JOBDIR in use is not touched.
            spider = getattr(crawler.spidercls, "name", None)
            check_frontier(Path(jobdir, FRONTIER_FILENAME), spider=spider)
            check_not_stock(Path(jobdir), Path(jobdir, FRONTIER_FILENAME))
        #: Where the frontier lives and what is saved of the crawl: in memory, or
        #: the JOBDIR's store and its checkpoints (from ``open()``).
        self.keeper: Jobdir | MemoryKeeper = MemoryKeeper()
        self.frontier: Frontier[Request] = Frontier(self._new_controller)
        #: An in-flight entry with no feedback this long after the timeout is swept.
        self.download_timeout = read_float(crawler.settings, "DOWNLOAD_TIMEOUT", 180.0)
        self._last_sweep = self.clock()
        self._given_up: list[tuple[str, Request]] = []
        self._scheduler: AimdScheduler | None = None
        #: Requests downloaded around the scheduler, waiting for their host's turn.
        self.outside = OutsideGate(
            host_of=request_host,
            ready_at=lambda host, now: self.frontier.controller(host).ready_at(now),
            start=self._start_outside,
            clock=self.clock,
            closing=lambda: spider_closing(self.crawler),
        )

    @property
    def where(self) -> str:
        return self.keeper.where

    @property
    def resumable(self) -> bool:
        return self.keeper.resumable

    @property
    def gave_up_note(self) -> str:
        return self.keeper.gave_up_note

    def check(self, dupefilter: BaseDupeFilter) -> None:
        if self.jobdir:
            check_jobdir(Path(self.jobdir), Path(self.jobdir, FRONTIER_FILENAME), dupefilter)

    def make_reporter(self, crawler: Crawler, events_file: str | None) -> Reporter:
        return Reporter(crawler, events_file=events_file)

    def open(self, scheduler: AimdScheduler) -> None:
        self._scheduler = scheduler
        assert scheduler.spider is not None
        if self.jobdir:
            self.keeper = Jobdir(
                self.jobdir,
                self.crawler,
                scheduler.spider,
                scheduler.df,
                self.flights,
                clock=self.clock,
            )
        self.frontier = Frontier(self._new_controller, self.keeper.queue_store())
        self.keeper.start(self.frontier)
        self._parts.outside = self.outside

    def robots_listener(self, scheduler: AimdScheduler) -> RobotsListener:
        return scheduler

    def hosts_view(self) -> QueuedHosts | None:
        return self.frontier

    # -- queueing ----------------------------------------------------------------------

    def seen(self, request: Request) -> bool:
        assert self._scheduler is not None
        return not request.dont_filter and self._scheduler.df.request_seen(request)

    def restore_robots(self, request: Request) -> None:
        robots = self._scheduler.robots if self._scheduler is not None else None
        if robots is not None and self.keeper.recheck_robots and not is_exempt(request):
            self.keeper.restore_robots(request_origin(request), robots)

    def push(self, request: Request, host: str) -> str:
        keeper = self.keeper
        unserializable = keeper.unserializable
        self.frontier.push(
            host, request, priority=request.priority, depth=request_depth(request), now=self.clock()
        )
        return self._written(request, unserializable)

    def keep(self, request: Request, host: str) -> str:
        unserializable = self.keeper.unserializable
        self.frontier.keep(host, request, priority=request.priority, depth=request_depth(request))
        return self._written(request, unserializable)

    def _written(self, request: Request, unserializable: int) -> str:
        keeper = self.keeper
        where = keeper.where
        if keeper.unserializable > unserializable:
            if ROBOTS_META not in request.meta:  # fetched again if needed
                self.stats.inc_value("scheduler/unserializable")
            where = "memory"  # as Scrapy's scheduler counts it
        keeper.wrote()
        return where

    def handed_out(self, request: Request) -> None:
        self.keeper.handed_out(request)

    def tick(self, now: float) -> None:
        self.keeper.tick()
        self._release_done(now)
        if now - self._last_sweep >= SWEEP_INTERVAL:
            self._sweep(now)
        self.outside.serve()  # first: they belong to pages already fetched

    def pop(self, now: float) -> Handout | None:
        scheduler = self._scheduler
        assert scheduler is not None
        popped = self.frontier.pop(now)
        while (
            popped is not None and self.keeper.recheck_robots and not self._may_start(popped.item)
        ):
            # Stored by an earlier run before its origin's robots.txt was known.
            self.frontier.cancel(popped.host, popped.ticket, now)
            if scheduler.denied:
                return None
            popped = self.frontier.pop(now)
        if popped is None:
            scheduler.wake.arm(self.frontier.next_ready_at(now), now)
            return None
        self.keeper.handed_out(popped.item)
        return Handout(popped.item, popped.host, popped.ticket, now, self.keeper.where)

    def _may_start(self, request: Request) -> bool:
        """With JOBDIR, robots.txt decides again at pop time: a request queued by an
        earlier run may come from an origin whose rules this run does not know."""
        scheduler = self._scheduler
        assert scheduler is not None
        if scheduler.robots is None or is_exempt(request):
            return True
        return scheduler.gate(request) is None

    def has_pending(self) -> bool:
        return len(self.frontier) > 0 or bool(self._given_up)

    def take_given_up(self) -> list[tuple[str, Request]]:
        taken, self._given_up = self._given_up, []
        return taken

    def give_up(self, host: str) -> tuple[bool, int]:
        drained = self.frontier.drain(host)
        self._given_up.extend((host, request) for request in drained)
        return True, len(drained)

    # -- feedback ------------------------------------------------------------------------

    def reached_downloader(self, request: Request) -> None:
        """Time the host's gap from the moment the request is sent, not handed out
        (see :func:`~scrapy_aimd.crawl.when_written`)."""
        flight = self.flights.get(request)
        if flight is not None and flight.ticket is not None and flight.host is not None:
            controller, ticket = self.frontier.controller(flight.host), flight.ticket
            controller.sent(ticket, self.clock())
            when_written(lambda: controller.sent(ticket, self.clock()))

    def answer(self, request: Request, feedback: Mapping[str, Any]) -> str | None:
        scheduler = self._scheduler
        assert scheduler is not None
        flight = self.flights.get(request)
        new_connection = flight is not None and flight.new_connection
        taken = self.flights.take_ticket(request)
        if taken is None:  # not handed out by us (engine.download ...), or swept
            return None
        host, ticket = taken
        now = self.clock()
        self.keeper.host_changed(host)
        reporter = scheduler.reporter
        if not feedback.get("downloaded", True) or self.flights.cancelled(request):
            self.frontier.cancel(host, ticket, now)
            reporter.cancelled()
            self.outside.serve()
            return None
        controller = self.frontier.controller(host)
        before = (controller.delay, controller.concurrency)
        status, exception = feedback.get("status"), feedback.get("exception")
        timeout, latency = bool(feedback.get("timeout")), feedback.get("latency")
        if exception is not None or status is None:
            reaction = self.frontier.fail(host, ticket, now, timeout=timeout)
            error = type(exception).__name__
            reporter.answered(host, now, reaction, controller, before, error=error, timeout=timeout)
        else:
            if new_connection:
                # Written once its connection was up, by when the host had it at
                # the latest: the gap counts from here (scrapy_aimd.core.connections).
                controller.sent(ticket, now)
            reaction = self.frontier.finish(
                host,
                ticket,
                now,
                status=status,
                latency=latency,
                retry_after=feedback.get("retry_after"),
                page=ROBOTS_META not in request.meta,
                quota=feedback.get("quota"),
                again=FORBIDDEN_META in request.meta,
            )
            reporter.answered(
                host, now, reaction, controller, before, status=status, latency=latency
            )
        # For the feedback middleware, which requeues the request if this says so.
        flight = self.flights.get(request)
        if flight is not None:
            flight.reaction = reaction
        self.outside.serve()
        return host

    def _start_outside(self, request: Request, host: str, now: float) -> None:
        """A request downloaded around the scheduler takes a place of its host's, so
        that its answer is heard as any other's (see :mod:`scrapy_aimd.outside`)."""
        ticket = self.frontier.start(host, now)
        self.flights.handed_out(request, host, ticket, now)
        assign_slot(request)  # its copies (a requeue) must come back to this host
        if self._scheduler is not None:
            self._scheduler.reporter.started(host, now, self.frontier.controller(host))
        self.stats.inc_value("aimd/outside_scheduler")

    # -- hosts -------------------------------------------------------------------------

    def controller(self, host: str) -> HostController:
        return self.frontier.controller(host)

    def set_crawl_delay(self, host: str, floor: float) -> HostController:
        controller = self.frontier.controller(host)
        controller.set_crawl_delay(floor)
        self.frontier.refile(host, self.clock())
        self.keeper.host_changed(host)
        return controller

    def robots_settled(self, origin: str) -> None:
        robots = self._scheduler.robots if self._scheduler is not None else None
        if robots is not None:
            self.keeper.save_robots(origin, robots)

    def _new_controller(self, host: str) -> HostController:
        cfg = self.configs.for_host(host)
        return self.keeper.controller(host, cfg) or HostController(cfg)

    # -- bookkeeping ---------------------------------------------------------------

    def _release(self, request: Request, now: float) -> None:
        taken = self.flights.take_ticket(request)
        if taken is not None:
            self.frontier.cancel(*taken, now)

    def _release_done(self, now: float) -> None:
        """Free the place of each request that the engine is done with and that
        never came back through the feedback middleware: a downloader middleware
        before ours swapped it for another one (scrapy-splash does, for every
        request). Its host learns nothing from it."""
        in_progress = requests_in_progress(self.crawler)
        if in_progress is None:
            return
        for request in self.flights.done_without_feedback(in_progress):
            self._release(request, now)
            flight = self.flights.get(request)
            if flight is not None:  # a middleware after ours swapped it: no feedback will come
                flight.sent_at = flight.reaction = None
                self.flights.settle(request)
            self.stats.inc_value("aimd/in_flight/no_feedback")
            logger.debug("No feedback for %s, which the engine is done with", request)

    def _sweep(self, now: float) -> None:
        """Release requests that never came back through the middleware: the
        last resort, for a request that the engine still holds without feedback."""
        self._last_sweep = now
        for request in self.flights.stale(now, self.download_timeout):
            self._release(request, now)
            self.stats.inc_value("aimd/in_flight/expired")
            logger.warning("No feedback for %s; released its host's place", request)

    def close(self, reason: str, now: float) -> list[tuple[str, HostController]]:
        self._parts.outside = None
        self.outside.close()
        held = list(self.flights.with_tickets())
        self.stats.set_value("aimd/in_flight_at_close", len(held))
        for request, _ in held:
            self._release(request, now)
        self.stats.set_value(
            "aimd/in_flight_after_close", sum(c.in_flight for _, c in self.frontier.hosts())
        )
        self.stats.set_value("aimd/queued_at_close", len(self.frontier))
        return list(self.frontier.hosts())

    def shut(self) -> None:
        self.keeper.close()

    def failed(self, exc: BaseException, where: str) -> bool:
        if isinstance(exc, StoreError):
            self.keeper.fail(exc)
            return True
        return False
