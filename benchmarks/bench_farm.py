"""Crawl the benchmark site farm with stock Scrapy and with scrapy-aimd, side by side.

Each crawler gets a fresh farm (``sitefarm.benchmark_farm``: sixteen loopback
hosts that push back each their own way, or are slow in a way a controller can misread)
and a fresh process, with the same ``CONCURRENT_REQUESTS`` and ``ROBOTSTXT_OBEY``. What
each crawl did is read from the farm's request log, the sites' own view, so the three
are measured alike:

1. Scrapy's defaults;
2. Scrapy with AutoThrottle (target concurrency 4);
3. scrapy-aimd through its add-on.

    PYTHONPATH=. python benchmarks/bench_farm.py [--runs N] [--only aimd ...]
        [--cap SECONDS] [--json OUT.json] [--keep DIR] [--hosts]
        [--farm FARM.json | --farm limiters]
        [--alone HOST ...]

The farm's clock (pauses, the outage, token buckets) starts at the crawl's first
request, and so does each host's possible time; a host's actual time runs from that
request to the host's last response. Per host the benchmark prints both and their
ratio (possible / actual: 1.0 is as fast as the host allows).

``--runs N`` reports the median of N runs of each crawler (taking turns); ``--cap``
bounds each crawl (default: 30x the possible time, at most 180 s), and a crawl that
reaches it is reported as capped with what it had fetched. ``--keep DIR`` keeps every
farm log, crawl log and scrapy-aimd events file (draw one with
``python -m scrapy_aimd.report EVENTS -o crawl.html``). ``--alone HOST ...`` also crawls
those hosts one at a time with their limits removed: where even that takes longer
than a host's possible time, the crawler's CPU bounds the host, not the controller.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sitefarm import (
    HostSpec,
    benchmark_farm,
    host_possible_seconds,
    limiter_farm,
    possible_crawl_seconds,
    specs_from_json,
    start_farm,
    summarize,
    totals,
)

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
CRAWL_SCRIPT = BENCHMARKS / "farm_crawl.py"

#: Settings every crawler shares: the comparison is about what each does with them.
#: 32 requests at once, not Scrapy's 16: the benchmark farm's pages take 203 s to the
#: first byte in all, which 16 slots cannot serve in less than 12.7 s, so that the slots,
#: not the hosts, would set every crawler's time (and the per-host ratios).
CONCURRENT_REQUESTS = 32
COMMON_SETTINGS: dict[str, Any] = {
    "ROBOTSTXT_OBEY": True,
    "CONCURRENT_REQUESTS": CONCURRENT_REQUESTS,
}


@dataclass(frozen=True)
class Contender:
    name: str
    label: str
    settings: dict[str, Any]


CONTENDERS = {
    c.name: c
    for c in (
        Contender("defaults", "Scrapy defaults", {}),
        Contender(
            "autothrottle",
            "Scrapy + AutoThrottle",
            {"AUTOTHROTTLE_ENABLED": True, "AUTOTHROTTLE_TARGET_CONCURRENCY": 4.0},
        ),
        Contender("aimd", "scrapy-aimd", {"ADDONS": {"scrapy_aimd.Addon": 500}}),
    )
}

#: Default cap: this many times the possible time, but never more than DEFAULT_CAP_MAX.
CAP_FACTOR = 30.0
DEFAULT_CAP_MAX = 180.0
#: Seconds past the cap that a crawl gets to close (CLOSESPIDER_TIMEOUT waits for the
#: requests in flight) before its process is killed.
KILL_GRACE = 60.0

# The targets for scrapy-aimd (issue 10; the ratio to AutoThrottle from issue 4).
TARGET_HOST_RATIO = 0.75
TARGET_EFFICIENCY = 0.85
TARGET_THROTTLED_SHARE = 0.02
"""429+503 outside an outage, as a share of all requests."""
TARGET_EFFICIENCY_RATIO = 3.0


@dataclass
class CrawlRun:
    """One crawl of a fresh farm: the farm's view of it, and how it ended."""

    contender: str
    wall_seconds: float
    """From the spider's opening to its closing (to the kill when killed)."""
    capped: bool
    finish_reason: str
    requests: int
    pages_fetched: int
    pages_total: int
    duplicate_fetches: int
    throttled: int
    """429 and 503 responses the farm sent."""
    outage_refused: int
    """Of those, the 503s of an outage, which no crawler avoids but by not asking."""
    over_capacity_seconds: float
    crawl_delay_violations: int
    possible_seconds: float
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per host: HostSummary fields, plus ``possible_seconds``, ``actual_seconds`` (the
    host's last response, in seconds since the crawl's first request), ``ratio``
    (possible / actual), ``complete`` (every page fetched) and ``done_after`` (the
    host's last response, in seconds since the spider opened)."""

    @property
    def throttled_share(self) -> float:
        return self.throttled / self.requests if self.requests else 0.0

    @property
    def throttled_outside_outage(self) -> int:
        return self.throttled - self.outage_refused

    @property
    def throttled_outside_outage_share(self) -> float:
        return self.throttled_outside_outage / self.requests if self.requests else 0.0

    @property
    def efficiency(self) -> float:
        return self.possible_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "throttled_share": self.throttled_share,
            "throttled_outside_outage": self.throttled_outside_outage,
            "throttled_outside_outage_share": self.throttled_outside_outage_share,
            "efficiency": self.efficiency,
        }


# -- running one crawl ------------------------------------------------------------------


def default_cap(possible_seconds: float) -> float:
    return min(CAP_FACTOR * possible_seconds, DEFAULT_CAP_MAX)


def crawl_settings(contender: Contender, cap: float, out: Path) -> dict[str, Any]:
    settings = {
        **COMMON_SETTINGS,
        **contender.settings,
        # A whole number: Scrapy's CloseSpider extension reads it with getint().
        "CLOSESPIDER_TIMEOUT": max(1, round(cap)),
    }
    if contender.name == "aimd":
        settings["AIMD_EVENTS_FILE"] = str(out / "aimd-events.jsonl")
    return settings


def run_crawl(contender: Contender, specs: list[HostSpec], cap: float, out: Path) -> CrawlRun:
    """Start a fresh farm, crawl it in a fresh process, and read what the farm saw."""
    out.mkdir(parents=True, exist_ok=True)
    farm_log = out / "farm.jsonl"
    lifetime = cap + KILL_GRACE + 60
    with start_farm(specs, farm_log, max_seconds=lifetime, clock="first_request") as farm:
        config = out / "config.json"
        config.write_text(
            json.dumps(
                {
                    "start_urls": [url + "/" for url in farm.urls.values()],
                    "settings": crawl_settings(contender, cap, out),
                    "out": str(out),
                }
            )
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(BENCHMARKS)])}
        launched = time.time()
        killed = False
        try:
            subprocess.run(
                [sys.executable, str(CRAWL_SCRIPT), str(config)],
                env=env,
                timeout=cap + KILL_GRACE,
                check=True,
                capture_output=True,
            )
        except subprocess.TimeoutExpired:
            killed = True
        except subprocess.CalledProcessError as error:
            raise RuntimeError(
                f"the {contender.name} crawl failed ({error.returncode}):\n"
                f"{error.stderr.decode(errors='replace')[-3000:]}"
            ) from None
        ended = time.time()
        farm.stop()
        records = farm.read_log()
    crawl_path = out / "crawl.json"
    crawl = json.loads(crawl_path.read_text()) if crawl_path.exists() else {}
    opened = crawl.get("opened", launched)
    closed = ended if killed else crawl.get("closed", ended)
    reason = "killed" if killed else str(crawl.get("reason", "unknown"))
    return measure(
        contender.name,
        records,
        specs,
        opened=opened,
        wall_seconds=closed - opened,
        finish_reason=reason,
        capped=killed or reason == "closespider_timeout",
    )


def measure(
    contender: str,
    records: list[dict[str, Any]],
    specs: list[HostSpec],
    *,
    opened: float,
    wall_seconds: float,
    finish_reason: str,
    capped: bool,
) -> CrawlRun:
    """The benchmark's columns, from the farm's request log. Hosts' times count from the
    first request the farm saw, when its clock started (``clock="first_request"``)."""
    summaries = summarize(records, specs)
    farm_wide = totals(summaries)
    origin = min((r["arrived"] for r in records), default=opened)
    hosts: dict[str, dict[str, Any]] = {}
    for spec in specs:
        summary = summaries[spec.name]
        possible = host_possible_seconds(spec)
        last = summary.last_finish
        actual = last - origin if last is not None else None
        hosts[spec.name] = {
            **summary.to_dict(),
            "possible_seconds": possible,
            "actual_seconds": actual,
            "ratio": possible / actual if actual else None,
            "complete": summary.pages_fetched >= summary.pages_total,
            "done_after": last - opened if last is not None else None,
        }
    return CrawlRun(
        contender=contender,
        wall_seconds=wall_seconds,
        capped=capped,
        finish_reason=finish_reason,
        requests=farm_wide["requests"],
        pages_fetched=farm_wide["pages_fetched"],
        pages_total=farm_wide["pages_total"],
        duplicate_fetches=farm_wide["duplicate_fetches"],
        throttled=farm_wide["throttled"],
        outage_refused=farm_wide["outage_refused"],
        over_capacity_seconds=farm_wide["over_capacity_seconds"],
        crawl_delay_violations=farm_wide["crawl_delay_violations"],
        possible_seconds=possible_crawl_seconds(specs, concurrency=CONCURRENT_REQUESTS),
        hosts=hosts,
    )


# -- hosts alone, with no limits: the crawler's own bound -------------------------------


def unlimited(spec: HostSpec) -> HostSpec:
    """The host with nothing that pushes back or fails (no capacity, bucket, pause,
    outage, errors, Crawl-delay) and no links to other hosts: what it costs the crawler
    alone to fetch and parse its pages at their latency."""
    return dataclasses.replace(
        spec,
        cross_links=[],
        soft_capacity=None,
        capacity=None,
        rate=None,
        pause_first=0.0,
        outage_start=0.0,
        outage_seconds=0.0,
        error_rate=0.0,
        crawl_delay=None,
    )


def crawl_alone(names: list[str], specs: list[HostSpec], base: Path) -> dict[str, float]:
    """Each named host crawled alone by scrapy-aimd with its limits removed: the seconds
    from its first request to its last response. Where that is above the host's
    possible time, the crawler's CPU (fetching and parsing), not the controller, bounds
    the host's ratio, and in the farm it shares that CPU with the other hosts."""
    found: dict[str, float] = {}
    for spec in specs:
        if spec.name not in names:
            continue
        alone = unlimited(spec)
        cap = default_cap(max(1.0, host_possible_seconds(spec)))
        run = run_crawl(CONTENDERS["aimd"], [alone], cap, base / f"alone-{spec.name}")
        actual = run.hosts[spec.name]["actual_seconds"]
        if actual is not None:
            found[spec.name] = actual
    return found


def format_alone(alone: dict[str, float], specs: list[HostSpec]) -> str:
    """The hosts crawled alone: possible time, time alone with no limits, and the best
    ratio that leaves (below the target: bound by the crawler's CPU)."""
    out = [
        "| host | possible (s) | alone, no limits (s) | best ratio the crawler allows | bound by |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for spec in specs:
        if spec.name not in alone:
            continue
        possible, seconds = host_possible_seconds(spec), alone[spec.name]
        best = min(1.0, possible / seconds) if seconds > 0 else 1.0
        bound = "the crawler's CPU" if best < 1.0 else "the host"
        out.append(f"| {spec.name} | {possible:.2f} | {seconds:.2f} | {best:.2f} | {bound} |")
    return "\n".join(out)


# -- medians, targets and the table ---------------------------------------------------


@dataclass
class HostRow:
    """One host in one crawler's column: the median of its runs."""

    possible_seconds: float
    actual_seconds: float | None
    """None: the host was never asked in some run."""
    ratio: float | None
    """possible / actual; None when the host was never asked."""
    complete_runs: int
    """Runs in which every page of the host was fetched."""
    pages_fetched: float
    pages_total: int


@dataclass
class Row:
    """One crawler's column of the table: the median of its runs."""

    contender: str
    runs: int
    capped_runs: int
    wall_seconds: float
    requests: float
    pages_fetched: float
    pages_total: int
    duplicate_fetches: float
    throttled: float
    throttled_share: float
    throttled_outside_outage: float
    throttled_outside_outage_share: float
    over_capacity_seconds: float
    crawl_delay_violations: float
    efficiency: float
    fewest_pages_fetched: int
    """The worst run's figures: pages, 429+503 and Crawl-delay are targets for every run."""
    highest_throttled_outside_outage_share: float
    most_crawl_delay_violations: int
    hosts: dict[str, HostRow] = field(default_factory=dict)
    efficiency_vs_autothrottle: float | None = None


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def median_host(runs: list[CrawlRun], name: str) -> HostRow:
    found = [run.hosts[name] for run in runs]
    actual = [h["actual_seconds"] for h in found]
    ratios = [h["ratio"] for h in found]
    return HostRow(
        possible_seconds=found[0]["possible_seconds"],
        actual_seconds=None if None in actual else median(actual),
        ratio=None if None in ratios else median(ratios),
        complete_runs=sum(bool(h["complete"]) for h in found),
        pages_fetched=median([h["pages_fetched"] for h in found]),
        pages_total=found[0]["pages_total"],
    )


def median_row(runs: list[CrawlRun]) -> Row:
    """Each column's median over the runs (so the figures of one row may come from
    different runs, as with any per-column median)."""
    return Row(
        contender=runs[0].contender,
        runs=len(runs),
        capped_runs=sum(run.capped for run in runs),
        wall_seconds=median([r.wall_seconds for r in runs]),
        requests=median([r.requests for r in runs]),
        pages_fetched=median([r.pages_fetched for r in runs]),
        pages_total=runs[0].pages_total,
        duplicate_fetches=median([r.duplicate_fetches for r in runs]),
        throttled=median([r.throttled for r in runs]),
        throttled_share=median([r.throttled_share for r in runs]),
        throttled_outside_outage=median([r.throttled_outside_outage for r in runs]),
        throttled_outside_outage_share=median([r.throttled_outside_outage_share for r in runs]),
        over_capacity_seconds=median([r.over_capacity_seconds for r in runs]),
        crawl_delay_violations=median([r.crawl_delay_violations for r in runs]),
        efficiency=median([r.efficiency for r in runs]),
        fewest_pages_fetched=min(r.pages_fetched for r in runs),
        highest_throttled_outside_outage_share=max(r.throttled_outside_outage_share for r in runs),
        most_crawl_delay_violations=max(r.crawl_delay_violations for r in runs),
        hosts={name: median_host(runs, name) for name in runs[0].hosts},
    )


def compare_with_autothrottle(rows: dict[str, Row]) -> None:
    """Fill each row's efficiency as a multiple of AutoThrottle's, when it ran."""
    baseline = rows.get("autothrottle")
    if baseline is None or baseline.efficiency <= 0:
        return
    for row in rows.values():
        row.efficiency_vs_autothrottle = row.efficiency / baseline.efficiency


@dataclass
class Target:
    text: str
    met: bool | None
    """None: not measured in this run (AutoThrottle did not run)."""
    value: str


def slow_hosts(row: Row) -> list[str]:
    """Hosts below the target ratio (median), or left incomplete in some run."""
    return [
        name
        for name, host in row.hosts.items()
        if host.possible_seconds > 0
        and (host.complete_runs < row.runs or host.ratio is None or host.ratio < TARGET_HOST_RATIO)
    ]


def targets(row: Row) -> list[Target]:
    """The targets, judged on a row (scrapy-aimd's): politeness and completeness in
    every run (the worst run's figure), times on the median."""
    ratio = row.efficiency_vs_autothrottle
    worst = " in the worst run" if row.runs > 1 else ""
    slow = slow_hosts(row)
    return [
        Target(
            "all pages fetched",
            row.fewest_pages_fetched >= row.pages_total,
            f"{row.fewest_pages_fetched:,} of {row.pages_total:,}{worst}",
        ),
        Target(
            f"every host at {TARGET_HOST_RATIO:g} of its possible time or better",
            not slow,
            f"below: {', '.join(slow)}" if slow else f"all {len(row.hosts)} hosts",
        ),
        Target(
            f"efficiency at least {TARGET_EFFICIENCY:g}",
            row.efficiency >= TARGET_EFFICIENCY,
            f"{row.efficiency:.2f}" + (" median" if row.runs > 1 else ""),
        ),
        Target(
            f"429+503 outside an outage at most {100 * TARGET_THROTTLED_SHARE:g} % of requests",
            row.highest_throttled_outside_outage_share <= TARGET_THROTTLED_SHARE,
            f"{100 * row.highest_throttled_outside_outage_share:.1f} %{worst}",
        ),
        Target(
            "no Crawl-delay violated (gaps between arrivals at the server)",
            row.most_crawl_delay_violations == 0,
            f"{row.most_crawl_delay_violations} violations{worst}",
        ),
        Target(
            "efficiency at least 3x AutoThrottle's",
            None if ratio is None else ratio >= TARGET_EFFICIENCY_RATIO,
            "AutoThrottle not run" if ratio is None else f"{ratio:.1f}x",
        ),
    ]


def format_table(rows: dict[str, Row], possible_seconds: float, cap: float) -> str:
    """A Markdown table, crawlers side by side."""

    def wall(row: Row) -> str:
        text = f"{row.wall_seconds:.1f}"
        if row.capped_runs:
            capped = "capped" if row.runs == 1 else f"{row.capped_runs}/{row.runs} capped"
            text += f" ({capped} at {cap:.0f})"
        return text

    def violations(row: Row) -> str:
        text = f"{row.crawl_delay_violations:,.0f}"
        if row.most_crawl_delay_violations > row.crawl_delay_violations:
            text += f" (worst run {row.most_crawl_delay_violations:,})"
        return text

    def ratio(row: Row) -> str:
        value = row.efficiency_vs_autothrottle
        return "" if value is None else f"{value:.1f}x"

    def share(count: float, fraction: float) -> str:
        return f"{count:,.0f} ({100 * fraction:.1f} %)"

    lines: list[tuple[str, list[str]]] = [
        ("wall time (s)", [wall(r) for r in rows.values()]),
        (
            "pages fetched",
            [f"{r.pages_fetched:,.0f} of {r.pages_total:,}" for r in rows.values()],
        ),
        ("duplicate fetches", [f"{r.duplicate_fetches:,.0f}" for r in rows.values()]),
        ("requests", [f"{r.requests:,.0f}" for r in rows.values()]),
        ("429+503 received", [share(r.throttled, r.throttled_share) for r in rows.values()]),
        (
            "429+503 outside the outage",
            [
                share(r.throttled_outside_outage, r.throttled_outside_outage_share)
                for r in rows.values()
            ],
        ),
        ("seconds over capacity", [f"{r.over_capacity_seconds:.1f}" for r in rows.values()]),
        ("Crawl-delay violations", [violations(r) for r in rows.values()]),
        (
            f"efficiency ({possible_seconds:.1f} s possible / wall)",
            [f"{r.efficiency:.2f}" for r in rows.values()],
        ),
        ("efficiency vs AutoThrottle", [ratio(r) for r in rows.values()]),
    ]
    header = [""] + [CONTENDERS[name].label for name in rows]
    out = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * len(rows)]
    out += ["| " + " | ".join([label, *cells]) + " |" for label, cells in lines]
    return "\n".join(out)


def format_host_times(rows: dict[str, Row]) -> str:
    """Per host: its possible time, then each crawler's actual time and the ratio
    possible / actual, with the pages fetched when the host was left incomplete."""

    def cell(row: Row, host: HostRow) -> str:
        if host.actual_seconds is None or host.ratio is None:
            return "not asked"
        text = f"{host.actual_seconds:.1f} ({host.ratio:.2f})"
        if host.complete_runs < row.runs:
            text += f", {host.pages_fetched:,.0f} of {host.pages_total:,} pages"
        return text

    header = ["host", "possible (s)"] + [
        f"{CONTENDERS[name].label}: actual (s) (ratio)" for name in rows
    ]
    out = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    first = next(iter(rows.values()))
    for name, host in first.hosts.items():
        cells = [cell(row, row.hosts[name]) for row in rows.values()]
        out.append(f"| {name} | {host.possible_seconds:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def format_targets(found: list[Target]) -> str:
    marks = {True: "met", False: "MISSED", None: "not measured"}
    return "\n".join(f"- {marks[t.met]}: {t.text} ({t.value})" for t in found)


def format_hosts(run: CrawlRun) -> str:
    """One crawl's per-host breakdown: which host took how long, and why."""
    header = (
        "| host | pages | dupes | requests | 429 | 503 | of which outage | over cap (s)"
        " | Crawl-delay viol. | min gap (s) | max in flight | possible (s) | actual (s) |"
    )
    out = [header, "| --- |" + " ---: |" * 12]
    for name, host in run.hosts.items():
        statuses = {int(k): v for k, v in host["statuses"].items()}
        actual = host["actual_seconds"]
        gap = host["min_gap_seconds"]
        out.append(
            f"| {name} | {host['pages_fetched']} of {host['pages_total']}"
            f" | {host['duplicate_fetches']} | {host['requests']}"
            f" | {statuses.get(429, 0)} | {statuses.get(503, 0)} | {host['outage_refused']}"
            f" | {host['over_capacity_seconds']:.1f} | {host['crawl_delay_violations']}"
            f" | {'' if gap is None else f'{gap:.3f}'}"
            f" | {host['max_in_flight']} | {host['possible_seconds']:.1f}"
            f" | {'' if actual is None else f'{actual:.1f}'} |"
        )
    return "\n".join(out)


def machine() -> str:
    import scrapy

    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores,"
        f" Python {platform.python_version()}, Scrapy {scrapy.__version__}"
    )


# -- the command ---------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each crawler (median)")
    parser.add_argument(
        "--only", nargs="+", choices=list(CONTENDERS), help="crawl with these crawlers only"
    )
    parser.add_argument("--cap", type=float, help="seconds a crawl may take at most")
    parser.add_argument("--json", type=Path, help="write every run and the medians here")
    parser.add_argument("--keep", type=Path, help="keep the farm logs, crawl logs and events")
    parser.add_argument("--hosts", action="store_true", help="per-host breakdown of each crawl")
    parser.add_argument(
        "--farm",
        help="a farm config (JSON) instead of the benchmark farm, or a preset's name:"
        f" {', '.join(PRESETS)}",
    )
    parser.add_argument(
        "--alone",
        nargs="+",
        metavar="HOST",
        default=[],
        help="also crawl these hosts alone with their limits removed (the crawler's own bound)",
    )
    add_set_option(parser)
    args = parser.parse_args(argv)
    read_set_option(parser, args)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.cap is not None and args.cap <= 0:
        parser.error("--cap must be positive")
    return args


#: ``--farm NAME``: the presets (``--farm limiters``: one host for each limiter that
#: sites deploy, kept apart from the benchmark farm while windows take the controller
#: minutes).
PRESETS = {"benchmark": benchmark_farm, "limiters": limiter_farm}


def farm_specs(farm: str | None) -> list[HostSpec]:
    """The benchmark farm, a preset by name, or a farm config file."""
    if farm is None:
        return benchmark_farm()
    if farm in PRESETS:
        return PRESETS[farm]()
    return specs_from_json(json.loads(Path(farm).read_text()))


def add_set_option(parser: argparse.ArgumentParser) -> None:
    """``--set NAME=VALUE``: a Scrapy setting for every crawler (see
    :func:`read_set_option`)."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Scrapy setting for every crawler (a JSON value, or a string),"
        " e.g. CONCURRENT_REQUESTS_PER_DOMAIN=16",
    )


def read_set_option(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``args.settings``: the ``--set`` values, each a JSON value if it is one, else
    a string."""
    settings = {}
    for text in args.set:
        name, equals, raw = text.partition("=")
        if not equals or not name:
            parser.error(f"--set {text!r}: expected NAME=VALUE")
        try:
            settings[name] = json.loads(raw)
        except json.JSONDecodeError:
            settings[name] = raw
    args.settings = settings


def chosen_contenders(names: list[str] | None, settings: dict[str, Any]) -> list[Contender]:
    """The crawlers to run (all by default), each with ``settings`` on top of its own."""
    return [
        dataclasses.replace(contender, settings={**contender.settings, **settings})
        for contender in (CONTENDERS[name] for name in (names or CONTENDERS))
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    specs = farm_specs(args.farm)
    possible = possible_crawl_seconds(specs, concurrency=CONCURRENT_REQUESTS)
    cap = args.cap if args.cap is not None else default_cap(possible)
    chosen = chosen_contenders(args.only, args.settings)
    pages = sum(len(spec.page_ids()) for spec in specs)
    print(f"machine: {machine()}")
    print(
        f"farm: {len(specs)} hosts, {pages:,} pages; possible crawl time {possible:.2f} s;"
        f" cap {cap:.0f} s; {args.runs} run(s) of {', '.join(c.name for c in chosen)}"
    )
    if args.settings:
        print(f"settings for every crawler: {args.settings}")
    runs: dict[str, list[CrawlRun]] = {c.name: [] for c in chosen}
    with tempfile.TemporaryDirectory(prefix="bench-farm-") as temp:
        base = args.keep or Path(temp)
        for number in range(1, args.runs + 1):
            for contender in chosen:
                run = run_crawl(contender, specs, cap, base / f"{contender.name}-{number}")
                runs[contender.name].append(run)
                print(
                    f"  run {number} {contender.name}: {run.wall_seconds:.1f} s"
                    f" ({run.finish_reason}), {run.pages_fetched} of {run.pages_total} pages,"
                    f" {run.throttled} 429+503, efficiency {run.efficiency:.2f}",
                    flush=True,
                )
                if args.hosts:
                    print(format_hosts(run), flush=True)
        alone = crawl_alone(args.alone, specs, base) if args.alone else {}
    rows = {name: median_row(found) for name, found in runs.items()}
    compare_with_autothrottle(rows)
    print()
    print(format_table(rows, possible, cap))
    print("\nper host, from the crawl's first request (median of the runs):")
    print(format_host_times(rows))
    if alone:
        print("\neach host alone, scrapy-aimd, its limits removed (--alone):")
        print(format_alone(alone, specs))
    judged = targets(rows["aimd"]) if "aimd" in rows else []
    if judged:
        print("\nscrapy-aimd against the targets:")
        print(format_targets(judged))
        if any(t.met is False for t in judged) and not args.hosts:
            for number, run in enumerate(runs["aimd"], 1):
                print(f"\nper host, scrapy-aimd's run {number}:")
                print(format_hosts(run))
    if args.keep:
        print(f"\nlogs kept in {args.keep}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine(),
                    "possible_seconds": possible,
                    "cap_seconds": cap,
                    "runs": {n: [r.to_dict() for r in found] for n, found in runs.items()},
                    "median": {n: dataclasses.asdict(row) for n, row in rows.items()},
                    "targets": [dataclasses.asdict(t) for t in judged],
                    "alone_seconds": alone,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
