"""The per-host politeness controller: when may the next request to a host start?

Built as Netflix's concurrency-limits is: :mod:`.answer` (one reading of an
answer), :mod:`.estimators` (latency, accepted rate, capacity, outages),
:mod:`.policy` (the phases and every transition: read it first), :mod:`.gate`
(tickets, the only ``ready_at``) and :mod:`.state` (the versioned record for
JOBDIR and Redis). :class:`HostController` ties them together behind the API
that the scheduler, the fleet and JOBDIR use. The clock is an argument
everywhere; nothing here imports Scrapy.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..rate_limit_headers import Quota
from . import answer as _answer
from . import gate as _gate
from . import policy as _policy
from . import state as _state
from .answer import Answer, Outcome, Reaction
from .config import INT_MINIMUMS, ControllerConfig
from .gate import HostNotReady, Limits, Ticket
from .policy import LONE_AFTER
from .state import HostState, shift_state

__all__ = [
    "INT_MINIMUMS",
    "LONE_AFTER",
    "Answer",
    "ControllerConfig",
    "HostController",
    "HostNotReady",
    "Limits",
    "Outcome",
    "Reaction",
    "Ticket",
    "shift_state",
]

_IGNORED = Reaction(kind="neutral", decreased=False)
_serials = itertools.count(1)


class HostController:
    """The politeness state of one host. Not thread-safe; one per host.

    Call :meth:`ready_at` to learn when a request may start, :meth:`start` when
    it does, and exactly one of :meth:`finish`, :meth:`fail` or :meth:`cancel`
    with the ticket when it is over.
    """

    __slots__ = ("_s", "cfg")

    def __init__(self, cfg: ControllerConfig, state: HostState | None = None) -> None:
        self.cfg = cfg
        limit = 1 if cfg.adaptive else cfg.max_concurrency
        self._s = state if state is not None else HostState(gap=cfg.min_delay, limit=limit)

    def __repr__(self) -> str:
        s = self._s
        return (
            f"<HostController {s.phase} delay={s.gap:.3g} concurrency={s.limit}"
            f" in_flight={len(s.in_flight)} paused_until={s.pause!r}>"
        )

    # -- what the scheduler reads ---------------------------------------------------

    @property
    def delay(self) -> float:
        """The current gap between two request starts, in seconds (a told quota's if wider)."""
        return max(self._s.gap, self._s.told)

    spacing = delay
    """The least time between two starts: what a fleet's claims read."""

    @property
    def concurrency(self) -> int:
        """The current limit of requests in flight."""
        return _policy.gate_limit(self._s)

    @property
    def in_flight(self) -> int:
        return len(self._s.in_flight)

    @property
    def paused_until(self) -> float:
        """The end of the latest Retry-After pause, or ``-inf`` if there was none."""
        return self._s.pause

    @property
    def limits(self) -> Limits:
        return Limits(self.delay, _policy.gate_limit(self._s), self._s.pause)

    @property
    def told_gap(self) -> float:
        """The gap the host's told quota sets (0: none told, or its own gap is wider)."""
        return self._s.told if self._s.told >= self._s.gap else 0.0

    @property
    def best_latency(self) -> float | None:
        """The host's latency baseline (a low percentile of its recent pages)."""
        return self._s.latency.baseline

    @property
    def answered_well(self) -> bool:
        """A page answered 2xx or 3xx (not robots.txt): only then is a 503 or a timeout
        overload, a run of 403s a block, rather than a plain failure."""
        return self._s.answered_well

    @property
    def floor(self) -> float:
        """The narrowest gap allowed: ``max(min_delay, Crawl-delay)``."""
        return self._s.floor(self.cfg.min_delay)

    def phase(self, now: float) -> str:
        """The policy's phase, or ``paused`` while a Retry-After or a spent quota holds the host."""
        return "paused" if self._s.pause > now and self._s.phase != "blocked" else self._s.phase

    def ready_at(self, now: float) -> float:
        """The earliest time a request may start; ``<= now`` means now."""
        return _gate.ready_at(self.limits, len(self._s.in_flight), self._s.last_start, now)

    # -- events ------------------------------------------------------------------------

    def start(self, now: float) -> Ticket:
        """A request starts now. Raises :class:`HostNotReady` if it may not."""
        ready = self.ready_at(now)
        if ready > now:
            raise HostNotReady(f"host not ready before {ready!r} (now {now!r})")
        ticket = Ticket(serial=next(_serials), started=now, round=self._s.round)
        _policy.on_start(self._s, now, ticket.serial)
        return ticket

    def finish(
        self,
        ticket: Ticket,
        now: float,
        status: int,
        latency: float | None = None,
        retry_after: float | None = None,
        *,
        page: bool = True,
        quota: Quota | None = None,
        again: bool = False,
    ) -> Reaction:
        """A response came back. ``latency`` is the fetch time (default: since start);
        ``retry_after`` the parsed header in seconds; ``page`` False for robots.txt;
        ``quota`` what the response told of the host's quota; ``again`` True for a
        page marked forbidden (it answered a block status, no block proven)."""
        if ticket.serial not in self._s.in_flight:
            return _IGNORED
        if latency is None or not math.isfinite(latency) or latency < 0:
            latency = max(0.0, now - ticket.started)
        read = replace(_answer.read(status, retry_after, page=page, cfg=self.cfg), again=again)
        reaction = _policy.on_answer(self._s, self.cfg, ticket, now, read, latency)
        told = None if quota is None else _policy.told(self._s, now, quota)
        if told is not None and reaction.paused_until is None:
            return replace(reaction, paused_until=told)
        return reaction

    def fail(self, ticket: Ticket, now: float, timeout: bool = False) -> Reaction:
        """The request failed without a response; only a timeout is a signal."""
        if ticket.serial not in self._s.in_flight:
            return _IGNORED
        read = _answer.read_failure(timeout)
        return _policy.on_answer(self._s, self.cfg, ticket, now, read, now - ticket.started)

    def cancel(self, ticket: Ticket) -> None:
        """The request never reached the host: free its place, learn nothing. If
        it was the latest start, the next need not wait a gap for it."""
        s = self._s
        if s.in_flight.pop(ticket.serial, None) is None:
            return
        if ticket.serial == s.last_serial:
            s.last_start = s.previous_start

    def sent(self, ticket: Ticket, now: float) -> None:
        """The request left for the host ``now``, later than it started: the gap
        counts from here (a host that counts arrivals must see it)."""
        s = self._s
        if ticket.serial in s.in_flight and now > s.last_start:
            s.last_start = now

    def set_crawl_delay(self, seconds: float | None) -> None:
        """The robots.txt Crawl-delay, or None. A floor, honoured above ``max_delay``."""
        if seconds is not None and (not math.isfinite(seconds) or seconds < 0):
            raise ValueError(f"crawl delay {seconds!r}: expected a finite number >= 0")
        self._s.crawl_delay = seconds or 0.0
        self._s.set_gap(self._s.gap, self.cfg.min_delay, self.cfg.max_delay)

    # -- a resumed crawl ---------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The whole record as plain JSON data (see :mod:`.state`)."""
        return _state.encode(self._s)

    @classmethod
    def from_state(
        cls, cfg: ControllerConfig, state: Mapping[str, Any], *, in_flight: bool = False
    ) -> HostController:
        """A controller that goes on from :meth:`state`, fitted into ``cfg``.
        ``in_flight``: the requests in flight then are still running (a fleet);
        by default they are gone with the process that held them."""
        s = _state.decode(state)
        if not in_flight:
            s.in_flight.clear()
        s.limit = min(s.limit, cfg.max_concurrency) if cfg.adaptive else cfg.max_concurrency
        s.set_gap(s.gap, cfg.min_delay, cfg.max_delay)
        _skip_serials_past(max([s.last_serial, *s.in_flight]))
        return cls(cfg, s)


def _skip_serials_past(serial: int) -> None:
    """Later tickets are numbered after every one a restored state knows of."""
    global _serials
    _serials = itertools.count(max(next(_serials), serial + 1))
