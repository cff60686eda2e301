"""``AimdScheduler``: dedup, the robots gate, then a frontier store that only
hands out requests whose host may start now.

Scrapy's engine pulls requests from the scheduler until the downloader is full.
The stock scheduler hands out whatever comes next, so a request for a delayed
or paused host sits in the downloader and holds a place that another host
could use (scrapy #2638, #6982). This scheduler asks each host's controller
first: a busy, slow or paused host waits in the frontier while every other host
goes on. When it holds requests back the store arms the wake timer
(:mod:`scrapy_aimd.wake`) for the moment the next host becomes ready.

This module is plumbing, the same in every mode: where the frontier lives is
the store's business (:mod:`scrapy_aimd.store`: memory, SQLite with
``JOBDIR``, Redis with ``AIMD_REDIS_URL``); what the controller decided is told
by the reporter (:mod:`scrapy_aimd.reporter`); the requests in flight are in
the crawl's registry (:mod:`scrapy_aimd.inflight`); ``AIMD_SHUTDOWN_GRACE``
bounds how long a stopping crawl waits for them (:mod:`scrapy_aimd.shutdown`).
"""

from __future__ import annotations

import logging
import sqlite3
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from scrapy import signals as scrapy_signals
from scrapy.utils.misc import build_from_crawler, load_object

from scrapy_aimd import give_up as give_up_setting
from scrapy_aimd import signals
from scrapy_aimd.addon import warn_about_downloader_throttling
from scrapy_aimd.core.robots import Verdict
from scrapy_aimd.crawl import (
    assign_slot,
    crawl_parts,
    hand_out_given_up,
    request_host,
    stop_crawl,
    user_slot,
)
from scrapy_aimd.give_up import GiveUpBudget
from scrapy_aimd.robots_middleware import ROBOTS_META, RobotsTxtMiddleware
from scrapy_aimd.settings import read_float
from scrapy_aimd.shutdown import ShutdownGrace, read_grace
from scrapy_aimd.stores import build_store
from scrapy_aimd.wake import WakeTimer

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from twisted.internet.defer import Deferred
    from typing_extensions import Self

    from scrapy_aimd.reporter import Reporter
    from scrapy_aimd.store import FrontierStore

logger = logging.getLogger(__name__)

#: Errors in ``enqueue_request`` that are not about the one request: the crawl
#: stops. Any other error drops that request, with an ERROR naming it.
CRAWL_ERRORS: tuple[type[BaseException], ...] = (OSError, sqlite3.Error, MemoryError)


class AimdScheduler:
    """A Scrapy scheduler with per-host AIMD politeness, over a frontier store."""

    def __init__(
        self,
        crawler: Crawler,
        dupefilter: BaseDupeFilter,
        store: FrontierStore,
        *,
        events_file: str | None = None,
        shutdown_grace: float | None = None,
        give_up: float = give_up_setting.DEFAULT,
    ) -> None:
        parts = crawl_parts(crawler)
        self.crawler = crawler
        self.stats = crawler.stats
        self.df = dupefilter
        self.store = store
        self.configs = parts.configs
        self.flights = parts.flights
        self.clock = parts.clock
        self.reporter: Reporter = store.make_reporter(crawler, events_file)
        self.wake = WakeTimer(crawler)
        self.spider: Spider | None = None
        self.robots: RobotsTxtMiddleware | None = None
        #: Requests robots.txt disallows: handed out first, without a ticket, for
        #: the robots middleware to turn into IgnoreRequest.
        self.denied: deque[Request] = deque()
        self.shutdown_grace = shutdown_grace
        self.shutdown: ShutdownGrace | None = None
        self.budget = GiveUpBudget(give_up)
        #: Requests of hosts given up on, handed out first for the feedback
        #: middleware to fail with ``HostGaveUp``.
        self.given_up: deque[Request] = deque()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        p = _PREPARED.pop(crawler, None) or _prepare(crawler)
        return cls(
            crawler,
            p.dupefilter,
            p.store,
            events_file=p.events_file,
            shutdown_grace=p.shutdown_grace,
            give_up=p.give_up,
        )

    @classmethod
    def prepare(cls, crawler: Crawler) -> None:
        """Read the scheduler's settings, build its store and its dupefilter (which
        reads a JOBDIR's seen-keys file) now, as the engine is made: Scrapy builds
        the scheduler only as the spider opens, where an error is buried under
        ``RuntimeError: Engine slot not assigned``. Raised here, an invalid
        setting or file is the one error shown. The downloader middleware calls
        this from its ``from_crawler``."""
        if crawler not in _PREPARED and issubclass(load_object(crawler.settings["SCHEDULER"]), cls):
            _PREPARED[crawler] = _prepare(crawler)

    # -- the scheduler interface -------------------------------------------------

    def open(self, spider: Spider) -> Deferred[None] | None:
        self.spider = spider
        self.robots = self.crawler.get_downloader_middleware(RobotsTxtMiddleware)
        self.store.open(self)
        for handler, signal in self._handlers():
            self.crawler.signals.connect(handler, signal=signal)
        self.reporter.open(self.clock(), spider.name, self.store.hosts_view(), self.clock)
        warn_about_downloader_throttling(self.crawler.settings, self.configs.default)
        if self.robots is not None:
            self.robots.attach(self.store.robots_listener(self), self.clock)
        if self.shutdown_grace is not None:
            self.shutdown = ShutdownGrace(
                self.crawler, self.shutdown_grace, self.flights, resumable=self.store.resumable
            )
            self.shutdown.start()
        return self.df.open()

    def close(self, reason: str) -> Deferred[None] | None:
        now = self.clock()
        self.wake.cancel()
        if self.shutdown is not None:
            self.shutdown.stop()
        for handler, signal in self._handlers():
            self.crawler.signals.disconnect(handler, signal=signal)
        hosts = self.store.close(reason, now)
        self.reporter.close(now, reason, hosts, self.df)
        closed = self.df.close(reason)  # writes the last keys after a last commit
        self.store.shut()
        return closed

    def _handlers(self) -> list[tuple[Any, object]]:
        """The signals the scheduler listens to while the spider is open."""
        return [
            (self._on_feedback, signals.response_feedback),
            (self._on_reached_downloader, scrapy_signals.request_reached_downloader),
        ]

    def has_pending_requests(self) -> bool:
        self._take_given_up()
        held = self.robots.held if self.robots is not None else 0
        return bool(held or self.denied or self.given_up) or self.store.has_pending()

    def enqueue_request(self, request: Request) -> bool:
        problem = _unqueueable(request)
        if problem is not None:
            self._drop_invalid(request, problem)
            return False
        try:
            if self.store.seen(request):
                self.df.log(request, self.crawler.spider)  # type: ignore[arg-type]
                return False
            where = self._route(request)
            if where is None:
                return False
            self.stats.inc_value("aimd/enqueued")
            self._count("enqueued", where)
        except Exception as exc:
            if self.store.failed(exc, "enqueue_request"):
                return True
            if isinstance(exc, CRAWL_ERRORS):
                self._fail("enqueue_request")
                return True
            # About this one request: the crawl goes on.
            self._drop_invalid(request, f"{type(exc).__name__}: {exc}", exc_info=True)
            return False
        return True

    def _drop_invalid(self, request: Request, problem: str, *, exc_info: bool = False) -> None:
        self.stats.inc_value("aimd/enqueue/invalid")
        logger.error("Dropped %s: it cannot be queued (%s)", request, problem, exc_info=exc_info)

    def _route(self, request: Request) -> str | None:
        """To the store, or aside while robots.txt decides; where it went."""
        host = request_host(request)
        if host in self.budget.given_up:
            return self._give_up_on(host, request)
        if self.robots is not None:
            # robots.txt itself is never held for robots.txt.
            kept = None if ROBOTS_META in request.meta else self.gate(request)
            if kept is not None:
                return kept
            if user_slot(request) is not None:
                self.robots.slot_crawl_delay(host, request)
        return self.store.push(request, host)

    def _resume(self, request: Request) -> None:
        """A request the robots gate held, its origin's rules now known."""
        try:
            self._route(request)
        except Exception as exc:  # as in enqueue_request: not left to the gate's log
            if not self.store.failed(exc, "enqueue_request"):
                raise

    def gate(self, request: Request) -> str | None:
        """The robots gate: None if the request may go now. If not, it is held in
        the robots middleware until its origin's robots.txt is known, or queued
        to be handed out as disallowed, and the store keeps it meanwhile: where."""
        assert self.robots is not None
        self.store.restore_robots(request)
        verdict = self.robots.verdict(request)
        if verdict is Verdict.ALLOW:
            return None
        if verdict is Verdict.WAIT:
            self.robots.hold(request, self._resume)
        else:
            self.denied.append(request)
        return self.store.keep(request, request_host(request))

    def next_request(self) -> Request | None:
        # An exception raised here would break the engine's loop quietly (it then
        # crawls on its 5 s heartbeat only): stop the crawl loudly instead.
        try:
            return self._next_request()
        except Exception as exc:
            if not self.store.failed(exc, "next_request"):
                self._fail("next_request")
        return None

    def _fail(self, where: str) -> None:
        """Log the exception being handled and close the spider (reason "aimd_error")."""
        logger.exception("Stopping the crawl: AimdScheduler.%s failed", where)
        self.stats.inc_value("aimd/errors")
        stop_crawl(self.crawler, "aimd_error")

    def _next_request(self) -> Request | None:
        now = self.clock()
        self.store.tick(now)
        if self.given_up or self._take_given_up():
            return self._hand_out_given_up()
        if self.denied:
            return self._hand_out_denied()
        handout = self.store.pop(now)
        if handout is None:
            # The store may have set requests aside meanwhile.
            if self._take_given_up():
                return self._hand_out_given_up()
            return self._hand_out_denied() if self.denied else None
        request, host = handout.request, handout.host
        if host is not None:
            self.flights.handed_out(request, host, handout.ticket, handout.at)
            assign_slot(request)  # the user's slot, else this URL's, not a redirect's (#2141)
            self.reporter.started(host, handout.at, self.store.controller(host))
        self._count("dequeued", handout.where)
        return request

    def _hand_out_denied(self) -> Request:
        request = self.denied.popleft()
        self.store.handed_out(request)
        self._count("dequeued", self.store.where)
        return request

    def _hand_out_given_up(self) -> Request:
        """Not stored as handed out: with JOBDIR its row stays, for a later run."""
        request = hand_out_given_up(self.given_up.popleft(), self.stats)
        self._count("dequeued", self.store.where)
        return request

    def _take_given_up(self) -> bool:
        """The store's requests of hosts given up on, to the ``given_up`` queue (their
        hosts noted in the budget); True if any came."""
        taken = self.store.take_given_up()
        for host, request in taken:
            self.budget.given_up.add(host)
            self.given_up.append(request)
        return bool(taken)

    def _give_up_on(self, host: str, request: Request) -> str:
        """A request that came for a host given up on: it fails with ``HostGaveUp``."""
        self.given_up.append(request)
        self.wake.now()
        return self.store.keep(request, host)

    def _gave_up(self, host: str, now: float) -> None:
        """``AIMD_HOST_GIVE_UP`` ran out for the host: its queue ends, in every
        process of the crawl (the first to give it up says so)."""
        try:
            first, queued = self.store.give_up(host)
        except Exception as exc:
            if self.store.failed(exc, "give_up"):
                return
            raise
        self._take_given_up()
        if first:
            self.stats.inc_value("aimd/host_gave_up/hosts")
            logger.warning(
                "Giving up on %s: no success for %.0fs while it refused or timed out "
                "(AIMD_HOST_GIVE_UP=%g); its %d queued requests fail with HostGaveUp%s",
                host,
                self.budget.trouble_for(host, now),
                self.budget.budget,
                queued,
                self.store.gave_up_note,
            )
        self.wake.now()

    def _count(self, what: str, where: str) -> None:
        """Scrapy's own scheduler stats, which monitoring tools read
        (``scheduler/enqueued``, ``scheduler/dequeued/disk`` ...)."""
        self.stats.inc_value(f"scheduler/{what}")
        self.stats.inc_value(f"scheduler/{what}/{where}")

    # -- feedback ------------------------------------------------------------------

    def _on_reached_downloader(self, request: Request, **_: Any) -> None:
        self.store.reached_downloader(request)

    def _on_feedback(self, request: Request, **feedback: Any) -> None:
        host = self.store.answer(request, feedback)
        if host is None:
            return
        now = self.clock()
        status = feedback.get("status")
        timeout = bool(feedback.get("timeout"))
        codes = self.configs.for_host(host).refusal_codes
        if self.budget.answered(host, now, status=status, timeout=timeout, throttle_codes=codes):
            self._gave_up(host, now)

    # -- robots.txt news (scrapy_aimd.robots_middleware.RobotsListener) --------------

    def robots_settled(self, origin: str, released: int) -> None:
        self.store.robots_settled(origin)
        if released:
            self.wake.now()

    def set_crawl_delay(self, host: str, crawl_delay: float, floor: float) -> None:
        """The one Crawl-delay floor: the store keeps the host's gap to it."""
        controller = self.store.set_crawl_delay(host, floor)
        if controller is not None:
            self.reporter.crawl_delay(host, self.clock(), crawl_delay, controller)


@dataclass
class _Prepared:
    """What ``from_crawler`` reads, read early by :meth:`AimdScheduler.prepare`."""

    dupefilter: BaseDupeFilter
    store: FrontierStore
    events_file: str | None
    shutdown_grace: float | None
    give_up: float


_PREPARED: WeakKeyDictionary[Crawler, _Prepared] = WeakKeyDictionary()


def _prepare(crawler: Crawler) -> _Prepared:
    settings = crawler.settings
    shutdown_grace = read_grace(settings)
    read_float(settings, "DOWNLOAD_TIMEOUT", 180.0)  # named now, read again as the spider opens
    give_up = read_float(settings, give_up_setting.SETTING, give_up_setting.DEFAULT)
    # The store first: a fleet refuses a JOBDIR before anything in it is read or
    # written, and a JOBDIR in use is refused before the dupefilter opens its file.
    store = build_store(crawler)
    try:
        dupefilter = build_from_crawler(load_object(settings["DUPEFILTER_CLASS"]), crawler)
        store.check(dupefilter)
    except BaseException:
        store.shut()  # connected already: a failed start leaves no connection
        raise
    return _Prepared(
        dupefilter,
        store,
        events_file=settings.get("AIMD_EVENTS_FILE") or None,
        shutdown_grace=shutdown_grace,
        give_up=give_up,
    )


def _unqueueable(request: Request) -> str | None:
    """Why a request cannot be queued, checked before any part keeps it."""
    if not isinstance(request.priority, int):
        return f"its priority {request.priority!r} is not an integer"
    return None
