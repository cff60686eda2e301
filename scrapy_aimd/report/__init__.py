"""The picture of a crawl: ``python -m scrapy_aimd.report EVENTS_FILE -o crawl.html``.

Several events files (a fleet's workers') are drawn as one crawl, a lane per worker.

:mod:`.series` reads an ``AIMD_EVENTS_FILE`` into per-host series (no HTML, no
Scrapy), :mod:`.html` draws them as one self-contained page of inline SVG and
:mod:`.png` as a picture, when matplotlib is installed.
"""

from __future__ import annotations

from .html import ReportOptions, render_html
from .series import (
    Crawl,
    HostSeries,
    HostTotals,
    Pause,
    Throttle,
    order_hosts,
    read_crawl,
    read_events,
    read_events_files,
)

__all__ = [
    "Crawl",
    "HostSeries",
    "HostTotals",
    "Pause",
    "ReportOptions",
    "Throttle",
    "order_hosts",
    "read_crawl",
    "read_events",
    "read_events_files",
    "render_html",
]
