"""What the HTML and PNG renderers share: ticks, bins, downsampling, marks, and the
readings of a host's limits (its Crawl-delay floor, what bounded it).

Everything here works on numbers, so the size of a drawing depends on its width
in pixels, not on the number of events behind it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from .series import Crawl, HostSeries, HostTotals, Pause, Throttle

__all__ = [
    "REASON_GROUPS",
    "WORKER_COLOURS",
    "Bound",
    "MarkGroup",
    "ReasonGroup",
    "RobotsOrigin",
    "Span",
    "bin_seconds",
    "bounded_by",
    "coarsen",
    "downsample_steps",
    "fleet_workers",
    "format_clock",
    "format_seconds",
    "gap_floor",
    "group_marks",
    "host_floor",
    "host_tick",
    "merge_pauses",
    "nice_ticks",
    "raise_to_floor",
    "reason_group",
    "rebin",
    "share_at_limit",
    "short_label",
    "step_lookup",
    "time_at_floor",
    "time_ticks",
    "worker_rates",
]


@dataclass(frozen=True)
class ReasonGroup:
    """How throttles of one kind of reason are drawn: a colour and a shape, never colour alone."""

    key: str
    label: str
    colour: str
    shape: str
    meaning: str


REASON_GROUPS = (
    ReasonGroup("429", "429", "#C44E00", "triangle", "429 Too Many Requests"),
    ReasonGroup("5xx", "5xx", "#882255", "square", "503 or another 5xx throttle code"),
    ReasonGroup("timeout", "timeout", "#332288", "diamond", "a download timed out"),
    ReasonGroup("latency", "latency", "#117733", "circle", "responses became slow"),
    ReasonGroup("other", "other", "#555555", "cross", "any other reason (an error, a 4xx code)"),
)
_GROUP_BY_KEY = {group.key: group for group in REASON_GROUPS}


def reason_group(reason: str) -> ReasonGroup:
    """The group of a throttle reason: ``"429"``, ``"503"``, ``"timeout"``, ``"latency"`` ..."""
    if reason in _GROUP_BY_KEY:
        return _GROUP_BY_KEY[reason]
    if reason.isdigit() and reason.startswith("5"):
        return _GROUP_BY_KEY["5xx"]
    if reason.lower() in ("timeout", "timeouterror", "tcptimedouterror"):
        return _GROUP_BY_KEY["timeout"]
    return _GROUP_BY_KEY["other"]


#: A fleet's workers, one colour each (Okabe-Ito, without the yellow that white hides).
WORKER_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000")


def short_label(name: str, chars: int) -> str:
    """A name cut to ``chars`` from its end: a worker's ``host:pid`` differs at its end."""
    return name if len(name) <= chars else "\N{HORIZONTAL ELLIPSIS}" + name[-(chars - 1) :]


# -- numbers and labels -----------------------------------------------------------------


def nice_ticks(top: float, count: int = 3) -> list[float]:
    """Ticks from 0 with a 1, 2, 2.5 or 5 step; the last tick is at or above ``top``."""
    if not math.isfinite(top) or top <= 0:
        top = 1.0
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * (1 - 1e-9))
    ticks = [0.0]
    while ticks[-1] < top * (1 - 1e-9):
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


_TIME_STEPS = (
    0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200,
    10800, 21600, 43200, 86400,
)  # fmt: skip


def time_ticks(end: float, most: int = 8) -> list[float]:
    """Round times (seconds, minutes, hours) from 0 to ``end``, at most ``most`` + 1 of them."""
    end = max(end, 1e-3)
    step = next((s for s in _TIME_STEPS if end / s <= most), None)
    if step is None:
        step = 86400 * math.ceil(end / most / 86400)
    count = int(end / step + 1e-9)
    return [round(i * step, 6) for i in range(count + 1)]


def format_clock(t: float, *, precise: bool = False) -> str:
    """Time since the crawl opened: ``45s``, ``2:05``, ``1:02:05`` (``precise`` keeps tenths)."""
    if t < 60:
        return f"{t:.1f}s" if precise or t != int(t) else f"{int(t)}s"
    whole = int(t + 0.05) if precise else round(t)
    hours, rest = divmod(whole, 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
    if precise:
        text += f".{int((t - int(t)) * 10 + 0.5) % 10}"
    return text


def format_seconds(value: float | None) -> str:
    """A duration for people: ``0``, ``250ms``, ``1.5s``, ``12s``, ``-`` when unknown."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    if value < 1:
        return f"{value * 1000:.3g}ms"
    if value < 10:
        return f"{value:.3g}s"
    return f"{value:.0f}s"


def format_count(value: float) -> str:
    """A rate or a count: ``0``, ``0.5``, ``12``, ``1.2k``."""
    if value >= 1000:
        return f"{value / 1000:.3g}k"
    return f"{value:.3g}"


# -- bins -------------------------------------------------------------------------------

_BIN_STEPS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)


def bin_seconds(end: float, most_bins: int, tick: float = 1.0) -> float:
    """A round number of seconds per bin, at least ``tick`` (the resolution the counts
    were kept at) and a whole number of ticks, so that ``end`` needs at most ``most_bins``.

    A short crawl kept at a tenth of a second gets bins of a tenth of a second: its
    first second is ten bars, not one. An odd tick gets whole ticks rather than a
    round step far coarser than it needs.
    """
    need = end / max(1, most_bins)
    ticks = tick * max(1, math.ceil(need / tick - 1e-9))
    for step in _BIN_STEPS:
        if step >= max(need, tick) * (1 - 1e-9) and _whole(step / tick):
            return step if step <= 2 * ticks else ticks
    return float(max(3600 * math.ceil(need / 3600), ticks))


def _whole(ratio: float) -> bool:
    return abs(ratio - round(ratio)) < 1e-6


def rebin(
    per_bucket: Mapping[int, float],
    width: float,
    end: float,
    combine: Callable[[Iterable[float]], float] = sum,
    *,
    tick: float = 1.0,
) -> list[float]:
    """Counts kept per ``tick`` seconds (key ``k`` is [k·tick, (k+1)·tick)) folded
    into bins of ``width`` seconds covering [0, end]."""
    count = max(1, math.ceil(end / width - 1e-9))
    buckets: list[list[float]] = [[] for _ in range(count)]
    per_bin = width / tick
    for key, value in per_bucket.items():
        buckets[min(count - 1, max(0, int(key / per_bin + 1e-9)))].append(value)
    return [combine(bucket) if bucket else 0.0 for bucket in buckets]


def coarsen(
    per_bucket: Mapping[int, float],
    factor: int,
    combine: Callable[[float, float], float] = lambda a, b: a + b,
) -> dict[int, float]:
    """Counts kept per tick, kept per ``factor`` ticks instead (``max`` for peaks).

    What a reader of events does when a crawl outgrows its buckets: start at a
    tenth of a second, and double the tick whenever a host has too many of them,
    so that memory stays bounded whatever the crawl's length.
    """
    out: dict[int, float] = {}
    for key, value in per_bucket.items():
        slot = key // factor
        out[slot] = combine(out[slot], value) if slot in out else value
    return out


def downsample_steps(
    points: list[tuple[float, float]], end: float, bins: int
) -> list[tuple[float, float]]:
    """At most four points per bin: the first, lowest, highest and last, in time order.

    Drawn as a step line this looks the same at one bin per pixel or two, and keeps
    every spike, which an average would hide.
    """
    if len(points) <= 2 * bins or end <= 0:
        return list(points)
    width = end / bins
    out: list[tuple[float, float]] = []
    group: list[tuple[float, float]] = []
    current = -1
    for point in points:
        index = min(bins - 1, int(point[0] / width))
        if index != current and group:
            out.extend(_extremes(group))
            group = []
        current = index
        group.append(point)
    out.extend(_extremes(group))
    return out


def _extremes(group: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(group) <= 4:
        return group
    lowest = min(range(len(group)), key=lambda i: group[i][1])
    highest = max(range(len(group)), key=lambda i: group[i][1])
    return [group[i] for i in sorted({0, lowest, highest, len(group) - 1})]


# -- marks and spans --------------------------------------------------------------------


@dataclass
class MarkGroup:
    """Throttles of one reason group close enough in time to share one mark.

    ``at`` is the middle of the group's time slot: marks drawn there never overlap.
    """

    group: ReasonGroup
    at: float
    first: Throttle
    last: Throttle
    count: int
    reasons: dict[str, int]
    decreased: bool


def group_marks(throttles: Iterable[Throttle], width: float) -> list[MarkGroup]:
    """One mark per reason group and slot of ``width`` seconds, so marks never pile up."""
    marks: dict[tuple[str, int], MarkGroup] = {}
    for throttle in throttles:
        group = reason_group(throttle.reason)
        slot = int(throttle.t / width) if width > 0 else 0
        mark = marks.get((group.key, slot))
        if mark is None:
            marks[(group.key, slot)] = MarkGroup(
                group,
                (slot + 0.5) * width,
                throttle,
                throttle,
                1,
                {throttle.reason: 1},
                throttle.decreased,
            )
            continue
        mark.count += 1
        mark.reasons[throttle.reason] = mark.reasons.get(throttle.reason, 0) + 1
        mark.decreased = mark.decreased or throttle.decreased
        if throttle.t < mark.first.t:
            mark.first = throttle
        if throttle.t >= mark.last.t:
            mark.last = throttle
    return sorted(marks.values(), key=lambda m: m.first.t)


@dataclass
class Span:
    """A stretch of paused time, possibly several pauses that overlap or nearly touch."""

    start: float
    end: float
    pauses: int
    requested: float
    cut: bool


def merge_pauses(pauses: Iterable[Pause], end: float, join: float = 0.0) -> list[Span]:
    """Pauses as shaded spans within [0, end]; spans closer than ``join`` become one.

    ``cut`` says that the crawl ended while the host was still paused.
    """
    spans: list[Span] = []
    for pause in sorted(pauses, key=lambda p: p.start):
        start, until = min(pause.start, end), pause.until
        stop = min(until, end)
        if spans and start <= spans[-1].end + join:
            last = spans[-1]
            last.end = max(last.end, stop)
            last.pauses += 1
            last.requested += until - pause.start
            last.cut = last.cut or until > end
        else:
            spans.append(Span(start, stop, 1, until - pause.start, until > end))
    return spans


# -- the limits beyond the gap: Crawl-delay, robots.txt outcomes -------------------------
#
# A file from before these events gives none, and draws as before.


@dataclass(frozen=True)
class RobotsOrigin:
    """What an origin's robots.txt came to: ``rules``, ``allow_all`` or ``unreachable``."""

    origin: str
    outcome: str
    status: int | None = None
    crawl_delay: float | None = None
    fetches: int = 1


def host_floor(host: HostSeries) -> list[tuple[float, float]]:
    """The host's gap floor from robots.txt Crawl-delay, as a step series.

    From the ``crawl_delay`` field of ``change`` events (seconds), kept by the reader
    as ``HostSeries.floor``; empty when the file has none.
    """
    return list(host.floor)


def gap_floor(
    host: HostSeries, totals: HostTotals | None
) -> tuple[list[tuple[float, float]], bool]:
    """The host's gap floor, and whether it was inferred rather than recorded.

    Files written before Crawl-delay had its own ``change`` event give a gap that
    never rose in the events, yet ends higher in the close line: nothing but a floor
    raises a gap without a pushback, so that end value is the floor, from the
    host's first event on.
    """
    floor = host_floor(host)
    if floor or totals is None or totals.delay is None or host.throttles or host.pauses:
        return floor, False
    recorded = max((v for _, v in host.gap), default=0.0)
    if totals.delay > recorded + 1e-3 and host.gap:
        return [(host.active[0], totals.delay)], True
    return [], False


def host_tick(host: HostSeries) -> float:
    """Seconds per key of the host's per-bucket counts: ``HostSeries.tick``."""
    return host.tick if host.tick > 0 else 1.0


# -- what bounded a host ----------------------------------------------------------------


def time_at_floor(
    gap: Sequence[tuple[float, float]],
    floor: Sequence[tuple[float, float]],
    start: float,
    end: float,
) -> float:
    """The share of [start, end] in which the gap sat at its floor (a Crawl-delay), 0 to 1.

    Both are step series. The gap counts as at its floor when it is within 2 % or
    10 ms of it: the controller's gap is the floor plus rounding, never below it.
    """
    if end <= start or not floor:
        return 0.0
    times = sorted({start, end, *(t for t, _ in gap), *(t for t, _ in floor)})
    floor_at, gap_at = step_lookup(floor), step_lookup(gap)
    at = 0.0
    for a, b in itertools.pairwise(t for t in times if start <= t <= end):
        low, value = floor_at(a), gap_at(a)
        if low is not None and low > 0 and value is not None and value <= low * 1.02 + 0.01:
            at += b - a
    return at / (end - start)


def step_lookup(points: Sequence[tuple[float, float]]) -> Callable[[float], float | None]:
    """The value of a step series at a time: its last point at or before, else None."""
    times = [t for t, _ in points]

    def at(t: float) -> float | None:
        index = bisect.bisect_right(times, t) - 1
        return points[index][1] if index >= 0 else None

    return at


BoundKind = Literal["crawl_delay", "rate_limit", "capacity", "latency", "none"]


@dataclass(frozen=True)
class Bound:
    """What held a host back most, and a sentence that says so with the figures."""

    kind: BoundKind
    sentence: str

    @property
    def label(self) -> str:
        return _BOUND_LABELS[self.kind]


_BOUND_LABELS: dict[BoundKind, str] = {
    "crawl_delay": "Crawl-delay",
    "rate_limit": "rate limit",
    "capacity": "capacity",
    "latency": "latency",
    "none": "none",
}


def bounded_by(
    reasons: Mapping[str, int],
    *,
    pauses: int = 0,
    paused_seconds: float = 0.0,
    crawl_delay: float | None = None,
    share_at_floor: float = 0.0,
    limit: int | None = None,
    share_at_limit: float = 0.0,
    limit_tick: float = 1.0,
) -> Bound:
    """Crawl-delay, rate limit, capacity, latency or none: what held the host back.

    ``reasons`` counts its throttles by reason (``"429"``, ``"503"``, ``"timeout"``,
    ``"latency"``...); a Retry-After pause counts as a rate limit, as the controller
    reads it. A Crawl-delay that held the gap for at least half of the host's time
    wins over pushbacks; otherwise the kind of pushback seen most does (a tie goes
    to the rate limit, then capacity: those cost the most). A host that never
    pushed back and has no Crawl-delay was bounded by nothing of its own: the
    sentence then says whether it reached its concurrency ``limit`` (a ceiling from
    the settings) in most of its intervals of ``limit_tick`` seconds
    (``share_at_limit``), or seldom filled it.
    """
    counts: dict[BoundKind, int] = {"rate_limit": pauses, "capacity": 0, "latency": 0}
    for reason, count in reasons.items():
        key = reason_group(reason).key
        if key == "429" or reason == "block":  # a block is a limiter's answer to a rate
            counts["rate_limit"] += count
        elif key in ("5xx", "timeout"):
            counts["capacity"] += count
        elif key == "latency":
            counts["latency"] += count
    pushback = _pushback_words(reasons, pauses, paused_seconds)
    delay = f"its robots.txt Crawl-delay of {format_seconds(crawl_delay)}"
    if crawl_delay and share_at_floor >= 0.5:
        also = f"; it also pushed back ({pushback})" if pushback else ""
        return Bound(
            "crawl_delay",
            f"Bounded by {delay}: the gap sat at it for {share_at_floor:.0%} of the host's "
            f"time, at most {1 / crawl_delay:.3g} requests a second{also}.",
        )
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])  # stable: the order of ties
    kind, count = ranked[0]
    if count > 0:
        what = {
            "crawl_delay": delay,
            "none": "nothing",
            "rate_limit": "its rate limit",
            "capacity": "its capacity (overload answers and timeouts)",
            "latency": "its latency (answers slowed down under load)",
        }[kind]
        floor = f"; {delay} held the gap for {share_at_floor:.0%}" if crawl_delay else ""
        return Bound(kind, f"Bounded by {what}: {pushback}{floor}.")
    if crawl_delay:
        return Bound(
            "crawl_delay",
            f"Bounded by {delay} for {share_at_floor:.0%} of the host's time; it never "
            "pushed back.",
        )
    if limit is not None and share_at_limit >= 0.5:
        return Bound(
            "none",
            "Nothing of its own bounded it (no pushback, no Crawl-delay): it reached its "
            f"limit of {limit} request{'s' * (limit != 1)} in flight in {share_at_limit:.0%} "
            f"of its {format_seconds(limit_tick)} intervals, a ceiling from the settings "
            "(AIMD_MAX_CONCURRENCY, AIMD_HOSTS, CONCURRENT_REQUESTS).",
        )
    return Bound(
        "none",
        "Nothing of its own bounded it (no pushback, no Crawl-delay), and it seldom filled "
        "its limit: its pace was how fast the crawl found its pages.",
    )


def _pushback_words(reasons: Mapping[str, int], pauses: int, paused_seconds: float) -> str:
    """``7 x 429, 2 x timeout, 7 Retry-After pauses (5.0s)``, most frequent first."""
    items = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    words = [f"{n} \N{MULTIPLICATION SIGN} {r}" for r, n in items if n > 0]
    if pauses:
        words.append(
            f"{pauses} Retry-After pause{'s' * (pauses != 1)}"
            + (f" ({format_clock(paused_seconds, precise=True)})" if paused_seconds else "")
        )
    return ", ".join(words)


def raise_to_floor(
    gap: Sequence[tuple[float, float]], floor: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The gap as the controller keeps it: never below its floor at any time.

    An events file may record the floor (a Crawl-delay) without a gap change at the
    same moment; the gap the controller used was the larger of the two all the same.
    """
    if not floor:
        return list(gap)
    gap_at, floor_at = step_lookup(gap), step_lookup(floor)
    out: list[tuple[float, float]] = []
    for t in sorted({t for t, _ in gap} | {t for t, _ in floor}):
        value = gap_at(t)
        if value is None:
            continue
        value = max(value, floor_at(t) or 0.0)
        if not out or out[-1][1] != value:
            out.append((t, value))
    return out


def share_at_limit(
    peaks: Mapping[int, float],
    limit: Sequence[tuple[float, float]],
    start: float,
    end: float,
    tick: float = 1.0,
) -> float:
    """The share of the ticks in [start, end] in which the host's peak in flight reached
    its limit (the lower of the limit as the tick began and as it ended: a limit
    that grew within the tick was reached first): how much of its time the limit
    held it back."""
    first, last = int(start / tick + 1e-9), int(end / tick + 1e-9)
    if last < first or not limit:
        return 0.0
    limit_at = step_lookup(limit)
    full = 0
    for key in range(first, last + 1):
        values = [
            v for t in (max(key * tick, start), min((key + 1) * tick, end)) if (v := limit_at(t))
        ]
        if values and peaks.get(key, 0) >= min(values):
            full += 1
    return full / (last - first + 1)


# -- a fleet's workers ---------------------------------------------------------------------


def fleet_workers(crawl: Crawl) -> list[str]:
    """The workers that get lanes: a fleet's, when there is more than one."""
    return list(crawl.workers) if len(crawl.workers) > 1 else []


def worker_rates(
    hosts: Iterable[HostSeries], workers: Sequence[str], width: float, end: float
) -> dict[str, list[float]]:
    """Each worker's starts per second on ``hosts``, in bins of ``width`` seconds."""
    out: dict[str, list[float]] = {}
    for host in hosts:
        for worker in workers:
            counts = host.worker_starts.get(worker)
            if not counts:
                continue
            binned = rebin(counts, width, end, tick=host_tick(host))
            rates = [n / width for n in binned]
            before = out.get(worker)
            out[worker] = (
                rates if before is None else [a + b for a, b in zip(before, rates, strict=True)]
            )
    return out
