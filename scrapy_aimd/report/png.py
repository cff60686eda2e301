"""The crawl as a PNG, for a README or a chat message; needs matplotlib, which is optional."""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from .draw import (
    REASON_GROUPS,
    format_clock,
    gap_floor,
    merge_pauses,
    raise_to_floor,
    reason_group,
)
from .series import Crawl, iter_steps

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = ["MatplotlibMissing", "have_matplotlib", "render_png"]

_MARKERS = {"triangle": "v", "square": "s", "diamond": "D", "circle": "o", "cross": "x"}


class MatplotlibMissing(RuntimeError):
    """``--png`` was asked for but matplotlib is not installed."""


def have_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def render_png(crawl: Crawl, hosts: Sequence[str], path: str | Path, title: str) -> None:
    """Limit and gap of each host over time, with throttle marks, pause spans and the
    Crawl-delay floor; the legend names only what is drawn."""
    if not have_matplotlib():
        raise MatplotlibMissing("--png needs matplotlib: pip install matplotlib")
    matplotlib: Any = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    plt: Any = importlib.import_module("matplotlib.pyplot")
    importlib.import_module("matplotlib.ticker")

    hosts = [name for name in hosts if name in crawl.hosts]
    end = max(crawl.end, 1.0)
    rows = max(1, len(hosts))
    height = 1.9 * rows + 0.7
    fig, axes = plt.subplots(rows, 2, figsize=(12, height), sharex=True, squeeze=False)
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
    for col in range(2):
        ax = axes[rows - 1][col]
        ax.set_xlabel("time since the crawl opened", fontsize=8.5)
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
    fig.savefig(path, dpi=110)
    plt.close(fig)
