"""What a server saw: nginx's access log (``log_format bench`` in nginx.conf.in), and
HAProxy's and Apache's lines read into the same entries, back into per-host figures.
Every figure of the benchmark comes from here, the server's view."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .site import Site

#: Arrivals closer than the Crawl-delay by more than this are a violation: nginx logs
#: whole milliseconds, twice (the end and the duration) for each arrival.
GAP_TOLERANCE = 0.010
THROTTLE_CODES = (429, 503)


@dataclass(frozen=True)
class Entry:
    ended: float
    status: int
    seconds: float
    host: str
    address: str
    port: int
    body_bytes: int
    connection: int
    request_uri: str
    uri: str

    @property
    def arrived(self) -> float:
        return self.ended - self.seconds

    @property
    def path(self) -> str:
        return urlsplit(self.request_uri).path


def parse_line(line: str) -> Entry:
    ended, status, seconds, host, address, port, body, connection, request_uri, uri = line.rstrip(
        "\n"
    ).split(" ", 9)
    return Entry(
        float(ended),
        int(status),
        float(seconds),
        host,
        address,
        int(port),
        int(body),
        int(connection),
        request_uri,
        uri,
    )


def read_log(path: Path) -> list[Entry]:
    if not path.exists():
        return []
    return [parse_line(line) for line in path.read_text().splitlines() if line.strip()]


#: nginx's clock is in milliseconds: a request logged as taking 0 ms took up to this.
RESOLUTION = 0.001


def max_in_flight(entries: list[Entry]) -> int:
    """Most requests the server was working on at once (from arrival to log time), to
    nginx's millisecond: a request counts as lasting at least half of one."""
    ends = [max(e.ended, e.arrived + RESOLUTION / 2) for e in entries]
    moments = sorted([(e.arrived, 1) for e in entries] + [(end, -1) for end in ends])
    # At a tie an end comes before a start (-1 < 1): a request that ends as the next
    # arrives, both in the same millisecond, did not overlap it.
    level = peak = 0
    for _, step in moments:
        level += step
        peak = max(peak, level)
    return peak


@dataclass
class HostFigures:
    requests: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    pages_fetched: int = 0
    pages_total: int = 0
    duplicate_fetches: int = 0
    disallowed_fetched: int = 0
    """Requests for paths the host's robots.txt disallows."""
    min_gap_seconds: float | None = None
    """The smallest gap between two arrivals (robots.txt included)."""
    crawl_delay_violations: int = 0
    max_in_flight: int = 0
    first_arrival: float | None = None
    last_end: float | None = None

    @property
    def throttled(self) -> int:
        return sum(self.statuses.get(code, 0) for code in THROTTLE_CODES)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "throttled": self.throttled}


def host_figures(entries: list[Entry], site: Site, crawl_delay: float | None) -> HostFigures:
    """One host's figures from its log entries."""
    figures = HostFigures(pages_total=len(site.pages))
    if not entries:
        return figures
    served = Counter(e.path for e in entries if e.status == 200 and e.path in site.pages)
    arrivals = sorted(e.arrived for e in entries)
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    figures.requests = len(entries)
    figures.statuses = dict(sorted(Counter(e.status for e in entries).items()))
    figures.pages_fetched = len(served)
    figures.duplicate_fetches = sum(served.values()) - len(served)
    figures.disallowed_fetched = sum(not site.allowed(e.path) for e in entries)
    figures.min_gap_seconds = min(gaps) if gaps else None
    if crawl_delay is not None:
        figures.crawl_delay_violations = sum(gap < crawl_delay - GAP_TOLERANCE for gap in gaps)
    figures.max_in_flight = max_in_flight(entries)
    figures.first_arrival = arrivals[0]
    figures.last_end = max(e.ended for e in entries)
    return figures
