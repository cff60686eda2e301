"""CPU per page: scrapy-aimd against stock Scrapy, on a broad crawl, in one run.

A broad crawl is CPU-bound on its callbacks and on Scrapy itself: every 0.1 ms
a page that the add-on costs is throughput its user pays for. The farm here
has ``--hosts`` (2,000) loopback hosts of ``--pages`` (10) fast pages each,
each with a robots.txt (``ROBOTSTXT_OBEY = True``), no limits, no latency:
nothing for a controller to do but keep out of the way. The same spider
(``tests/crawlrunner.py``'s ``FarmSpider``: one item per page, every link
followed) crawls it with stock Scrapy's defaults and with the add-on, each in a
fresh process; the crawl process's CPU (user and system, from the kernel's
accounting of the child) is divided by the pages it fetched.

The machine's load moves one crawl's CPU per page by several percent, so the
two crawlers take turns in ``--rounds`` rounds (in the opposite order every
other round), and the ratio printed is the median of the rounds' ratios,
with their range. ``--profile FILE`` also runs one scrapy-aimd crawl under
``cProfile`` and prints its top entries by own time (and writes the profile).

    PYTHONPATH=. python benchmarks/bench_cpu.py [--hosts 2000] [--pages 10]
        [--rounds 3] [--concurrency 16] [--profile FILE] [--top 25]

``--concurrency`` sets ``CONCURRENT_REQUESTS`` of both (Scrapy's default, 16).
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "tests" / "crawlrunner.py"

from sitefarm import HostSpec, start_farm  # noqa: E402

#: Settings of both crawls: Scrapy's defaults, robots.txt on.
COMMON = {"ROBOTSTXT_OBEY": True, "LOG_LEVEL": "INFO"}
CRAWLERS: dict[str, dict[str, Any]] = {
    "stock Scrapy": {"ADDONS": {}},
    "scrapy-aimd": {"ADDONS": {"scrapy_aimd.Addon": 500}},
}


def farm_specs(hosts: int, pages: int) -> list[HostSpec]:
    return [
        HostSpec(name=f"h{n}", pages=pages, links_per_page=4, seed=n, robots="User-agent: *\n")
        for n in range(hosts)
    ]


def crawl(
    urls: list[str], settings: dict[str, Any], out: Path, profile: Path | None = None
) -> tuple[float, int, float]:
    """One crawl in a fresh process: its CPU seconds, the pages it fetched, its wall time."""
    out.mkdir(parents=True, exist_ok=True)
    config = out / "config.json"
    config.write_text(json.dumps({"start_urls": urls, "settings": settings, "out": str(out)}))
    command = [sys.executable]
    if profile is not None:
        command += ["-m", "cProfile", "-o", str(profile)]
    command += [str(RUNNER), str(config)]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    started = time.monotonic()
    with (out / "stderr.txt").open("wb") as err:
        process = subprocess.Popen(command, env=env, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - started
    code = process.returncode = os.waitstatus_to_exitcode(status)
    if code != 0:
        shown = (out / "stderr.txt").read_text(errors="replace")[-3000:]
        raise SystemExit(f"the crawl failed ({code}): {shown}")
    items = out / "items.jsonl"
    pages = sum(1 for line in items.read_text().splitlines() if line) if items.exists() else 0
    return usage.ru_utime + usage.ru_stime, pages, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    # A socket per host in the farm, and a connection per host in the crawler.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    specs = farm_specs(args.hosts, args.pages)
    common = {**COMMON, "CONCURRENT_REQUESTS": args.concurrency}
    per_page: dict[str, list[float]] = {name: [] for name in CRAWLERS}
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="aimd-bench-cpu-") as tmp:
        for round_ in range(args.rounds):
            order = list(CRAWLERS) if round_ % 2 == 0 else list(reversed(CRAWLERS))
            got: dict[str, float] = {}
            for name in order:
                with start_farm(specs, max_seconds=900) as farm:
                    urls = [url + "/" for url in farm.urls.values()]
                    out = Path(tmp, f"r{round_}-{name.split()[0]}")
                    cpu, pages, wall = crawl(urls, {**common, **CRAWLERS[name]}, out)
                got[name] = cpu / max(1, pages) * 1000
                per_page[name].append(got[name])
                print(
                    f"round {round_ + 1}, {name}: {pages} pages, {cpu:.1f} s CPU, "
                    f"{got[name]:.3f} ms a page, {wall:.1f} s wall",
                    file=sys.stderr,
                )
            ratios.append(got["scrapy-aimd"] / got["stock Scrapy"])
        print(
            f"\n{args.hosts} hosts x {args.pages} pages, robots.txt on, CONCURRENT_REQUESTS "
            f"{args.concurrency}, {args.rounds} rounds\n"
        )
        print("| crawler | CPU a page (ms), median | rounds |")
        print("|---|---:|---|")
        for name, values in per_page.items():
            shown = ", ".join(f"{v:.3f}" for v in values)
            print(f"| {name} | {statistics.median(values):.3f} | {shown} |")
        print(
            f"\nscrapy-aimd / stock Scrapy, CPU a page: {statistics.median(ratios):.3f}x "
            f"(rounds {min(ratios):.3f}x to {max(ratios):.3f}x)"
        )
        if args.profile is not None:
            with start_farm(specs, max_seconds=900) as farm:
                urls = [url + "/" for url in farm.urls.values()]
                crawl(
                    urls,
                    {**common, **CRAWLERS["scrapy-aimd"]},
                    Path(tmp, "profile"),
                    profile=args.profile,
                )
            print(f"\nscrapy-aimd under cProfile, top {args.top} by own time:\n")
            stats = pstats.Stats(str(args.profile))
            stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
