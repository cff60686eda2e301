"""Turn an ``AIMD_EVENTS_FILE`` into per-host series, with no HTML in sight.

The events file may come from a crawl that was killed (no ``close`` line, a
partial last line) or from a newer version of the package (events this module
does not know). Reading never fails on content: what cannot be read is counted,
so that the report can say how much of the file it could not use.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from scrapy_aimd.events import HOST_EVENTS, DuplicateHosts
from scrapy_aimd.host_totals import HostTotals, as_integer, as_number, pause_until
from scrapy_aimd.report.draw import RobotsOrigin, coarsen

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

__all__ = [
    "Crawl",
    "HostSeries",
    "HostTotals",
    "Pause",
    "Throttle",
    "order_hosts",
    "read_crawl",
    "read_events",
    "read_events_files",
]

KNOWN_EVENTS = HOST_EVENTS | {"open", "close"}
#: Counts are kept per tenth of a second for the first FINE_SECONDS of a host's
#: crawl (a short crawl then shows something), per second after that.
FINE_TICK = 0.1
FINE_SECONDS = 600.0
ROBOTS_OUTCOMES = frozenset({"rules", "allow_all", "unreachable"})
#: How many numbers of unreadable lines are kept for the report to quote.
KEEP_BAD_LINE_NUMBERS = 5


@dataclass(slots=True)
class Throttle:
    """A host pushed back; ``delay`` and ``limit`` are the controller's state after it."""

    t: float
    reason: str
    delay: float | None
    limit: int | None
    decreased: bool


@dataclass(slots=True)
class Pause:
    """A Retry-After pause from ``start`` until ``until``; ``resumed`` is the first start after."""

    start: float
    until: float
    resumed: float | None = None


@dataclass
class HostSeries:
    """Everything the report draws for one host.

    ``limit``, ``gap`` and ``floor`` (the robots.txt Crawl-delay under the gap)
    are step series: each point is the value from its time on, recorded only when
    the value changes. Counts of starts, responses and failures are kept per
    ``tick`` seconds (the key is the time divided by the tick): a tenth of a second
    for the first ten minutes, then whole seconds, so that memory does not grow
    with the number of events but with the length of the crawl.
    """

    host: str
    limit: list[tuple[float, int]] = field(default_factory=list)
    gap: list[tuple[float, float]] = field(default_factory=list)
    floor: list[tuple[float, float]] = field(default_factory=list)
    throttles: list[Throttle] = field(default_factory=list)
    pauses: list[Pause] = field(default_factory=list)
    started: Counter[int] = field(default_factory=Counter)
    responses: Counter[int] = field(default_factory=Counter)
    failures: Counter[int] = field(default_factory=Counter)
    peak_in_flight: dict[int, int] = field(default_factory=dict)
    latency_sum: dict[int, float] = field(default_factory=dict)
    latency_count: Counter[int] = field(default_factory=Counter)
    first_t: float = math.inf
    last_t: float = -math.inf
    counted: HostTotals = field(default_factory=HostTotals)
    #: Seconds per key of the counts (HostSeries built by hand count per second).
    tick: float = 1.0
    #: A fleet's starts per worker (the event's ``worker``), counted like ``started``.
    worker_starts: dict[str, Counter[int]] = field(default_factory=dict)
    #: Each worker's own count of the host: what its close row falls back to.
    worker_counted: dict[str, HostTotals] = field(default_factory=dict)

    def bucket(self, t: float) -> int:
        """The key of the counts for time ``t``; coarsens fine counts past FINE_SECONDS."""
        if self.tick < 1.0 and t >= FINE_SECONDS:
            self.coarsen(round(1.0 / self.tick))
        return int(t / self.tick + 1e-9)

    def coarsen(self, factor: int) -> None:
        """Keep the counts per ``factor`` ticks from now on."""
        for counts in (
            self.started,
            self.responses,
            self.failures,
            self.latency_count,
            *self.worker_starts.values(),
        ):
            merged = coarsen(counts, factor)
            counts.clear()
            counts.update({k: int(v) for k, v in merged.items()})
        self.latency_sum = coarsen(self.latency_sum, factor)
        self.peak_in_flight = {
            k: int(v) for k, v in coarsen(self.peak_in_flight, factor, max).items()
        }
        self.tick *= factor

    def set_floor(self, t: float, value: float) -> None:
        if not self.floor or self.floor[-1][1] != value:
            self.floor.append((t, value))

    def set_limit(self, t: float, value: int) -> None:
        if not self.limit or self.limit[-1][1] != value:
            self.limit.append((t, value))

    def set_gap(self, t: float, value: float) -> None:
        if not self.gap or self.gap[-1][1] != value:
            self.gap.append((t, value))

    def add_pause(self, t: float, until: float) -> None:
        """A pause to draw, counted as the summary counts it (the union of pauses)."""
        self.pauses.append(Pause(t, until))
        self.counted.add({"event": "pause", "t": t, "until": until})

    @property
    def active(self) -> tuple[float, float]:
        """From the host's first event to its last (0, 0 if it had none)."""
        if self.first_t > self.last_t:
            return (0.0, 0.0)
        return (self.first_t, self.last_t)


@dataclass
class Crawl:
    """A whole events file: per-host series, the summary, and what could not be read."""

    spider: str | None = None
    #: Every spider named by an open line: more than one when the files read
    #: together are of different crawls.
    spiders: set[str] = field(default_factory=set)
    wall: float | None = None
    end: float = 0.0
    closed: bool = False
    close_reason: str | None = None
    hosts: dict[str, HostSeries] = field(default_factory=dict)
    summary: dict[str, HostTotals] = field(default_factory=dict)
    summary_source: Literal["close", "events"] = "events"
    lines: int = 0
    bad_lines: int = 0
    bad_line_numbers: list[int] = field(default_factory=list)
    last_line_partial: bool = False
    unknown_events: Counter[str] = field(default_factory=Counter)
    #: What each origin's robots.txt came to, from ``robots`` events (the last one).
    robots: dict[str, RobotsOrigin] = field(default_factory=dict)
    #: Requests dropped as already seen: ``total``, and by kind where known.
    duplicates: dict[str, int] = field(default_factory=dict)
    #: The hosts with the most of them, with the bounds their counts are known
    #: within (a fleet's: summed over its workers).
    top_duplicates: DuplicateHosts = field(default_factory=DuplicateHosts)
    #: A fleet's workers, by when they opened (empty for one file without ``worker``).
    workers: list[str] = field(default_factory=list)
    #: Each worker's open, in seconds after the earliest worker's (its file's shift).
    worker_opened: dict[str, float] = field(default_factory=dict)
    #: Files read together that have no ``wall`` in their open line: drawn unshifted.
    unaligned: list[str] = field(default_factory=list)
    #: Each file read together, by name: its first and last line's time, shifted.
    file_spans: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def duplicate_hosts(self) -> dict[str, int]:
        """The hosts with the most duplicates and their counts (each an upper bound)."""
        return self.top_duplicates.counts

    def host(self, name: str) -> HostSeries:
        series = self.hosts.get(name)
        if series is None:
            series = self.hosts[name] = HostSeries(name, tick=FINE_TICK)
        return series


# -- reading ----------------------------------------------------------------------------


def read_events(path: str | Path) -> Crawl:
    """Read an events file line by line, so that its size does not matter."""
    with Path(path).open("r", encoding="utf-8", errors="replace", newline="") as lines:
        return read_crawl(lines)


def read_crawl(lines: Iterable[str]) -> Crawl:
    """Build a :class:`Crawl` from events lines (with or without their newlines)."""
    crawl = Crawl()
    closes: list[dict[str, Any]] = []
    last: _Line | None = None
    for last in _lines(lines, 0.0, None):
        _take(crawl, last, closes)
    if last is not None and last.record is None and not last.ended:
        crawl.last_line_partial = True
    _finish(crawl, closes[-1:], files=1)
    return crawl


def read_events_files(paths: Sequence[str | Path]) -> Crawl:
    """Read the events files of a fleet's workers as one crawl, line by line.

    Each file's times count from its own open; they are shifted by its ``wall``
    time minus the earliest one, then merged by time, so that every worker's
    events sit on one time axis. Each file's worker is its open line's
    ``worker`` (else the file's name). One file reads exactly as
    :func:`read_events`.
    """
    if len(paths) == 1:
        return read_events(paths[0])
    crawl = Crawl()
    with contextlib.ExitStack() as stack:
        heads = []
        for path in paths:
            handle = stack.enter_context(
                Path(path).open("r", encoding="utf-8", errors="replace", newline="")
            )
            heads.append((Path(path), handle, _open_line(handle)))
        walls = [wall for _, _, (_, wall, _) in heads if wall is not None]
        earliest = min(walls, default=0.0)
        names: list[str] = []
        streams = []
        for path, handle, (first, wall, worker) in heads:
            name = worker or path.stem
            name = _unique(name, names)
            names.append(name)
            shift = 0.0 if wall is None else wall - earliest
            if wall is None:
                crawl.unaligned.append(path.name)
            crawl.worker_opened[name] = shift
            text = [first, *handle] if first is not None else handle
            streams.append(_lines(text, shift, name))
        crawl.workers = sorted(names, key=lambda n: (crawl.worker_opened[n], names.index(n)))
        closes: list[dict[str, Any]] = []
        partial: dict[str | None, _Line] = {}
        for line in heapq.merge(*streams, key=lambda line: line.t):
            _take(crawl, line, closes)
            partial[line.worker] = line
        for (path, _, _), name in zip(heads, names, strict=True):
            last = partial.get(name)
            opened = crawl.worker_opened[name]
            crawl.file_spans[path.name] = (opened, opened if last is None else last.t)
    crawl.last_line_partial = any(
        line.record is None and not line.ended for line in partial.values()
    )
    _finish(crawl, closes, files=len(paths))
    return crawl


#: A file that begins this long after every file before it ended is of another
#: crawl (a fleet's workers overlap; their machines' clocks may differ by seconds).
APART: Final = 60.0


def apart_in_time(crawl: Crawl) -> list[tuple[str, float]]:
    """The files read together that began over :data:`APART` after every file
    before them ended, each with that gap (s): runs of a crawl, not one crawl."""
    found: list[tuple[str, float]] = []
    ended = -math.inf
    for name, (began, last) in sorted(crawl.file_spans.items(), key=lambda item: item[1]):
        if math.isfinite(ended) and began - ended > APART:
            found.append((name, began - ended))
        ended = max(ended, last)
    return found


def _open_line(handle: Iterator[str]) -> tuple[str | None, float | None, str | None]:
    """A file's first line, its ``wall`` and its ``worker`` (None where it has none)."""
    for line in handle:
        if not line.strip():
            continue
        record = _parse(line.strip())
        if record is None or record["event"] != "open":
            return line, None, None
        worker = record.get("worker")
        return line, as_number(record.get("wall")), worker if isinstance(worker, str) else None
    return None, None, None


def _unique(name: str, taken: Sequence[str]) -> str:
    """Two files that name the same worker stay two lanes."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}#{n}"
    return candidate


@dataclass(slots=True)
class _Line:
    """One non-empty line of an events file, its time shifted to the crawl's."""

    t: float
    number: int
    record: dict[str, Any] | None
    ended: bool
    worker: str | None


def _lines(lines: Iterable[str], shift: float, worker: str | None) -> Iterator[_Line]:
    """The non-empty lines of one file; an unreadable one keeps the time before it."""
    t = 0.0
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        record = _parse(text)
        if record is not None:
            if shift:
                record["t"] += shift
                if (until := as_number(record.get("until"))) is not None:
                    record["until"] = until + shift
            if worker is not None:
                record["worker"] = worker
            t = max(t, record["t"])
        yield _Line(t, number, record, line.endswith("\n"), worker)


def _take(crawl: Crawl, line: _Line, closes: list[dict[str, Any]]) -> None:
    crawl.lines += 1
    record = line.record
    if record is None or not _apply(crawl, record):
        _bad(crawl, line.number)
    elif record["event"] == "close":
        closes.append(record)


def _parse(text: str) -> dict[str, Any] | None:
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    t = as_number(record.get("t"))
    event = record.get("event")
    if t is None or t < 0 or not isinstance(event, str):
        return None
    record["t"] = t
    return record


def _bad(crawl: Crawl, number: int) -> None:
    crawl.bad_lines += 1
    numbers = crawl.bad_line_numbers
    if len(numbers) < KEEP_BAD_LINE_NUMBERS:
        numbers.append(number)
    else:
        numbers[-1] = number  # keep the first few and the last one


def _apply(crawl: Crawl, record: dict[str, Any]) -> bool:
    """Fold one event into the crawl; False if the line is not a usable event."""
    event: str = record["event"]
    t: float = record["t"]
    if event not in KNOWN_EVENTS:
        crawl.unknown_events[event] += 1
        crawl.end = max(crawl.end, t)
        return True
    if event == "open":
        spider, wall = record.get("spider"), as_number(record.get("wall"))
        if isinstance(spider, str):
            crawl.spiders.add(spider)
            if crawl.spider is None:
                crawl.spider = spider
        if crawl.wall is None and wall is not None:
            crawl.wall = wall
        return True
    if event == "close":
        crawl.end = max(crawl.end, t)
        crawl.duplicates = _counts(record.get("duplicates"))
        crawl.top_duplicates = DuplicateHosts.from_close(record)
        return True
    name = record.get("host")
    if not isinstance(name, str) or not name:
        return False
    host = crawl.host(name)
    if event == "pause" and pause_until(record) is None:
        return False
    crawl.end = max(crawl.end, t)
    host.first_t = min(host.first_t, t)
    host.last_t = max(host.last_t, t)
    if event != "pause":  # add_pause counts it
        host.counted.add(record)
    worker = record.get("worker")
    if isinstance(worker, str):
        host.worker_counted.setdefault(worker, HostTotals()).add(record)
    second = host.bucket(t)
    if event == "start":
        host.started[second] += 1
        if isinstance(worker, str):
            host.worker_starts.setdefault(worker, Counter())[second] += 1
        in_flight = as_integer(record.get("in_flight"))
        if in_flight is not None and in_flight > host.peak_in_flight.get(second, -1):
            host.peak_in_flight[second] = in_flight
    elif event == "response":
        host.responses[second] += 1
        latency = as_number(record.get("latency"))
        if latency is not None and latency >= 0:
            host.latency_sum[second] = host.latency_sum.get(second, 0.0) + latency
            host.latency_count[second] += 1
    elif event == "fail":
        host.failures[second] += 1
    elif event == "throttle":
        reason = record.get("reason")
        delay, limit = as_number(record.get("delay")), as_integer(record.get("limit"))
        host.throttles.append(
            Throttle(
                t,
                str(reason) if isinstance(reason, (str, int)) else "unknown",
                delay,
                limit,
                record.get("decreased") is True,
            )
        )
        _set_state(host, t, delay, limit)
    elif event == "pause":
        until = pause_until(record)
        assert until is not None
        host.add_pause(t, until)
    elif event == "resume":
        for pause in reversed(host.pauses):
            if pause.resumed is None:
                pause.resumed = t
            else:
                break
    elif event == "change":
        _set_state(host, t, as_number(record.get("delay")), as_integer(record.get("limit")))
        crawl_delay = as_number(record.get("crawl_delay"))
        if crawl_delay is not None and crawl_delay >= 0:
            host.set_floor(t, crawl_delay)
    elif event == "robots":
        _robots(crawl, record)
    return True


def _robots(crawl: Crawl, record: dict[str, Any]) -> None:
    """An origin's robots.txt outcome; the latest counts, the fetches add up."""
    origin, outcome = record.get("origin"), record.get("outcome")
    if not isinstance(origin, str) or outcome not in ROBOTS_OUTCOMES:
        return
    crawl_delay = as_number(record.get("crawl_delay"))
    before = crawl.robots.get(origin)
    crawl.robots[origin] = RobotsOrigin(
        origin,
        str(outcome),
        as_integer(record.get("status")),
        crawl_delay if crawl_delay is not None and crawl_delay >= 0 else None,
        1 + (before.fetches if before else 0),
    )


def _set_state(host: HostSeries, t: float, delay: float | None, limit: int | None) -> None:
    if delay is not None and delay >= 0:
        host.set_gap(t, delay)
    if limit is not None and limit >= 0:
        host.set_limit(t, limit)


# -- the summary ------------------------------------------------------------------------


def _finish(crawl: Crawl, closes: list[dict[str, Any]], *, files: int) -> None:
    """Take the summary from the ``close`` lines where they say something, else count it.

    A fleet's workers each close with their own rows: the counts add up, the gap
    and the limit are the latest close's, pause time is the union of the pauses.
    """
    crawl.summary = {name: host.counted for name, host in crawl.hosts.items()}
    if not closes:
        return
    crawl.closed = len(closes) >= files
    reason = closes[-1].get("reason")
    crawl.close_reason = reason if isinstance(reason, str) else None
    if files > 1:
        crawl.duplicates = _summed(closes, "duplicates")
        crawl.top_duplicates = DuplicateHosts.combined(map(DuplicateHosts.from_close, closes))
    rows: dict[str, list[HostTotals]] = {}
    for close in closes:
        hosts = close.get("hosts")
        if not isinstance(hosts, dict):
            continue
        crawl.summary_source = "close"
        worker = close.get("worker")
        for name, row in hosts.items():
            if not isinstance(row, dict):
                continue
            host = crawl.hosts.get(name)
            if host is None:
                counted = HostTotals()
            elif files > 1 and isinstance(worker, str):
                counted = host.worker_counted.get(worker, HostTotals())
            else:
                counted = host.counted
            rows.setdefault(name, []).append(_totals_from_close(row, counted))
    for name, totals in rows.items():
        host = crawl.hosts.get(name)
        crawl.summary[name] = totals[0] if len(totals) == 1 else _fleet_totals(totals, host)


def _counts(value: object) -> dict[str, int]:
    """A close line's counts by name; what is not a count is left out."""
    if not isinstance(value, dict):
        return {}
    return {str(k): n for k, v in value.items() if (n := as_integer(v)) is not None and n >= 0}


def _summed(closes: list[dict[str, Any]], name: str) -> dict[str, int]:
    """The workers' counts of a close line's field ``name``, added up."""
    summed: Counter[str] = Counter()
    for close in closes:
        summed.update(_counts(close.get(name)))
    return dict(summed)


def _fleet_totals(rows: list[HostTotals], host: HostSeries | None) -> HostTotals:
    """One host's close rows of several workers (in the order they closed) as one."""
    latest = rows[-1]
    best = [r.best_latency for r in rows if r.best_latency is not None]
    paused = max(r.paused_seconds for r in rows)
    if host is not None and host.pauses:
        paused = host.counted.paused_seconds  # the union over every worker's pauses
    responses: Counter[str] = Counter()
    for row in rows:
        responses.update(row.responses)
    return HostTotals(
        requests=sum(r.requests for r in rows),
        responses=responses,
        failures=sum(r.failures for r in rows),
        throttles=sum(r.throttles for r in rows),
        pauses=sum(r.pauses for r in rows),
        paused_seconds=paused,
        blocks=sum(r.blocks for r in rows),
        blocked_seconds=max(r.blocked_seconds for r in rows),
        told=sum(r.told for r in rows),
        delay=latest.delay,
        limit=latest.limit,
        best_latency=min(best) if best else None,
    )


def _totals_from_close(row: dict[str, Any], counted: HostTotals) -> HostTotals:
    """A close-line row; a field that is missing or malformed falls back to the counted one."""

    def integer(key: str, fallback: int) -> int:
        value = as_integer(row.get(key))
        return fallback if value is None or value < 0 else value

    def number(key: str, fallback: float | None) -> float | None:
        value = as_number(row.get(key))
        return fallback if value is None or value < 0 else value

    responses = counted.responses
    given = row.get("responses")
    if isinstance(given, dict):
        responses = Counter(
            {str(k): n for k, v in given.items() if (n := as_integer(v)) is not None and n >= 0}
        )
    limit = as_integer(row.get("limit"))
    return HostTotals(
        requests=integer("requests", counted.requests),
        responses=responses,
        failures=integer("failures", counted.failures),
        throttles=integer("throttles", counted.throttles),
        pauses=integer("pauses", counted.pauses),
        paused_seconds=number("paused_seconds", counted.paused_seconds) or 0.0,
        blocks=integer("blocks", counted.blocks),
        blocked_seconds=number("blocked_seconds", counted.blocked_seconds) or 0.0,
        told=integer("told", counted.told),
        delay=number("delay", counted.delay),
        limit=limit if limit is not None and limit >= 0 else counted.limit,
        best_latency=None
        if "best_latency" in row and row["best_latency"] is None
        else number("best_latency", counted.best_latency),
    )


# -- ordering ---------------------------------------------------------------------------

Order = Literal["trouble", "requests", "name"]


def order_hosts(crawl: Crawl, by: Order = "trouble") -> list[str]:
    """Hosts in the order the report shows them.

    ``trouble``: the hosts that pushed back first (paused time, then throttles),
    then the busiest; ``requests``: the busiest first; ``name``: alphabetical.
    """
    names = sorted(set(crawl.hosts) | set(crawl.summary))

    def totals(name: str) -> HostTotals:
        return crawl.summary.get(name) or crawl.hosts[name].counted

    if by == "name":
        return names
    if by == "requests":
        return sorted(names, key=lambda n: -totals(n).requests)
    return sorted(
        names,
        key=lambda n: (
            -(totals(n).paused_seconds > 0 or totals(n).throttles > 0),
            -totals(n).paused_seconds,
            -totals(n).throttles,
            -totals(n).requests,
        ),
    )


def iter_steps(
    points: list[tuple[float, float]], end: float
) -> Iterator[tuple[float, float, float]]:
    """Each step of a step series as (from, to, value), the last one running to ``end``."""
    for i, (t, value) in enumerate(points):
        until = points[i + 1][0] if i + 1 < len(points) else max(end, t)
        yield (t, until, value)
