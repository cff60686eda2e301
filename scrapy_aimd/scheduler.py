"""``AimdScheduler``: dedup, then a host-aware frontier that only hands out
requests whose host may start now.

Scrapy's engine pulls requests from the scheduler until the downloader is full.
The stock scheduler hands out whatever comes next, so a request for a delayed
or paused host sits in the downloader and holds a place that another host
could use (scrapy #2638, #6982). This scheduler asks each host's controller
first: a busy, slow or paused host waits in the frontier while every other host
goes on. When it holds requests back it wakes the engine itself the moment the
next host becomes ready, instead of waiting for the engine's 5 s heartbeat.

With ``JOBDIR`` the frontier lives on disk and survives a crash (see
:mod:`scrapy_aimd.jobdir`); ``AIMD_SHUTDOWN_GRACE`` bounds how long a stopping
crawl waits for the requests in flight (see :mod:`scrapy_aimd.shutdown`).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy import signals as scrapy_signals
from scrapy.utils.asyncio import call_later
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.job import job_dir
from scrapy.utils.misc import build_from_crawler, load_object

from scrapy_aimd import signals
from scrapy_aimd._compat import wake_engine
from scrapy_aimd.core.controller import HostController, Reaction, Ticket
from scrapy_aimd.core.frontier import Frontier
from scrapy_aimd.core.robots import Verdict
from scrapy_aimd.events import EventLog
from scrapy_aimd.jobdir import Jobdir
from scrapy_aimd.request_hosts import request_host, request_origin
from scrapy_aimd.robots_middleware import RobotsTxtMiddleware, is_exempt
from scrapy_aimd.settings import HostConfigs, controller_configs
from scrapy_aimd.shutdown import ShutdownGrace, read_grace
from scrapy_aimd.sqlite_store import StoreError
from scrapy_aimd.summary import HostRow, HostSummary, format_summary

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.http import Response
    from scrapy.utils.asyncio import CallLaterResult
    from twisted.internet.defer import Deferred
    from typing_extensions import Self

logger = logging.getLogger(__name__)

#: How often in-flight entries that never got feedback are looked for.
SWEEP_INTERVAL = 30.0


class AimdScheduler:
    """A Scrapy scheduler with per-host AIMD politeness."""

    def __init__(
        self,
        crawler: Crawler,
        dupefilter: BaseDupeFilter,
        configs: HostConfigs,
        *,
        events_file: str | None = None,
        jobdir: str | None = None,
        shutdown_grace: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.df = dupefilter
        self.configs = configs
        self.clock = clock
        self.events_file = events_file
        self.events: EventLog | None = None
        self.frontier: Frontier[Request] = Frontier(self._new_controller)
        self.summaries: dict[str, HostSummary] = {}
        #: Requests handed to the engine whose feedback has not come yet.
        self.in_flight: dict[Request, tuple[str, Ticket, float]] = {}
        #: An in-flight entry with no feedback this long after the timeout is swept.
        self.download_timeout = crawler.settings.getfloat("DOWNLOAD_TIMEOUT", 180)
        self._wake: CallLaterResult | None = None
        self._wake_at = math.inf
        self._last_sweep = clock()
        self.spider: Spider | None = None
        self.robots: RobotsTxtMiddleware | None = None
        self._failed = False
        #: Requests whose origin's robots.txt is not known yet, by origin.
        self.parked: dict[str, list[Request]] = {}
        self._parked_count = 0
        #: Requests robots.txt disallows: handed out first, without a ticket, for
        #: the robots middleware to turn into IgnoreRequest.
        self.denied: deque[Request] = deque()
        self.jobdir_path = jobdir
        #: The on-disk frontier and its checkpoints, with JOBDIR (from ``open()``).
        self.jobdir: Jobdir | None = None
        self.shutdown_grace = shutdown_grace
        self.shutdown: ShutdownGrace | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        dupefilter_cls = load_object(settings["DUPEFILTER_CLASS"])
        return cls(
            crawler,
            build_from_crawler(dupefilter_cls, crawler),
            controller_configs(settings),
            events_file=settings.get("AIMD_EVENTS_FILE") or None,
            jobdir=job_dir(settings),
            shutdown_grace=read_grace(settings),
        )

    # -- the scheduler interface -------------------------------------------------

    def open(self, spider: Spider) -> Deferred[None] | None:
        self.spider = spider
        if self.jobdir_path:
            self.jobdir = Jobdir(self.jobdir_path, self.crawler, spider, self.df, clock=self.clock)
            self.frontier = Frontier(self._new_controller, self.jobdir.store)
        self.crawler.signals.connect(self._on_feedback, signal=signals.response_feedback)
        self.crawler.signals.connect(
            self._on_reached_downloader, signal=scrapy_signals.request_reached_downloader
        )
        if self.events_file:
            self.events = EventLog(self.events_file, now=self.clock(), spider=spider.name)
        self._check_downloader_settings()
        self.robots = self.crawler.get_downloader_middleware(RobotsTxtMiddleware)
        if self.robots is not None:
            self.robots.attach(self, self.clock)
        if self.shutdown_grace is not None:
            self.shutdown = ShutdownGrace(
                self.crawler, self.shutdown_grace, resumable=self.jobdir is not None
            )
            self.shutdown.start()
        if self.jobdir is not None:
            if self.shutdown is not None:
                self.jobdir.keep_if = self.shutdown.was_cancelled
            self.jobdir.start(self.frontier)
        return self.df.open()

    def close(self, reason: str) -> Deferred[None] | None:
        now = self.clock()
        self._cancel_wake()
        if self.shutdown is not None:
            self.shutdown.stop()
        self.crawler.signals.disconnect(self._on_feedback, signal=signals.response_feedback)
        self.crawler.signals.disconnect(
            self._on_reached_downloader, signal=scrapy_signals.request_reached_downloader
        )
        self.stats.set_value("aimd/in_flight_at_close", len(self.in_flight))
        for request in list(self.in_flight):
            self._release(request, now)
        self.stats.set_value(
            "aimd/in_flight_after_close", sum(c.in_flight for _, c in self.frontier.hosts())
        )
        self.stats.set_value("aimd/hosts", len(self.summaries))
        self.stats.set_value("aimd/queued_at_close", len(self.frontier))
        if self.summaries:
            logger.info("Per-host summary (%s):\n%s", reason, format_summary(self._rows()))
        if self.events is not None:
            self.events.close(now, reason=reason, hosts=self._summary_dict())
        closed = self.df.close(reason)  # writes the last keys after a last commit
        if self.jobdir is not None:
            self.jobdir.close()
        return closed

    def has_pending_requests(self) -> bool:
        return len(self.frontier) + self._parked_count + len(self.denied) > 0

    def enqueue_request(self, request: Request) -> bool:
        try:
            if not request.dont_filter and self.df.request_seen(request):
                self.df.log(request, self.crawler.spider)  # type: ignore[arg-type]
                return False
            self.stats.inc_value("aimd/enqueued")
            self._route(request)
            if self.jobdir is not None:
                self.jobdir.wrote()
        except StoreError as exc:
            assert self.jobdir is not None
            self.jobdir.fail(exc)
        except Exception:
            self._fail("enqueue_request")
        return True

    def _route(self, request: Request) -> None:
        """To the frontier, or aside while robots.txt decides."""
        if self.robots is not None:
            verdict = self._verdict(request)
            if verdict is not Verdict.ALLOW:
                self._set_aside(request, verdict)
                return
        self.frontier.push(
            request_host(request),
            request,
            priority=request.priority,
            depth=_depth(request),
            now=self.clock(),
        )

    def _verdict(self, request: Request) -> Verdict:
        assert self.robots is not None
        if self.jobdir is not None and not is_exempt(request):
            self.jobdir.restore_robots(request_origin(request), self.robots)
        return self.robots.verdict(request)

    def _set_aside(self, request: Request, verdict: Verdict) -> None:
        """Park a request until its origin's robots.txt is known, or queue it to be
        handed out as disallowed; with JOBDIR the store keeps it meanwhile."""
        if verdict is Verdict.WAIT:
            self.parked.setdefault(request_origin(request), []).append(request)
            self._parked_count += 1
        else:
            self.denied.append(request)
        if self.jobdir is not None:
            self.frontier.keep(
                request_host(request), request, priority=request.priority, depth=_depth(request)
            )

    def next_request(self) -> Request | None:
        # An exception raised here would break the engine's loop quietly (it then
        # crawls on its 5 s heartbeat only): stop the crawl loudly instead.
        try:
            return self._next_request()
        except StoreError as exc:
            assert self.jobdir is not None
            self.jobdir.fail(exc)
        except Exception:
            self._fail("next_request")
        return None

    def _fail(self, where: str) -> None:
        """Log the exception being handled and close the spider (reason "aimd_error")."""
        logger.exception("Stopping the crawl: AimdScheduler.%s failed", where)
        self.stats.inc_value("aimd/errors")
        engine = self.crawler.engine
        if engine is not None and engine.spider is not None and not self._failed:
            self._failed = True
            deferred_from_coro(engine.close_spider_async(reason="aimd_error"))

    def _next_request(self) -> Request | None:
        jobdir = self.jobdir
        if jobdir is not None and jobdir.engine_finished_some():
            jobdir.checkpoint()
        if self.denied:
            request = self.denied.popleft()
            if jobdir is not None:
                jobdir.handed_out(request)
            return request
        now = self.clock()
        if now - self._last_sweep >= SWEEP_INTERVAL:
            self._sweep(now)
        popped = self.frontier.pop(now)
        while popped is not None and jobdir is not None and not self._may_start(popped.item):
            # Stored by an earlier run before its origin's robots.txt was known.
            self.frontier.cancel(popped.host, popped.ticket, now)
            if self.denied:
                request = self.denied.popleft()
                jobdir.handed_out(request)
                return request
            popped = self.frontier.pop(now)
        if popped is None:
            self._arm_wake(now)
            return None
        request, host = popped.item, popped.host
        if jobdir is not None:
            jobdir.handed_out(request)
        # Our host key, not the one a redirect or a copy carried over (scrapy #2141).
        request.meta["download_slot"] = host
        self.in_flight[request] = (host, popped.ticket, now)
        summary = self._summary(host)
        summary.requests += 1
        self.stats.inc_value("aimd/started")
        resumed = 0.0 < summary.paused_until <= now
        if resumed:
            summary.paused_until = 0.0
        if self.events is not None:
            if resumed:
                self.events.emit("resume", now, host)
            self.events.emit("start", now, host, in_flight=self.frontier.controller(host).in_flight)
        return request

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
        """Time the host's gap from the moment the request is sent, not handed out."""
        entry = self.in_flight.get(request)
        if entry is not None:
            self.frontier.controller(entry[0]).sent(entry[1], self.clock())

    def _on_feedback(
        self,
        request: Request,
        response: Response | None = None,
        status: int | None = None,
        latency: float | None = None,
        retry_after: float | None = None,
        exception: BaseException | None = None,
        timeout: bool = False,
        downloaded: bool = True,
        **_: Any,
    ) -> None:
        entry = self.in_flight.pop(request, None)
        if entry is None:  # not handed out by us (engine.download, robots.txt ...)
            return
        host, ticket, _started = entry
        now = self.clock()
        if self.jobdir is not None:
            self.jobdir.host_changed(host)
        if not downloaded or (self.shutdown is not None and self.shutdown.was_cancelled(request)):
            self.frontier.cancel(host, ticket, now)
            self.stats.inc_value("aimd/cancelled")
            return
        controller = self.frontier.controller(host)
        before = (controller.delay, controller.concurrency)
        summary = self._summary(host)
        if exception is not None or status is None:
            reaction = self.frontier.fail(host, ticket, now, timeout=timeout)
            summary.failures += 1
            reason = "timeout" if timeout else type(exception).__name__
            if self.events is not None:
                self.events.emit("fail", now, host, error=reason, timeout=timeout)
        else:
            reaction = self.frontier.finish(
                host, ticket, now, status=status, latency=latency, retry_after=retry_after
            )
            summary.add_response(status)
            reason = str(status)
            if self.events is not None:
                self.events.emit("response", now, host, status=status, latency=latency)
        self._react(host, reaction, reason, now, before)

    def _react(
        self, host: str, reaction: Reaction, reason: str, now: float, before: tuple[float, int]
    ) -> None:
        """Stats, signals, events and log lines for what the controller decided."""
        controller = self.frontier.controller(host)
        summary = self._summary(host)
        delay, concurrency = controller.delay, controller.concurrency
        if reaction.kind in ("overload", "rate_limit"):
            if reaction.kind == "overload" and reason.isdigit() and int(reason) < 400:
                reason = "latency"
            summary.throttles += 1
            summary.troubled = True
            self.stats.inc_value("aimd/throttle/count")
            self.stats.inc_value(f"aimd/throttle/{reason}")
            if reaction.decreased:
                summary.decreases += 1
                self.stats.inc_value("aimd/throttle/decreases")
                logger.info(
                    "Slowing down %s (%s): gap %.2fs, limit %d",
                    host,
                    reason,
                    delay,
                    concurrency,
                )
                self._send(
                    signals.host_throttled,
                    host=host,
                    reason=reason,
                    delay=delay,
                    concurrency=concurrency,
                )
            if self.events is not None:
                self.events.emit(
                    "throttle",
                    now,
                    host,
                    reason=reason,
                    delay=delay,
                    limit=concurrency,
                    decreased=reaction.decreased,
                )
        if reaction.paused_until is not None and reaction.paused_until > now:
            seconds = reaction.paused_until - now
            summary.add_pause(now, reaction.paused_until)
            summary.troubled = True
            self.stats.inc_value("aimd/pauses")
            self.stats.inc_value("aimd/pause_seconds", seconds)  # type: ignore[arg-type]
            logger.info("Pausing %s for %.1fs (Retry-After)", host, seconds)
            self._send(signals.host_paused, host=host, seconds=seconds)
            if self.events is not None:
                self.events.emit(
                    "pause",
                    now,
                    host,
                    seconds=round(seconds, 3),
                    until=round(reaction.paused_until - self._t0(), 3),
                )
        elif reaction.kind == "good" and summary.troubled:
            summary.troubled = False
            logger.debug("%s recovered: gap %.2fs, limit %d", host, delay, concurrency)
            self._send(signals.host_recovered, host=host, delay=delay, concurrency=concurrency)
        if self.events is not None and (delay, concurrency) != before:
            self.events.emit("change", now, host, delay=round(delay, 4), limit=concurrency)

    def _send(self, signal: object, **kwargs: Any) -> None:
        self.crawler.signals.send_catch_log(signal=signal, **kwargs)

    # -- robots.txt news (scrapy_aimd.robots.RobotsListener) -------------------------

    def robots_settled(self, origin: str) -> None:
        if self.jobdir is not None and self.robots is not None:
            self.jobdir.save_robots(origin, self.robots)
        parked = self.parked.pop(origin, [])
        self._parked_count -= len(parked)
        for request in parked:
            self._route(request)
        if parked:
            wake_engine(self.crawler)

    def set_crawl_delay(self, host: str, seconds: float) -> None:
        self.frontier.controller(host).set_crawl_delay(seconds)
        self.frontier.refile(host, self.clock())
        if self.jobdir is not None:
            self.jobdir.host_changed(host)

    # -- waking the engine -----------------------------------------------------

    def _arm_wake(self, now: float) -> None:
        """Wake the engine when the earliest waiting host becomes ready."""
        at = self.frontier.next_ready_at(now)
        if math.isinf(at) or (self._wake is not None and self._wake_at <= at):
            return
        self._cancel_wake()
        self._wake_at = at
        self._wake = call_later(max(0.0, at - now), self._on_wake)

    def _on_wake(self) -> None:
        self._wake = None
        self._wake_at = math.inf
        wake_engine(self.crawler)

    def _cancel_wake(self) -> None:
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
            self._wake_at = math.inf

    # -- bookkeeping ---------------------------------------------------------------

    def _release(self, request: Request, now: float) -> None:
        entry = self.in_flight.pop(request, None)
        if entry is not None:
            self.frontier.cancel(entry[0], entry[1], now)

    def _sweep(self, now: float) -> None:
        """Release requests that never came back through the middleware.

        A downloader middleware before ours that swaps a request for another
        one gives no feedback about the first; without this its host would keep
        a place in flight for ever.
        """
        self._last_sweep = now
        expired = [
            request
            for request, (_, _, started) in self.in_flight.items()
            if now - started > self._stale_after(request)
        ]
        for request in expired:
            self._release(request, now)
            self.stats.inc_value("aimd/in_flight/expired")
            logger.warning("No feedback for %s; released its host's place", request)

    def _stale_after(self, request: Request) -> float:
        """Twice the request's own download timeout, and a minute: surely over."""
        timeout = request.meta.get("download_timeout", self.download_timeout)
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            timeout = self.download_timeout
        return 2 * float(timeout) + 60

    def _new_controller(self, host: str) -> HostController:
        cfg = self.configs.for_host(host)
        if self.jobdir is not None:
            restored = self.jobdir.controller(host, cfg)
            if restored is not None:
                return restored
        return HostController(cfg)

    def _summary(self, host: str) -> HostSummary:
        summary = self.summaries.get(host)
        if summary is None:
            summary = self.summaries[host] = HostSummary()
            self.stats.inc_value("aimd/hosts")
        return summary

    def _rows(self) -> list[HostRow]:
        rows = []
        for host, summary in sorted(self.summaries.items()):
            c = self.frontier.controller(host)
            rows.append(HostRow(host, summary, c.delay, c.concurrency, c.best_latency))
        return rows

    def _summary_dict(self) -> dict[str, dict[str, Any]]:
        return {
            row.host: {
                "requests": row.summary.requests,
                "responses": dict(row.summary.responses),
                "failures": row.summary.failures,
                "throttles": row.summary.throttles,
                "pauses": row.summary.pauses,
                "paused_seconds": round(row.summary.paused_seconds, 3),
                "delay": row.delay,
                "limit": row.concurrency,
                "best_latency": row.best_latency,
            }
            for row in self._rows()
        }

    def _t0(self) -> float:
        return 0.0 if self.events is None else self.events.t0

    def _check_downloader_settings(self) -> None:
        """Warn when the downloader would throttle on its own and fight the controller."""
        settings = self.crawler.settings
        if settings.getfloat("DOWNLOAD_DELAY") > 0:
            logger.warning(
                "DOWNLOAD_DELAY=%s also delays every request in the downloader; "
                "use AIMD_MIN_DELAY instead (the scrapy_aimd.Addon does this for you)",
                settings.get("DOWNLOAD_DELAY"),
            )
        per_domain = settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN")
        if per_domain < self.configs.default.max_concurrency:
            logger.warning(
                "CONCURRENT_REQUESTS_PER_DOMAIN=%d is below AIMD_MAX_CONCURRENCY=%d: "
                "the downloader would queue what the scheduler lets start",
                per_domain,
                self.configs.default.max_concurrency,
            )
        if settings.getbool("AUTOTHROTTLE_ENABLED"):
            logger.warning("AutoThrottle is enabled and will fight scrapy-aimd; disable it")


def _depth(request: Request) -> int:
    depth = request.meta.get("depth", 0)
    return depth if isinstance(depth, int) else 0
