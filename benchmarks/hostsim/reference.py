"""The yardstick: the best crawler with fixed settings, found by search.

A fixed crawler keeps at most ``concurrency`` requests in flight, starts them at
least ``gap`` seconds apart, and waits out a Retry-After when it gets one; it
learns nothing else. For each host the search tries concurrency 1..N against a gap
of 0 or one of :data:`GAPS`, through the same driver as the controller, and keeps
the one with the most pages done with at most :data:`MAX_REFUSED` of its requests
refused, then tries seven finer gaps just below the best one. For a short crawl (a
site of a few dozen pages, most of a real crawl's hosts) :func:`fastest_fixed`
searches the same grid for the setting that does the pages soonest. A controller's score
on a host is its pages over that best. Where no fixed setting keeps within the cap
(a host down for a fifth of the run refuses a fifth of any fixed crawler's
requests), the best is the most pages at any refusal, and says so.

The search prunes what cannot win. A run's pages are bounded by its gap
(``seconds / gap``) and by its concurrency over the fastest page seen on the host
(each request holds its place at least that long, taken with a 10 % margin), and a
run whose refusals can no longer fall to the threshold ends early, as does one
with most of its requests refused a tenth of the way in.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, NamedTuple

from benchmarks.hostsim.driver import Run, crawl
from benchmarks.hostsim.models import Model

MAX_REFUSED = 0.05
GAPS: tuple[float, ...] = (0.0, *(0.005 * 2 ** (k / 4) for k in range(45)))
"""0, then 5 ms to about 11 s in steps of 19 %."""


@dataclasses.dataclass
class FixedCrawler:
    """The pinned controller API with fixed settings."""

    concurrency: int
    gap: float
    live: int = 0
    last_start: float = -math.inf
    paused_until: float = -math.inf

    def ready_at(self, now: float) -> float:
        if self.live >= self.concurrency:
            return math.inf
        return max(self.last_start + self.gap, self.paused_until, now)

    def start(self, now: float) -> None:
        self.live += 1
        self.last_start = now

    def finish(
        self,
        ticket: Any,
        now: float,
        status: int,
        latency: float | None = None,
        retry_after: float | None = None,
        *,
        page: bool = True,
    ) -> None:
        self.live -= 1
        if retry_after is not None:
            self.paused_until = max(self.paused_until, now + retry_after)

    def fail(self, ticket: Any, now: float, timeout: bool = False) -> None:
        self.live -= 1

    def cancel(self, ticket: Any) -> None:
        self.live -= 1


class Best(NamedTuple):
    concurrency: int
    gap: float
    pages: int
    refused_share: float
    capped: bool = True
    """False if no fixed setting kept its refusals within the cap: then this is the
    most pages of any setting, whatever it had refused (a long outage)."""


def _most_pages(concurrency: int, gap: float, fastest: float, seconds: float) -> float:
    """An upper bound on the pages a fixed crawler can do in ``seconds``."""
    by_gap = seconds / gap + 1 if gap > 0 else math.inf
    by_latency = concurrency * (seconds / fastest + 1) if fastest > 0 else math.inf
    return min(by_gap, by_latency)


@dataclasses.dataclass
class _Search:
    """The best so far over fixed crawls of one host."""

    model: Callable[[], Model]
    duration: float
    robots: bool
    max_refused: float
    best: Best = dataclasses.field(default_factory=lambda: Best(0, math.inf, 0, 0.0))
    fastest: float = 0.0
    """90 % of the fastest page seen; 0 until a page is done (no bound yet)."""
    runs: int = 0

    def beatable(self, concurrency: int, gap: float) -> bool:
        return _most_pages(concurrency, gap, self.fastest, self.duration) > self.best.pages

    def hopeless(self, concurrency: int, gap: float) -> Callable[[Run, float], bool]:
        def stop(run: Run, now: float) -> bool:
            ahead = _most_pages(concurrency, gap, self.fastest, self.duration - now)
            if run.pages + ahead <= self.best.pages:
                return True
            if run.refused > self.max_refused * (run.requests + ahead):
                return True
            majority = now >= self.duration / 10 and run.refused > run.requests / 2
            return majority and self.max_refused < 0.5

        return stop

    def try_(self, concurrency: int, gap: float) -> None:
        crawler = FixedCrawler(concurrency, gap)
        stop = self.hopeless(concurrency, gap)
        run = crawl(crawler, self.model(), self.duration, robots=self.robots, stop=stop)
        self.runs += 1
        if run.pages and math.isfinite(run.min_latency):
            seen = 0.9 * run.min_latency
            self.fastest = seen if self.fastest == 0 else min(self.fastest, seen)
        if run.stopped is None and run.refused_share <= self.max_refused:
            better = (run.pages, -run.refused_share) > (self.best.pages, -self.best.refused_share)
            if better:
                capped = self.max_refused <= MAX_REFUSED
                self.best = Best(concurrency, gap, run.pages, run.refused_share, capped)

    def grid(self, max_concurrency: int) -> None:
        for concurrency in range(max_concurrency, 0, -1):
            for gap in GAPS:
                if self.beatable(concurrency, gap):
                    self.try_(concurrency, gap)
                elif gap > 0:
                    break  # larger gaps bound lower still

    def refine(self) -> None:
        """Seven gaps between the best gap and the grid's next smaller one."""
        concurrency, gap = self.best.concurrency, self.best.gap
        if gap <= 0 or not concurrency:
            return
        for finer in _finer(gap):
            if self.beatable(concurrency, finer):
                self.try_(concurrency, finer)


def _finer(gap: float) -> list[float]:
    """Seven gaps between ``gap`` and the grid's next smaller one (a step of 19 %)."""
    return [gap * 2 ** (-k / 32) for k in range(1, 8)]


def best_fixed(
    model: Callable[[], Model], duration: float, max_concurrency: int = 16, *, robots: bool = False
) -> Best:
    """The best fixed setting for the host that ``model()`` builds afresh for each run."""
    search = _Search(model, duration, robots, MAX_REFUSED)
    search.grid(max_concurrency)
    if not search.best.pages:
        search = _Search(model, duration, robots, 1.0)
        search.grid(max_concurrency)
    search.refine()
    return search.best


class Fastest(NamedTuple):
    concurrency: int
    gap: float
    pages: int
    seconds: float
    """When the last of the pages was done (robots.txt first, where asked)."""
    refused_share: float
    capped: bool = True


SHORT_LIMIT = 3600.0
"""A short crawl that takes longer than this (fake seconds) is not a short crawl."""


@dataclasses.dataclass
class _ShortSearch:
    """The soonest finish so far over fixed crawls of ``pages`` pages of one host."""

    model: Callable[[], Model]
    pages: int
    robots: bool
    max_refused: float
    best: Fastest = dataclasses.field(
        default_factory=lambda: Fastest(0, math.inf, 0, SHORT_LIMIT, 0.0)
    )

    def beatable(self, gap: float) -> bool:
        return gap * (self.pages - 1) < self.best.seconds

    def try_(self, concurrency: int, gap: float) -> None:
        limit = self.best.seconds

        def stop(run: Run, now: float) -> bool:
            left = self.pages - run.pages
            return now >= limit or run.refused > self.max_refused * (run.requests + left)

        crawler = FixedCrawler(concurrency, gap)
        run = crawl(crawler, self.model(), limit, robots=self.robots, pages=self.pages, stop=stop)
        done = run.stopped is None and run.pages >= self.pages and run.ended < limit
        if done and run.refused_share <= self.max_refused:
            capped = self.max_refused <= MAX_REFUSED
            self.best = Fastest(concurrency, gap, run.pages, run.ended, run.refused_share, capped)

    def grid(self, max_concurrency: int) -> None:
        for concurrency in range(max_concurrency, 0, -1):
            for gap in GAPS:
                if not self.beatable(gap):
                    break
                self.try_(concurrency, gap)

    def refine(self) -> None:
        concurrency, gap = self.best.concurrency, self.best.gap
        if gap <= 0 or not concurrency or not math.isfinite(gap):
            return
        for finer in _finer(gap):
            self.try_(concurrency, finer)


def fastest_fixed(
    model: Callable[[], Model], pages: int, max_concurrency: int = 16, *, robots: bool = False
) -> Fastest:
    """The fixed setting that does ``pages`` pages of the host soonest, within
    :data:`MAX_REFUSED`; where none keeps within it, the soonest at any refusal."""
    search = _ShortSearch(model, pages, robots, MAX_REFUSED)
    search.grid(max_concurrency)
    if not search.best.pages:
        search = _ShortSearch(model, pages, robots, 1.0)
        search.grid(max_concurrency)
    search.refine()
    return search.best
