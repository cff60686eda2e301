"""What the crawl tells about its hosts: stats, signals, events, log lines and
the end-of-crawl summary, all from the controller's :class:`Reaction`.

The scheduler reports each start and each answer here and decides nothing
from what comes back. Every host event goes through :meth:`Reporter._event`:
it is folded into the host's :class:`~scrapy_aimd.host_totals.HostTotals`
(the summary) and, with ``AIMD_EVENTS_FILE``, written as a line, so that the
summary and the report count the same stream.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy_aimd import signals
from scrapy_aimd.events import EventLog, event_record
from scrapy_aimd.host_totals import HostTotals
from scrapy_aimd.summary import format_summary

if TYPE_CHECKING:
    from collections.abc import Iterable

    from scrapy.crawler import Crawler

    from scrapy_aimd.core.controller import HostController, Reaction

logger = logging.getLogger(__name__)


class Reporter:
    """One per crawl; the clock readings come from the scheduler."""

    def __init__(self, crawler: Crawler, *, events_file: str | None = None) -> None:
        self.crawler = crawler
        self.stats = crawler.stats
        self.events_file = events_file
        self.events: EventLog | None = None
        self.totals: dict[str, HostTotals] = {}
        self.t0 = 0.0
        #: Hosts throttled or paused and not answered well since (for host_recovered).
        self._troubled: set[str] = set()
        #: Hosts paused whose first start after the pause is still to be told.
        self._pausing: set[str] = set()

    def open(self, now: float, spider: str) -> None:
        self.t0 = now
        if self.events_file:
            self.events = EventLog(self.events_file, now=now, spider=spider)

    # -- what the scheduler reports -------------------------------------------------

    def started(self, host: str, now: float, controller: HostController) -> None:
        self.stats.inc_value("aimd/started")
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
        if status is None:
            self._event("fail", now, host, error="timeout" if timeout else error, timeout=timeout)
        else:
            self._event("response", now, host, status=status, latency=latency)
        delay, concurrency = controller.delay, controller.concurrency
        if reaction.throttled:
            self._throttled(
                host, now, reaction, controller, _reason(reaction, status, error, timeout)
            )
        if reaction.paused_until is not None and reaction.paused_until > now:
            self._paused(host, now, reaction.paused_until)
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

    def close(self, now: float, reason: str, hosts: Iterable[tuple[str, HostController]]) -> None:
        """The per-host summary: counted from the events, with each host's last state."""
        controllers = dict(hosts)
        rows = []
        for host, totals in sorted(self.totals.items()):
            controller = controllers.get(host)
            if controller is not None:
                totals.delay = controller.delay
                totals.limit = controller.concurrency
                totals.best_latency = controller.best_latency
            rows.append((host, totals))
        self.stats.set_value("aimd/hosts", len(self.totals))
        if rows:
            logger.info("Per-host summary (%s):\n%s", reason, format_summary(rows))
        if self.events is not None:
            self.events.close(now, reason=reason, hosts={host: _row(t) for host, t in rows})

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

    def _paused(self, host: str, now: float, until: float) -> None:
        seconds = until - now
        self._troubled.add(host)
        self._pausing.add(host)
        self.stats.inc_value("aimd/pauses")
        self.stats.inc_value("aimd/pause_seconds", seconds)  # type: ignore[arg-type]
        logger.info("Pausing %s for %.1fs (Retry-After)", host, seconds)
        self._send(signals.host_paused, host=host, seconds=seconds)
        self._event("pause", now, host, seconds=round(seconds, 3), until=round(until - self.t0, 3))

    def _event(self, event: str, now: float, host: str, **fields: Any) -> None:
        record = event_record(self.t0, event, now, host, **fields)
        totals = self.totals.get(host)
        if totals is None:
            totals = self.totals[host] = HostTotals()
            self.stats.inc_value("aimd/hosts")
        totals.add(record)
        if self.events is not None:
            self.events.write(record, now)

    def _send(self, signal: object, **kwargs: Any) -> None:
        self.crawler.signals.send_catch_log(signal=signal, **kwargs)


def _reason(reaction: Reaction, status: int | None, error: str | None, timeout: bool) -> str:
    """The stats' and signals' name of a pushback: the status, "timeout", or
    "latency" for a good status that came too slowly."""
    if timeout:
        return "timeout"
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
        "failures": totals.failures,
        "throttles": totals.throttles,
        "pauses": totals.pauses,
        "paused_seconds": round(totals.paused_seconds, 3),
        "delay": totals.delay,
        "limit": totals.limit,
        "best_latency": totals.best_latency,
    }
