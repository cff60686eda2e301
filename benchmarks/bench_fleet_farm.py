"""One scrapy-aimd process against a fleet of three, and against three
scrapy-redis workers, on the same farms; and a fleet of three that loses one
worker to ``kill -9``.

Each crawl gets a fresh farm and, for the fleets, a fresh ``redis-server`` child
(``tests/redis_server.py``); the workers are the tests' crawl processes
(``tests/crawlrunner.py``) started together. What each crawl did is read from
the farm's request log, the sites' own view:

1. ``sitefarm.benchmark_farm()``: sixteen hosts that push back each their own way
   (``CONCURRENT_REQUESTS`` 32 per process, as ``bench_farm.py``), crawled by one
   scrapy-aimd process, three scrapy-aimd workers, and three scrapy-redis
   workers (its scheduler and dupefilter; Scrapy's own politeness, then with
   AutoThrottle at target concurrency 4, as ``bench_farm.py``);
2. a many-host farm: 60 hosts of 20 pages of 0.2 s (``CONCURRENT_REQUESTS`` 8
   per process), where one process is bound by its downloader and three
   should take half the time or less (scrapy-aimd only);
3. ``kill9``: the benchmark farm again, crawled by three scrapy-aimd workers,
   then by three of which the busiest (the most requests in the farm's log,
   told apart by their ``USER_AGENT``) is sent SIGKILL ``--kill-after``
   seconds (5) after the crawl's first request. The other two must fetch what
   it held: its heartbeat expires and the next claim puts its leases back in
   the queues. ``DOWNLOAD_TIMEOUT`` is Scrapy's default, 180 s (a lease holds
   210 s), unless ``--timeout`` says otherwise. Per host: pages fetched of the
   total, lost, fetched twice, and the host's time; then the leases the
   survivors reaped (``aimd/fleet/reaped``) and the check that pages fetched
   twice are at most those (only a dead worker's request is fetched again).

Per host: the most requests in flight at once, 429 and 503 answers, arrivals
closer than the robots.txt Crawl-delay, pages lost and pages fetched twice, and
the host's time (from the crawl's first request to the host's last answer);
for the scrapy-aimd fleet, the feedbacks applied again per host (a lost race
for the host's state in Redis). scrapy-redis runs with
``SCHEDULER_PERSIST = True``: with its default, the first worker to finish
deletes the queue and the seen set under the others.

    pip install scrapy-redis      # the comparison only: not a scrapy-aimd dependency
    PYTHONPATH=. python benchmarks/bench_fleet_farm.py
        [--farm benchmark|many|both|kill9|all] [--workers 3] [--no-scrapy-redis]
        [--keep DIR] [--kill-after 5] [--timeout 180]

``both`` (the default) is 1 and 2, ``all`` is 1, 2 and 3.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fleetcrawl import Worker, start_worker, wait_for  # noqa: E402
from redis_server import REDIS_SERVER, SKIP_REASON, RedisServer  # noqa: E402

from sitefarm import (  # noqa: E402
    FarmProcess,
    HostSpec,
    HostSummary,
    benchmark_farm,
    start_farm,
    summarize,
    totals,
)

#: Seconds any crawl may take before it is killed.
CAP = 300.0
#: Seconds after the first request when the ``kill9`` crawl's busiest worker is killed.
KILL_AFTER = 5.0


def many_hosts(count: int = 60) -> list[HostSpec]:
    return [HostSpec(name=f"m{n:02d}", pages=20, latency=0.2, seed=n) for n in range(count)]


FARMS: dict[str, tuple[Any, dict[str, Any]]] = {
    "benchmark": (benchmark_farm, {"CONCURRENT_REQUESTS": 32}),
    "many": (many_hosts, {"CONCURRENT_REQUESTS": 8}),
    # Scrapy's DOWNLOAD_TIMEOUT (180 s): a lease holds 210 s, the heartbeat seconds.
    "kill9": (benchmark_farm, {"CONCURRENT_REQUESTS": 32, "DOWNLOAD_TIMEOUT": 180}),
}

#: Settings of a scrapy-redis worker (no scrapy-aimd), given the Redis URL.
SCRAPY_REDIS = {
    "ADDONS": {},
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": True,
}
AUTOTHROTTLE = {"AUTOTHROTTLE_ENABLED": True, "AUTOTHROTTLE_TARGET_CONCURRENCY": 4}


def crawl(
    specs: list[HostSpec],
    settings: dict[str, Any],
    workers: int,
    out: Path,
    scrapy_redis: dict[str, Any] | None = None,
    kill_at: float | None = None,
) -> dict[str, Any]:
    """One crawl of a fresh farm: ``workers`` = 0 is one process without Redis;
    with ``scrapy_redis`` (extra settings), scrapy-redis workers instead; with
    ``kill_at``, the busiest worker is killed -9 that many seconds after the
    first request (each worker has a ``USER_AGENT`` of its own)."""
    server = RedisServer().start() if workers else None
    try:
        # The farm's clock (its outage, pauses, buckets) starts at the first request,
        # so that a fleet that takes longer to start meets the same farm.
        with start_farm(specs, max_seconds=CAP + 60, clock="first_request") as farm:
            urls = [url + "/" for url in farm.urls.values()]
            common = {"ROBOTSTXT_OBEY": True, "AIMD_FLEET_IDLE_CLOSE": 2.0, **settings}
            url = server.url if server else None
            if scrapy_redis is not None:
                common |= {**SCRAPY_REDIS, "REDIS_URL": url, **scrapy_redis}
                url = None
            fleet: list[Worker] = [
                start_worker(urls, out / f"w{n}", url, {**common, "USER_AGENT": f"{AGENT}{n}"})
                for n in range(max(1, workers))
            ]
            killed = kill_busiest(farm, fleet, kill_at) if kill_at is not None else None
            wait_for(fleet, CAP)
            log = farm.read_log()
            names = {url.split("://", 1)[1]: name for name, url in farm.urls.items()}
    finally:
        if server is not None:
            server.close()
    (out / "farm-log.json").write_text(json.dumps(log))
    summaries = summarize(log, specs)
    reasons = [w.stats().get("finish_reason") for w in fleet]
    survivors = [w for n, w in enumerate(fleet) if killed is None or n != killed[2]]
    return {
        "summaries": summaries,
        "totals": totals(summaries),
        "reasons": reasons,
        "claims": [w.stats().get("aimd/fleet/claims", 0) for w in fleet],
        "conflicts": sum(w.stats().get("aimd/fleet/conflicts", 0) for w in fleet),
        "feedbacks": sum(w.stats().get("aimd/fleet/feedbacks", 0) for w in fleet),
        "conflicts_by_host": conflicts_by_host(fleet, names),
        "codes": [w.code for w in fleet],
        "killed": killed,
        "reaped": [w.stats().get("aimd/fleet/reaped", 0) for w in survivors],
    }


#: Each worker's ``USER_AGENT`` is this and its number: the farm's log tells them apart.
AGENT = "aimd-bench-worker-"


def kill_busiest(
    farm: FarmProcess, fleet: list[Worker], after: float
) -> tuple[float, int, int] | None:
    """SIGKILL the worker that sent the most requests so far, ``after`` seconds
    after the crawl's first request (the farm's log); None if the fleet ended
    first. Returns the moment (``time.time()``), the requests served then and
    the worker's number."""
    deadline = time.monotonic() + CAP
    while time.monotonic() < deadline and all(w.process.poll() is None for w in fleet):
        log = farm.read_log()
        if log and time.time() >= min(r["arrived"] for r in log) + after:
            agents = [r.get("user_agent") for r in log]
            sent = [agents.count(f"{AGENT}{n}") for n in range(len(fleet))]
            busiest = max(range(len(fleet)), key=sent.__getitem__)
            fleet[busiest].process.send_signal(signal.SIGKILL)
            return time.time(), len(log), busiest
        time.sleep(0.05)
    return None


def conflicts_by_host(fleet: list[Worker], names: dict[str, str]) -> dict[str, list[int]]:
    """Feedbacks and those applied again (a lost race), per host, from the line
    each fleet worker logs at close."""
    found: dict[str, list[int]] = {}
    for worker in fleet:
        for line in worker.log().splitlines():
            _, marker, rest = line.partition(BY_HOST)
            if not marker:
                continue
            for host, feedbacks, again in re.findall(r"(\S+) (\d+) \((\d+)\)", rest):
                row = found.setdefault(names.get(host, host), [0, 0])
                row[0] += int(feedbacks)
                row[1] += int(again)
    return found


BY_HOST = "Fleet feedbacks by host (of which applied again): "


def span(result: dict[str, Any]) -> float:
    seconds: float = result["totals"]["span_seconds"]
    return seconds


def first_request(summaries: dict[str, HostSummary]) -> float:
    """When the crawl's first request arrived: each host's time counts from it."""
    return min(
        (h.first_arrival for h in summaries.values() if h.first_arrival is not None),
        default=0.0,
    )


def host_time(summaries: dict[str, HostSummary], host: str) -> str:
    last = summaries[host].last_finish
    return f"{last - first_request(summaries):.1f}" if last is not None else "-"


def report(name: str, runs: dict[str, dict[str, Any]]) -> None:
    labels = list(runs)
    base = span(runs[labels[0]])
    print(f"\n## {name}\n")
    for label in labels:
        result = runs[label]
        extra = ""
        if result["feedbacks"]:
            extra = (
                f"; claims per worker {result['claims']}, feedbacks applied again "
                f"{result['conflicts'] / result['feedbacks']:.0%}"
            )
        print(
            f"- {label}: {span(result):.1f} s from first request to last answer "
            f"({span(result) / base:.2f}x the first), finish {result['reasons']}{extra}"
        )
    columns = "in flight / 429+503 / delay gaps / lost / twice / time (s)"
    print("\n| host | " + " | ".join(f"{label}: {columns}" for label in labels) + " |")
    print("|---|" + "---:|" * len(labels))
    hosts = sorted(runs[labels[0]]["summaries"])
    sums = {label: [0, 0, 0, 0, 0] for label in labels}
    for host in hosts:
        cells = []
        for label in labels:
            summaries = runs[label]["summaries"]
            s = summaries[host]
            row = [
                s.max_in_flight,
                s.throttled,
                s.crawl_delay_violations,
                s.pages_total - s.pages_fetched,
                s.duplicate_fetches,
            ]
            sums[label] = [
                max(sums[label][0], row[0]),
                *(a + b for a, b in zip(sums[label][1:], row[1:], strict=True)),
            ]
            cells.append(" / ".join(str(v) for v in row) + f" / {host_time(summaries, host)}")
        print(f"| {host} | " + " | ".join(cells) + " |")
    print(
        "| all (max, sums) | "
        + " | ".join(
            " / ".join(str(v) for v in sums[label]) + f" / {span(runs[label]):.1f}"
            for label in labels
        )
        + " |"
    )
    for label in labels:
        by_host = runs[label]["conflicts_by_host"]
        if not by_host:
            continue
        print(f"\n{label}, feedbacks per host (of which applied again after a lost race):\n")
        print("| host | feedbacks | applied again |")
        print("|---|---:|---:|")
        for host, (feedbacks, again) in sorted(by_host.items()):
            print(f"| {host} | {feedbacks} | {again} ({again / max(1, feedbacks):.0%}) |")


def report_kill(label: str, result: dict[str, Any]) -> None:
    """The killed crawl: did the survivors fetch every page, and only the dead
    worker's leases again?"""
    summaries = result["summaries"]
    print(f"\n{label}, exit codes {result['codes']}", end="")
    if result["killed"] is None:
        print(": the fleet ended before a worker was killed")
        return
    moment, served, busiest = result["killed"]
    total = result["totals"]["pages_total"]
    print(
        f"; worker {busiest} (the busiest) killed {moment - first_request(summaries):.1f} s "
        f"after the first request, {served} requests served:\n"
    )
    print("| host | pages fetched / total | lost | fetched twice | time (s) |")
    print("|---|---:|---:|---:|---:|")
    for host, s in sorted(summaries.items()):
        print(
            f"| {host} | {s.pages_fetched} / {s.pages_total} | {s.pages_total - s.pages_fetched}"
            f" | {s.duplicate_fetches} | {host_time(summaries, host)} |"
        )
    sums = result["totals"]
    twice = sums["duplicate_fetches"]
    print(
        f"| all | {sums['pages_fetched']} / {total} | {total - sums['pages_fetched']}"
        f" | {twice} | {span(result):.1f} |"
    )
    reaped = sum(result["reaped"])
    verdict = "holds" if twice <= reaped else "FAILS"
    print(
        f"\nLeases reaped by the survivors (aimd/fleet/reaped): {reaped} {result['reaped']}; "
        f"pages fetched twice ({twice}) <= leases reaped ({reaped}): {verdict}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--farm", choices=["benchmark", "many", "both", "kill9", "all"], default="both"
    )
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--no-scrapy-redis", action="store_true")
    parser.add_argument("--keep", type=Path, default=None)
    parser.add_argument("--kill-after", type=float, default=KILL_AFTER)
    parser.add_argument("--timeout", type=float, default=None)
    args = parser.parse_args()
    if REDIS_SERVER is None:
        sys.exit(SKIP_REASON)
    with_redis = not args.no_scrapy_redis
    if with_redis and importlib.util.find_spec("scrapy_redis") is None:
        sys.exit("scrapy-redis is not installed: pip install scrapy-redis (or --no-scrapy-redis)")
    groups = {"both": ["benchmark", "many"], "all": ["benchmark", "many", "kill9"]}
    names = groups.get(args.farm, [args.farm])
    n = args.workers
    with tempfile.TemporaryDirectory(prefix="aimd-fleet-farm-") as tmp:
        base = args.keep or Path(tmp)
        for name in names:
            make, settings = FARMS[name]
            kinds: list[tuple[str, int, dict[str, Any] | None, float | None]] = [
                ("scrapy-aimd, 1 process", 0, None, None),
                (f"scrapy-aimd, {n} workers", n, None, None),
            ]
            if with_redis and name == "benchmark":
                kinds += [
                    (f"scrapy-redis, {n} workers", n, {}, None),
                    (f"scrapy-redis + AutoThrottle, {n} workers", n, AUTOTHROTTLE, None),
                ]
            killed = f"scrapy-aimd, {n} workers, the busiest killed -9"
            if name == "kill9":
                kinds = [kinds[1], (killed, n, None, args.kill_after)]
                if args.timeout is not None:
                    settings = {**settings, "DOWNLOAD_TIMEOUT": args.timeout}
            runs = {}
            for label, workers, scrapy_redis, kill_at in kinds:
                started = time.monotonic()
                out = base / name / re.sub(r"[^a-z0-9]+", "-", label.lower())
                runs[label] = crawl(make(), settings, workers, out, scrapy_redis, kill_at)
                print(f"{name}, {label}: {time.monotonic() - started:.1f} s wall", file=sys.stderr)
            report(name, runs)
            if name == "kill9":
                report_kill(killed, runs[killed])


if __name__ == "__main__":
    main()
