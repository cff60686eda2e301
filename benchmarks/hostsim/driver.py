"""The crawler loop: one host, an endless queue of its pages, a fake clock.

It uses only the controller's pinned API (``ready_at``, ``start``, ``finish``,
``fail``, ``cancel``), so any object with that API plugs in: today's
``HostController``, a redesigned one, or the fixed-setting crawler of
:mod:`benchmarks.hostsim.reference`. As the scheduler does, it starts a request
whenever the controller allows one and feeds every answer back; a refused page goes
back to the queue and is asked again.
"""

from __future__ import annotations

import dataclasses
import heapq
import inspect
import math
from collections.abc import Callable
from typing import Any, Protocol

from benchmarks.hostsim.models import TIMEOUT, Answer, Model
from scrapy_aimd.core.rate_limit_headers import read_quota

#: The bound of a told reset, as the add-on's default ``AIMD_MAX_RETRY_AFTER``.
MAX_RETRY_AFTER = 3600.0

REFUSALS = frozenset({403, 429, 503})
"""Statuses that mean the host did not serve the page: it is asked again."""


class Controller(Protocol):
    def ready_at(self, now: float) -> float: ...
    def start(self, now: float) -> Any: ...
    def finish(self, ticket: Any, now: float, status: int, *args: Any, **kwargs: Any) -> Any: ...
    def fail(self, ticket: Any, now: float, timeout: bool = False) -> Any: ...
    def cancel(self, ticket: Any) -> None: ...


ControllerFactory = Callable[[], Controller]


@dataclasses.dataclass
class Run:
    """What one crawl of one host did."""

    duration: float
    ended: float = 0.0
    """When the crawl ended: ``duration``, or when a finite queue was done."""
    pages: int = 0
    """Pages done: answers that were not refusals (a 404 is a page done)."""
    refused: int = 0
    """Requests the host refused (403, 429, 503) or never answered (timeouts)."""
    requests: int = 0
    """Requests sent, robots.txt included."""
    in_flight_seconds: float = 0.0
    page_latency_sum: float = 0.0
    min_latency: float = math.inf
    """The fastest page done."""
    retried: int = 0
    """Refused pages queued again (the queue is endless, so this is ``refused``
    unless robots.txt itself was refused)."""
    page_times: list[float] = dataclasses.field(default_factory=list)
    """When each page was done."""
    stopped: float | None = None
    """When ``stop`` ended the run early, if it did."""

    @property
    def refused_share(self) -> float:
        return self.refused / max(1, self.requests)

    @property
    def mean_in_flight(self) -> float:
        return self.in_flight_seconds / self.ended if self.ended > 0 else 0.0

    @property
    def mean_latency(self) -> float:
        return self.page_latency_sum / max(1, self.pages)


def takes_headers(controller: Controller) -> str | None:
    """How the controller's ``finish`` takes what the answer's headers tell: ``"quota"``
    (the quota read as the feedback middleware reads it), ``"headers"`` (as they
    are: a ``headers`` keyword, or any keyword), or None."""
    parameters = inspect.signature(controller.finish).parameters
    keywords = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    if "quota" in parameters:
        return "quota"
    return "headers" if "headers" in parameters or keywords else None


class _Flight:
    """A request in flight: what comes back, and when."""

    __slots__ = ("answer", "page", "ticket")

    def __init__(self, ticket: Any, answer: Answer, page: bool) -> None:
        self.ticket, self.answer, self.page = ticket, answer, page


def crawl(
    controller: Controller,
    model: Model,
    duration: float,
    *,
    robots: bool = False,
    pages: int | None = None,
    stop: Callable[[Run, float], bool] | None = None,
) -> Run:
    """Crawl ``model`` for ``duration`` seconds of fake time; with ``robots``,
    robots.txt is fetched first and the pages wait for it (the robots gate).
    With ``pages``, the queue holds that many pages instead of no end: the crawl
    ends when they are done (``duration`` may then be ``inf``; ``Run.ended`` says
    when). ``stop(run, now)``, checked after each batch of answers, may end the run
    early. Requests still in flight at the end are cancelled."""
    headers = takes_headers(controller)
    run = Run(duration=duration)
    flights: list[tuple[float, int, _Flight]] = []
    serial = 0
    now = 0.0

    def send(page: bool) -> None:
        nonlocal serial
        ticket = controller.start(now)
        answer = model.answer(now)
        run.requests += 1
        serial += 1
        heapq.heappush(flights, (now + answer.latency, serial, _Flight(ticket, answer, page)))

    def wanted() -> bool:
        return pages is None or run.pages + len(flights) < pages

    if robots:
        send(page=False)
    while True:
        if robots and flights:
            ready = math.inf  # the robots gate holds the pages
        else:
            robots = False
            while (ready := controller.ready_at(now)) <= now and wanted():
                send(page=True)
            ready = ready if wanted() else math.inf
        following = min(ready, flights[0][0] if flights else math.inf)
        if following >= duration or following == math.inf:
            end = min(following, duration)
            done = not flights and not wanted()  # a finite queue is done
            run.ended = now if done or end == math.inf else end
            run.in_flight_seconds += len(flights) * (run.ended - now)
            break
        run.in_flight_seconds += len(flights) * (following - now)
        now = following
        while flights and flights[0][0] <= now:
            _, _, flight = heapq.heappop(flights)
            _answered(controller, run, flight, now, headers)
        if stop is not None and stop(run, now):
            run.stopped = run.ended = now
            break
    for _, _, flight in flights:
        controller.cancel(flight.ticket)
    return run


def _answered(
    controller: Controller, run: Run, flight: _Flight, now: float, headers: str | None
) -> None:
    answer = flight.answer
    if answer.status == TIMEOUT:
        controller.fail(flight.ticket, now, timeout=True)
    else:
        told = answer.latency if answer.first_byte is None else answer.first_byte
        extra: dict[str, Any] = {} if flight.page else {"page": False}
        if headers == "quota":
            reading = read_quota(answer.headers, now, MAX_RETRY_AFTER) if answer.headers else None
            extra["quota"] = None if reading is None else reading.quota
        elif headers:
            extra["headers"] = answer.headers
        controller.finish(
            flight.ticket, now, answer.status, latency=told, retry_after=answer.retry_after, **extra
        )
    if answer.status == TIMEOUT or answer.status in REFUSALS:
        run.refused += 1
        run.retried += flight.page
    elif flight.page:
        run.pages += 1
        run.page_times.append(now)
        run.page_latency_sum += answer.latency
        run.min_latency = min(run.min_latency, answer.latency)
