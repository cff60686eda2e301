"""Geometry shared by the HTML and PNG renderers: scales, ticks, bins and downsampling.

Everything here works on numbers, so the size of a drawing depends on its width
in pixels, not on the number of events behind it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from .series import Pause, Throttle

__all__ = [
    "REASON_GROUPS",
    "MarkGroup",
    "ReasonGroup",
    "Span",
    "bin_seconds",
    "downsample_steps",
    "format_clock",
    "format_seconds",
    "group_marks",
    "merge_pauses",
    "nice_ticks",
    "reason_group",
    "rebin",
    "time_ticks",
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

_BIN_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)


def bin_seconds(end: float, most_bins: int) -> int:
    """A whole, round number of seconds per bin so that ``end`` needs at most ``most_bins``."""
    for step in _BIN_STEPS:
        if end / step <= most_bins:
            return step
    return 3600 * math.ceil(end / most_bins / 3600)


def rebin(
    per_second: Mapping[int, float],
    width: int,
    end: float,
    combine: Callable[[Iterable[float]], float] = sum,
) -> list[float]:
    """Per-second values folded into bins of ``width`` seconds covering [0, end]."""
    count = max(1, math.ceil(end / width))
    buckets: list[list[float]] = [[] for _ in range(count)]
    for second, value in per_second.items():
        buckets[min(count - 1, max(0, second // width))].append(value)
    return [combine(bucket) if bucket else 0.0 for bucket in buckets]


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
