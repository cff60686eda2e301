"""The crawl report as one HTML page with inline SVG: nothing is fetched when it is opened.

The page has no script, no external font or stylesheet, and a Content-Security-Policy
that forbids loading anything, so that it looks the same offline, in a mail
attachment or years later.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

from scrapy_aimd.events import CLOSE_HOSTS, DuplicateHosts

from .. import __version__
from .draw import (
    REASON_GROUPS,
    WORKER_COLOURS,
    Bound,
    MarkGroup,
    ReasonGroup,
    RobotsOrigin,
    Span,
    bin_seconds,
    bounded_by,
    downsample_steps,
    fleet_workers,
    format_clock,
    format_count,
    format_seconds,
    gap_floor,
    group_marks,
    host_tick,
    merge_pauses,
    nice_ticks,
    raise_to_floor,
    reason_group,
    rebin,
    share_at_limit,
    short_label,
    step_lookup,
    time_at_floor,
    time_ticks,
    worker_rates,
)
from .series import Crawl, HostSeries, HostTotals, Order, order_hosts

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = ["ReportOptions", "render_html"]

#: The charts' coordinate width. They are drawn to the window's width (CSS scales the
#: SVG); at 1200 their text is its nominal size in a window about 1240 pixels wide.
WIDTH = 1200
LEFT = 90
RIGHT = 24
PLOT = WIDTH - LEFT - RIGHT
#: Seconds per bar are chosen so that a bar is at least this many pixels wide.
BAR_PIXELS = 3
#: A hover column (the values under the pointer) is at least this many pixels wide.
HOVER_PIXELS = 8
#: Step lines keep at most four points per this many pixels.
STEP_PIXELS = 2
#: Throttles closer than this many pixels share one mark.
MARK_PIXELS = 10

INK = "#1f2328"
MUTED = "#57606a"
GRID = "#e6e8eb"
AXIS = "#8c959f"
LINE = "#0072B2"
IN_FLIGHT = "#BBD7EC"
RESPONSES = "#A3ACB6"
FAILURES = "#CC6677"
LATENCY = "#3D4752"
PAUSE_FILL = "#EBDDF0"
PAUSE_EDGE = "#AA4499"
FLOOR = "#D4A72C"
FLOOR_TEXT = "#7D4E00"
DASH = "\N{EN DASH}"
#: The page is as wide as the window up to this; in a wider one the charts would grow
#: their text past easy reading.
MAX_PAGE = 1800
#: Below this the charts scroll sideways rather than shrink their text past reading.
MIN_CHART = 1000
TIMES = "\N{MULTIPLICATION SIGN}"


@dataclass(frozen=True)
class ReportOptions:
    """What the page shows: host order, how many hosts get a chart, and its title."""

    order: Order = "trouble"
    max_hosts: int = 30
    title: str | None = None
    source: str | None = None


def render_html(crawl: Crawl, options: ReportOptions | None = None) -> str:
    """The whole page for ``crawl``."""
    options = options or ReportOptions()
    names = order_hosts(crawl, options.order)
    charted = [name for name in names if name in crawl.hosts][: max(0, options.max_hosts)]
    anchors = {name: f"host-{i}" for i, name in enumerate(names)}
    end = _end(crawl)
    title = options.title or (f"Crawl of {crawl.spider}" if crawl.spider else "Crawl report")
    bounds = {name: host_bound(crawl, name) for name in names}
    parts = [
        _head(title),
        "<body><main>",
        f"<header><h1>{escape(title)}</h1>{_facts(crawl, names)}</header>",
        _notes(crawl, names, charted),
        _legend(crawl, charted),
    ]
    if charted:
        parts.append(_overview(crawl, charted, anchors, end, bounds))
    parts.append(_table(crawl, names, anchors, bounds))
    parts.append(_robots_and_duplicates(crawl))
    workers = fleet_workers(crawl)
    for name in charted:
        parts.append(
            _host_section(
                crawl.hosts[name],
                crawl.summary.get(name),
                anchors[name],
                end,
                bounds[name],
                workers,
            )
        )
    source = f" from {escape(options.source)}" if options.source else ""
    opened = "the first worker opened" if workers else "the crawl opened"
    parts.append(
        f"<footer><p>Drawn{source} by scrapy-aimd {escape(__version__)}. Times count from the "
        f"moment {opened}.</p></footer></main></body></html>\n"
    )
    return "\n".join(part for part in parts if part)


def _end(crawl: Crawl) -> float:
    """The time axis's end: the crawl's, at least a second (a tenth with fine counts)."""
    floor = 1.0 if all(host_tick(h) >= 1 for h in crawl.hosts.values()) else 0.5
    return max(crawl.end, floor)


# -- what the events give beyond the counts -----------------------------------------------
#
# A file from before these events gives empty ones, and draws as before.


def robots_origins(crawl: Crawl) -> list[RobotsOrigin]:
    """``Crawl.robots`` (origin to :class:`RobotsOrigin`), from ``robots`` events."""
    return sorted(crawl.robots.values(), key=lambda r: r.origin)


def duplicates(crawl: Crawl) -> Mapping[str, int]:
    """``Crawl.duplicates``: requests dropped as already seen, ``total`` and by kind."""
    return dict(crawl.duplicates)


def host_bound(crawl: Crawl, name: str) -> Bound:
    """What bounded the host, from its throttles, pauses and Crawl-delay."""
    totals = crawl.summary.get(name) or (crawl.hosts[name].counted if name in crawl.hosts else None)
    host = crawl.hosts.get(name)
    if host is None:
        totals = totals or HostTotals()
        return bounded_by({}, pauses=totals.pauses, paused_seconds=totals.paused_seconds)
    totals = totals or host.counted
    floor, _ = gap_floor(host, totals)
    start, stop = host.active
    tick = host_tick(host)
    return bounded_by(
        Counter(t.reason for t in host.throttles),
        pauses=totals.pauses,
        paused_seconds=totals.paused_seconds,
        crawl_delay=max((v for _, v in floor), default=0.0) or None,
        share_at_floor=time_at_floor(raise_to_floor(host.gap, floor), floor, start, stop),
        limit=totals.limit,
        share_at_limit=share_at_limit(
            host.peak_in_flight,
            [(t, float(v)) for t, v in host.limit],
            start,
            stop,
            tick,
        ),
        limit_tick=tick,
    )


# -- page frame -------------------------------------------------------------------------

_CSS = f"""
:root {{ color-scheme: light; }}
body {{ margin: 0; background: #fff; color: {INK};
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
  sans-serif; }}
main {{ max-width: {MAX_PAGE}px; margin: 0 auto; padding: 20px 2vw; }}
h1 {{ font-size: 1.6em; margin: 0 0 .2em; }}
h2 {{ font-size: 1.15em; margin: 0; overflow-wrap: anywhere; }}
a {{ color: #0550ae; }}
.facts {{ color: {MUTED}; margin: 0; }}
.notes {{ border-left: 4px solid #bf8700; background: #fff8c5; padding: .5em 1em;
  margin: 1em 0; }}
.notes ul {{ margin: .3em 0; padding-left: 1.2em; }}
.legend {{ display: flex; flex-wrap: wrap; gap: .3em 1.4em; margin: 1em 0; padding: .6em .8em;
  border: 1px solid {GRID}; border-radius: 6px; font-size: .88em; }}
.legend span {{ display: inline-flex; align-items: center; gap: .4em; }}
.legend svg {{ flex: none; }}
figure {{ margin: 1.2em 0; }}
figcaption {{ color: {MUTED}; font-size: .88em; }}
svg.chart {{ width: 100%; height: auto; display: block; min-width: {MIN_CHART}px; }}
figure.overview, section.host {{ overflow-x: auto; }}
svg .halo {{ paint-order: stroke; stroke: #fff; stroke-width: 3px; stroke-linejoin: round; }}
svg text {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }}
section.host {{ border-top: 1px solid {GRID}; padding-top: .8em; margin-top: 1.4em; }}
.host-facts {{ color: {MUTED}; font-size: .9em; margin: .1em 0 .4em; }}
.bound {{ margin: .1em 0 .4em; font-size: .92em; }}
.bound strong {{ font-weight: 600; }}
td.bound-col {{ text-align: left; }}
.table-wrap {{ overflow-x: auto; }}
table {{ border-collapse: collapse; font-size: .88em; font-variant-numeric: tabular-nums;
  width: 100%; }}
th, td {{ padding: .25em .55em; text-align: right; border-bottom: 1px solid {GRID};
  white-space: nowrap; }}
th:first-child, td:first-child {{ text-align: left; white-space: normal;
  overflow-wrap: anywhere; min-width: 10em; }}
thead th {{ border-bottom: 2px solid {AXIS}; }}
th.bound-col {{ text-align: left; }}
tbody tr:nth-child(even) {{ background: #f6f8fa; }}
tfoot td {{ font-weight: 600; border-top: 2px solid {AXIS}; }}
td.trouble {{ color: #a40e26; font-weight: 600; }}
.duplicate-tables {{ display: flex; flex-wrap: wrap; gap: .4em 2.5em; align-items: flex-start; }}
.duplicate-tables .table-wrap {{ flex: 1 1 22em; max-width: 40em; }}
footer {{ color: {MUTED}; font-size: .85em; margin-top: 2em; }}
"""


def _head(title: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{escape(title)}</title><style>{_CSS}</style></head>"
    )


def _facts(crawl: Crawl, names: Sequence[str]) -> str:
    facts = []
    if crawl.wall is not None:
        opened = dt.datetime.fromtimestamp(crawl.wall, dt.timezone.utc)
        facts.append(f"opened {opened:%Y-%m-%d %H:%M:%S} UTC")
    facts.append(f"ran {format_clock(crawl.end, precise=crawl.end < 60)}")
    requests = sum(totals.requests for totals in crawl.summary.values())
    facts.append(f"{len(names)} host{'s' * (len(names) != 1)}")
    if len(crawl.workers) > 1:
        facts.append(f"{len(crawl.workers)} workers")
    facts.append(f"{requests:,} request{'s' * (requests != 1)}")
    if crawl.closed:
        facts.append(f"closed: {escape(crawl.close_reason or 'unknown reason')}")
    else:
        facts.append("<strong>not closed</strong>")
    return f'<p class="facts">{" · ".join(facts)}</p>'


def _notes(crawl: Crawl, names: Sequence[str], charted: Sequence[str]) -> str:
    """What the reader should know before trusting the picture."""
    notes = []
    if not crawl.lines:
        notes.append("The events file is empty: there is nothing to draw.")
    elif not crawl.closed:
        notes.append(
            "The file has no <code>close</code> line: the crawl was killed or is still "
            "running. The summary is counted from the events, up to the last one."
        )
    elif crawl.summary_source == "events":
        notes.append("The close line has no per-host summary; it is counted from the events.")
    if crawl.bad_lines:
        numbers = [str(n) for n in crawl.bad_line_numbers]
        if crawl.bad_lines > len(numbers):  # the first few and the last one
            numbers[-1:-1] = ["..."]
        partial = " The last line is incomplete." if crawl.last_line_partial else ""
        notes.append(
            f"{crawl.bad_lines:,} line{'s were' if crawl.bad_lines != 1 else ' was'} not "
            f"readable and skipped (line{'s' * (crawl.bad_lines != 1)} "
            f"{', '.join(numbers)}).{partial}"
        )
    if crawl.unaligned:
        files = ", ".join(f"<code>{escape(name)}</code>" for name in crawl.unaligned)
        notes.append(
            f"No open time (<code>wall</code>) in {files}: drawn as if opened with the "
            "earliest worker."
        )
    if crawl.unknown_events:
        kinds = ", ".join(
            f"<code>{escape(name[:40])}</code> {TIMES}{count:,}"
            for name, count in crawl.unknown_events.most_common(6)
        )
        more = len(crawl.unknown_events) - 6
        notes.append(
            "Events this report does not know were ignored: "
            f"{kinds}{f' and {more} more kinds' if more > 0 else ''}."
        )
    uncharted = len([n for n in names if n in crawl.hosts]) - len(charted)
    if uncharted > 0:
        notes.append(
            f"Only the first {len(charted)} host{'s' if len(charted) != 1 else ''} "
            f"{'are' if len(charted) != 1 else 'is'} drawn; {uncharted} more are in the "
            f"table (<code>--max-hosts</code> draws more)."
        )
    if not notes:
        return ""
    items = "".join(f"<li>{note}</li>" for note in notes)
    return f'<aside class="notes" role="note"><ul>{items}</ul></aside>'


def _legend(crawl: Crawl, charted: Sequence[str]) -> str:
    """Each kind of mark the drawn charts hold, once, drawn the way the charts draw it."""
    hosts = [crawl.hosts[name] for name in charted]
    if not hosts:
        return ""

    def swatch(body: str, width: int = 26) -> str:
        return (
            f'<svg width="{width}" height="14" viewBox="0 0 {width} 14" aria-hidden="true">'
            f"{body}</svg>"
        )

    items = [
        swatch(f'<path d="M1 11H9V4H17V8H25" fill="none" stroke="{LINE}" stroke-width="2"/>')
        + "concurrency limit, gap between starts",
    ]
    if any(gap_floor(h, crawl.summary.get(h.host))[0] for h in hosts):
        items.append(
            swatch(
                f'<path d="M1 8H25" stroke="{FLOOR}" stroke-width="5" stroke-opacity="0.55" '
                'stroke-dasharray="7 4"/>'
            )
            + "gap floor: robots.txt Crawl-delay"
        )
    if any(h.peak_in_flight for h in hosts):
        items.append(
            swatch(f'<rect x="1" y="3" width="24" height="10" fill="{IN_FLIGHT}"/>')
            + "requests in flight (peak)"
        )
    failures = any(h.failures for h in hosts)
    if any(h.responses for h in hosts) or failures:
        items.append(
            swatch(
                f'<rect x="1" y="5" width="24" height="8" fill="{RESPONSES}"/>'
                + (f'<rect x="1" y="1" width="24" height="4" fill="{FAILURES}"/>' * failures)
            )
            + ("responses / failures per second" if failures else "responses per second")
        )
    if any(h.latency_count for h in hosts):
        items.append(
            swatch(
                f'<path d="M1 10H9V5H17V8H25" fill="none" stroke="{LATENCY}" stroke-width="1.5"/>'
            )
            + "mean latency"
        )
    if any(h.pauses for h in hosts):
        items.append(
            swatch(
                f'<rect x="1" y="0" width="24" height="14" fill="{PAUSE_FILL}"/>'
                f'<path d="M1.5 0V14" stroke="{PAUSE_EDGE}" stroke-width="1.5"/>'
            )
            + "paused (Retry-After)"
        )
    throttles = [t for h in hosts for t in h.throttles]
    seen = {reason_group(t.reason).key for t in throttles}
    for group in REASON_GROUPS:
        if group.key in seen:
            items.append(
                swatch(_shape(group, 8, 7, 5, True), 16) + f"throttle: {escape(group.meaning)}"
            )
    if any(not t.decreased for t in throttles) and any(t.decreased for t in throttles):
        group = next(g for g in REASON_GROUPS if g.key in seen)
        items.append(
            swatch(_shape(group, 6, 7, 5, True) + _shape(group, 20, 7, 5, False))
            + "filled: slowed down; hollow: already slowing"
        )
    elif throttles and not any(t.decreased for t in throttles):
        items.append("hollow marks: throttles that came while the host was already slowing")
    spans = "".join(f"<span>{item}</span>" for item in items)
    return f'<section class="legend" aria-label="Legend">{spans}</section>'


# -- SVG pieces -------------------------------------------------------------------------


def _n(value: float) -> str:
    """A coordinate with one decimal, without a trailing ``.0``."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


class TimeScale:
    """Seconds since open to x pixels, shared by every chart so that hosts line up."""

    def __init__(self, end: float, left: float, width: float) -> None:
        self.end, self.left, self.width = end, left, width

    def __call__(self, t: float) -> float:
        return self.left + min(max(t, 0.0), self.end) / self.end * self.width

    def seconds(self, pixels: float) -> float:
        return pixels / self.width * self.end


class ValueScale:
    """Values to y pixels for one panel, from 0 at the bottom to the top tick."""

    def __init__(self, top: float, bottom: float, height: float, *, exact: bool = False) -> None:
        self.ticks = nice_ticks(top)
        self.top = (top if top > 0 else 1.0) if exact else self.ticks[-1]
        self.bottom, self.height = bottom, height

    def __call__(self, value: float) -> float:
        return self.bottom - min(max(value, 0.0), self.top) / self.top * self.height


def _shape_d(group: ReasonGroup, cx: float, cy: float, r: float) -> str:
    """Path data of a throttle mark centred on (cx, cy); every shape is a path."""
    x, y = _n(cx), _n(cy)
    if group.shape == "circle":
        c, d = _n(r * 0.85), _n(r * 1.7)
        return f"M{_n(cx - r * 0.85)} {y}a{c} {c} 0 1 0 {d} 0a{c} {c} 0 1 0 -{d} 0Z"
    if group.shape == "triangle":
        return f"M{_n(cx - r)} {_n(cy - r * 0.8)}H{_n(cx + r)}L{x} {_n(cy + r)}Z"
    if group.shape == "square":
        s = r * 0.78
        return f"M{_n(cx - s)} {_n(cy - s)}H{_n(cx + s)}V{_n(cy + s)}H{_n(cx - s)}Z"
    if group.shape == "diamond":
        return f"M{x} {_n(cy - r)}L{_n(cx + r)} {y}L{x} {_n(cy + r)}L{_n(cx - r)} {y}Z"
    s = r * 0.8
    return (
        f"M{_n(cx - s)} {_n(cy - s)}L{_n(cx + s)} {_n(cy + s)}"
        f"M{_n(cx + s)} {_n(cy - s)}L{_n(cx - s)} {_n(cy + s)}"
    )


def _shape_style(group: ReasonGroup, filled: bool) -> str:
    """Filled when the controller slowed down, hollow when it was already slowing."""
    if group.shape == "cross":
        return f'fill="none" stroke="{group.colour}" stroke-width="{"2.4" if filled else "1.2"}"'
    fill = group.colour if filled else "#fff"
    return f'fill="{fill}" stroke="{group.colour}" stroke-width="1.5"'


def _shape(group: ReasonGroup, cx: float, cy: float, r: float, filled: bool) -> str:
    return f'<path d="{_shape_d(group, cx, cy, r)}" {_shape_style(group, filled)}/>'


def _mark(mark: MarkGroup, cx: float, cy: float, r: float) -> str:
    """One mark with a tooltip: how many throttles, when, why, and the state after."""
    when = format_clock(mark.first.t, precise=True)
    if mark.last.t > mark.first.t:
        when += f"{DASH}{format_clock(mark.last.t, precise=True)}"
    reasons = ", ".join(f"{r} {TIMES}{n}" for r, n in sorted(mark.reasons.items()))
    after = []
    if mark.last.delay is not None:
        after.append(f"gap {format_seconds(mark.last.delay)}")
    if mark.last.limit is not None:
        after.append(f"limit {mark.last.limit}")
    what = "slowed down" if mark.decreased else "already slowing"
    tip = f"{when}: {reasons}, {what}" + (f"; {', '.join(after)}" if after else "")
    return (
        f'<g class="mark mark-{mark.group.key}" data-count="{mark.count}">'
        f"<title>{escape(tip)}</title>{_shape(mark.group, cx, cy, r, mark.decreased)}</g>"
    )


def _lane_marks(marks: Iterable[MarkGroup], x: TimeScale, cy: float, r: float) -> list[str]:
    """Marks without tooltips, one path per kind: the overview stays small with many hosts."""
    paths: dict[tuple[ReasonGroup, bool], list[str]] = {}
    for mark in marks:
        paths.setdefault((mark.group, mark.decreased), []).append(
            _shape_d(mark.group, x(mark.at), cy, r)
        )
    return [
        f'<path class="mark mark-{group.key}" d="{"".join(d)}" {_shape_style(group, filled)}/>'
        for (group, filled), d in paths.items()
    ]


def _pause_rect(span: Span, x: TimeScale, top: float, height: float, *, tip: bool = True) -> str:
    x0, x1 = x(span.start), x(span.end)
    width = max(x1 - x0, 1.5)
    what = f"{span.pauses} pauses" if span.pauses > 1 else "paused"
    text = (
        f"{what} {format_clock(span.start, precise=True)}{DASH}"
        f"{format_clock(span.end, precise=True)}"
        f" ({format_seconds(span.requested)} asked by Retry-After)"
        + (", still paused when the crawl ended" if span.cut else "")
    )
    title = f"<title>{escape(text)}</title>" if tip else ""
    return (
        f'<g class="pause">{title}'
        f'<rect x="{_n(x0)}" y="{_n(top)}" width="{_n(width)}" height="{_n(height)}" '
        f'fill="{PAUSE_FILL}"/><path d="M{_n(x0)} {_n(top)}v{_n(height)}" '
        f'stroke="{PAUSE_EDGE}" stroke-width="1.5"/></g>'
    )


def _step_line(points: Sequence[tuple[float, float]], x: TimeScale, y: ValueScale) -> str:
    """``M x y H x V y ...`` to the end of the crawl, from the first known value."""
    points = downsample_steps(list(points), x.end, max(1, int(x.width / STEP_PIXELS)))
    if not points:
        return ""
    t0, v0 = points[0]
    d = [f"M{_n(x(t0))} {_n(y(v0))}"]
    for t, value in points[1:]:
        d.append(f"H{_n(x(t))}V{_n(y(value))}")
    d.append(f"H{_n(x(x.end))}")
    return "".join(d)


def _band(
    edges: Sequence[float], lower: Sequence[float], upper: Sequence[float], y: ValueScale
) -> str:
    """A stepped area between two per-bin series; empty when ``upper`` is all at ``lower``."""
    if not any(u > lo for u, lo in zip(upper, lower, strict=True)):
        return ""
    d = [f"M{_n(edges[0])} {_n(y(upper[0]))}"]
    for i in range(len(upper)):
        if i:
            d.append(f"V{_n(y(upper[i]))}")
        d.append(f"H{_n(edges[i + 1])}")
    for i in reversed(range(len(lower))):
        d.append(f"V{_n(y(lower[i]))}H{_n(edges[i])}")
    d.append("Z")
    return "".join(d)


def _broken_steps(edges: Sequence[float], values: Sequence[float | None], y: ValueScale) -> str:
    """Per-bin values as a step line with gaps where a bin has no value."""
    d: list[str] = []
    previous: float | None = None
    for i, value in enumerate(values):
        if value is None:
            previous = None
            continue
        if previous is None:
            d.append(f"M{_n(edges[i])} {_n(y(value))}")
        else:
            d.append(f"V{_n(y(value))}")
        d.append(f"H{_n(edges[i + 1])}")
        previous = value
    return "".join(d)


def _time_axis(x: TimeScale, y: float, top: float, *, labels: bool = True) -> list[str]:
    out = []
    for t in time_ticks(x.end):
        px = _n(x(t))
        out.append(f'<path d="M{px} {_n(top)}V{_n(y)}" stroke="{GRID}"/>')
        if labels:
            anchor = "end" if x(t) > x.left + x.width - 12 else "middle"
            out.append(
                f'<text x="{px}" y="{_n(y + 14)}" font-size="11" fill="{MUTED}" '
                f'text-anchor="{anchor}">{format_clock(t)}</text>'
            )
    out.append(f'<path d="M{_n(x.left)} {_n(y)}H{_n(x.left + x.width)}" stroke="{AXIS}"/>')
    return out


def _value_axis(y: ValueScale, left: float, width: float, label: Callable[[float], str]) -> str:
    out = []
    for tick in y.ticks:
        py = _n(y(tick))
        if tick:
            out.append(f'<path d="M{_n(left)} {py}h{_n(width)}" stroke="{GRID}"/>')
        out.append(
            f'<text x="{_n(left - 6)}" y="{py}" dy="3.5" font-size="10.5" fill="{MUTED}" '
            f'text-anchor="end">{escape(label(tick))}</text>'
        )
    return "".join(out)


def _svg(width: int, height: float, label: str, body: Iterable[str], cls: str = "chart") -> str:
    return (
        f'<svg class="{cls}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} '
        f'{_n(height)}" width="{width}" height="{_n(height)}" role="img" '
        f'aria-label="{escape(label)}"><title>{escape(label)}</title>{"".join(body)}</svg>'
    )


# -- per-host rates ---------------------------------------------------------------------


@dataclass
class Rates:
    """A host's per-bucket counts folded into bars of the same width for every host."""

    width: float
    edges: list[float]
    responses: list[float]
    failures: list[float]
    in_flight: list[float]
    latency: list[float | None]

    def bin_time(self, i: int, end: float) -> tuple[float, float]:
        return (i * self.width, min((i + 1) * self.width, end))


def _rates(host: HostSeries, x: TimeScale, pixels: float = BAR_PIXELS) -> Rates:
    tick = host_tick(host)
    width = bin_seconds(x.end, int(x.width / pixels), tick)

    def fold(per_bucket: Mapping[int, float], combine: Callable[..., float] = sum) -> list[float]:
        return rebin(per_bucket, width, x.end, combine, tick=tick)

    responses = fold(host.responses)
    count = len(responses)
    edges = [x(i * width) for i in range(count)] + [x(x.end)]
    latency_sum, latency_count = fold(host.latency_sum), fold(host.latency_count)
    return Rates(
        width=width,
        edges=edges,
        responses=[r / width for r in responses],
        failures=[f / width for f in fold(host.failures)],
        in_flight=fold(host.peak_in_flight, max),
        latency=[s / c if c else None for s, c in zip(latency_sum, latency_count, strict=True)],
    )


def _hover_columns(
    host: HostSeries,
    x: TimeScale,
    top: float,
    bottom: float,
    steps: tuple[Sequence[tuple[float, float]], ...],
    spans: Sequence[Span],
) -> list[str]:
    """Invisible columns over a host's charts whose tooltips give the values under the
    pointer: the page stays without script, and the columns' count is set by pixels."""
    rates = _rates(host, x, HOVER_PIXELS)
    limit_at, gap_at, floor_at = (step_lookup(points) for points in steps)
    first, last = host.active
    out = ['<g class="hover" fill="#fff" fill-opacity="0">']
    for i, responses in enumerate(rates.responses):
        start, stop = rates.bin_time(i, x.end)
        if stop < first or start > last:
            continue
        when = f"{format_clock(start, precise=True)}{DASH}{format_clock(stop, precise=True)}"
        facts = []
        failures = rates.failures[i]
        rate = f"{format_count(responses)} responses/s"
        facts.append(rate + (f", {format_count(failures)} failures/s" if failures else ""))
        if rates.in_flight[i]:
            facts.append(f"peak {rates.in_flight[i]:g} in flight")
        latency = rates.latency[i]
        if latency is not None:
            facts.append(f"mean latency {format_seconds(latency)}")
        state = []
        if (value := limit_at(stop)) is not None:
            state.append(f"limit {value:g}")
        if (value := gap_at(stop)) is not None:
            state.append(f"gap {format_seconds(value)}")
        if (value := floor_at(stop)) is not None and value > 0:
            state.append(f"Crawl-delay floor {format_seconds(value)}")
        if state:
            facts.append(", ".join(state))
        if any(span.start < stop and span.end > start for span in spans):
            facts.append("paused (Retry-After)")
        x0, x1 = rates.edges[i], rates.edges[i + 1]
        out.append(
            f'<rect x="{_n(x0)}" y="{_n(top)}" width="{_n(x1 - x0)}" '
            f'height="{_n(bottom - top)}"><title>{escape(when)}: {escape("; ".join(facts))}'
            "</title></rect>"
        )
    out.append("</g>")
    return out if len(out) > 2 else []


# -- the overview -----------------------------------------------------------------------

OVERVIEW_LEFT = 210
LANE = 24


def _overview(
    crawl: Crawl,
    names: Sequence[str],
    anchors: dict[str, str],
    end: float,
    bounds: Mapping[str, Bound],
) -> str:
    """All charted hosts on one time axis: where each was busy, throttled and paused."""
    plot = WIDTH - OVERVIEW_LEFT - RIGHT
    x = TimeScale(end, OVERVIEW_LEFT, plot)
    rates = {name: _rates(crawl.hosts[name], x) for name in names}
    first = rates[names[0]]
    width = first.width
    total = [0.0] * len(first.responses)
    for host in crawl.hosts.values():  # all hosts, drawn or not
        counts = rebin(host.responses, width, x.end, tick=host_tick(host))
        total = [a + b / width for a, b in zip(total, counts, strict=True)]
    top_height = 64.0
    y_total = ValueScale(max(total, default=0.0), 14 + top_height, top_height)
    body = [
        f'<text x="{OVERVIEW_LEFT}" y="10" font-size="11.5" font-weight="600" fill="{INK}">'
        "responses per second, all hosts</text>",
        _value_axis(y_total, OVERVIEW_LEFT, plot, format_count),
    ]
    zero = [0.0] * len(total)
    band = _band(first.edges, zero, total, y_total)
    if band:
        body.append(f'<path d="{band}" fill="{RESPONSES}"/>')
    body.extend(_total_hover(first, total, x, 14, 14 + top_height))
    lanes_top = 14 + top_height + 14
    bottom = lanes_top + LANE * len(names)
    workers = fleet_workers(crawl)
    if workers:
        lanes, bottom = _worker_lanes(
            workers,
            worker_rates(crawl.hosts.values(), workers, width, x.end),
            first.edges,
            bottom + 8,
            OVERVIEW_LEFT,
            "starts per second, by worker, all hosts",
            label_chars=30,
        )
        body.extend(lanes)
    body.extend(_time_axis(x, bottom, 14))
    body.append(f'<path d="M{OVERVIEW_LEFT} {_n(14 + top_height)}h{plot}" stroke="{AXIS}"/>')
    mark_width = x.seconds(MARK_PIXELS)
    for i, name in enumerate(names):
        host, rate = crawl.hosts[name], rates[name]
        top = lanes_top + i * LANE
        mid = top + LANE / 2
        totals = crawl.summary.get(name) or host.counted
        tip = (
            f"{name}: {totals.requests:,} requests, {totals.throttles:,} throttles, "
            f"{totals.pauses:,} pauses. {bounds[name].sentence}"
        )
        lane = [f'<g class="lane" data-host="{escape(name)}"><title>{escape(tip)}</title>']
        stripe = 'fill="#f6f8fa"' if i % 2 == 0 else 'fill="#fff" fill-opacity="0"'
        lane.append(f'<rect x="0" y="{_n(top)}" width="{WIDTH}" height="{LANE}" {stripe}/>')
        for span in merge_pauses(host.pauses, x.end, join=x.seconds(1)):
            lane.append(_pause_rect(span, x, top + 1, LANE - 2, tip=False))
        y_lane = ValueScale(max(rate.responses, default=0.0), top + LANE - 2, LANE - 5, exact=True)
        band = _band(rate.edges, [0.0] * len(rate.responses), rate.responses, y_lane)
        if band:
            lane.append(f'<path d="{band}" fill="{RESPONSES}" fill-opacity="0.8"/>')
        lane.extend(_lane_marks(group_marks(host.throttles, mark_width), x, mid, 4))
        label = name if len(name) <= 30 else name[:29] + "\N{HORIZONTAL ELLIPSIS}"
        lane.append(
            f'<a href="#{anchors[name]}"><text x="{OVERVIEW_LEFT - 8}" y="{_n(mid)}" dy="4" '
            f'font-size="12" fill="{INK}" text-anchor="end">{escape(label)}'
            f"<title>{escape(name)}</title></text></a></g>"
        )
        body.append("".join(lane))
    svg = _svg(WIDTH, bottom + 22, "Overview of all drawn hosts over time", body)
    fleet = (
        f" Under them, one lane per worker of the fleet ({len(workers)}): its starts per "
        "second over all hosts, on one scale for all workers."
        if workers
        else ""
    )
    return (
        f'<figure class="overview">{svg}<figcaption>Each lane is one host; grey is its '
        "responses per second, scaled to the host's own peak. Click a host's name for "
        f"its charts.{fleet}</figcaption></figure>"
    )


WORKER_LANE = 16


def _worker_lanes(
    workers: Sequence[str],
    rates: Mapping[str, Sequence[float]],
    edges: Sequence[float],
    top: float,
    left: float,
    title: str,
    *,
    label_chars: int,
) -> tuple[list[str], float]:
    """One lane per worker, its starts per second on one scale for all lanes, with a
    tooltip of its share; returns the pieces and the bottom of the last lane."""
    body = [
        f'<text class="halo" x="{_n(left)}" y="{_n(top + 13)}" font-size="11.5" '
        f'font-weight="600" fill="{INK}">{escape(title)}</text>'
    ]
    top += PANEL_TITLE
    bins = len(edges) - 1
    zero = [0.0] * bins
    peak = max((v for row in rates.values() for v in row), default=0.0)
    totals = {w: sum(rates.get(w, zero)) for w in workers}  # bins of equal seconds
    everyone = sum(totals.values()) or 1.0
    for i, worker in enumerate(workers):
        row = list(rates.get(worker, zero))
        lane_top = top + i * WORKER_LANE
        colour = WORKER_COLOURS[i % len(WORKER_COLOURS)]
        scale = ValueScale(peak, lane_top + WORKER_LANE - 1, WORKER_LANE - 3, exact=True)
        tip = (
            f"{worker}: {totals[worker] / everyone:.0%} of the starts here, "
            f"at most {format_count(max(row, default=0.0))} starts/s"
        )
        lane = [
            f'<g class="worker-lane" data-worker="{escape(worker)}"><title>{escape(tip)}</title>',
            f'<rect x="{_n(left)}" y="{_n(lane_top)}" width="{_n(edges[-1] - left)}" '
            f'height="{WORKER_LANE}" fill="#fff" fill-opacity="0"/>',
        ]
        band = _band(edges, zero, row, scale)
        if band:
            lane.append(f'<path d="{band}" fill="{colour}" fill-opacity="0.75"/>')
        lane.append(
            f'<text x="{_n(left - 6)}" y="{_n(lane_top + WORKER_LANE / 2)}" dy="3.5" '
            f'font-size="10.5" fill="{colour}" text-anchor="end">'
            f"{escape(short_label(worker, label_chars))}</text></g>"
        )
        body.append("".join(lane))
    return body, top + WORKER_LANE * len(workers)


def _total_hover(
    rates: Rates, total: Sequence[float], x: TimeScale, top: float, bottom: float
) -> list[str]:
    """Tooltips over the crawl's responses per second, a column per few bars."""
    per = max(1, math.ceil(HOVER_PIXELS / max(rates.edges[1] - rates.edges[0], 1e-9)))
    out = ['<g class="hover" fill="#fff" fill-opacity="0">']
    for i in range(0, len(total), per):
        j = min(len(total), i + per)
        start, stop = rates.bin_time(i, x.end)[0], rates.bin_time(j - 1, x.end)[1]
        mean = sum(total[i:j]) / (j - i)
        tip = (
            f"{format_clock(start, precise=True)}{DASH}{format_clock(stop, precise=True)}: "
            f"{format_count(mean)} responses/s, all hosts"
        )
        x0, x1 = rates.edges[i], rates.edges[j]
        out.append(
            f'<rect x="{_n(x0)}" y="{_n(top)}" width="{_n(x1 - x0)}" height="{_n(bottom - top)}">'
            f"<title>{escape(tip)}</title></rect>"
        )
    out.append("</g>")
    return out


# -- the table --------------------------------------------------------------------------

_COLUMNS = (
    ("host", "host"),
    ("requests", "requests started"),
    ("2xx", "2xx responses"),
    ("3xx", "3xx responses"),
    ("4xx", "4xx responses, 429 included (the log's summary counts 429 apart)"),
    ("5xx", "5xx responses, 503 included (the log's summary counts 503 apart)"),
    ("errors", "failed downloads"),
    ("throttles", "times the host pushed back"),
    ("blocks", "times the host blocked the crawl (a run of 403s after pages)"),
    ("told", "responses after which the host's told quota set its pace"),
    ("pauses", "pauses: Retry-After, a spent told quota, a block"),
    ("paused", "time paused"),
    ("gap", "gap between starts at the end"),
    ("limit", "concurrency limit at the end"),
    ("best", "best latency"),
    ("bounded by", "what held the host back most"),
)


BOUND_CLASS = ' class="bound-col"'


def _table(
    crawl: Crawl, names: Sequence[str], anchors: dict[str, str], bounds: Mapping[str, Bound]
) -> str:
    if not names:
        return ""
    head = "".join(
        f'<th scope="col" title="{title}"{BOUND_CLASS * (label == "bounded by")}>{label}</th>'
        for label, title in _COLUMNS
    )
    rows = []
    all_hosts = HostTotals()
    for name in names:
        totals = crawl.summary.get(name) or crawl.hosts[name].counted
        _add(all_hosts, totals)
        link = (
            f'<a href="#{anchors[name]}">{escape(name)}</a>'
            if name in crawl.hosts
            else escape(name)
        )
        bound = bounds[name]
        rows.append(
            f'<tr><th scope="row">{link}</th>{_cells(totals)}'
            f'<td class="bound-col bound-{bound.kind}" title="{escape(bound.sentence)}">'
            f"{escape(bound.label)}</td></tr>"
        )
    source = (
        "from the crawl's close line"
        if crawl.summary_source == "close"
        else "counted from the events (no close-line summary)"
    )
    hosts = f"{len(names)} host{'s' * (len(names) != 1)}"
    foot = f"<tr><td>{hosts}</td>{_cells(all_hosts, total=True)}<td></td></tr>"
    return (
        '<section id="summary"><h2>Summary</h2>'
        f'<p class="host-facts">Per host, {source}; gap and limit are the controller\'s '
        "last values.</p>"
        f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody><tfoot>{foot}</tfoot></table></div></section>"
    )


def _add(into: HostTotals, totals: HostTotals) -> None:
    into.requests += totals.requests
    into.responses.update(totals.responses)
    into.failures += totals.failures
    into.throttles += totals.throttles
    into.blocks += totals.blocks
    into.told += totals.told
    into.pauses += totals.pauses
    into.paused_seconds += totals.paused_seconds


def _cells(totals: HostTotals, *, total: bool = False) -> str:
    def cell(text: str, trouble: bool = False) -> str:
        return f'<td class="trouble">{text}</td>' if trouble else f"<td>{text}</td>"

    r = totals.responses
    cells = [
        cell(f"{totals.requests:,}"),
        *(cell(f"{r.get(k, 0):,}") for k in ("2xx", "3xx", "4xx")),
        cell(f"{r.get('5xx', 0):,}", r.get("5xx", 0) > 0),
        cell(f"{totals.failures:,}", totals.failures > 0),
        cell(f"{totals.throttles:,}", totals.throttles > 0),
        cell(f"{totals.blocks:,}", totals.blocks > 0),
        cell(f"{totals.told:,}"),
        cell(f"{totals.pauses:,}", totals.pauses > 0),
        cell(format_clock(totals.paused_seconds, precise=True) if totals.paused_seconds else "0"),
    ]
    if total:
        cells += [cell(""), cell(""), cell("")]
    else:
        cells += [
            cell(format_seconds(totals.delay)),
            cell("-" if totals.limit is None else str(totals.limit)),
            cell(format_seconds(totals.best_latency)),
        ]
    return "".join(cells)


# -- robots.txt and duplicates -----------------------------------------------------------

_OUTCOMES = {
    "rules": "rules: obeyed",
    "allow_all": "no rules (4xx): everything allowed",
    "unreachable": "unreachable (5xx, 429 or no answer): the origin was skipped",
}
#: Kinds of duplicates (``aimd/dupefilter/filtered/KIND``): what the canonicalizer
#: changed in the URL, in its order of stages; "exact" when nothing.
_DUPLICATE_KINDS = {
    "exact": "nothing: the same URL again",
    "clean": "surrounding spaces, tabs or newlines, scheme case",
    "host": "host spelling: case, IDNA, trailing dot, IP form",
    "port": "a default or empty port",
    "percent_encoding": "percent-encoding",
    "path": "dot segments, an empty path or a trailing slash",
    "query_filter": "tracking parameters or empty pairs",
    "query_order": "query order",
    "fragment": "a fragment",
}
_STAGE_ORDER = {kind: index for index, kind in enumerate(_DUPLICATE_KINDS)}
#: Hosts listed with the most duplicates.
DUPLICATE_HOSTS_SHOWN = 10


def _robots_and_duplicates(crawl: Crawl) -> str:
    """What robots.txt said per origin, and what the canonicalizer saved, when known."""
    origins, dupes = robots_origins(crawl), duplicates(crawl)
    if not origins and not dupes:
        return ""
    parts = ['<section id="limits"><h2>robots.txt and duplicates</h2>']
    if origins:
        rows = []
        for r in origins:
            outcome = _OUTCOMES.get(r.outcome, r.outcome)
            rows.append(
                f'<tr><th scope="row">{escape(r.origin)}</th>'
                f"<td>{'-' if r.status is None else r.status}</td>"
                f'<td class="bound-col">{escape(outcome)}</td>'
                f"<td>{format_seconds(r.crawl_delay) if r.crawl_delay else '-'}</td>"
                f"<td>{r.fetches:,}</td></tr>"
            )
        parts.append(
            '<div class="table-wrap"><table class="robots"><thead><tr>'
            '<th scope="col">origin</th><th scope="col" title="the last fetch\'s status">'
            'status</th><th scope="col" class="bound-col">outcome</th>'
            '<th scope="col">Crawl-delay</th><th scope="col">fetches</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>"
        )
    if dupes:
        parts.append(_duplicates(dupes, crawl.top_duplicates))
    parts.append("</section>")
    return "".join(parts)


def _duplicates(dupes: Mapping[str, int], hosts: DuplicateHosts) -> str:
    """The duplicates by kind and the hosts that had the most, as two small tables."""
    total = dupes.get("total", sum(v for k, v in dupes.items() if k != "total"))
    kinds = sorted(
        ((kind, n) for kind, n in dupes.items() if kind != "total" and n),
        key=lambda kv: (-kv[1], _STAGE_ORDER.get(kv[0], len(_STAGE_ORDER)), kv[0]),
    )
    text = f"{total:,} request{'s' * (total != 1)} dropped as duplicates of a page already seen"
    if not kinds:
        return f'<p class="duplicates">{text}.</p>'
    several = sum(n for _, n in kinds) > total
    parts = [
        f'<p class="duplicates">{text}, by what the canonicalizer changed in their URL'
        + (" (a request changed by several stages counts under each)" if several else "")
        + ":</p>"
    ]
    rows = "".join(
        f'<tr><th scope="row" title="{escape(kind)}">{escape(_DUPLICATE_KINDS.get(kind, kind))}'
        f"</th><td>{n:,}</td><td>{_percent(n, total)}</td></tr>"
        for kind, n in kinds
    )
    parts.append(
        '<div class="duplicate-tables"><div class="table-wrap">'
        '<table class="duplicates"><thead><tr>'
        '<th scope="col">changed</th><th scope="col">requests</th>'
        '<th scope="col" title="of the duplicates">share</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
    )
    listed = [host for host in hosts.certain(DUPLICATE_HOSTS_SHOWN) if hosts.counts[host]]
    heard = sum(1 for n in hosts.counts.values() if n)
    if heard and not listed:
        parts.append(f'<div class="table-wrap">{_more_hosts(hosts, 0, heard)}</div>')
    elif listed:
        rows = "".join(
            f'<tr><th scope="row">{escape(host)}</th><td>{hosts.text(host)}</td>'
            f"<td>{_percent(hosts.counts[host], total)}</td></tr>"
            for host in listed
        )
        parts.append(
            '<div class="table-wrap"><table class="duplicate-hosts"><thead><tr>'
            '<th scope="col">host</th><th scope="col">duplicates</th>'
            '<th scope="col" title="of the duplicates">share</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>{_more_hosts(hosts, len(listed), heard)}</div>"
        )
    parts.append("</div>")
    return "".join(parts)


def _more_hosts(hosts: DuplicateHosts, listed: int, heard: int) -> str:
    """How many hosts with duplicates the table leaves out, from the real number
    where the close line has it, and the most any of them can have had when
    some are left out for want of proof (their counts are bounds)."""
    if hosts.count is not None:
        more, least = hosts.count - listed, hosts.count_is_least
    else:  # an older file: only the hosts it lists are known
        more, least = heard - listed, heard >= CLOSE_HOSTS
    if more <= 0:
        return ""
    some = f"{'at least ' * least}{more:,}"
    if listed:
        text = f"... and {some} more host{'s' * (more != 1)}"
    else:
        text = f"{some} host{'s' * (more != 1)} had duplicates"
    if listed < min(DUPLICATE_HOSTS_SHOWN, heard):
        text += (
            f", none with more than {hosts.beyond(listed):,} (past some thousands of hosts "
            f"the counts are bounds, too wide to rank these)"
        )
    return f'<p class="facts">{text}.</p>'


def _percent(n: int, total: int) -> str:
    return f"{100 * n / total:.0f}%" if total else "-"


# -- one host ---------------------------------------------------------------------------

MARK_ROW = 16
PANEL_TITLE = 21
PANEL_GAP = 10


def _host_section(
    host: HostSeries,
    totals: HostTotals | None,
    anchor: str,
    end: float,
    bound: Bound,
    workers: Sequence[str] = (),
) -> str:
    totals = totals or host.counted
    x = TimeScale(end, LEFT, PLOT)
    rates = _rates(host, x)
    body: list[str] = []
    overlay: list[str] = []

    marks = group_marks(host.throttles, x.seconds(MARK_PIXELS))
    groups = [g for g in REASON_GROUPS if any(m.group is g for m in marks)]
    strip_top = 4.0
    rows = max(1, len(groups))
    strip_height = rows * MARK_ROW
    for row, group in enumerate(groups):
        cy = strip_top + row * MARK_ROW + MARK_ROW / 2
        body.append(
            f'<text x="{LEFT - 6}" y="{_n(cy)}" dy="3.5" font-size="10.5" fill="{group.colour}" '
            f'text-anchor="end">{escape(group.label)}</text>'
        )
        overlay.extend(_mark(m, x(m.at), cy, 4.5) for m in marks if m.group is group)
    if not groups:
        body.append(
            f'<text x="{LEFT - 6}" y="{_n(strip_top + MARK_ROW / 2)}" dy="3.5" font-size="10.5" '
            f'fill="{MUTED}" text-anchor="end">throttles</text>'
            f'<text x="{LEFT + 4}" y="{_n(strip_top + MARK_ROW / 2)}" dy="3.5" font-size="10.5" '
            f'fill="{MUTED}">none</text>'
        )
    y = strip_top + strip_height + 4

    panels: list[tuple[str, float, float, Callable[[float], str]]] = []
    limit_points, limit_known = _state_points(host.limit, totals.limit, host)
    floor, inferred = gap_floor(host, totals)
    gap_points, gap_known = _state_points(raise_to_floor(host.gap, floor), totals.delay, host)
    limit_top = max([v for _, v in limit_points] + [v for v in rates.in_flight if v] + [1.0])
    gap_top = max([v for _, v in gap_points] + [v for _, v in floor] + [0.0])
    rate_top = max([r + f for r, f in zip(rates.responses, rates.failures, strict=True)] + [0.0])
    latency_top = max([v for v in rates.latency if v is not None] + [0.0])
    panels = [
        ("concurrency limit", 70, limit_top, lambda v: f"{v:g}"),
        ("gap between starts", 70, gap_top, format_seconds),
        ("responses per second", 52, rate_top, format_count),
        ("mean latency", 52, latency_top, format_seconds),
    ]
    content_top = y
    scales = []
    for title, height, top, label in panels:
        body.append(
            f'<text class="halo" x="{LEFT}" y="{_n(y + 13)}" font-size="11.5" '
            f'font-weight="600" fill="{INK}">{title}</text>'
        )
        y += PANEL_TITLE
        scale = ValueScale(top, y + height, height)
        scales.append(scale)
        body.append(_value_axis(scale, LEFT, PLOT, label))
        body.append(f'<path d="M{LEFT} {_n(y + height)}h{PLOT}" stroke="{AXIS}"/>')
        y += height + PANEL_GAP
    hover_bottom = y - PANEL_GAP
    if workers:
        lanes, y = _worker_lanes(
            workers,
            worker_rates([host], workers, rates.width, x.end),
            rates.edges,
            y,
            LEFT,
            "starts per second, by worker",
            label_chars=14,
        )
        body.extend(lanes)
        y += PANEL_GAP
    axis_y = y - PANEL_GAP
    limit_y, gap_y, rate_y, latency_y = scales

    spans = merge_pauses(host.pauses, x.end, join=x.seconds(1))
    background = [_pause_rect(span, x, 0, axis_y) for span in spans]
    background.extend(_time_axis(x, axis_y, content_top))

    zero = [0.0] * len(rates.responses)
    in_flight = _band(rates.edges, zero, rates.in_flight, limit_y)
    if in_flight:
        body.append(f'<path class="in-flight" d="{in_flight}" fill="{IN_FLIGHT}"/>')
    body.extend(_floor_line(floor, x, gap_y, inferred=inferred))  # under the gap line
    for name, points, known, scale in (
        ("limit", limit_points, limit_known, limit_y),
        ("gap", gap_points, gap_known, gap_y),
    ):
        d = _step_line(points, x, scale)
        if d and known:
            body.append(
                f'<path class="{name}" d="{d}" fill="none" stroke="{LINE}" stroke-width="2" '
                'stroke-linejoin="round"/>'
            )
        elif d:
            body.append(
                f'<path class="{name} from-close" d="{d}" fill="none" stroke="{LINE}" '
                'stroke-width="2" stroke-dasharray="6 4"/>'
                f'<text class="halo" x="{_n(x.left + x.width - 4)}" y="{_n(scale.bottom - 6)}" '
                f'font-size="10.5" fill="{MUTED}" text-anchor="end">no change recorded; '
                "the value at the end of the crawl</text>"
            )
        else:
            body.append(
                f'<text x="{LEFT + 4}" y="{_n(scale.bottom - 6)}" font-size="10.5" '
                f'fill="{MUTED}">no {name} recorded</text>'
            )
    totals_band = [r + f for r, f in zip(rates.responses, rates.failures, strict=True)]
    responses = _band(rates.edges, zero, rates.responses, rate_y)
    if responses:
        body.append(f'<path class="responses" d="{responses}" fill="{RESPONSES}"/>')
    failures = _band(rates.edges, rates.responses, totals_band, rate_y)
    if failures:
        body.append(f'<path class="failures" d="{failures}" fill="{FAILURES}"/>')
    latency = _broken_steps(rates.edges, rates.latency, latency_y)
    if latency:
        body.append(
            f'<path class="latency" d="{latency}" fill="none" stroke="{LATENCY}" '
            'stroke-width="1.5"/>'
        )

    description = (
        f"{host.host}: concurrency limit, gap, responses per second and latency over time, "
        f"{totals.throttles} throttles, {totals.pauses} pauses"
    )
    hover = _hover_columns(
        host, x, content_top, hover_bottom, (limit_points, gap_points, floor), spans
    )
    svg = _svg(WIDTH, axis_y + 22, description, [*background, *body, *hover, *overlay])
    return (
        f'<section class="host" id="{anchor}" data-host="{escape(host.host)}">'
        f"<h2>{escape(host.host)}</h2>{_host_facts(totals)}"
        f'<p class="bound bound-{bound.kind}"><strong>{escape(bound.label)}.</strong> '
        f"{escape(bound.sentence)}</p>{svg}</section>"
    )


def _floor_line(
    floor: Sequence[tuple[float, float]], x: TimeScale, y: ValueScale, *, inferred: bool
) -> list[str]:
    """The robots.txt Crawl-delay under the gap: dashed, labelled, with its value on hover."""
    points = [(t, v) for t, v in floor if v > 0] if floor else []
    if not points:
        return []
    d = _step_line(points, x, y)
    value = points[-1][1]
    tip = f"robots.txt Crawl-delay: the gap never goes below {format_seconds(value)}"
    if inferred:
        tip = (
            f"gap floor {format_seconds(value)}, from the close line: the events did not "
            "record when it came (a Crawl-delay, in a file from before Crawl-delay events)"
        )
    above = y(value) - 5
    label_y = above if above - 10 >= y.bottom - y.height else y(value) + 14
    return [
        f'<g class="floor"><title>{escape(tip)}</title>'
        f'<path d="{d}" fill="none" stroke="{FLOOR}" stroke-width="5" stroke-opacity="0.55" '
        'stroke-dasharray="7 4"/>'
        f'<text class="halo" x="{_n(x.left + x.width - 4)}" y="{_n(label_y)}" '
        f'font-size="10.5" fill="{FLOOR_TEXT}" text-anchor="end">Crawl-delay '
        f"{escape(format_seconds(value))}</text></g>"
    ]


def _state_points(
    points: Sequence[tuple[float, float]], final: float | None, host: HostSeries
) -> tuple[list[tuple[float, float]], bool]:
    """A step series, or the value from the close line when the events never changed it.

    The second item says whether the points were recorded as they happened.
    """
    if points:
        return [(t, float(v)) for t, v in points], True
    if final is None:
        return [], True
    return [(host.active[0], float(final))], False


def _host_facts(totals: HostTotals) -> str:
    ok = totals.responses.get("2xx", 0) + totals.responses.get("3xx", 0)
    facts = [
        f"{totals.requests:,} requests",
        f"{ok:,} ok",
        f"{totals.throttles:,} throttle{'s' * (totals.throttles != 1)}",
        f"{totals.pauses:,} pause{'s' * (totals.pauses != 1)}"
        + (f" ({format_clock(totals.paused_seconds, precise=True)})" if totals.pauses else ""),
        f"ended at gap {format_seconds(totals.delay)}, limit "
        f"{'-' if totals.limit is None else totals.limit}",
    ]
    if totals.best_latency is not None:
        facts.append(f"best latency {format_seconds(totals.best_latency)}")
    return f'<p class="host-facts">{" · ".join(facts)}</p>'
