"""The crawl as a PNG, for a README or a chat message; needs matplotlib, which is optional."""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from .draw import (
    REASON_GROUPS,
    WORKER_COLOURS,
    bin_seconds,
    fleet_workers,
    format_clock,
    gap_floor,
    merge_pauses,
    raise_to_floor,
    reason_group,
    worker_rates,
)
from .series import Crawl, iter_steps

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = ["MatplotlibMissing", "figure", "have_matplotlib", "render_png"]

#: Bins of the workers' starts per second across the picture's width.
WORKER_BINS = 120

_MARKERS = {"triangle": "v", "square": "s", "diamond": "D", "circle": "o", "cross": "x"}


class MatplotlibMissing(RuntimeError):
    """``--png`` was asked for but matplotlib is not installed."""


def have_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def render_png(crawl: Crawl, hosts: Sequence[str], path: str | Path, title: str) -> None:
    """Draw :func:`figure` to ``path``."""
    fig = figure(crawl, hosts, title)
    fig.savefig(path, dpi=110)
    importlib.import_module("matplotlib.pyplot").close(fig)


def figure(crawl: Crawl, hosts: Sequence[str], title: str) -> Any:
    """Limit and gap of each host over time, with throttle marks, pause spans and the
    Crawl-delay floor; under them, for a fleet, each worker's starts per second on
    all hosts. The legend names only what is drawn. A matplotlib ``Figure``."""
    if not have_matplotlib():
        raise MatplotlibMissing("--png needs matplotlib: pip install matplotlib")
    matplotlib: Any = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    plt: Any = importlib.import_module("matplotlib.pyplot")
    importlib.import_module("matplotlib.ticker")

    hosts = [name for name in hosts if name in crawl.hosts]
    end = max(crawl.end, 1.0)
    rows = max(1, len(hosts))
    workers = fleet_workers(crawl)
    height = 1.9 * (rows + (1 if workers else 0)) + 0.7
    fig = plt.figure(figsize=(12, height))
    grid = fig.add_gridspec(rows + (1 if workers else 0), 2)
    first: Any = fig.add_subplot(grid[0, 0])
    axes: list[list[Any]] = [
        [first if (r, c) == (0, 0) else fig.add_subplot(grid[r, c], sharex=first) for c in range(2)]
        for r in range(rows)
    ]
    bottom: list[Any] = axes[rows - 1]
    if workers:
        lanes: Any = fig.add_subplot(grid[rows, :], sharex=first)
        _draw_workers(lanes, crawl, workers, end)
        bottom = [lanes]
    for inner in (panel for pair in axes for panel in pair if panel not in bottom):
        inner.tick_params(labelbottom=False)
    fig.text(0.01, 1 - 0.12 / height, title, ha="left", va="top", fontsize=13)
    for row, name in enumerate(hosts):
        host = crawl.hosts[name]
        spans = merge_pauses(host.pauses, end)
        floor, _ = gap_floor(host, crawl.summary.get(name))
        panels: list[tuple[list[tuple[float, float]], str]] = [
            ([(t, float(v)) for t, v in host.limit], "concurrency limit"),
            (raise_to_floor(host.gap, floor), "gap between starts (s)"),
        ]
        for col, (points, label) in enumerate(panels):
            ax: Any = axes[row][col]
            for span in spans:
                ax.axvspan(span.start, span.end, color="#EBDDF0", lw=0)
            xs: list[float] = []
            ys: list[float] = []
            for start, stop, value in iter_steps(points, end):
                xs += [start, stop]
                ys += [value, value]
            fy: list[float] = []
            if col == 1 and floor:
                fx: list[float] = []
                for start, stop, value in iter_steps(floor, end):
                    fx += [start, stop]
                    fy += [value, value]
                ax.plot(fx, fy, color="#D4A72C", lw=4, alpha=0.55, ls=(0, (4, 2)))
            ax.plot(xs, ys, color="#0072B2", lw=1.8)
            top = max(ys + fy, default=1.0) or 1.0
            for throttle in host.throttles:
                group = reason_group(throttle.reason)
                ax.plot(
                    throttle.t,
                    top * 1.12,
                    _MARKERS[group.shape],
                    color=group.colour,
                    ms=5,
                    mfc=group.colour if throttle.decreased else "white",
                )
            ax.set_ylim(0, top * 1.22)
            if col == 0:
                ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=5, integer=True))
            ax.set_xlim(0, end)
            ax.set_title(f"{name}: {label}", fontsize=9.5, loc="left")
            ax.grid(color="#e6e8eb", lw=0.8)
            ax.spines[["top", "right"]].set_visible(False)
            ax.tick_params(labelsize=8)
    for ax in bottom:
        opened = "the first worker opened" if workers else "the crawl opened"
        ax.set_xlabel(f"time since {opened}", fontsize=8.5)
        ax.xaxis.set_major_formatter(
            matplotlib.ticker.FuncFormatter(lambda t, _pos: format_clock(max(t, 0.0)))
        )
    drawn = [crawl.hosts[name] for name in hosts]
    seen = {reason_group(t.reason).key for h in drawn for t in h.throttles}
    handles = [
        matplotlib.lines.Line2D(
            [], [], ls="", marker=_MARKERS[g.shape], color=g.colour, label=f"throttle: {g.label}"
        )
        for g in REASON_GROUPS
        if g.key in seen
    ]
    if any(h.pauses for h in drawn):
        handles.append(matplotlib.patches.Patch(color="#EBDDF0", label="paused (Retry-After)"))
    if any(gap_floor(h, crawl.summary.get(h.host))[0] for h in drawn):
        handles.append(
            matplotlib.lines.Line2D(
                [], [], color="#D4A72C", lw=4, alpha=0.55, label="Crawl-delay floor"
            )
        )
    fig.legend(
        handles=handles,
        loc="upper right",
        bbox_to_anchor=(0.995, 1 - 0.08 / height),
        ncol=max(1, len(handles)),
        fontsize=8,
        frameon=False,
    )
    fig.subplots_adjust(
        left=0.045,
        right=0.99,
        top=1 - 0.75 / height,
        bottom=0.55 / height,
        hspace=0.42,
        wspace=0.1,
    )
    return fig


def _draw_workers(ax: Any, crawl: Crawl, workers: Sequence[str], end: float) -> None:
    """One line per worker: its starts per second on all hosts, as the HTML's lanes."""
    ticks = [h.tick for h in crawl.hosts.values() if h.tick > 0]
    width = bin_seconds(end, WORKER_BINS, max(ticks, default=1.0))
    rates = worker_rates(crawl.hosts.values(), workers, width, end)
    for k, worker in enumerate(workers):
        values = rates.get(worker, [])
        xs = [x for i in range(len(values)) for x in (i * width, min(end, (i + 1) * width))]
        ys = [v for v in values for _ in (0, 1)]
        colour = WORKER_COLOURS[k % len(WORKER_COLOURS)]
        ax.plot(xs, ys, color=colour, lw=1.6, label=worker)
    ax.set_xlim(0, end)
    ax.set_ylim(bottom=0)
    ax.set_title("starts per second, by worker, all hosts", fontsize=9.5, loc="left")
    ax.legend(loc="upper right", fontsize=8, frameon=False, ncol=min(len(workers), 4))
    ax.grid(color="#e6e8eb", lw=0.8)
    ax.spines[["top", "right"]].set_visible(False)
    ax.tick_params(labelsize=8)
