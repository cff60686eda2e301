"""Per-host accounting for the end-of-crawl summary: what happened, and why."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class HostSummary:
    """Counters of one host; pause time is the union of its pauses."""

    requests: int = 0
    responses: Counter[str] = field(default_factory=Counter)
    failures: int = 0
    throttles: int = 0
    decreases: int = 0
    pauses: int = 0
    paused_seconds: float = 0.0
    paused_until: float = 0.0
    #: Throttled or paused, and not yet answered well since.
    troubled: bool = False

    def add_response(self, status: int) -> None:
        self.responses[f"{status // 100}xx"] += 1

    def add_pause(self, now: float, until: float) -> None:
        """Count a pause; one that overlaps the current pause adds only its excess."""
        self.pauses += 1
        start = max(now, self.paused_until)
        if until > start:
            self.paused_seconds += until - start
        self.paused_until = max(self.paused_until, until)


@dataclass(frozen=True)
class HostRow:
    host: str
    summary: HostSummary
    delay: float
    concurrency: int
    best_latency: float | None


COLUMNS = (
    "host",
    "requests",
    "2xx",
    "3xx",
    "4xx",
    "5xx",
    "errors",
    "throttles",
    "paused",
    "gap",
    "limit",
    "best",
)


def format_summary(rows: Iterable[HostRow]) -> str:
    """A plain-text table, one line per host, for the log at spider close."""
    lines = [COLUMNS]
    for row in rows:
        s = row.summary
        best = "-" if row.best_latency is None else f"{row.best_latency * 1000:.0f}ms"
        lines.append(
            (
                row.host,
                str(s.requests),
                str(s.responses["2xx"]),
                str(s.responses["3xx"]),
                str(s.responses["4xx"]),
                str(s.responses["5xx"]),
                str(s.failures),
                str(s.throttles),
                f"{s.paused_seconds:.1f}s",
                f"{row.delay:.2f}s",
                str(row.concurrency),
                best,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )
