"""A controller's score on a host: its pages over the best fixed crawler's."""

from __future__ import annotations

import dataclasses
import importlib
import statistics
from collections.abc import Iterable
from typing import Any

from benchmarks.hostsim.driver import Controller, crawl
from benchmarks.hostsim.reference import SHORT_LIMIT, best_fixed, fastest_fixed
from benchmarks.hostsim.sets import HostSpec

TODAY = "benchmarks.hostsim.bench:today"


def today(**config: Any) -> Controller:
    """Today's controller: ``HostController(ControllerConfig(**config))``."""
    from scrapy_aimd.core.controller import ControllerConfig, HostController

    return HostController(ControllerConfig(**config))


def load_factory(path: str) -> Any:
    """``module:callable``, a factory that takes ControllerConfig's keywords."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclasses.dataclass
class Score:
    host: str
    seconds: float
    pages: int
    refused: float
    """The controller's share of requests refused."""
    best_pages: int
    best_concurrency: int
    best_gap: float
    best_refused: float
    best_capped: bool
    """False: no fixed setting kept within 5 % refused; ``best_pages`` is the most
    pages at any refusal."""
    waiting: float | None
    """For a queueing host: the mean number of requests waiting inside the server."""
    in_flight: float

    @property
    def ratio(self) -> float:
        return self.pages / self.best_pages if self.best_pages else 0.0


def score(
    spec: HostSpec, seconds: float, factory: str = TODAY, concurrency: int | None = None
) -> Score:
    """Crawl ``spec`` with the controller, then find the best fixed crawler; with
    ``concurrency``, both go up to that many in flight instead of the host's own."""
    duration = spec.seconds or seconds
    if concurrency is not None:
        spec = dataclasses.replace(spec, concurrency=concurrency)
    model = spec.model()
    controller = load_factory(factory)(max_concurrency=spec.concurrency, **spec.config)
    run = crawl(controller, model, duration, robots=spec.robots)
    mean_waiting = getattr(model, "mean_waiting", None)
    best = best_fixed(spec.model, duration, spec.concurrency, robots=spec.robots)
    return Score(
        host=spec.name,
        seconds=duration,
        pages=run.pages,
        refused=run.refused_share,
        best_pages=best.pages,
        best_concurrency=best.concurrency,
        best_gap=best.gap,
        best_refused=best.refused_share,
        best_capped=best.capped,
        waiting=None if mean_waiting is None else mean_waiting(duration),
        in_flight=run.mean_in_flight,
    )


@dataclasses.dataclass
class ShortScore:
    """A short crawl: ``pages`` pages of the host, as most hosts of a real crawl are."""

    host: str
    pages: int
    seconds: float
    """When the controller had done the pages (robots.txt first, where asked)."""
    refused: float
    best_seconds: float
    best_concurrency: int
    best_gap: float
    best_refused: float
    best_capped: bool

    @property
    def ratio(self) -> float:
        """The fastest fixed crawler's time over the controller's: 1.0 is as soon."""
        return self.best_seconds / self.seconds if self.seconds > 0 else 0.0


def short_score(
    spec: HostSpec, pages: int, factory: str = TODAY, concurrency: int | None = None
) -> ShortScore:
    """Crawl ``pages`` pages of ``spec`` with the controller, then find the fixed
    setting that does them soonest."""
    if concurrency is not None:
        spec = dataclasses.replace(spec, concurrency=concurrency)
    controller = load_factory(factory)(max_concurrency=spec.concurrency, **spec.config)
    run = crawl(controller, spec.model(), SHORT_LIMIT, robots=spec.robots, pages=pages)
    best = fastest_fixed(spec.model, pages, spec.concurrency, robots=spec.robots)
    return ShortScore(
        host=spec.name,
        pages=run.pages,
        seconds=run.ended,
        refused=run.refused_share,
        best_seconds=best.seconds,
        best_concurrency=best.concurrency,
        best_gap=best.gap,
        best_refused=best.refused_share,
        best_capped=best.capped,
    )


def summary(scores: Iterable[Score | ShortScore]) -> tuple[float, float]:
    """The lowest ratio and the median."""
    ratios = [s.ratio for s in scores]
    return min(ratios), statistics.median(ratios)
