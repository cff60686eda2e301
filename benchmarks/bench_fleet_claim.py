"""The fleet's claim and feedback on loopback: time and Redis round trips each.

One worker, a fresh ``redis-server`` (persistence off): requests over many
hosts, claimed one by one and answered with a 200 at once (feedback that also
forgets the lease), as a scheduler calls them. Round trips are counted on the
client and, independently, in the server's ``INFO commandstats``. For scale,
the same requests through the single-process ``Frontier`` (pop and finish).
Then several worker processes on the same fleet, over a few hosts so that they
contend for each host's state: requests a second in all, and how many
feedbacks lost a race and were applied again (one more round trip each).

    PYTHONPATH=. python benchmarks/bench_fleet_claim.py [--requests 20000] [--hosts 100]
        [--workers 3] [--shared-hosts 4]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from redis_server import REDIS_SERVER, SKIP_REASON, redis_server  # noqa: E402

from scrapy_aimd.core.controller import ControllerConfig, HostController  # noqa: E402
from scrapy_aimd.core.frontier import Frontier  # noqa: E402
from scrapy_aimd.fleet import Claim, Fleet, FleetFrontier, Item  # noqa: E402

CFG = ControllerConfig(min_delay=0.0, adaptive=False, max_concurrency=8)


def evalsha_stats(client: redis.Redis) -> tuple[int, float]:
    """EVALSHA calls so far, and the server's time in them (microseconds)."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), float(stats.get("usec", 0))


def fleet_run(url: str, requests: int, hosts: int) -> dict[str, float]:
    fleet = Fleet(url, "bench:claim")
    frontier = FleetFrontier(
        fleet, encode=bytes, decode=bytes, config=lambda host: CFG, lease_time=60.0
    )
    body = b"x" * 300  # about a stored Request's size
    frontier.push([Item(f"host{n % hosts}", body, key=n) for n in range(requests)])
    observer = redis.Redis.from_url(url)
    claim_times: list[float] = []
    feedback_times: list[float] = []
    trips_before = fleet.counters.round_trips
    server_before, usec_before = evalsha_stats(observer)
    for _ in range(requests):
        started = time.perf_counter()
        claim = frontier.claim()
        claimed = time.perf_counter()
        assert isinstance(claim, Claim), claim
        frontier.finish(claim, status=200, latency=0.01, done=True)
        claim_times.append(claimed - started)
        feedback_times.append(time.perf_counter() - claimed)
    trips = fleet.counters.round_trips - trips_before
    server_after, usec_after = evalsha_stats(observer)
    server = server_after - server_before
    assert frontier.status().queued == 0
    return {
        "claim_us": statistics.median(claim_times) * 1e6,
        "claim_p99_us": sorted(claim_times)[int(0.99 * len(claim_times))] * 1e6,
        "feedback_us": statistics.median(feedback_times) * 1e6,
        "feedback_p99_us": sorted(feedback_times)[int(0.99 * len(feedback_times))] * 1e6,
        "trips_per_request": trips / requests,
        "server_calls_per_request": server / requests,
        "conflicts": fleet.counters.conflicts,
        "server_us_per_call": (usec_after - usec_before) / max(1, server),
    }


def _worker(url: str) -> dict[str, int]:
    """One worker process: claim and answer until the fleet has nothing left."""
    fleet = Fleet(url, "bench:workers")
    frontier = FleetFrontier(
        fleet, encode=bytes, decode=bytes, config=lambda host: CFG, lease_time=60.0
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        claim = frontier.claim()
        if isinstance(claim, Claim):
            frontier.finish(claim, status=200, latency=0.01, done=True)
        elif claim.queued == 0 and claim.leased == 0:
            break
    counters = fleet.counters
    return {
        "claims": counters.claims,
        "feedbacks": counters.feedbacks,
        "conflicts": counters.conflicts,
        "round_trips": counters.round_trips,
    }


def workers_run(url: str, requests: int, hosts: int, workers: int) -> dict[str, float]:
    fleet = Fleet(url, "bench:workers")
    FleetFrontier(fleet, encode=bytes, decode=bytes, config=lambda host: CFG, lease_time=60.0).push(
        [Item(f"host{n % hosts}", b"x" * 300) for n in range(requests)]
    )
    started = time.perf_counter()
    with multiprocessing.Pool(workers) as pool:
        results = pool.map(_worker, [url] * workers)
    elapsed = time.perf_counter() - started
    total = {name: sum(r[name] for r in results) for name in results[0]}
    assert total["claims"] == requests, total
    return {
        "per_second": requests / elapsed,
        "conflict_share": total["conflicts"] / total["feedbacks"],
        "trips_per_request": total["round_trips"] / requests,
        "spread": min(r["claims"] for r in results) / max(r["claims"] for r in results),
    }


def local_run(requests: int, hosts: int) -> float:
    frontier: Frontier[bytes] = Frontier(lambda host: HostController(CFG))
    for n in range(requests):
        frontier.push(f"host{n % hosts}", b"x", now=0.0)
    started = time.perf_counter()
    for _ in range(requests):
        popped = frontier.pop(1.0)
        assert popped is not None
        frontier.finish(popped.host, popped.ticket, 1.0, status=200, latency=0.01)
    return (time.perf_counter() - started) / requests * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--shared-hosts", type=int, default=4)
    args = parser.parse_args()
    if REDIS_SERVER is None:
        print(SKIP_REASON)
        return 1
    with redis_server() as server:
        result = fleet_run(server.url, args.requests, args.hosts)
        many = workers_run(server.url, args.requests, args.shared_hosts, args.workers)
    local = local_run(args.requests, args.hosts)
    print(f"{args.requests:,} requests over {args.hosts} hosts, one worker, loopback\n")
    print("| | median | p99 |")
    print("|---|---:|---:|")
    print(
        f"| claim (1 round trip) | {result['claim_us']:.0f} us | {result['claim_p99_us']:.0f} us |"
    )
    print(
        f"| feedback + lease forgotten (1 round trip) | {result['feedback_us']:.0f} us"
        f" | {result['feedback_p99_us']:.0f} us |"
    )
    print(f"| single-process Frontier pop + finish | {local:.0f} us | |")
    print()
    print(
        f"Round trips per request (claim + feedback): {result['trips_per_request']:.2f} counted "
        f"by the client, {result['server_calls_per_request']:.2f} EVALSHA by the server; "
        f"conflicts: {result['conflicts']:.0f}; Redis's own time per script: "
        f"{result['server_us_per_call']:.0f} us"
    )
    print(
        f"\n{args.workers} worker processes, {args.requests:,} requests over "
        f"{args.shared_hosts} hosts: {many['per_second']:,.0f} requests/s in all; "
        f"{many['conflict_share']:.1%} of feedbacks lost a race and were applied again; "
        f"{many['trips_per_request']:.2f} round trips a request (connecting included); "
        f"the least busy worker claimed {many['spread']:.0%} as many as the busiest"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
