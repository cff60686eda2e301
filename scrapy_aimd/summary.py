"""The end-of-crawl summary table: one line per host, for the log at spider close.

The rows are :class:`~scrapy_aimd.host_totals.HostTotals`, counted from the
event stream (the report counts the same way), with the host's last gap,
limit and best latency filled in from its controller.
"""

from __future__ import annotations

from collections.abc import Iterable

from scrapy_aimd.host_totals import HostTotals

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


def format_summary(rows: Iterable[tuple[str, HostTotals]]) -> str:
    """A plain-text table, one line per host."""
    lines = [COLUMNS]
    for host, t in rows:
        best = "-" if t.best_latency is None else f"{t.best_latency * 1000:.0f}ms"
        lines.append(
            (
                host,
                str(t.requests),
                str(t.responses["2xx"]),
                str(t.responses["3xx"]),
                str(t.responses["4xx"]),
                str(t.responses["5xx"]),
                str(t.failures),
                str(t.throttles),
                f"{t.paused_seconds:.1f}s",
                "-" if t.delay is None else f"{t.delay:.2f}s",
                "-" if t.limit is None else str(t.limit),
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
