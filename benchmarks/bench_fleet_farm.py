"""One scrapy-aimd process against a fleet of three on the same farms.

Each crawl gets a fresh farm and, for the fleet, a fresh ``redis-server`` child
(``tests/redis_server.py``); the workers are the tests' crawl processes
(``tests/crawlrunner.py``) started together. What each crawl did is read from
the farm's request log, the sites' own view:

1. ``sitefarm.benchmark_farm()``: twelve hosts that push back each their own way
   (``CONCURRENT_REQUESTS`` 32 per process, as ``bench_farm.py``);
2. a many-host farm: 60 hosts of 20 pages of 0.2 s (``CONCURRENT_REQUESTS`` 8
   per process), where one process is bound by its downloader and three
   should take half the time or less.

Per host: the most requests in flight at once, 429 and 503 answers, arrivals
closer than the robots.txt Crawl-delay, pages lost and pages fetched twice.

    PYTHONPATH=. python benchmarks/bench_fleet_farm.py [--farm benchmark|many|both]
        [--workers 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fleetcrawl import Worker, start_worker, wait_for  # noqa: E402
from redis_server import REDIS_SERVER, SKIP_REASON, RedisServer  # noqa: E402

from sitefarm import HostSpec, benchmark_farm, start_farm, summarize, totals  # noqa: E402

#: Seconds any crawl may take before it is killed.
CAP = 300.0


def many_hosts(count: int = 60) -> list[HostSpec]:
    return [HostSpec(name=f"m{n:02d}", pages=20, latency=0.2, seed=n) for n in range(count)]


FARMS: dict[str, tuple[Any, dict[str, Any]]] = {
    "benchmark": (benchmark_farm, {"CONCURRENT_REQUESTS": 32}),
    "many": (many_hosts, {"CONCURRENT_REQUESTS": 8}),
}


def crawl(
    specs: list[HostSpec], settings: dict[str, Any], workers: int, out: Path
) -> dict[str, Any]:
    """One crawl of a fresh farm: ``workers`` = 0 is one process without Redis."""
    server = RedisServer().start() if workers else None
    try:
        # The farm's clock (its outage, pauses, buckets) starts at the first request,
        # so that a fleet that takes longer to start meets the same farm.
        with start_farm(specs, max_seconds=CAP + 60, clock="first_request") as farm:
            urls = [url + "/" for url in farm.urls.values()]
            common = {"ROBOTSTXT_OBEY": True, "AIMD_FLEET_IDLE_CLOSE": 2.0, **settings}
            url = server.url if server else None
            fleet: list[Worker] = [
                start_worker(urls, out / f"w{n}", url, common) for n in range(max(1, workers))
            ]
            wait_for(fleet, CAP)
            log = farm.read_log()
    finally:
        if server is not None:
            server.close()
    reasons = [w.stats().get("finish_reason") for w in fleet]
    return {
        "summaries": summarize(log, specs),
        "totals": totals(summarize(log, specs)),
        "reasons": reasons,
        "claims": [w.stats().get("aimd/fleet/claims", 0) for w in fleet],
        "conflicts": sum(w.stats().get("aimd/fleet/conflicts", 0) for w in fleet),
        "feedbacks": sum(w.stats().get("aimd/fleet/feedbacks", 0) for w in fleet),
    }


def span(result: dict[str, Any]) -> float:
    seconds: float = result["totals"]["span_seconds"]
    return seconds


def report(name: str, runs: dict[str, dict[str, Any]]) -> None:
    labels = list(runs)
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
            f"- {label}: {span(result):.1f} s from first request to last answer, "
            f"finish {result['reasons']}{extra}"
        )
    header = (
        "| host | "
        + " | ".join(
            f"{label}: in flight / 429+503 / delay gaps / lost / twice" for label in labels
        )
        + " |"
    )
    print("\n" + header)
    print("|---|" + "---:|" * len(labels))
    hosts = sorted(runs[labels[0]]["summaries"])
    sums = {label: [0, 0, 0, 0, 0] for label in labels}
    for host in hosts:
        cells = []
        for label in labels:
            s = runs[label]["summaries"][host]
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
            cells.append(" / ".join(str(v) for v in row))
        print(f"| {host} | " + " | ".join(cells) + " |")
    print(
        "| all (max, sums) | "
        + " | ".join(" / ".join(str(v) for v in sums[label]) for label in labels)
        + " |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--farm", choices=["benchmark", "many", "both"], default="both")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None)
    args = parser.parse_args()
    if REDIS_SERVER is None:
        sys.exit(SKIP_REASON)
    names = ["benchmark", "many"] if args.farm == "both" else [args.farm]
    with tempfile.TemporaryDirectory(prefix="aimd-fleet-farm-") as tmp:
        base = args.keep or Path(tmp)
        for name in names:
            make, settings = FARMS[name]
            runs = {}
            for label, workers in (("1 process", 0), (f"{args.workers} workers", args.workers)):
                started = time.monotonic()
                runs[label] = crawl(
                    make(), settings, workers, base / name / label.replace(" ", "-")
                )
                print(f"{name}, {label}: {time.monotonic() - started:.1f} s wall", file=sys.stderr)
            report(name, runs)


if __name__ == "__main__":
    main()
