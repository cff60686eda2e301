"""Frontier cost per operation at 1,000, 10,000 and 100,000 hosts.

The frontier keeps hosts in two heaps (ready now, ready at a time), so push,
pop and finish cost O(log n) in the number of hosts. This drives it as a crawl
would, on a fake clock: every host has a 0.5 s gap, requests are popped as soon
as a host is ready and finished 50 ms later, and the clock moves on when no host
is ready. It prints microseconds per operation and the ratio to the smallest
farm: a flat ratio (a log factor) is what O(log n) looks like.

    PYTHONPATH=. python benchmarks/bench_frontier.py [--hosts 1000 10000 100000]
"""

from __future__ import annotations

import argparse
import heapq
import random
import time

from scrapy_aimd.core.controller import ControllerConfig, HostController, Ticket
from scrapy_aimd.core.frontier import Frontier

PER_HOST = 4
LATENCY = 0.05


def run(hosts: int, seed: int = 1) -> tuple[float, float, int]:
    """(µs per push, µs per pop-or-finish, operations) for one farm size."""
    rng = random.Random(seed)
    cfg = ControllerConfig(min_delay=0.5, max_concurrency=2, adaptive=False)
    frontier: Frontier[int] = Frontier(lambda host: HostController(cfg))
    names = [f"host{i}.example" for i in range(hosts)]
    pushes = [
        (rng.choice(names), rng.randrange(3), rng.randrange(5)) for _ in range(hosts * PER_HOST)
    ]

    began = time.perf_counter()
    for item, (host, priority, depth) in enumerate(pushes):
        frontier.push(host, item, priority=priority, depth=depth, now=0.0)
    push_seconds = time.perf_counter() - began

    now, ops = 0.0, 0
    running: list[tuple[float, int, str, Ticket]] = []
    began = time.perf_counter()
    while len(frontier) or running:
        popped = frontier.pop(now)
        if popped is not None:
            heapq.heappush(running, (now + LATENCY, ops, popped.host, popped.ticket))
            ops += 1
            continue
        wake = min(frontier.next_ready_at(now), running[0][0] if running else float("inf"))
        now = max(now, wake)
        while running and running[0][0] <= now:
            _, _, host, ticket = heapq.heappop(running)
            frontier.finish(host, ticket, now, status=200, latency=LATENCY)
            ops += 1
    pop_seconds = time.perf_counter() - began
    return push_seconds / len(pushes) * 1e6, pop_seconds / ops * 1e6, ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    args = parser.parse_args()
    print(f"{PER_HOST} requests per host, 0.5 s gap, limit 2, {LATENCY * 1000:.0f} ms per fetch")
    print("| hosts | push (µs) | pop or finish (µs) | vs the smallest |")
    print("| ---: | ---: | ---: | ---: |")
    base: float | None = None
    for hosts in args.hosts:
        push_us, op_us, _ = run(hosts)
        base = base or op_us
        print(f"| {hosts:,} | {push_us:.2f} | {op_us:.2f} | {op_us / base:.2f}x |")


if __name__ == "__main__":
    main()
