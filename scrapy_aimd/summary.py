"""The end-of-crawl summary table: one line per host, for the log at spider close.

The rows are :class:`~scrapy_aimd.host_totals.HostTotals`, counted from the
event stream (the report counts the same way), with the host's last gap,
limit and best latency filled in from its controller. The hosts that pushed
back come first, and a crawl of many hosts shows at most
:setting:`AIMD_SUMMARY_ROWS` of them, so that its troubled hosts are not
buried.
"""

from __future__ import annotations

from collections.abc import Iterable

from scrapy_aimd.host_totals import HostTotals

#: The header, with units; "best" is the host's latency baseline.
COLUMNS = (
    "host",
    "requests",
    "2xx",
    "3xx",
    "4xx",
    "429",
    "5xx",
    "503",
    "cached",
    "errors",
    "other",
    "throttles",
    "blocks",
    "told",
    "paused s",
    "gap s",
    "limit",
    "best ms",
)
#: Below the table: what the columns mean where the header cannot say it.
LEGEND = (
    "4xx and 5xx exclude 429 and 503; other: responses with a status outside "
    "200-599 (1xx, 999); blocks: runs of block statuses (403) after pages, each "
    "a pause and probes; told: responses after which the host's told quota "
    "(X-RateLimit-*, RateLimit) set its pace; paused s: up to the crawl's end; "
    "gap s: seconds between two request starts; "
    "best ms: the host's latency baseline, a low percentile of its recent page "
    "fetch times (to the response headers)"
)
DEFAULT_ROWS = 20


def order_rows(rows: Iterable[tuple[str, HostTotals]]) -> list[tuple[str, HostTotals]]:
    """Troubled hosts first (longest paused, then most throttled), then the busiest."""
    return sorted(
        rows,
        key=lambda row: (
            not row[1].troubled,
            -row[1].paused_seconds,
            -(row[1].throttles + row[1].statuses[429] + row[1].statuses[503]),
            -row[1].requests,
            row[0],
        ),
    )


def format_summary(rows: Iterable[tuple[str, HostTotals]], *, max_rows: int = DEFAULT_ROWS) -> str:
    """A plain-text table, one line per host, at most ``max_rows`` of them."""
    ordered = order_rows(rows)
    shown, rest = ordered[:max_rows], ordered[max_rows:]
    lines = [COLUMNS, *(_cells(host, t) for host, t in shown)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    text = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    ]
    if rest:
        troubled = sum(t.troubled for _, t in rest)
        text.append(
            f"... and {len(rest)} more hosts ({sum(t.requests for _, t in rest)} requests, "
            f"{troubled} of them troubled); AIMD_SUMMARY_ROWS={max_rows}"
        )
    text.append(LEGEND)
    return "\n".join(text)


def _cells(host: str, t: HostTotals) -> tuple[str, ...]:
    r429, r503 = t.statuses[429], t.statuses[503]
    return (
        host,
        str(t.requests),
        str(t.responses["2xx"]),
        str(t.responses["3xx"]),
        str(t.responses["4xx"] - r429),
        str(r429),
        str(t.responses["5xx"] - r503),
        str(r503),
        str(t.cached),
        str(t.failures),
        str(t.other_responses),
        str(t.throttles),
        str(t.blocks),
        str(t.told),
        f"{t.paused_seconds:.1f}",
        "-" if t.delay is None else f"{t.delay:.2f}",
        "-" if t.limit is None else str(t.limit),
        "-" if t.best_latency is None else f"{t.best_latency * 1000:.0f}",
    )
