"""Crawl real servers that limit each host their own way with stock Scrapy, Scrapy +
AutoThrottle and scrapy-aimd, and judge them by the servers' own logs.

The servers are not ours, and each runs as a child process on loopback addresses:

- ``nginx``: Debian's stock nginx (``/usr/sbin/nginx``, or ``$NGINX``), seven hosts
  with ``limit_req``, ``limit_conn``, ``limit_rate`` and a robots.txt
  ``Crawl-delay``, serving sections of Python's HTML documentation (``python3-doc``);
- ``haproxy``: Debian's HAProxy (``$HAPROXY``) with a stick table per host in front
  of an nginx serving a generated static site (``--pages``, a tenth as many broken
  links): more than 80 requests per 10 s answered 429, and more than 40 denied with
  its default 403, denied requests counted (``servers.limiters``);
- ``apache``: Debian's Apache (``$APACHE2``) with mod_evasive serving the same site:
  more than 20 requests without a 2 s pause blocked (403) for 5 s, renewed by hits.

Every crawler gets fresh servers and a fresh process (``benchmarks/farm_crawl.py``,
the farm benchmark's runner, with its crawlers and shared settings):

    PYTHONPATH=. python benchmarks/bench_servers.py [--server nginx haproxy apache]
        [--only aimd ...] [--cap SECONDS] [--limiter-cap SECONDS] [--pages N]
        [--deadline SECONDS] [--json OUT.json] [--keep DIR]

nginx, per host and in total: pages fetched of those reachable, requests, 429+503
(share of requests), Crawl-delay violations (arrivals closer than the delay), the most
requests nginx served at once, the host's time from the crawl's first request to its
last response, and its possible time (what its configured limits allow, see
``servers.hosts.NginxHost.possible_seconds``) over that. HAProxy and Apache, per host:
pages of reachable, refused (403+429+503) share, time and ideal time
(``servers.limiters.LimitedHost.possible_seconds``). An nginx crawl is capped at
``--cap`` seconds, a crawl of HAProxy and Apache at ``--limiter-cap``
(``CLOSESPIDER_TIMEOUT``, then killed 30 s later); the whole run at ``--deadline``
seconds, shared among the crawls still to run. A server that is not installed is
left out, saying so.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_farm import (
    CONTENDERS,
    CRAWL_SCRIPT,
    Contender,
    add_set_option,
    chosen_contenders,
    crawl_settings,
    machine,
    read_set_option,
)
from servers import apache, haproxy
from servers.accesslog import Entry, HostFigures, host_figures, read_log
from servers.hosts import HOSTS, NginxHost
from servers.limiters import LIMITED, LimitedHost
from servers.nginx import Listening, find_nginx, run_nginx
from servers.site import DOCS, Site, build_site, build_static_site

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent

DEFAULT_CAP = 90.0
DEFAULT_DEADLINE = 1200.0
#: ``--server``: nginx's seven hosts (Python's documentation), HAProxy's and Apache's.
SERVERS = ("nginx", "haproxy", "apache")
#: Seconds a crawl gets past its cap to close before its process is killed.
KILL_GRACE = 30.0
#: The least cap worth starting a crawl with when the deadline is near.
MIN_CAP = 10.0


@dataclass
class NginxRun:
    """One crawl of a fresh nginx, as nginx saw it."""

    contender: str
    wall_seconds: float
    """From the spider's opening to its closing (to the kill when killed)."""
    capped: bool
    finish_reason: str
    cap_seconds: float
    possible_seconds: float
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per host: HostFigures, plus ``possible_seconds``, ``actual_seconds`` (last
    response, from the crawl's first request at any host) and ``ratio``."""

    def total(self, key: str) -> int:
        return sum(int(host[key]) for host in self.hosts.values())

    @property
    def requests(self) -> int:
        return self.total("requests")

    @property
    def throttled(self) -> int:
        return self.total("throttled")

    @property
    def efficiency(self) -> float:
        return self.possible_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        totals = {
            key: self.total(key)
            for key in (
                "requests",
                "throttled",
                "pages_fetched",
                "pages_total",
                "duplicate_fetches",
                "disallowed_fetched",
                "crawl_delay_violations",
            )
        }
        return {**dataclasses.asdict(self), **totals, "efficiency": self.efficiency}


def build_sites(base: Path, docs: Path = DOCS) -> dict[str, Site]:
    return {
        host.name: build_site(
            base / host.name,
            list(host.sections),
            robots_txt=host.robots_txt(),
            disallowed=host.disallow,
            docs=docs,
        )
        for host in HOSTS
    }


def launch(config: Path, timeout: float) -> bool:
    """Run farm_crawl.py on ``config``; True if it had to be killed at ``timeout``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(BENCHMARKS)])}
    command = [sys.executable, str(CRAWL_SCRIPT), str(config)]
    try:
        done = subprocess.run(command, env=env, timeout=timeout, capture_output=True)
    except subprocess.TimeoutExpired:
        return True
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace")[-3000:]
        raise RuntimeError(f"crawl {config} failed ({done.returncode}):\n{error}")
    return False


def run_one(
    contender: Contender, sites: dict[str, Site], cap: float, out: Path, nginx: str
) -> NginxRun:
    """A fresh nginx, one crawl of all its hosts in a fresh process, then nginx's log."""
    out.mkdir(parents=True, exist_ok=True)
    roots = {name: site.root for name, site in sites.items()}
    with run_nginx(out / "nginx", HOSTS, roots, nginx) as listening:
        config = out / "config.json"
        config.write_text(
            json.dumps(
                {
                    "start_urls": [item.url + "/" for item in listening],
                    "settings": crawl_settings(contender, cap, out),
                    "out": str(out),
                }
            )
        )
        launched = time.time()
        killed = launch(config, cap + KILL_GRACE)
        ended = time.time()
    entries = read_log(out / "nginx" / "access.log")
    by_host = entries_by_host(entries, listening)
    crawl_path = out / "crawl.json"
    crawl = json.loads(crawl_path.read_text()) if crawl_path.exists() else {}
    opened = float(crawl.get("opened", launched))
    closed = ended if killed else float(crawl.get("closed", ended))
    reason = "killed" if killed else str(crawl.get("reason", "unknown"))
    origin = min((e.arrived for e in entries), default=opened)
    hosts: dict[str, dict[str, Any]] = {}
    for host in HOSTS:
        mine = by_host.get(host.name, [])
        figures = host_figures(mine, sites[host.name], host.crawl_delay)
        hosts[host.name] = judged(figures, host, sites[host.name], origin)
    return NginxRun(
        contender=contender.name,
        wall_seconds=closed - opened,
        capped=killed or reason == "closespider_timeout",
        finish_reason=reason,
        cap_seconds=cap,
        possible_seconds=possible_seconds(sites),
        hosts=hosts,
    )


def entries_by_host(entries: list[Entry], listening: list[Listening]) -> dict[str, list[Entry]]:
    """Each host's log entries, by the address and port the request came in on: two
    hosts on their own addresses may get the same free port."""
    by_listener = {(item.address, item.port): item.host.name for item in listening}
    mine: dict[str, list[Entry]] = {}
    for entry in entries:
        name = by_listener.get((entry.address, entry.port))
        if name is not None:
            mine.setdefault(name, []).append(entry)
    return mine


def judged(figures: HostFigures, host: NginxHost, site: Site, origin: float) -> dict[str, Any]:
    possible = host.possible_seconds(site)
    actual = None if figures.last_end is None else figures.last_end - origin
    return {
        **figures.to_dict(),
        "possible_seconds": possible,
        "actual_seconds": actual,
        "ratio": possible / actual if actual and possible > 0 else None,
    }


def possible_seconds(sites: dict[str, Site]) -> float:
    """The whole crawl's: the hosts are independent, so the slowest host's."""
    return max(host.possible_seconds(sites[host.name]) for host in HOSTS)


# -- HAProxy and Apache + mod_evasive in front of the static site ----------------------

#: The origin behind HAProxy: an nginx without limits, serving the static site.
ORIGIN = NginxHost("origin", "the static site, no limit", ())
DEFAULT_LIMITER_CAP = 180.0


@dataclass
class Binaries:
    nginx: str | None
    haproxy: str | None
    apache: str | None


def limited_hosts(servers: list[str], binaries: Binaries) -> list[LimitedHost]:
    """The limiters' hosts of the chosen servers whose programs are installed."""
    chosen = []
    for host in LIMITED:
        if host.server not in servers:
            continue
        if host.server == "haproxy" and (binaries.haproxy is None or binaries.nginx is None):
            continue
        if host.server == "apache" and binaries.apache is None:
            continue
        chosen.append(host)
    return chosen


def run_limited(
    contender: Contender,
    hosts: list[LimitedHost],
    site: Site,
    cap: float,
    out: Path,
    binaries: Binaries,
) -> NginxRun:
    """Fresh servers, one crawl of every limited host in a fresh process, then each
    server's log: HAProxy's frontends on 127.0.0.3 upwards in front of an nginx origin
    on 127.0.0.2, Apache after them."""
    out.mkdir(parents=True, exist_ok=True)
    proxied = [host for host in hosts if host.server == "haproxy"]
    evasive = [host for host in hosts if host.server == "apache"]
    urls: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        if proxied:
            assert binaries.nginx is not None and binaries.haproxy is not None
            origin = stack.enter_context(
                run_nginx(out / "origin", (ORIGIN,), {"origin": site.root}, binaries.nginx)
            )[0]
            frontends = stack.enter_context(
                haproxy.run_haproxy(
                    out / "haproxy",
                    proxied,
                    (origin.address, origin.port),
                    binaries.haproxy,
                    first_address=3,
                )
            )
            urls.update({item.host.name: item.url for item in frontends})
        for number, host in enumerate(evasive, 3 + len(proxied)):
            assert binaries.apache is not None
            listener = stack.enter_context(
                apache.run_apache(out / host.name, host, site.root, binaries.apache, number)
            )
            urls[host.name] = listener.url
        config = out / "config.json"
        config.write_text(
            json.dumps(
                {
                    "start_urls": [url + "/" for url in urls.values()],
                    "settings": crawl_settings(contender, cap, out),
                    "out": str(out),
                }
            )
        )
        launched = time.time()
        killed = launch(config, cap + KILL_GRACE)
        ended = time.time()
    logs: dict[str, list[Entry]] = {}
    if proxied:
        entries = haproxy.read_log(out / "haproxy" / "access.log")
        by_address = {urls[h.name].split("//")[1]: h.name for h in proxied}
        for entry in entries:
            name = by_address.get(f"{entry.address}:{entry.port}")
            if name is not None:
                logs.setdefault(name, []).append(entry)
    for host in evasive:
        logs[host.name] = apache.read_log(out / host.name / "access.log")
    crawl_path = out / "crawl.json"
    crawl = json.loads(crawl_path.read_text()) if crawl_path.exists() else {}
    opened = float(crawl.get("opened", launched))
    closed = ended if killed else float(crawl.get("closed", ended))
    reason = "killed" if killed else str(crawl.get("reason", "unknown"))
    everything = [entry for found in logs.values() for entry in found]
    origin_time = min((e.arrived for e in everything), default=opened)
    judged_hosts: dict[str, dict[str, Any]] = {}
    for host in hosts:
        figures = host_figures(logs.get(host.name, []), site, None)
        possible = host.possible_seconds(site)
        actual = None if figures.last_end is None else figures.last_end - origin_time
        refused = sum(figures.statuses.get(code, 0) for code in REFUSED_CODES)
        judged_hosts[host.name] = {
            **figures.to_dict(),
            "refused": refused,
            "possible_seconds": possible,
            "actual_seconds": actual,
            "ratio": possible / actual if actual and possible > 0 else None,
        }
    return NginxRun(
        contender=contender.name,
        wall_seconds=closed - opened,
        capped=killed or reason == "closespider_timeout",
        finish_reason=reason,
        cap_seconds=cap,
        possible_seconds=max(host.possible_seconds(site) for host in hosts),
        hosts=judged_hosts,
    )


#: What the limiters answer above their limits (the static site forbids nothing).
REFUSED_CODES = (403, 429, 503)


def format_limited(runs: list[NginxRun], hosts: list[LimitedHost]) -> str:
    """Per server: pages of reachable, refused share, its time (from the crawl's first
    request to its last answer) and its ideal time."""

    def cell(found: dict[str, Any]) -> str:
        if found["actual_seconds"] is None:
            return "not asked"
        return (
            f"{found['pages_fetched']} of {found['pages_total']} pages,"
            f" {share(found['refused'], found['requests'])} refused,"
            f" {found['actual_seconds']:.1f} s"
        )

    header = ["host", "ideal (s)", *(CONTENDERS[r.contender].label for r in runs)]
    out = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    for host in hosts:
        possible = runs[0].hosts[host.name]["possible_seconds"]
        cells = [cell(run.hosts[host.name]) for run in runs]
        out.append(f"| {host.name} | {possible:.1f} | " + " | ".join(cells) + " |")
    walls = [f"{r.wall_seconds:.1f}" + (f" ({r.finish_reason})" if r.capped else "") for r in runs]
    out.append("| whole crawl, wall (s) | | " + " | ".join(walls) + " |")
    return "\n".join(out)


# -- tables ---------------------------------------------------------------------------


def share(count: int, total: int) -> str:
    return f"{count:,} ({100 * count / total:.1f} %)" if total else f"{count:,}"


def efficiency(run: NginxRun) -> str:
    """The figure, and how many pages it did not fetch: a crawl that gave up on pages
    can look faster than possible."""
    missing = run.total("pages_total") - run.total("pages_fetched")
    return f"{run.efficiency:.2f}" + (f" ({missing:,} pages missing)" if missing else "")


def format_totals(runs: list[NginxRun]) -> str:
    def wall(run: NginxRun) -> str:
        capped = f" ({run.finish_reason} at {run.cap_seconds:.0f})" if run.capped else ""
        return f"{run.wall_seconds:.1f}{capped}"

    lines: list[tuple[str, list[str]]] = [
        ("wall time (s)", [wall(r) for r in runs]),
        (
            "pages fetched of reachable",
            [f"{r.total('pages_fetched'):,} of {r.total('pages_total'):,}" for r in runs],
        ),
        ("requests", [f"{r.requests:,}" for r in runs]),
        ("429+503", [share(r.throttled, r.requests) for r in runs]),
        ("duplicate fetches", [f"{r.total('duplicate_fetches'):,}" for r in runs]),
        ("robots.txt-disallowed fetched", [f"{r.total('disallowed_fetched'):,}" for r in runs]),
        ("Crawl-delay violations", [f"{r.total('crawl_delay_violations'):,}" for r in runs]),
        (
            f"efficiency ({runs[0].possible_seconds:.1f} s possible / wall)",
            [efficiency(r) for r in runs],
        ),
    ]
    header = ["", *(CONTENDERS[r.contender].label for r in runs)]
    out = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * len(runs)]
    out += ["| " + " | ".join([label, *cells]) + " |" for label, cells in lines]
    return "\n".join(out)


def host_cell(host: dict[str, Any]) -> str:
    """Pages of reachable, requests, 429+503, time (ratio) in one cell."""
    if host["actual_seconds"] is None:
        return "not asked"
    if host["pages_fetched"] < host["pages_total"]:
        ratio = " (gave up)"  # done early with pages missing: its ratio means nothing
    else:
        ratio = "" if host["ratio"] is None else f" ({host['ratio']:.2f})"
    return (
        f"{host['pages_fetched']}/{host['pages_total']}, {host['requests']} req,"
        f" {share(host['throttled'], host['requests'])} 429+503,"
        f" {host['actual_seconds']:.1f} s{ratio}"
    )


def format_host_times(runs: list[NginxRun]) -> str:
    header = ["host", "possible (s)"] + [CONTENDERS[r.contender].label for r in runs]
    out = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    for host in HOSTS:
        possible = runs[0].hosts[host.name]["possible_seconds"]
        cells = [host_cell(run.hosts[host.name]) for run in runs]
        out.append(f"| {host.name} | {possible:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def format_hosts(run: NginxRun) -> str:
    """One crawl's per-host breakdown, all from nginx's log."""
    header = (
        "| host | pages | requests | 429 | 503 | 404 | Crawl-delay viol. | min gap (s)"
        " | max at once | possible (s) | actual (s) | ratio |"
    )
    out = [header, "| --- |" + " ---: |" * 11]
    for host in HOSTS:
        found = run.hosts[host.name]
        statuses = {int(k): v for k, v in found["statuses"].items()}
        gap, actual, ratio = found["min_gap_seconds"], found["actual_seconds"], found["ratio"]
        out.append(
            f"| {host.name} | {found['pages_fetched']} of {found['pages_total']}"
            f" | {found['requests']} | {statuses.get(429, 0)} | {statuses.get(503, 0)}"
            f" | {statuses.get(404, 0)} | {found['crawl_delay_violations']}"
            f" | {'' if gap is None else f'{gap:.3f}'} | {found['max_in_flight']}"
            f" | {found['possible_seconds']:.2f} | {'' if actual is None else f'{actual:.1f}'}"
            f" | {'' if ratio is None else f'{ratio:.2f}'} |"
        )
    return "\n".join(out)


# -- the command ----------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=list(CONTENDERS), help="these crawlers only")
    parser.add_argument("--cap", type=float, default=DEFAULT_CAP, help="seconds per crawl")
    parser.add_argument(
        "--deadline", type=float, default=DEFAULT_DEADLINE, help="seconds for the whole run"
    )
    parser.add_argument("--json", type=Path, help="write every run here")
    parser.add_argument("--keep", type=Path, help="keep nginx's logs, the crawl logs and events")
    parser.add_argument("--docs", type=Path, default=DOCS, help="python3-doc's HTML directory")
    parser.add_argument(
        "--server",
        nargs="+",
        choices=SERVERS,
        default=list(SERVERS),
        help="these servers only (default: all that are installed)",
    )
    parser.add_argument(
        "--limiter-cap",
        type=float,
        default=DEFAULT_LIMITER_CAP,
        help="seconds per crawl of the HAProxy and Apache hosts",
    )
    parser.add_argument(
        "--pages", type=int, default=120, help="pages of the static site behind them"
    )
    add_set_option(parser)
    args = parser.parse_args(argv)
    read_set_option(parser, args)
    if args.cap <= 0 or args.deadline <= 0 or args.limiter_cap <= 0:
        parser.error("--cap, --limiter-cap and --deadline must be positive")
    if args.pages < 1:
        parser.error("--pages must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    binaries = Binaries(find_nginx(), haproxy.find_haproxy(), apache.find_apache())
    chosen = chosen_contenders(args.only, args.settings)
    with_nginx = "nginx" in args.server and binaries.nginx is not None
    if "nginx" in args.server and binaries.nginx is None:
        print("nginx not found (apt-get install nginx, or set $NGINX)", file=sys.stderr)
    if with_nginx and not args.docs.is_dir():
        print(f"{args.docs} is missing (apt-get install python3-doc)", file=sys.stderr)
        with_nginx = False
    if "haproxy" in args.server and (binaries.haproxy is None or binaries.nginx is None):
        print("haproxy or nginx not found (apt-get install haproxy nginx)", file=sys.stderr)
    if "apache" in args.server and binaries.apache is None:
        print(
            "apache2 or mod_evasive not found (apt-get install apache2 libapache2-mod-evasive)",
            file=sys.stderr,
        )
    limited = limited_hosts(args.server, binaries)
    if not with_nginx and not limited:
        return 2
    jobs = len(chosen) * (with_nginx + bool(limited))

    def cap_for(wanted: float, done: int) -> float:
        left = args.deadline - (time.monotonic() - started)
        return min(wanted, float(left) / (jobs - done) - KILL_GRACE)

    runs: list[NginxRun] = []
    limited_runs: list[NginxRun] = []
    print(f"machine: {machine()}; {binaries.nginx}, {binaries.haproxy}, {binaries.apache}")
    with tempfile.TemporaryDirectory(prefix="bench-servers-") as temp:
        base = args.keep or Path(temp)
        if with_nginx:
            assert binaries.nginx is not None
            sites = build_sites(base / "sites", args.docs)
            possible = possible_seconds(sites)
            reachable = sum(len(site.pages) for site in sites.values())
            print(
                f"nginx: {len(HOSTS)} hosts, {reachable} reachable pages;"
                f" possible {possible:.2f} s; cap {args.cap:.0f} s a crawl,"
                f" {args.deadline:.0f} s in all; crawlers: {', '.join(c.name for c in chosen)}",
                flush=True,
            )
            for contender in chosen:
                cap = cap_for(args.cap, len(runs) + len(limited_runs))
                if cap < MIN_CAP:
                    print(f"  {contender.name}: skipped, the run's deadline is near", flush=True)
                    continue
                run = run_one(contender, sites, cap, base / contender.name, binaries.nginx)
                runs.append(run)
                print(
                    f"  {contender.name}: {run.wall_seconds:.1f} s ({run.finish_reason}),"
                    f" {run.total('pages_fetched')} of {run.total('pages_total')} pages,"
                    f" {run.throttled} 429+503, efficiency {run.efficiency:.2f}",
                    flush=True,
                )
        if limited:
            site = build_static_site(base / "static", pages=args.pages, broken=args.pages // 10)
            print(
                f"limiters: {', '.join(h.name for h in limited)} in front of a static site of"
                f" {len(site.pages)} reachable pages and {len(site.broken)} broken links;"
                f" cap {args.limiter_cap:.0f} s a crawl",
                flush=True,
            )
            for contender in chosen:
                cap = cap_for(args.limiter_cap, len(runs) + len(limited_runs))
                if cap < MIN_CAP:
                    print(f"  {contender.name}: skipped, the run's deadline is near", flush=True)
                    continue
                out = base / "limiters" / contender.name
                run = run_limited(contender, limited, site, cap, out, binaries)
                limited_runs.append(run)
                print(
                    f"  {contender.name}: {run.wall_seconds:.1f} s ({run.finish_reason}),"
                    f" {run.total('pages_fetched')} of {run.total('pages_total')} pages,"
                    f" {run.total('refused')} refused",
                    flush=True,
                )
    if not runs and not limited_runs:
        return 1
    if runs:
        print()
        print(format_totals(runs))
        print(
            "\nper host: pages/reachable, requests, 429+503, last response (s) (possible/actual):"
        )
        print(format_host_times(runs))
        for run in runs:
            print(f"\n{CONTENDERS[run.contender].label}, per host:")
            print(format_hosts(run))
    if limited_runs:
        print(
            "\nHAProxy and Apache + mod_evasive, per host: pages of reachable, refused"
            " (403+429+503), time from the crawl's first request to the host's last answer:"
        )
        print(format_limited(limited_runs, limited))
    print(f"\nrun time {time.monotonic() - started:.0f} s")
    if args.keep:
        print(f"logs kept in {args.keep}")
    if args.json:
        report = {
            "machine": machine(),
            "runs": [run.to_dict() for run in runs],
            "limited_runs": [run.to_dict() for run in limited_runs],
        }
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
