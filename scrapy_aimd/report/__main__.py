"""``python -m scrapy_aimd.report EVENTS_FILE [EVENTS_FILE ...] -o crawl.html [--png crawl.png]``.

Several files are a fleet's workers, drawn as one crawl with a lane per worker.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .html import ReportOptions, render_html
from .png import MatplotlibMissing, render_png
from .series import apart_in_time, order_hosts, read_events_files

if TYPE_CHECKING:
    from collections.abc import Sequence


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scrapy_aimd.report",
        description="Draw a crawl from its AIMD_EVENTS_FILE as one self-contained HTML page.",
    )
    p.add_argument(
        "events",
        type=Path,
        nargs="+",
        metavar="EVENTS_FILE",
        help="the crawl's events file; several: a fleet's workers' files, drawn as one crawl",
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        help="the HTML file to write (default: the first EVENTS_FILE with .html), - for stdout",
    )
    p.add_argument("--png", type=Path, metavar="PNG", help="also draw a PNG (needs matplotlib)")
    p.add_argument(
        "--order",
        choices=("trouble", "requests", "name"),
        default="trouble",
        help="host order: most paused and throttled first (default), most requests, or name",
    )
    p.add_argument(
        "--max-hosts",
        type=int,
        default=30,
        metavar="N",
        help="draw charts for the first N hosts; the table lists all (default: 30)",
    )
    p.add_argument("--title", help="the page title (default: 'Crawl of SPIDER')")
    return p


def sources(paths: Sequence[Path]) -> list[str]:
    """The files as the page names them: their names, or their paths where names repeat
    (each worker's ``events.jsonl`` in its own directory)."""
    names = [path.name for path in paths]
    return names if len(set(names)) == len(names) else [str(path) for path in paths]


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    events: list[Path] = args.events
    try:
        crawl = read_events_files(events)
    except OSError as exc:
        name = exc.filename if exc.filename is not None else events[0]
        print(f"error: cannot read {name}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if crawl.lines and crawl.bad_lines == crawl.lines:
        one = len(events) == 1
        what = f"{events[0].name} has" if one else "the files have"
        print(
            f"error: {what} no event of scrapy-aimd in {'its' if one else 'their'} "
            f"{crawl.lines:,} lines "
            "(an events file is written by the crawl with AIMD_EVENTS_FILE)",
            file=sys.stderr,
        )
        return 1
    options = ReportOptions(
        order=args.order,
        max_hosts=args.max_hosts,
        title=args.title,
        source=", ".join(sources(events)),
    )
    page = render_html(crawl, options)
    output: Path | None = args.output
    if output is None:
        output = events[0].with_suffix(".html")
    if output.exists() and any(output.resolve() == path.resolve() for path in events):
        which = "the events file" if len(events) == 1 else "one of the events files"
        print(f"error: {output} is {which}; choose another with -o", file=sys.stderr)
        return 1
    if str(output) == "-":
        sys.stdout.write(page)
    else:
        try:
            output.write_text(page, encoding="utf-8")
        except OSError as exc:
            print(f"error: cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        print(
            f"wrote {output} ({len(crawl.hosts)} hosts, "
            + (f"{len(crawl.workers)} workers, " if len(crawl.workers) > 1 else "")
            + f"{crawl.lines:,} lines, "
            f"{len(page.encode()) / 1024:,.0f} KiB)",
            file=sys.stderr,
        )
    if len(crawl.spiders) > 1:
        print(
            f"note: the files are of different spiders ({', '.join(sorted(crawl.spiders))}),"
            " drawn as one crawl",
            file=sys.stderr,
        )
    for name, gap in apart_in_time(crawl):
        print(
            f"note: the files are of crawls apart in time ({name} began {gap:,.0f} s after "
            "the files before it ended), drawn as one crawl",
            file=sys.stderr,
        )
    if crawl.bad_lines:
        print(f"note: skipped {crawl.bad_lines:,} unreadable lines", file=sys.stderr)
    if crawl.lines and not crawl.closed:
        print("note: no close line; the crawl did not finish", file=sys.stderr)
    if args.png is not None:
        title = options.title or (f"Crawl of {crawl.spider}" if crawl.spider else "Crawl")
        hosts = order_hosts(crawl, args.order)[: max(0, args.max_hosts)]
        try:
            render_png(crawl, hosts, args.png, title)
        except MatplotlibMissing as exc:
            print(f"note: no PNG written: {exc}", file=sys.stderr)
        else:
            print(f"wrote {args.png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
