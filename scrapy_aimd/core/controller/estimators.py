"""What the controller measures of a host, one small estimator per question.

Each holds plain fields only (numbers, lists, None), so that the state record
(:mod:`.state`) stores it as it is, and each is tested on its own
(``tests/test_controller_estimators.py``). None decides anything: the policy
(:mod:`.policy`) reads them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

Phase = Literal["startup", "steady", "backing_off", "outage", "blocked"]

__all__ = ["AcceptedRate", "Capacity", "Latency", "Outage", "median"]

LATENCY_SAMPLES = 20
"""Page latencies a host remembers: enough for a low percentile that one fast
outlier cannot set, little memory for a crawl of 100,000 hosts."""
BASELINE_QUANTILE = 0.1
"""The baseline is this low percentile of the remembered pages (never the
fastest of two or more): a typical fast page, not a cached outlier."""

MEDIAN_PAGES = 2
"""A limit's median is of two pages at least: one page alone is no median."""


def median(values: list[float]) -> float:
    """The median of a non-empty list."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@dataclass(slots=True)
class Latency:
    """The host's recent page latencies (2xx pages only) and their baseline."""

    values: list[float] = field(default_factory=list)

    def add(self, latency: float) -> None:
        self.values.append(latency)
        del self.values[:-LATENCY_SAMPLES]

    @property
    def baseline(self) -> float | None:
        """A low percentile of the remembered pages; None before the first."""
        if not self.values:
            return None
        ordered = sorted(self.values)
        index = int(BASELINE_QUANTILE * len(ordered))
        return ordered[max(index, 1) if len(ordered) > 1 else 0]


@dataclass(slots=True)
class AcceptedRate:
    """How many requests the host accepted per second over its last cycle.

    A *run* is the requests accepted between two refusals; the *cycle* lasts from
    its first start to the first start accepted after it. Every counting limiter
    fits (a bucket's burst then refill, a fixed or sliding window's quota then
    reopening): the cycle's rate is what the host takes in the long run, whatever
    the spacing at which it refused (a window's memory is no refused spacing).
    """

    run_start: float | None = None
    """When the run's first accepted request started."""
    accepted: int = 0
    """Requests of the run the host accepted."""
    refused_since: float | None = None
    """When the first refusal of the current episode came; None outside one."""
    rate: float | None = None
    """The accepted rate of the last cycle, requests per second."""
    waited: float = 0.0
    """How long the last cycle's refusals lasted, in seconds: the time the host's
    window took to reopen."""
    counted: int = 0
    """How many requests the host accepted in the last cycle."""

    def accept(self, started: float) -> float | None:
        """An accepted request that started at ``started``. Returns the cycle's rate
        if it is the first accepted after a refusal (the cycle ends with it)."""
        refused = self.refused_since
        if refused is None or started < refused:
            if self.run_start is None or started < self.run_start:
                self.run_start = started
            self.accepted += 1
            return None
        run_start = self.run_start if self.run_start is not None else refused
        length = started - run_start
        rate = None
        if self.accepted and length > 0:
            rate = self.accepted / length
            self.rate, self.waited, self.counted = rate, started - refused, self.accepted
        self.run_start, self.accepted, self.refused_since = started, 1, None
        return rate

    def refuse(self, now: float) -> None:
        if self.refused_since is None:
            self.refused_since = now

    def pace(self, now: float) -> float | None:
        """Seconds per accepted request in the current run, or None if unknown."""
        if self.run_start is None or not self.accepted or now <= self.run_start:
            return None
        return (now - self.run_start) / self.accepted


@dataclass(slots=True)
class Capacity:
    """The most in flight at which the host's pages stay as fast.

    Each limit's pages give a median; the lowest of any limit is the unloaded
    latency. By Little's law, ``k`` in flight whose pages take ``m`` where they
    would take ``u`` keep ``k (1 - u / m)`` waiting inside the host: a queueing
    origin's workers are found by latency before it refuses anything.
    """

    pages: list[float] = field(default_factory=list)
    """Latencies of the current limit's pages."""
    unloaded: float | None = None
    """The lowest median page latency of any limit."""
    most: int | None = None
    """The limit the last queue was cut to: the host's workers."""

    def add(self, latency: float) -> None:
        self.pages.append(latency)
        del self.pages[:-LATENCY_SAMPLES]

    def waiting(self, limit: int) -> float | None:
        """Requests waiting inside the host at ``limit`` in flight (None: too few
        pages yet), and the limit's median becomes a candidate unloaded latency."""
        if len(self.pages) < max(limit, MEDIAN_PAGES):
            return None
        current = median(self.pages)
        if self.unloaded is None or current < self.unloaded:
            self.unloaded = current
        return limit * (1.0 - self.unloaded / current) if current > 0 else 0.0

    def new_level(self) -> None:
        """The limit changed: its pages are measured afresh."""
        self.pages = []


@dataclass(slots=True)
class Outage:
    """Refusals with no accepted request between, and the host as it was before."""

    since: float | None = None
    """When the first refusal came; None when the host is answering."""
    gap: float = 0.0
    limit: int = 1
    phase: Phase = "steady"
    """The limits and phase from before the first refusal."""
    spacing: float | None = None
    """The spacing the host accepted before it, if one was measured."""
    refusals: int = 0
    """Refusals acted on since: more than one with nothing accepted, a closure."""

    def begin(
        self, now: float, gap: float, limit: int, phase: Phase, spacing: float | None
    ) -> None:
        if self.since is None:
            self.since, self.gap, self.limit, self.phase = now, gap, limit, phase
            self.spacing, self.refusals = spacing, 0

    def proven(self, gap: float, proof: float) -> bool:
        """The host refused a gap ``proof`` times the spacing it took before: not
        the crawl's doing."""
        spacing = self.spacing if self.spacing is not None else math.inf
        return self.since is not None and gap >= proof * spacing

    def end(self) -> None:
        self.since = None
