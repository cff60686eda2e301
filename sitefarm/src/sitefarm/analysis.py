"""What a crawl did to the farm, read from the request log: the benchmark's columns."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sitefarm.spec import HostSpec

#: Reasons of requests the host refused at once; they never occupied it.
REFUSED_REASONS = frozenset(
    {"capacity", "rate", "pause", "outage", "bad_request", "window", "sliding", "block"}
)


@dataclass
class HostSummary:
    name: str
    requests: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    pages_total: int = 0
    """Distinct pages a complete crawl fetches (``HostSpec.page_ids``)."""
    pages_fetched: int = 0
    """Of those, how many were served with 200."""
    duplicate_fetches: int = 0
    """200 page responses beyond the first of each page (tracking variants, refetches)."""
    throttled: int = 0
    """429 and 503 responses, robots.txt included."""
    outage_refused: int = 0
    """Of those, the 503s of an outage (``HostSpec.outage_seconds``): no crawler avoids
    them but by not asking, so the benchmark also counts the others apart."""
    blocked: int = 0
    """403 answers of a block or of a sliding window that denies with 403."""
    over_capacity_seconds: float = 0.0
    """Time more requests were being served than min(capacity, soft_capacity, workers):
    for a queueing origin, the time some request waited in its queue."""
    mean_waiting: float = 0.0
    """Requests waiting in a queueing origin's queue (``workers``), on average over the
    host's time from its first arrival to its last answer."""
    crawl_delay_violations: int = 0
    """Consecutive request arrivals closer than the robots Crawl-delay (robots.txt
    included, as it counts for politeness)."""
    min_gap_seconds: float | None = None
    """The smallest start-to-start gap between two requests."""
    max_in_flight: int = 0
    first_arrival: float | None = None
    last_finish: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def over_capacity_seconds(records: Iterable[dict[str, Any]], limit: int | None) -> float:
    """Seconds during which more than ``limit`` admitted requests were being served."""
    if limit is None:
        return 0.0
    events: list[tuple[float, int]] = []
    for record in records:
        if record["reason"] not in REFUSED_REASONS:
            events.append((record["arrived"], 1))
            events.append((record["finished"], -1))
    events.sort(key=lambda event: (event[0], event[1]))  # ends before starts at a tie
    total = 0.0
    serving = 0
    previous = 0.0
    for moment, change in events:
        if serving > limit:
            total += moment - previous
        serving += change
        previous = moment
    return total


def queued_request_seconds(records: Iterable[dict[str, Any]], workers: int) -> float:
    """The integral over time of the requests admitted beyond ``workers`` (those
    waiting in the queue): divided by a span, the mean queue length."""
    events: list[tuple[float, int]] = []
    for record in records:
        if record["reason"] not in REFUSED_REASONS:
            events.append((record["arrived"], 1))
            events.append((record["finished"], -1))
    events.sort(key=lambda event: (event[0], event[1]))
    total = 0.0
    inside = 0
    previous = 0.0
    for moment, change in events:
        total += max(0, inside - workers) * (moment - previous)
        inside += change
        previous = moment
    return total


def summarize(
    records: Iterable[dict[str, Any]],
    specs: list[HostSpec],
    *,
    crawl_delay_tolerance: float = 0.01,
) -> dict[str, HostSummary]:
    """Per host, what the crawl fetched and how it treated the host."""
    by_host: dict[str, list[dict[str, Any]]] = {spec.name: [] for spec in specs}
    for record in records:
        by_host.setdefault(record["host"], []).append(record)
    result: dict[str, HostSummary] = {}
    for spec in specs:
        host_records = sorted(by_host[spec.name], key=lambda r: r["arrived"])
        expected = set(spec.page_ids())
        served = Counter(
            r["page"] for r in host_records if r["status"] == 200 and r["page"] is not None
        )
        summary = HostSummary(name=spec.name, pages_total=len(expected))
        summary.requests = len(host_records)
        summary.statuses = dict(sorted(Counter(r["status"] for r in host_records).items()))
        summary.pages_fetched = len(expected & set(served))
        summary.duplicate_fetches = sum(count - 1 for count in served.values())
        summary.throttled = sum(1 for r in host_records if r["status"] in (429, 503))
        summary.outage_refused = sum(1 for r in host_records if r["reason"] == "outage")
        summary.blocked = sum(
            1 for r in host_records if r["status"] == 403 and r["reason"] in ("block", "sliding")
        )
        limits = [c for c in (spec.capacity, spec.soft_capacity, spec.workers) if c is not None]
        summary.over_capacity_seconds = over_capacity_seconds(
            host_records, min(limits) if limits else None
        )
        if spec.workers is not None and host_records:
            span = max(r["finished"] for r in host_records) - host_records[0]["arrived"]
            waiting = queued_request_seconds(host_records, spec.workers)
            summary.mean_waiting = waiting / span if span > 0 else 0.0
        arrivals = [r["arrived"] for r in host_records]
        gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
        summary.min_gap_seconds = min(gaps) if gaps else None
        crawl_delay = spec.robots_crawl_delay()
        if crawl_delay:
            summary.crawl_delay_violations = sum(
                1 for gap in gaps if gap < crawl_delay - crawl_delay_tolerance
            )
        summary.max_in_flight = max((r["in_flight"] for r in host_records), default=0)
        if host_records:
            summary.first_arrival = arrivals[0]
            summary.last_finish = max(r["finished"] for r in host_records)
        result[spec.name] = summary
    return result


def totals(summaries: dict[str, HostSummary]) -> dict[str, Any]:
    """The farm-wide row: sums, and the crawl's span from first arrival to last finish."""
    hosts = list(summaries.values())
    firsts = [h.first_arrival for h in hosts if h.first_arrival is not None]
    lasts = [h.last_finish for h in hosts if h.last_finish is not None]
    statuses: Counter[int] = Counter()
    for host in hosts:
        statuses.update(host.statuses)
    return {
        "requests": sum(h.requests for h in hosts),
        "statuses": dict(sorted(statuses.items())),
        "pages_total": sum(h.pages_total for h in hosts),
        "pages_fetched": sum(h.pages_fetched for h in hosts),
        "duplicate_fetches": sum(h.duplicate_fetches for h in hosts),
        "throttled": sum(h.throttled for h in hosts),
        "blocked": sum(h.blocked for h in hosts),
        "outage_refused": sum(h.outage_refused for h in hosts),
        "over_capacity_seconds": sum(h.over_capacity_seconds for h in hosts),
        "crawl_delay_violations": sum(h.crawl_delay_violations for h in hosts),
        "span_seconds": (max(lasts) - min(firsts)) if firsts and lasts else 0.0,
    }
