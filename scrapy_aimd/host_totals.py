"""Per-host totals: one fold over the event stream.

The end-of-crawl summary (:mod:`scrapy_aimd.reporter`, live, as the events
happen) and the crawl report (:mod:`scrapy_aimd.report.series`, from an
``AIMD_EVENTS_FILE``) both count a host with :meth:`HostTotals.add`, over the
same records (:mod:`scrapy_aimd.events` names them), so that the two never
disagree on what a request, a throttle or a second of pause is.

Pure: no Scrapy; a record is a dict as one line of the events file holds it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HostTotals", "as_integer", "as_number", "pause_until"]


#: The response classes that the summary shows in their own columns.
STATUS_CLASSES = frozenset({"2xx", "3xx", "4xx", "5xx"})


@dataclass
class HostTotals:
    """One row of the summary table; pause time is the union of the host's pauses."""

    requests: int = 0
    responses: Counter[str] = field(default_factory=Counter)
    #: Responses by status code (the summary shows 429 and 503 on their own).
    statuses: Counter[int] = field(default_factory=Counter)
    #: Responses that HttpCacheMiddleware answered from its cache (no download).
    cached: int = 0
    failures: int = 0
    throttles: int = 0
    pauses: int = 0
    paused_seconds: float = 0.0
    delay: float | None = None
    limit: int | None = None
    best_latency: float | None = None
    #: Blocks (a run of block statuses after pages), and the seconds of those that ended.
    blocks: int = 0
    blocked_seconds: float = 0.0
    #: Responses after which the host's told quota set its pace (``told`` responses).
    told: int = 0
    #: The end of the latest pause counted, so that overlapping pauses count once.
    paused_until: float = field(default=0.0, repr=False, compare=False)

    def add(self, record: Mapping[str, Any]) -> None:
        """Count one host event (``record["event"]``; its ``t`` is a number)."""
        event = record.get("event")
        if event == "start":
            self.requests += 1
        elif event == "response":
            status = as_integer(record.get("status"))
            self.responses[f"{status // 100}xx" if status is not None else "?"] += 1
            if status is not None:
                self.statuses[status] += 1
            self.told += record.get("told") is True
            latency = as_number(record.get("latency"))
            if latency is not None and latency >= 0:
                best = self.best_latency
                self.best_latency = latency if best is None else min(best, latency)
        elif event == "fail":
            self.failures += 1
        elif event == "cached":
            self.cached += 1
        elif event == "throttle":
            self.throttles += 1
            self._state(record)
        elif event == "change":
            self._state(record)
        elif event == "block":
            self.blocks += 1
        elif event == "unblock":
            self.blocked_seconds += max(0.0, as_number(record.get("seconds")) or 0.0)
        elif event == "pause":
            until = pause_until(record)
            if until is not None:
                self._pause(float(record["t"]), until)

    @property
    def other_responses(self) -> int:
        """Responses in none of the classes 2xx to 5xx: 1xx, 600 and above (999, as
        some sites send), or an unreadable status."""
        return sum(n for kind, n in self.responses.items() if kind not in STATUS_CLASSES)

    def end(self, t: float) -> None:
        """The crawl ended at ``t``: a pause that would have gone on after it counts
        only up to it (every pause counted started by then, so their union covers
        the whole of what is cut)."""
        if self.paused_until > t:
            self.paused_seconds = max(0.0, self.paused_seconds - (self.paused_until - t))
            self.paused_until = t

    @property
    def troubled(self) -> bool:
        """The host pushed back: throttled, paused, blocked or refused (429/503)."""
        return bool(
            self.throttles
            or self.paused_seconds > 0
            or self.blocks
            or self.statuses[429]
            or self.statuses[503]
        )

    def _state(self, record: Mapping[str, Any]) -> None:
        delay, limit = as_number(record.get("delay")), as_integer(record.get("limit"))
        if delay is not None and delay >= 0:
            self.delay = delay
        if limit is not None and limit >= 0:
            self.limit = limit

    def _pause(self, t: float, until: float) -> None:
        """Count a pause; one that overlaps the current pause adds only its excess."""
        self.pauses += 1
        start = max(t, self.paused_until)
        if until > start:
            self.paused_seconds += until - start
        self.paused_until = max(self.paused_until, until)


def pause_until(record: Mapping[str, Any]) -> float | None:
    """When a ``pause`` record's pause ends, on its own time scale (None: unreadable)."""
    until = as_number(record.get("until"))
    if until is None:
        seconds = as_number(record.get("seconds"))
        if seconds is None:
            return None
        until = float(record["t"]) + seconds
    return max(until, float(record["t"]))


def as_number(value: object) -> float | None:
    """A finite int or float (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def as_integer(value: object) -> int | None:
    """A whole finite number (not a bool), else None."""
    number = as_number(value)
    if number is None or number != int(number):
        return None
    return int(number)
