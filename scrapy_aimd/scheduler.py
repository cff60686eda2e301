"""``AimdScheduler``: dedup, the robots gate, then a host-aware frontier that
only hands out requests whose host may start now.

Scrapy's engine pulls requests from the scheduler until the downloader is full.
The stock scheduler hands out whatever comes next, so a request for a delayed
or paused host sits in the downloader and holds a place that another host
could use (scrapy #2638, #6982). This scheduler asks each host's controller
first: a busy, slow or paused host waits in the frontier while every other host
goes on. When it holds requests back it arms the wake timer
(:mod:`scrapy_aimd.wake`) for the moment the next host becomes ready.

This module is plumbing: what the controller decided is told by the reporter
(:mod:`scrapy_aimd.reporter`); the requests in flight are in the crawl's
registry (:mod:`scrapy_aimd.inflight`); with ``JOBDIR`` the frontier lives on
disk (:mod:`scrapy_aimd.jobdir`); ``AIMD_SHUTDOWN_GRACE`` bounds how long a
stopping crawl waits for the requests in flight (:mod:`scrapy_aimd.shutdown`).
"""

from __future__ import annotations

import logging
import sqlite3
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from scrapy import signals as scrapy_signals
from scrapy.utils.job import job_dir
from scrapy.utils.misc import build_from_crawler, load_object

from scrapy_aimd import give_up as give_up_setting
from scrapy_aimd import signals
from scrapy_aimd._compat import requests_in_progress, spider_closing
from scrapy_aimd.addon import warn_about_downloader_throttling
from scrapy_aimd.core.controller import HostController
from scrapy_aimd.core.frontier import Frontier
from scrapy_aimd.core.robots import Verdict
from scrapy_aimd.crawl import (
    assign_slot,
    crawl_parts,
    hand_out_given_up,
    request_depth,
    request_host,
    request_origin,
    stop_crawl,
    user_slot,
    when_written,
)
from scrapy_aimd.give_up import GiveUpBudget
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
from scrapy_aimd.robots_middleware import (
    ROBOTS_META,
    RobotsTxtMiddleware,
    is_exempt,
)
from scrapy_aimd.settings import AimdSettingsError, masked_url, read_float
from scrapy_aimd.shutdown import ShutdownGrace, read_grace
from scrapy_aimd.sqlite_store import StoreError
from scrapy_aimd.wake import WakeTimer

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from twisted.internet.defer import Deferred
    from typing_extensions import Self

    from scrapy_aimd.fleet_scheduler import FleetScheduler

logger = logging.getLogger(__name__)

#: Errors in ``enqueue_request`` that are not about the one request: the crawl
#: stops. Any other error drops that request, with an ERROR naming it.
CRAWL_ERRORS: tuple[type[BaseException], ...] = (OSError, sqlite3.Error, MemoryError)

#: How often in-flight entries that never got feedback are looked for.
SWEEP_INTERVAL = 30.0


class AimdScheduler:
    """A Scrapy scheduler with per-host AIMD politeness."""

    def __init__(
        self,
        crawler: Crawler,
        dupefilter: BaseDupeFilter,
        *,
        events_file: str | None = None,
        jobdir: str | None = None,
        shutdown_grace: float | None = None,
        give_up: float = give_up_setting.DEFAULT,
        clock: Callable[[], float] | None = None,
    ) -> None:
        parts = self._parts = crawl_parts(crawler)
        self.crawler = crawler
        self.stats = crawler.stats
        self.df = dupefilter
        self.configs = parts.configs
        self.flights = parts.flights
        self.clock = clock or parts.clock
        self.reporter = Reporter(crawler, events_file=events_file)
        self.wake = WakeTimer(crawler)
        self.frontier: Frontier[Request] = Frontier(self._new_controller)
        #: An in-flight entry with no feedback this long after the timeout is swept.
        self.download_timeout = read_float(crawler.settings, "DOWNLOAD_TIMEOUT", 180.0)
        self._last_sweep = self.clock()
        self.spider: Spider | None = None
        self.robots: RobotsTxtMiddleware | None = None
        #: Requests robots.txt disallows: handed out first, without a ticket, for
        #: the robots middleware to turn into IgnoreRequest.
        self.denied: deque[Request] = deque()
        self.jobdir_path = jobdir
        #: Where the frontier lives and what is saved of the crawl: in memory, or
        #: the JOBDIR's store and its checkpoints (from ``open()``).
        self.keeper: Jobdir | MemoryKeeper = MemoryKeeper()
        self.shutdown_grace = shutdown_grace
        self.shutdown: ShutdownGrace | None = None
        self.budget = GiveUpBudget(give_up)
        #: Requests of hosts given up on, handed out first for the feedback
        #: middleware to fail with ``HostGaveUp``.
        self.given_up: deque[Request] = deque()
        #: With AIMD_REDIS_URL, the fleet path does the work (scrapy_aimd.fleet_scheduler).
        self.fleet: FleetScheduler | None = None
        #: Requests downloaded around the scheduler, waiting for their host's turn.
        self.outside = OutsideGate(
            host_of=request_host,
            ready_at=lambda host, now: self.frontier.controller(host).ready_at(now),
            start=self._start_outside,
            clock=self.clock,
            closing=lambda: spider_closing(self.crawler),
        )

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        parts = _PREPARED.pop(crawler, None) or _prepare(crawler)
        scheduler = cls(
            crawler,
            parts.dupefilter,
            events_file=parts.events_file,
            jobdir=parts.jobdir,
            shutdown_grace=parts.shutdown_grace,
            give_up=parts.give_up,
        )
        scheduler.fleet = parts.fleet
        return scheduler

    @classmethod
    def prepare(cls, crawler: Crawler) -> None:
        """Read the scheduler's settings and build its dupefilter (which reads a
        JOBDIR's seen-keys file) now, as the engine is made: Scrapy builds the
        scheduler only as the spider opens, where an error is buried under
        ``RuntimeError: Engine slot not assigned``. Raised here, an invalid
        setting or file is the one error shown. The downloader middleware calls
        this from its ``from_crawler``."""
        if crawler not in _PREPARED and issubclass(load_object(crawler.settings["SCHEDULER"]), cls):
            _PREPARED[crawler] = _prepare(crawler)

    # -- the scheduler interface -------------------------------------------------

    def open(self, spider: Spider) -> Deferred[None] | None:
        self.spider = spider
        if self.fleet is not None:
            return self.fleet.open(spider, self.df)
        if self.jobdir_path:
            self.keeper = Jobdir(
                self.jobdir_path, self.crawler, spider, self.df, self.flights, clock=self.clock
            )
        self.frontier = Frontier(self._new_controller, self.keeper.queue_store())
        self.crawler.signals.connect(self._on_feedback, signal=signals.response_feedback)
        self.crawler.signals.connect(
            self._on_reached_downloader, signal=scrapy_signals.request_reached_downloader
        )
        self.reporter.open(self.clock(), spider.name, self.frontier, self.clock)
        warn_about_downloader_throttling(self.crawler.settings, self.configs.default)
        self.robots = self.crawler.get_downloader_middleware(RobotsTxtMiddleware)
        if self.robots is not None:
            self.robots.attach(self, self.clock)
        if self.shutdown_grace is not None:
            self.shutdown = ShutdownGrace(
                self.crawler,
                self.shutdown_grace,
                self.flights,
                resumable=self.keeper.resumable,
            )
            self.shutdown.start()
        self.keeper.start(self.frontier)
        self._parts.outside = self.outside
        return self.df.open()

    def close(self, reason: str) -> Deferred[None] | None:
        if self.fleet is not None:
            return self.fleet.close(reason)
        now = self.clock()
        self.wake.cancel()
        self._parts.outside = None
        self.outside.close()
        if self.shutdown is not None:
            self.shutdown.stop()
        self.crawler.signals.disconnect(self._on_feedback, signal=signals.response_feedback)
        self.crawler.signals.disconnect(
            self._on_reached_downloader, signal=scrapy_signals.request_reached_downloader
        )
        held = list(self.flights.with_tickets())
        self.stats.set_value("aimd/in_flight_at_close", len(held))
        for request, _ in held:
            self._release(request, now)
        self.stats.set_value(
            "aimd/in_flight_after_close", sum(c.in_flight for _, c in self.frontier.hosts())
        )
        self.stats.set_value("aimd/queued_at_close", len(self.frontier))
        self.reporter.close(now, reason, self.frontier.hosts(), self.df)
        closed = self.df.close(reason)  # writes the last keys after a last commit
        self.keeper.close()
        return closed

    def has_pending_requests(self) -> bool:
        if self.fleet is not None:
            return self.fleet.has_pending_requests()
        held = self.robots.held if self.robots is not None else 0
        return len(self.frontier) + held + len(self.denied) + len(self.given_up) > 0

    def enqueue_request(self, request: Request) -> bool:
        problem = _unqueueable(request)
        if problem is not None:
            self._drop_invalid(request, problem)
            return False
        if self.fleet is not None:
            return self.fleet.enqueue_request(request)
        try:
            if not request.dont_filter and self.df.request_seen(request):
                self.df.log(request, self.crawler.spider)  # type: ignore[arg-type]
                return False
            self.stats.inc_value("aimd/enqueued")
            keeper = self.keeper
            unserializable = keeper.unserializable
            self._route(request)
            if keeper.unserializable > unserializable:
                if ROBOTS_META not in request.meta:  # fetched again if needed
                    self.stats.inc_value("scheduler/unserializable")
                self._count("enqueued", "memory")  # as Scrapy's scheduler counts it
            else:
                self._count("enqueued")
            keeper.wrote()
        except StoreError as exc:
            self.keeper.fail(exc)
        except CRAWL_ERRORS:
            self._fail("enqueue_request")
        except Exception as exc:  # about this one request: the crawl goes on
            self._drop_invalid(request, f"{type(exc).__name__}: {exc}", exc_info=True)
            return False
        return True

    def _drop_invalid(self, request: Request, problem: str, *, exc_info: bool = False) -> None:
        self.stats.inc_value("aimd/enqueue/invalid")
        logger.error("Dropped %s: it cannot be queued (%s)", request, problem, exc_info=exc_info)

    def _route(self, request: Request) -> None:
        """To the frontier, or aside while robots.txt decides."""
        host = request_host(request)
        if host in self.budget.given_up:
            self._give_up_on(host, request)
            return
        if self.robots is not None:
            verdict = self._verdict(request)
            if verdict is not Verdict.ALLOW:
                self._set_aside(request, verdict)
                return
            if user_slot(request) is not None:
                self.robots.slot_crawl_delay(host, request)
        self.frontier.push(
            host,
            request,
            priority=request.priority,
            depth=request_depth(request),
            now=self.clock(),
        )

    def _verdict(self, request: Request) -> Verdict:
        assert self.robots is not None
        if self.keeper.recheck_robots and not is_exempt(request):
            self.keeper.restore_robots(request_origin(request), self.robots)
        return self.robots.verdict(request)

    def _set_aside(self, request: Request, verdict: Verdict) -> None:
        """Hold a request in the robots middleware until its origin's robots.txt is
        known, or queue it to be handed out as disallowed; with JOBDIR the store
        keeps it meanwhile."""
        assert self.robots is not None
        if verdict is Verdict.WAIT:
            self.robots.hold(request, self._route)
        else:
            self.denied.append(request)
        self.frontier.keep(
            request_host(request),
            request,
            priority=request.priority,
            depth=request_depth(request),
        )

    def next_request(self) -> Request | None:
        if self.fleet is not None:
            return self.fleet.next_request()
        # An exception raised here would break the engine's loop quietly (it then
        # crawls on its 5 s heartbeat only): stop the crawl loudly instead.
        try:
            return self._next_request()
        except StoreError as exc:
            self.keeper.fail(exc)
        except Exception:
            self._fail("next_request")
        return None

    def _fail(self, where: str) -> None:
        """Log the exception being handled and close the spider (reason "aimd_error")."""
        logger.exception("Stopping the crawl: AimdScheduler.%s failed", where)
        self.stats.inc_value("aimd/errors")
        stop_crawl(self.crawler, "aimd_error")

    def _next_request(self) -> Request | None:
        keeper = self.keeper
        keeper.tick()
        if self.given_up:
            return self._hand_out_given_up()
        if self.denied:
            return self._hand_out_denied()
        now = self.clock()
        self._release_done(now)
        if now - self._last_sweep >= SWEEP_INTERVAL:
            self._sweep(now)
        self.outside.serve()  # first: they belong to pages already fetched
        popped = self.frontier.pop(now)
        while popped is not None and keeper.recheck_robots and not self._may_start(popped.item):
            # Stored by an earlier run before its origin's robots.txt was known.
            self.frontier.cancel(popped.host, popped.ticket, now)
            if self.denied:
                return self._hand_out_denied()
            popped = self.frontier.pop(now)
        if popped is None:
            self.wake.arm(self.frontier.next_ready_at(now), now)
            return None
        request, host = popped.item, popped.host
        self.flights.handed_out(request, host, popped.ticket, now)
        keeper.handed_out(request)
        assign_slot(request)  # the user's slot, else this URL's, not a redirect's (#2141)
        self.reporter.started(host, now, self.frontier.controller(host))
        self._count("dequeued")
        return request

    def _hand_out_denied(self) -> Request:
        request = self.denied.popleft()
        self.keeper.handed_out(request)
        self._count("dequeued")
        return request

    def _hand_out_given_up(self) -> Request:
        """Not stored as handed out: with JOBDIR its row stays, for a later run."""
        request = hand_out_given_up(self.given_up.popleft(), self.stats)
        self._count("dequeued")
        return request

    def _give_up_on(self, host: str, request: Request | None = None) -> None:
        """Fail the host's queued requests (and ``request``, one that came back
        for it): the errback of each gets ``HostGaveUp``."""
        if request is not None:
            self.given_up.append(request)
            self.frontier.keep(
                host, request, priority=request.priority, depth=request_depth(request)
            )
        self.given_up.extend(self.frontier.drain(host))
        self.wake.now()

    def _gave_up(self, host: str, now: float) -> None:
        """``AIMD_HOST_GIVE_UP`` ran out for the host: its queue ends."""
        self.stats.inc_value("aimd/host_gave_up/hosts")
        logger.warning(
            "Giving up on %s: no success for %.0fs while it refused or timed out "
            "(AIMD_HOST_GIVE_UP=%g); its %d queued requests fail with HostGaveUp%s",
            host,
            self.budget.trouble_for(host, now),
            self.budget.budget,
            self.frontier.queued(host),
            self.keeper.gave_up_note,
        )
        self._give_up_on(host)

    def _count(self, what: str, where: str | None = None) -> None:
        """Scrapy's own scheduler stats, which monitoring tools read
        (``scheduler/enqueued``, ``scheduler/dequeued/disk`` ...)."""
        if where is None:
            where = self.keeper.where
        self.stats.inc_value(f"scheduler/{what}")
        self.stats.inc_value(f"scheduler/{what}/{where}")

    def _may_start(self, request: Request) -> bool:
        """With JOBDIR, robots.txt decides again at pop time: a request queued by an
        earlier run may come from an origin whose rules this run does not know."""
        if self.robots is None or is_exempt(request):
            return True
        verdict = self._verdict(request)
        if verdict is Verdict.ALLOW:
            return True
        self._set_aside(request, verdict)
        return False

    # -- feedback ------------------------------------------------------------------

    def _on_reached_downloader(self, request: Request, **_: Any) -> None:
        """Time the host's gap from the moment the request is sent, not handed out
        (see :func:`~scrapy_aimd.crawl.when_written`)."""
        flight = self.flights.get(request)
        if flight is not None and flight.ticket is not None and flight.host is not None:
            controller, ticket = self.frontier.controller(flight.host), flight.ticket
            controller.sent(ticket, self.clock())
            when_written(lambda: controller.sent(ticket, self.clock()))

    def _on_feedback(
        self,
        request: Request,
        status: int | None = None,
        latency: float | None = None,
        retry_after: float | None = None,
        exception: BaseException | None = None,
        timeout: bool = False,
        downloaded: bool = True,
        quota: Any = None,
        **_: Any,
    ) -> None:
        flight = self.flights.get(request)
        new_connection = flight is not None and flight.new_connection
        taken = self.flights.take_ticket(request)
        if taken is None:  # not handed out by us (engine.download ...), or swept
            return
        host, ticket = taken
        now = self.clock()
        self.keeper.host_changed(host)
        if not downloaded or self.flights.cancelled(request):
            self.frontier.cancel(host, ticket, now)
            self.reporter.cancelled()
            self.outside.serve()
            return
        controller = self.frontier.controller(host)
        before = (controller.delay, controller.concurrency)
        if exception is not None or status is None:
            reaction = self.frontier.fail(host, ticket, now, timeout=timeout)
            error = type(exception).__name__
            self.reporter.answered(
                host, now, reaction, controller, before, error=error, timeout=timeout
            )
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
                retry_after=retry_after,
                page=ROBOTS_META not in request.meta,
                quota=quota,
            )
            self.reporter.answered(
                host, now, reaction, controller, before, status=status, latency=latency
            )
        if self.budget.answered(
            host, now, status=status, timeout=timeout, throttle_codes=controller.cfg.refusal_codes
        ):
            self._gave_up(host, now)
        # For the feedback middleware, which requeues the request if this says so.
        flight = self.flights.get(request)
        if flight is not None:
            flight.reaction = reaction
        self.outside.serve()

    def _start_outside(self, request: Request, host: str, now: float) -> None:
        """A request downloaded around the scheduler takes a place of its host's, so
        that its answer is heard as any other's (see :mod:`scrapy_aimd.outside`)."""
        ticket = self.frontier.start(host, now)
        self.flights.handed_out(request, host, ticket, now)
        assign_slot(request)  # its copies (a requeue) must come back to this host
        self.reporter.started(host, now, self.frontier.controller(host))
        self.stats.inc_value("aimd/outside_scheduler")

    # -- robots.txt news (scrapy_aimd.robots_middleware.RobotsListener) --------------

    def robots_settled(self, origin: str, released: int) -> None:
        if self.robots is not None:
            self.keeper.save_robots(origin, self.robots)
        if released:
            self.wake.now()

    def set_crawl_delay(self, host: str, crawl_delay: float, floor: float) -> None:
        controller = self.frontier.controller(host)
        controller.set_crawl_delay(floor)
        self.frontier.refile(host, self.clock())
        self.reporter.crawl_delay(host, self.clock(), crawl_delay, controller)
        self.keeper.host_changed(host)

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

    def _new_controller(self, host: str) -> HostController:
        cfg = self.configs.for_host(host)
        return self.keeper.controller(host, cfg) or HostController(cfg)


@dataclass
class _Prepared:
    """What ``from_crawler`` reads, read early by :meth:`AimdScheduler.prepare`."""

    dupefilter: BaseDupeFilter
    events_file: str | None
    jobdir: str | None
    shutdown_grace: float | None
    give_up: float
    #: With AIMD_REDIS_URL: connected as the engine is made, so that an
    #: unreachable Redis is the one error shown.
    fleet: FleetScheduler | None = None


_PREPARED: WeakKeyDictionary[Crawler, _Prepared] = WeakKeyDictionary()


def _prepare(crawler: Crawler) -> _Prepared:
    settings = crawler.settings
    shutdown_grace = read_grace(settings)
    read_float(settings, "DOWNLOAD_TIMEOUT", 180.0)  # named now, read again as the spider opens
    give_up = read_float(settings, give_up_setting.SETTING, give_up_setting.DEFAULT)
    # The fleet first: it refuses a JOBDIR before anything in it is read or written.
    fleet = _fleet_scheduler(crawler) if settings.get("AIMD_REDIS_URL") else None
    try:
        jobdir = job_dir(settings)
        if jobdir:
            # Before the dupefilter opens its file: a JOBDIR in use is not touched.
            spider = getattr(crawler.spidercls, "name", None)
            check_frontier(Path(jobdir, FRONTIER_FILENAME), spider=spider)
            check_not_stock(Path(jobdir), Path(jobdir, FRONTIER_FILENAME))
        dupefilter = build_from_crawler(load_object(settings["DUPEFILTER_CLASS"]), crawler)
        if jobdir:
            check_jobdir(Path(jobdir), Path(jobdir, FRONTIER_FILENAME), dupefilter)
    except BaseException:
        if fleet is not None:
            fleet.fleet.close()  # connected already: a failed start leaves no connection
        raise
    return _Prepared(
        dupefilter,
        events_file=settings.get("AIMD_EVENTS_FILE") or None,
        jobdir=jobdir,
        shutdown_grace=shutdown_grace,
        give_up=give_up,
        fleet=fleet,
    )


def _unqueueable(request: Request) -> str | None:
    """Why a request cannot be queued, checked before any part keeps it."""
    if not isinstance(request.priority, int):
        return f"its priority {request.priority!r} is not an integer"
    return None


def _fleet_scheduler(crawler: Crawler) -> FleetScheduler | None:
    """The fleet path (imported only with AIMD_REDIS_URL: it needs ``redis``)."""
    try:
        from scrapy_aimd.fleet_scheduler import FleetScheduler
    except ImportError as exc:
        raise AimdSettingsError(
            "AIMD_REDIS_URL",
            masked_url(crawler.settings.get("AIMD_REDIS_URL")),
            """the redis client """
            f"installed: pip install 'scrapy-aimd[fleet]' ({exc})",
        ) from exc
    return FleetScheduler.from_crawler(crawler)
