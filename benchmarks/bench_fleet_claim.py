"""The fleet's claim script on loopback, as a worker drives it: CPU, time and
Redis round trips per request.

One worker, a fresh ``redis-server`` (persistence off), requests over many
hosts, driven as ``FleetStore`` drives its frontier in a crawl: each round
trip claims up to ``--batch`` requests (the downloader's room), and carries
what the worker learnt since the last one: each answer (a 200, stored with the
next claim), each lease done, and each claimed request's child to queue (a
crawl's next page), so that one script does a request's whole work. The
worker's CPU (``time.thread_time``) and wall time per request, round trips
per request, counted on the client and, independently, in the server's ``INFO
commandstats``, and Redis's own time per script. For scale, the same requests
through the single-process ``Frontier`` (pop and finish). Then several worker
processes on the same fleet, over a few hosts so that they contend for each
host's state: requests a second in all, and how many feedbacks lost a race and
were applied again (one more round trip each).

    PYTHONPATH=. python benchmarks/bench_fleet_claim.py [--requests 20000] [--hosts 100]
        [--batch 8] [--workers 3] [--shared-hosts 4]
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
from scrapy_aimd.fleet import Fleet, FleetFrontier, Item  # noqa: E402

CFG = ControllerConfig(min_delay=0.0, adaptive=False, max_concurrency=8)
#: About a stored Request's size.
BODY = b"x" * 300


def evalsha_stats(client: redis.Redis) -> tuple[int, float]:
    """EVALSHA calls so far, and the server's time in them (microseconds)."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), float(stats.get("usec", 0))


def _frontier(url: str, prefix: str) -> FleetFrontier[bytes]:
    return FleetFrontier(
        Fleet(url, prefix), encode=bytes, decode=bytes, config=lambda host: CFG, lease_time=60.0
    )


def drive(
    frontier: FleetFrontier[bytes], batch: int, children: list[Item[bytes]], deadline: float
) -> list[float]:
    """Claim and answer until nothing is queued or leased fleet-wide, each round
    trip carrying the last one's answers, leases done and a child per claim (taken
    from ``children`` while it lasts). Returns each round trip's wall time."""
    trips: list[float] = []
    while time.monotonic() < deadline:
        started = time.perf_counter()
        got = frontier.claim_many(batch)
        trips.append(time.perf_counter() - started)
        if not isinstance(got, list):
            if got.queued == 0 and got.leased == 0:
                break
            continue
        for claim in got:
            frontier.finish_later(claim, status=200, latency=0.01, then=lambda reaction: None)
        frontier.done_later([claim.lease for claim in got])
        pushed = [children.pop() for _ in got if children]
        if pushed:
            frontier.push_later(pushed, lambda results: None)
    frontier.flush()
    return trips


def fleet_run(url: str, requests: int, hosts: int, batch: int) -> dict[str, float]:
    frontier = _frontier(url, "bench:claim")
    seeds = min(requests, hosts * batch)
    frontier.push([Item(f"host{n % hosts}", BODY, key=n) for n in range(seeds)])
    children = [Item(f"host{n % hosts}", BODY, key=n) for n in range(requests - 1, seeds - 1, -1)]
    observer = redis.Redis.from_url(url)
    trips_before = frontier.counters.round_trips
    server_before, usec_before = evalsha_stats(observer)
    cpu, wall = time.thread_time(), time.perf_counter()
    trips = drive(frontier, batch, children, time.monotonic() + 600)
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    server_after, usec_after = evalsha_stats(observer)
    server = server_after - server_before
    assert frontier.counters.claims == requests, frontier.counters.claims
    assert frontier.status().queued == 0
    return {
        "cpu_us": cpu / requests * 1e6,
        "wall_us": wall / requests * 1e6,
        "trip_us": statistics.median(trips) * 1e6,
        "trip_p99_us": sorted(trips)[int(0.99 * len(trips))] * 1e6,
        "trips_per_request": (frontier.counters.round_trips - trips_before) / requests,
        "server_calls_per_request": server / requests,
        "conflicts": frontier.counters.conflicts,
        "server_us_per_call": (usec_after - usec_before) / max(1, server),
        "server_us_per_request": (usec_after - usec_before) / requests,
    }


def _worker(url: str, batch: int) -> dict[str, int]:
    """One worker process: claim and answer until the fleet has nothing left."""
    frontier = _frontier(url, "bench:workers")
    drive(frontier, batch, [], time.monotonic() + 300)
    counters = frontier.counters
    return {
        "claims": counters.claims,
        "feedbacks": counters.feedbacks,
        "conflicts": counters.conflicts,
        "round_trips": counters.round_trips,
    }


def workers_run(url: str, requests: int, hosts: int, workers: int, batch: int) -> dict[str, float]:
    _frontier(url, "bench:workers").push([Item(f"host{n % hosts}", BODY) for n in range(requests)])
    started = time.perf_counter()
    with multiprocessing.Pool(workers) as pool:
        results = pool.starmap(_worker, [(url, batch)] * workers)
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
    parser.add_argument("--batch", type=int, default=8, help="claims per round trip at most")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--shared-hosts", type=int, default=4)
    parser.add_argument(
        "--shared-batch",
        type=int,
        default=1,
        help="claims per round trip of the workers that contend (more, with answers "
        "at once and a few hosts, keeps a host's state moving faster than a lost "
        "feedback's retry can follow)",
    )
    args = parser.parse_args()
    if REDIS_SERVER is None:
        print(SKIP_REASON)
        return 1
    with redis_server() as server:
        result = fleet_run(server.url, args.requests, args.hosts, args.batch)
        many = workers_run(
            server.url, args.requests, args.shared_hosts, args.workers, args.shared_batch
        )
    local = local_run(args.requests, args.hosts)
    print(
        f"{args.requests:,} requests over {args.hosts} hosts, one worker, up to "
        f"{args.batch} claims a round trip, loopback\n"
    )
    print("| per request | worker CPU | wall |")
    print("|---|---:|---:|")
    print(
        f"| claim, answer, lease done, a child queued (carried) "
        f"| {result['cpu_us']:.0f} us | {result['wall_us']:.0f} us |"
    )
    print(f"| single-process Frontier pop + finish | {local:.0f} us | |")
    print()
    print(
        f"A round trip: median {result['trip_us']:.0f} us, p99 {result['trip_p99_us']:.0f} us. "
        f"Round trips per request: {result['trips_per_request']:.2f} counted "
        f"by the client, {result['server_calls_per_request']:.2f} EVALSHA by the server; "
        f"conflicts: {result['conflicts']:.0f}; Redis's own time: "
        f"{result['server_us_per_call']:.0f} us a script, "
        f"{result['server_us_per_request']:.0f} us a request"
    )
    print(
        f"\n{args.workers} worker processes, {args.requests:,} requests over "
        f"{args.shared_hosts} hosts, up to {args.shared_batch} claims a round trip: "
        f"{many['per_second']:,.0f} requests/s in all; "
        f"{many['conflict_share']:.1%} of feedbacks lost a race and were applied again; "
        f"{many['trips_per_request']:.2f} round trips a request (connecting included); "
        f"the least busy worker claimed {many['spread']:.0%} as many as the busiest"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
