"""Fingerprint + dedup throughput and seen-set memory, against stock Scrapy.

1. ``request_seen`` throughput of AimdDupeFilter (with AimdRequestFingerprinter)
   against Scrapy's RFPDupeFilter (with RequestFingerprinter), on the same
   requests: the generated URLs of bench_canonical.py, plus a third of them
   again as duplicate links. Fresh request objects and filters each round.
2. Memory per key of SeenSet at 1 and 10 million keys, beside a Python set of
   the same 64-bit ints and RFPDupeFilter's set of SHA-1 digests; each measured
   in a fresh process as the growth of its resident set size (RSS), with the
   peak (SeenSet grows by copying a segment) beside it.
3. The worst single add while each fills up to the largest of those sizes:
   SeenSet.add against RFPDupeFilter.request_seen (its set grows by copying
   every digest), each in a fresh process, with the 99.99th percentile and the
   adds slower than 20 ms, and for SeenSet the longest single segment growth
   (timed inside it). On a shared machine the worst add includes the time the
   process was not scheduled: compare it with the growth time.

    PYTHONPATH=. python benchmarks/bench_dedup.py [--urls 100000] [--rounds 3]
        [--memory-keys 1000000 10000000]
"""

from __future__ import annotations

import argparse
import bisect
import gc
import hashlib
import random
import resource
import subprocess
import sys
import time
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from scrapy_aimd.core.dedup import SeenSet

# Scrapy, w3lib and the dupefilter are imported where they are used, so that a
# memory-measuring child process holds nothing but what it measures.


def workload(count: int) -> list[str]:
    from bench_canonical import generate_urls

    urls = generate_urls(count)
    rnd = random.Random(2)
    return urls + rnd.sample(urls, count // 3)


def best_seconds(
    make_filters: dict[str, Any], urls: list[str], rounds: int
) -> dict[str, tuple[float, int]]:
    """Best time (and filtered count) of each filter, taking turns round by
    round; fresh request objects and a fresh filter each time."""
    from scrapy import Request

    best: dict[str, tuple[float, int]] = {}
    for _ in range(rounds):
        for name, make_filter in make_filters.items():
            requests = [Request(url) for url in urls]
            dupefilter = make_filter()
            gc.collect()
            start = time.perf_counter()
            filtered = sum(map(dupefilter.request_seen, requests))
            seconds = time.perf_counter() - start
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, filtered)
    return best


def throughput(count: int, rounds: int) -> float:
    """Print both request_seen throughputs; return the ratio (ours / Scrapy's)."""
    from scrapy.dupefilters import RFPDupeFilter
    from scrapy.utils.request import RequestFingerprinter

    from scrapy_aimd.dupefilter import AimdDupeFilter

    urls = workload(count)
    best = best_seconds(
        {
            "stock": lambda: RFPDupeFilter(fingerprinter=RequestFingerprinter()),
            "ours": AimdDupeFilter,
        },
        urls,
        rounds,
    )
    (stock_time, stock_filtered), (our_time, our_filtered) = best["stock"], best["ours"]
    print(f"requests: {len(urls):,} ({count:,} generated URLs + a third again), best of {rounds}")
    print(
        f"Scrapy RequestFingerprinter + RFPDupeFilter : {len(urls) / stock_time:10,.0f} req/s"
        f"  ({stock_filtered:,} filtered)"
    )
    print(
        f"AimdRequestFingerprinter + AimdDupeFilter    : {len(urls) / our_time:10,.0f} req/s"
        f"  ({our_filtered:,} filtered)"
    )
    ratio = stock_time / our_time
    print(f"fingerprint + dedup ratio                    : {ratio:.2f}x Scrapy")
    return ratio


def _rss_bytes() -> int:
    """Current resident set size (Linux /proc; the peak elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except OSError:
        return _peak_rss_bytes()
    return pages * resource.getpagesize()


def _peak_rss_bytes() -> int:
    """Peak resident set size of this process image: VmHWM on Linux (reset by
    exec, unlike getrusage's ru_maxrss, which keeps the parent's peak)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


class _Sha1Fingerprinter:
    """RFPDupeFilter stores what its fingerprinter returns: SHA-1 digests, as
    Scrapy's RequestFingerprinter does, here of a counter (no Request needed)."""

    def fingerprint(self, request: Any) -> bytes:
        return hashlib.sha1(request.to_bytes(8, "big")).digest()


class _TimedSeenSet(SeenSet):
    """A SeenSet that keeps the longest time one segment took to grow: the part
    of an add's time that the structure itself costs, whatever else runs."""

    __slots__ = ("longest_growth",)

    def __init__(self) -> None:
        super().__init__()
        self.longest_growth = 0.0

    def _grow(self, segment: int) -> None:
        start = time.perf_counter()
        super()._grow(segment)
        self.longest_growth = max(self.longest_growth, time.perf_counter() - start)


def _adder(structure: str) -> tuple[Any, Callable[[int], object]]:
    """A fresh structure and the call that adds one key (a counter for
    RFPDupeFilter, whose fingerprinter turns it into a SHA-1 digest)."""
    kept: Any
    if structure == "SeenSet":
        kept = SeenSet()
        return kept, kept.add
    if structure == "TimedSeenSet":
        kept = _TimedSeenSet()
        return kept, kept.add
    if structure == "set":
        kept = set()
        return kept, kept.add
    from scrapy.dupefilters import RFPDupeFilter

    kept = RFPDupeFilter(fingerprinter=_Sha1Fingerprinter())
    return kept, kept.request_seen


def _keys(structure: str, count: int) -> Iterator[int]:
    if structure == "RFPDupeFilter":
        return iter(range(count))
    getrandbits = random.Random(3).getrandbits
    return (getrandbits(64) for _ in range(count))


def measure_child(structure: str, keys: int) -> None:
    """In a fresh process: fill one structure and print its bytes per key."""
    gc.collect()
    before = _rss_bytes()
    _kept, add = _adder(structure)  # alive until the RSS is read
    for key in _keys(structure, keys):
        add(key)
    gc.collect()
    after = _rss_bytes()
    # The process peaked no higher than its current RSS before the fill.
    print((after - before) / keys, (max(_peak_rss_bytes(), after) - before) / keys)


def _in_child(option: str, structure: str, keys: int) -> list[str]:
    """What this script prints with ``option structure keys`` in a fresh process."""
    return subprocess.run(
        [sys.executable, __file__, option, structure, str(keys)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()


def memory(key_counts: list[int]) -> None:
    """Print bytes per key of each structure at each size."""
    print("memory per key (RSS growth in a fresh process; peak in brackets)")
    header = f"{'keys':>12}  {'SeenSet':>16}  {'Python set[int]':>16}  {'RFPDupeFilter':>16}"
    print(header)
    for keys in key_counts:
        cells = []
        for structure in ("SeenSet", "set", "RFPDupeFilter"):
            output = _in_child("--memory-child", structure, keys)
            resident, peak = float(output[0]), float(output[1])
            cells.append(f"{resident:6.1f} ({peak:5.1f}) B")
        print(f"{keys:>12,}  " + "  ".join(f"{cell:>16}" for cell in cells))


def latency_child(structure: str, keys: int) -> None:
    """In a fresh process: time every add while filling one structure; print the
    worst (seconds, and at which key), the 99.99th percentile and the adds over 20 ms."""
    kept, add = _adder(structure if structure != "SeenSet" else "TimedSeenSet")
    clock = time.perf_counter
    times = array("f", bytes(4 * keys))
    for number, key in enumerate(_keys(structure, keys)):
        start = clock()
        add(key)
        times[number] = clock() - start
    worst = max(range(keys), key=times.__getitem__)
    ordered = sorted(times)
    percentile = ordered[min(keys - 1, int(keys * 0.9999))]
    slow = keys - bisect.bisect_right(ordered, 0.020)
    print(times[worst], worst, percentile, slow, getattr(kept, "longest_growth", "-"))


def latency(keys: int) -> None:
    """Print the worst single add of each structure while it fills to ``keys``."""
    print(f"add latency while filling to {keys:,} keys (fresh process each)")
    print(
        f"{'':16}  {'worst add':>10}  {'at key':>12}  {'p99.99':>8}  {'adds > 20 ms':>12}"
        f"  {'longest growth':>14}"
    )
    for structure in ("SeenSet", "RFPDupeFilter"):
        output = _in_child("--latency-child", structure, keys)
        worst, at, percentile, slow = float(output[0]), int(output[1]), float(output[2]), output[3]
        growth = f"{float(output[4]) * 1000:11.1f} ms" if output[4] != "-" else f"{'-':>14}"
        print(
            f"{structure:16}  {worst * 1000:7.1f} ms  {at:>12,}  {percentile * 1e6:5.1f} us"
            f"  {int(slow):>12,}  {growth}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-keys", type=int, nargs="*", default=[1_000_000, 10_000_000])
    parser.add_argument("--memory-child", nargs=2, metavar=("STRUCTURE", "KEYS"))
    parser.add_argument("--latency-child", nargs=2, metavar=("STRUCTURE", "KEYS"))
    arguments = parser.parse_args()
    if arguments.memory_child:
        structure, keys = arguments.memory_child
        measure_child(structure, int(keys))
        return
    if arguments.latency_child:
        structure, keys = arguments.latency_child
        latency_child(structure, int(keys))
        return
    throughput(arguments.urls, arguments.rounds)
    print()
    if arguments.memory_keys:
        latency(max(arguments.memory_keys))
        print()
        memory(arguments.memory_keys)


if __name__ == "__main__":
    main()
