"""What the crawl tells about its hosts: stats, signals, events, log lines and
the end-of-crawl summary, all from the controller's :class:`Reaction`.

The scheduler reports each start and each answer here and decides nothing
from what comes back. Every host event goes through :meth:`Reporter._event`:
it is folded into the host's :class:`~scrapy_aimd.host_totals.HostTotals`
(the summary) and, with ``AIMD_EVENTS_FILE``, written as a line, so that the
summary and the report count the same stream.

Every ``LOGSTATS_INTERVAL`` (or ``AIMD_LOGSTATS_INTERVAL``) seconds it also
logs one line about the hosts (:mod:`scrapy_aimd.live`), so that a long
crawl says what holds it back while it runs.

At close it also tells the dupefilter's work: the duplicates by kind (from
the stats, so whichever dupefilter counted them) in a log line and in the
events file, with the hosts that had the most when the dupefilter is ours.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy.utils.asyncio import create_looping_call

from scrapy_aimd import signals
from scrapy_aimd.crawl import origin_host, request_host
from scrapy_aimd.dupefilter import DUPLICATE_KINDS, AimdDupeFilter, kind_stat
from scrapy_aimd.events import (
    DuplicateHosts,
    EventLog,
    event_record,
    events_path,
    spider_params,
)
from scrapy_aimd.host_totals import HostTotals
from scrapy_aimd.live import HostsView, QueuedHosts, hosts_line
from scrapy_aimd.settings import read_logstats_interval, read_summary_rows
from scrapy_aimd.summary import format_summary

if TYPE_CHECKING:
    from collections.abc import Iterable

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.http import Response

    from scrapy_aimd.core.controller import HostController, Reaction

logger = logging.getLogger(__name__)

#: The hosts with the most duplicates that the events file's close line names.
DUPLICATE_HOSTS = 20
#: ... and the close's log line.
LOGGED_HOSTS = 3


class Reporter:
    """One per crawl; the clock readings come from the scheduler."""

    def __init__(self, crawler: Crawler, *, events_file: str | None = None) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        settings = crawler.settings
        #: The events file's path template; checked here, at startup, expanded at open.
        self.events_file = events_file
        if events_file is not None:
            events_path(events_file, spider_params(crawler, "spider"))
        self.summary_rows = read_summary_rows(settings)
        self.live_interval = read_logstats_interval(settings)
        self._live: Any = None
        self._view: HostsView | None = None
        self.events: EventLog | None = None
        self.totals: dict[str, HostTotals] = {}
        self.t0 = 0.0
        self.clock: Callable[[], float] = time.monotonic
        #: Hosts throttled or paused and not answered well since (for host_recovered).
        self._troubled: set[str] = set()
        #: Hosts paused whose first start after the pause is still to be told.
        self._pausing: set[str] = set()
        #: Blocked hosts (blocks this process began): when their block began, and
        #: the end of its first wait (no probe, so no end, comes before it).
        self._blocked: dict[str, tuple[float, float]] = {}
        #: Hosts whose latest start here found the controller blocked: a block answer
        #: to it is a probe (a fleet's worker may probe a block another one began).
        self._probing: set[str] = set()

    def open(
        self,
        now: float,
        spider: str,
        hosts: QueuedHosts | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """Start the events file, and with ``hosts`` (the frontier) the live line."""
        self.t0 = now
        self.clock = clock or time.monotonic
        if self.events_file:
            path = events_path(self.events_file, spider_params(self.crawler, spider))
            self.events = self.event_log(path, now=now, spider=spider)
        self.crawler.signals.connect(self._on_feedback, signal=signals.response_feedback)
        if hosts is not None and self.live_interval > 0:
            self._view = HostsView(hosts, self.clock)
            self._live = create_looping_call(self._log_hosts)
            self._live.start(self.live_interval, now=False)

    def event_log(self, path: str, *, now: float, spider: str) -> EventLog:
        """The events file's writer (a fleet worker's names its worker)."""
        return EventLog(path, now=now, spider=spider)

    def _log_hosts(self) -> None:
        if self._view is not None:
            logger.info("%s", hosts_line(self._view.take()))

    def _on_feedback(self, request: Request, response: Response | None, **_: Any) -> None:
        """A response from HttpCacheMiddleware's cache, a redirect's included: no
        download, no feedback to the controller."""
        if response is not None and "cached" in response.flags:
            self.stats.inc_value("aimd/cached")
            self._event("cached", self.clock(), request_host(request), status=response.status)

    # -- what the scheduler reports -------------------------------------------------

    def started(self, host: str, now: float, controller: HostController) -> None:
        self.stats.inc_value("aimd/started")
        if controller.phase(now) == "blocked":
            self._probing.add(host)
        else:
            self._probing.discard(host)
            if host in self._blocked and now >= self._blocked[host][1]:
                # Ended by another worker's probe (a fleet's). A start before the first
                # wait's end is of a claim made before the block: its view is older.
                self._unblocked(host, now, controller)
        if host in self._pausing and controller.paused_until <= now:
            self._pausing.discard(host)
            self._event("resume", now, host)
        self._event("start", now, host, in_flight=controller.in_flight)

    def cancelled(self) -> None:
        self.stats.inc_value("aimd/cancelled")

    def answered(
        self,
        host: str,
        now: float,
        reaction: Reaction,
        controller: HostController,
        before: tuple[float, int],
        *,
        status: int | None = None,
        latency: float | None = None,
        error: str | None = None,
        timeout: bool = False,
    ) -> None:
        """A response (``status``) or a failure (``error``), and what the controller made of it."""
        delay, concurrency = controller.delay, controller.concurrency
        told = controller.told_gap > 0
        if status is None:
            self._event("fail", now, host, error="timeout" if timeout else error, timeout=timeout)
        elif told:
            self.stats.inc_value("aimd/quota/paced")
            self._event("response", now, host, status=status, latency=latency, told=True)
        else:
            self._event("response", now, host, status=status, latency=latency)
        if reaction.kind == "block":
            self._block(host, now, reaction, controller)
        elif (
            host in self._blocked
            and reaction.kind in ("good", "neutral")
            and controller.phase(now) != "blocked"  # not a page sent before the block
        ):
            self._unblocked(host, now, controller)
        if reaction.throttled or (reaction.kind == "block" and reaction.decreased):
            self._throttled(
                host, now, reaction, controller, _reason(reaction, status, error, timeout)
            )
        if reaction.paused_until is not None and reaction.paused_until > now:
            self._paused(host, now, reaction.paused_until, _pause_reason(reaction))
        elif reaction.kind == "good" and host in self._troubled:
            self._troubled.discard(host)
            logger.debug("%s recovered: gap %.2fs, limit %d", host, delay, concurrency)
            self._send(signals.host_recovered, host=host, delay=delay, concurrency=concurrency)
        if (delay, concurrency) != before:
            self._event("change", now, host, delay=round(delay, 4), limit=concurrency)

    def crawl_delay(
        self, host: str, now: float, seconds: float, controller: HostController
    ) -> None:
        """A robots.txt Crawl-delay arrived: the floor of the host's gap, for the report."""
        self._event(
            "change",
            now,
            host,
            delay=round(controller.delay, 4),
            limit=controller.concurrency,
            crawl_delay=round(seconds, 4),
        )

    def robots(
        self,
        now: float,
        origin: str,
        status: int | None,
        outcome: str,
        crawl_delay: float | None,
        *,
        shared: bool = False,
    ) -> None:
        """What an origin's robots.txt came to: ``rules``, ``allow_all`` or ``unreachable``;
        ``shared``: the answer another worker of a fleet fetched."""
        self._event(
            "robots",
            now,
            origin_host(origin),
            origin=origin,
            status=status,
            outcome=outcome,
            crawl_delay=crawl_delay,
            shared=shared,
        )

    def close(
        self,
        now: float,
        reason: str,
        hosts: Iterable[tuple[str, HostController]],
        dupefilter: BaseDupeFilter | None = None,
    ) -> None:
        """The per-host summary: counted from the events, with each host's last state;
        the hosts of the duplicates when ``dupefilter`` (the scheduler's) is ours."""
        if self._live is not None and self._live.running:
            self._live.stop()
        self._live = None
        self.crawler.signals.disconnect(self._on_feedback, signal=signals.response_feedback)
        controllers = dict(hosts)
        rows = []
        for host, totals in sorted(self.totals.items()):
            totals.end(now - self.t0)
            controller = controllers.get(host)
            if controller is not None:
                totals.delay = controller.delay
                totals.limit = controller.concurrency
                totals.best_latency = controller.best_latency
            rows.append((host, totals))
        self.stats.set_value("aimd/hosts", len(self.totals))
        if rows:
            summary = format_summary(rows, max_rows=self.summary_rows)
            logger.info("Per-host summary (%s):\n%s", reason, summary)
        duplicates = self.duplicates()
        top = (
            dupefilter.duplicate_hosts(DUPLICATE_HOSTS)
            if isinstance(dupefilter, AimdDupeFilter)
            else DuplicateHosts()
        )
        if duplicates["total"]:
            logger.info("%s", duplicates_line(duplicates, top))
        if self.events is not None:
            self.events.close(
                now,
                reason=reason,
                hosts={host: _row(t) for host, t in rows},
                duplicates=duplicates,
                **top.close_fields(),
            )

    def duplicates(self) -> dict[str, int]:
        """The requests filtered as duplicates: ``total``, then each kind counted."""
        counts = {"total": _int_stat(self.stats.get_value("dupefilter/filtered", 0))}
        for kind in DUPLICATE_KINDS:
            n = _int_stat(self.stats.get_value(kind_stat(kind), 0))
            if n:
                counts[kind] = n
        return counts

    # -- the parts ---------------------------------------------------------------------

    def _throttled(
        self, host: str, now: float, reaction: Reaction, controller: HostController, reason: str
    ) -> None:
        delay, concurrency = controller.delay, controller.concurrency
        self._troubled.add(host)
        self.stats.inc_value("aimd/throttle/count")
        self.stats.inc_value(f"aimd/throttle/{reason}")
        if reaction.decreased:
            self.stats.inc_value("aimd/throttle/decreases")
            logger.info(
                "Slowing down %s (%s): gap %.2fs, limit %d", host, reason, delay, concurrency
            )
            self._send(
                signals.host_throttled,
                host=host,
                reason=reason,
                delay=delay,
                concurrency=concurrency,
            )
        self._event(
            "throttle",
            now,
            host,
            reason=reason,
            delay=delay,
            limit=concurrency,
            decreased=reaction.decreased,
        )

    def _block(self, host: str, now: float, reaction: Reaction, controller: HostController) -> None:
        """A block answer: a new block, a probe still blocked, or a straggler of one.

        A block is counted once, by the process whose answer began it: the one that
        moved the controller into its ``blocked`` phase. The reaction alone does not
        tell it from a probe's (both decrease), so a probe is told by its start: one
        started while the controller was blocked. A fleet's worker whose first sight
        of a block is its own probe's answer counts a probe, not a block."""
        self.stats.inc_value("aimd/blocked/answers")
        if not reaction.decreased:
            return
        if host in self._blocked or host in self._probing:
            self.stats.inc_value("aimd/blocked/probes")
            return
        self._blocked[host] = (now, reaction.paused_until or now)
        self.stats.inc_value("aimd/blocked/hosts")
        logger.warning(
            "%s blocks the crawl (a run of %s answers after pages): no request for %.1fs,"
            " then one probe at a time",
            host,
            sorted(controller.cfg.block_codes),
            (reaction.paused_until or now) - now,
        )
        self._event("block", now, host)

    def _unblocked(self, host: str, now: float, controller: HostController) -> None:
        """A block this process began is over: its seconds, counted here only, up to
        the first answer or start of this process that finds the host unblocked (in
        a fleet another worker's probe may end it: then this worker's next start on
        the host, a little later than that answer). A block that never ended here
        counts no seconds."""
        seconds = now - self._blocked.pop(host)[0]
        self.stats.inc_value("aimd/blocked/seconds", seconds)  # type: ignore[arg-type]
        logger.info(
            "%s no longer blocks the crawl after %.1fs: gap %.2fs", host, seconds, controller.delay
        )
        self._event(
            "unblock", now, host, seconds=round(seconds, 3), delay=round(controller.delay, 4)
        )

    def _paused(self, host: str, now: float, until: float, reason: str) -> None:
        seconds = until - now
        self._troubled.add(host)
        self._pausing.add(host)
        self.stats.inc_value("aimd/pauses")
        self.stats.inc_value("aimd/pause_seconds", seconds)  # type: ignore[arg-type]
        if reason == "quota":
            self.stats.inc_value("aimd/quota/pauses")
        logger.info("Pausing %s for %.1fs (%s)", host, seconds, _PAUSE_WORDS[reason])
        self._send(signals.host_paused, host=host, seconds=seconds)
        self._event(
            "pause",
            now,
            host,
            seconds=round(seconds, 3),
            until=round(until - self.t0, 3),
            reason=reason,
        )

    def _event(self, event: str, now: float, host: str, **fields: Any) -> None:
        record = event_record(self.t0, event, now, host, **fields)
        if self._view is not None:
            self._view.saw(record)
        totals = self.totals.get(host)
        if totals is None:
            totals = self.totals[host] = HostTotals()
            self.stats.inc_value("aimd/hosts")
        totals.add(record)
        if self.events is not None:
            self.events.write(record, now)

    def _send(self, signal: object, **kwargs: Any) -> None:
        self.crawler.signals.send_catch_log(signal=signal, **kwargs)


def duplicates_line(duplicates: dict[str, int], hosts: DuplicateHosts) -> str:
    """The close's log line about the duplicates (``total`` above 0), with the
    hosts provably among those with the most, and a bound for the others."""
    total = duplicates["total"]
    text = f"Filtered {total} duplicate request{'s' * (total != 1)}"
    kinds = {kind: n for kind, n in duplicates.items() if kind != "total"}
    if kinds:
        text += ": " + ", ".join(f"{n} {kind}" for kind, n in kinds.items())
        if sum(kinds.values()) > total:
            text += " (a request changed by several stages counts under each)"
    named = [host for host in hosts.certain(LOGGED_HOSTS) if hosts.counts[host]]
    if named:
        text += "; the most on " + ", ".join(f"{host} ({hosts.text(host)})" for host in named)
    heard = sum(1 for n in hosts.counts.values() if n)
    if len(named) < min(LOGGED_HOSTS, heard) and hosts.count is not None:
        text += (
            f"; {hosts.count:,} hosts had duplicates, no {'other ' * bool(named)}more than "
            f"{hosts.beyond(len(named)):,} (too close to rank in bounded memory)"
        )
    return text


def _int_stat(value: object) -> int:
    return value if isinstance(value, int) else 0


#: How the log names what asked for a pause.
_PAUSE_WORDS = {
    "retry-after": "Retry-After",
    "quota": "its told quota is spent",
    "block": "blocked",
}


def _pause_reason(reaction: Reaction) -> str:
    """What asked for a pause: a block, a throttle answer's Retry-After, or a told quota."""
    if reaction.kind == "block":
        return "block"
    return "retry-after" if reaction.throttled else "quota"


def _reason(reaction: Reaction, status: int | None, error: str | None, timeout: bool) -> str:
    """The stats' and signals' name of a pushback: the status, "timeout", or
    "latency" for a good status that came too slowly."""
    if timeout:
        return "timeout"
    if reaction.kind == "block":
        return "block"
    if status is None:
        return error or "error"
    if reaction.kind == "overload" and status < 400:
        return "latency"
    return str(status)


def _row(totals: HostTotals) -> dict[str, Any]:
    """A host's entry in the events file's ``close`` line."""
    return {
        "requests": totals.requests,
        "responses": dict(totals.responses),
        "statuses": {str(code): n for code, n in sorted(totals.statuses.items())},
        "cached": totals.cached,
        "failures": totals.failures,
        "throttles": totals.throttles,
        "pauses": totals.pauses,
        "paused_seconds": round(totals.paused_seconds, 3),
        "delay": totals.delay,
        "limit": totals.limit,
        "best_latency": totals.best_latency,
        "blocks": totals.blocks,
        "blocked_seconds": round(totals.blocked_seconds, 3),
        "told": totals.told,
    }
