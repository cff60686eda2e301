"""The frontier's stores: SQLite against memory and Scrapy's disk queues.

1. Enqueue and dequeue throughput on the same requests (a spider callback, a
   depth in meta, a few priorities, spread over many hosts):
   ``MemoryQueueStore``; ``SqliteQueueStore`` with the scheduler's request codec
   and a commit every 2000 writes, as with ``JOBDIR``; and what stock Scrapy
   uses with ``JOBDIR``: ``ScrapyPriorityQueue`` over ``PickleLifoDiskQueue``.
   Dequeue takes every host in turn and marks each request done (Scrapy's
   queue has no hosts: it pops until empty). Best of the rounds, taking turns.
2. The memory of a ``Frontier`` over ``SqliteQueueStore`` holding millions of
   requests across tens of thousands of hosts, in a fresh process: growth of
   the resident set (RSS) and its peak, the file's size, and the time to open
   it again and resume, in another fresh process.

    PYTHONPATH=. python benchmarks/bench_frontier_store.py [--requests 100000]
        [--hosts 1000] [--rounds 3] [--memory 5000000 50000]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import scrapy
from bench_dedup import _peak_rss_bytes, _rss_bytes
from scrapy.utils.test import get_crawler

from scrapy_aimd.core.controller import ControllerConfig, HostController
from scrapy_aimd.core.frontier import Frontier, MemoryQueueStore, QueueStore
from scrapy_aimd.jobdir import CHECKPOINT_WRITES
from scrapy_aimd.request_codec import RequestCodec
from scrapy_aimd.sqlite_store import SqliteQueueStore


class BenchSpider(scrapy.Spider):
    name = "bench"

    def parse(self, response: Any) -> None:
        pass


def make_spider() -> BenchSpider:
    crawler = get_crawler(BenchSpider)
    spider = BenchSpider.from_crawler(crawler)
    crawler.spider = spider
    return spider


def requests(spider: BenchSpider, count: int, hosts: int) -> Iterator[tuple[str, scrapy.Request]]:
    """(host, request) pairs, the hosts taken in turn: each push lands far from the last."""
    for number in range(count):
        host = f"host{number % hosts}.example"
        yield (
            host,
            scrapy.Request(
                f"http://{host}/section/{number % 97}/page-{number}.html?ref=list",
                callback=spider.parse,
                priority=number % 3,
                meta={"depth": number % 5},
            ),
        )


# -- throughput ---------------------------------------------------------------------


def time_store(
    make: Callable[[Path], QueueStore[scrapy.Request]],
    work: list[tuple[str, scrapy.Request]],
    directory: Path,
) -> tuple[float, float]:
    """Seconds to push every request, and to pop them all host by host (done each)."""
    store = make(directory)
    commit = getattr(store, "pending_writes", None) is not None
    hosts = sorted({host for host, _ in work})
    gc.collect()
    start = time.perf_counter()
    for arrival, (host, request) in enumerate(work):
        store.push(host, (-request.priority, request.meta["depth"], arrival), request)
        if commit and store.pending_writes >= CHECKPOINT_WRITES:  # type: ignore[attr-defined]
            store.commit()
    store.commit()
    pushed = time.perf_counter()
    left = len(work)
    while left:
        for host in hosts:
            item = store.pop(host)
            if item is not None:
                store.done(item)
                left -= 1
                if commit and store.pending_writes >= CHECKPOINT_WRITES:  # type: ignore[attr-defined]
                    store.commit()
    store.commit()
    popped = time.perf_counter()
    store.close()
    return pushed - start, popped - pushed


def time_scrapy_queue(
    spider: BenchSpider, work: list[tuple[str, scrapy.Request]], directory: Path
) -> tuple[float, float]:
    from scrapy.pqueues import ScrapyPriorityQueue
    from scrapy.squeues import PickleLifoDiskQueue

    assert spider.crawler is not None
    queue = ScrapyPriorityQueue.from_crawler(
        spider.crawler, downstream_queue_cls=PickleLifoDiskQueue, key=str(directory / "q")
    )
    gc.collect()
    start = time.perf_counter()
    for _, request in work:
        queue.push(request)
    pushed = time.perf_counter()
    while queue.pop() is not None:
        pass
    popped = time.perf_counter()
    queue.close()
    return pushed - start, popped - pushed


def throughput(count: int, hosts: int, rounds: int) -> None:
    spider = make_spider()
    codec = RequestCodec(spider)

    def sqlite(directory: Path) -> QueueStore[scrapy.Request]:
        return SqliteQueueStore(
            directory / "frontier.sqlite", encode=codec.encode, decode=codec.decode
        )

    def memory(directory: Path) -> QueueStore[scrapy.Request]:
        return MemoryQueueStore()

    best: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name in ("memory", "sqlite", "scrapy"):
            work = list(requests(spider, count, hosts))
            directory = Path(tempfile.mkdtemp(prefix="bench-frontier-"))
            try:
                if name == "scrapy":
                    seconds = time_scrapy_queue(spider, work, directory)
                else:
                    seconds = time_store(memory if name == "memory" else sqlite, work, directory)
            finally:
                shutil.rmtree(directory)
            if name not in best:
                best[name] = list(seconds)
            else:
                best[name] = [min(a, b) for a, b in zip(best[name], seconds, strict=True)]
    labels = {
        "memory": "MemoryQueueStore",
        "sqlite": "SqliteQueueStore (JOBDIR)",
        "scrapy": "Scrapy ScrapyPriorityQueue + PickleLifoDiskQueue",
    }
    print(f"requests: {count:,} across {hosts:,} hosts, best of {rounds}")
    print(f"{'':50}  {'enqueue':>14}  {'dequeue':>14}")
    for name, (push, pop) in best.items():
        print(f"{labels[name]:50}  {count / push:10,.0f} /s  {count / pop:10,.0f} /s")
    sqlite_push, sqlite_pop = best["sqlite"]
    for name in ("memory", "scrapy"):
        push, pop = best[name]
        print(f"{'SQLite / ' + name:50}  {push / sqlite_push:12.2f}x  {pop / sqlite_pop:12.2f}x")


# -- memory ---------------------------------------------------------------------------


def open_frontier(path: Path, spider: BenchSpider) -> tuple[Frontier[scrapy.Request], Any]:
    codec = RequestCodec(spider)
    store: SqliteQueueStore[scrapy.Request] = SqliteQueueStore(
        path, encode=codec.encode, decode=codec.decode
    )
    cfg = ControllerConfig(min_delay=0.0)
    return Frontier(lambda host: HostController(cfg), store), store


def fill_child(path: Path, count: int, hosts: int) -> None:
    """In a fresh process: queue ``count`` requests; print the figures."""
    spider = make_spider()
    gc.collect()
    before = _rss_bytes()
    start = time.perf_counter()
    frontier, store = open_frontier(path, spider)
    for host, request in requests(spider, count, hosts):
        frontier.push(
            host, request, priority=request.priority, depth=request.meta["depth"], now=0.0
        )
        if store.pending_writes >= CHECKPOINT_WRITES:
            store.commit()
    store.commit()
    seconds = time.perf_counter() - start
    gc.collect()
    after = _rss_bytes()
    popped = 0
    while popped < 10_000 and (item := frontier.pop(0.0)) is not None:
        frontier.done(item.item)
        popped += 1
    store.close()
    print(before, after, _peak_rss_bytes(), seconds, popped)


def reopen_child(path: Path) -> None:
    """In a fresh process: open the file again and file every host, as a resumed crawl does."""
    spider = make_spider()
    gc.collect()
    before = _rss_bytes()
    start = time.perf_counter()
    frontier, store = open_frontier(path, spider)
    hosts = frontier.restore(0.0)
    seconds = time.perf_counter() - start
    gc.collect()
    print(_rss_bytes() - before, seconds, hosts, len(frontier))
    store.close()


def memory(count: int, hosts: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix="bench-frontier-"))
    path = directory / "frontier.sqlite"
    try:
        fill = run_child("--fill-child", str(path), str(count), str(hosts))
        size = path.stat().st_size
        reopen = run_child("--reopen-child", str(path))
    finally:
        shutil.rmtree(directory)
    before, after, peak = (int(value) / 2**20 for value in fill[:3])
    seconds, popped = float(fill[3]), int(fill[4])
    print(f"memory: a Frontier over SqliteQueueStore, {count:,} requests across {hosts:,} hosts")
    print(f"  queued in {seconds:,.0f} s ({count / seconds:,.0f} /s)")
    print(
        f"  RSS {after:,.1f} MiB (peak {peak:,.1f} MiB), of which the frontier"
        f" {after - before:,.1f} MiB (peak {peak - before:,.1f} MiB)"
    )
    print(f"  file {size / 2**20:,.0f} MiB ({size / count:,.0f} B a request)")
    print(
        f"  popped {popped:,} and marked them done; reopened, every host filed in"
        f" {float(reopen[1]):,.1f} s: {int(reopen[2]):,} hosts, {int(reopen[3]):,} requests,"
        f" RSS growth {int(reopen[0]) / 2**20:,.1f} MiB"
    )


def run_child(*arguments: str) -> list[str]:
    output = subprocess.run(
        [sys.executable, __file__, *arguments], check=True, capture_output=True, text=True
    ).stdout
    return output.split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--hosts", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory", type=int, nargs="*", default=[5_000_000, 50_000])
    parser.add_argument("--fill-child", nargs=3)
    parser.add_argument("--reopen-child", nargs=1)
    arguments = parser.parse_args()
    if arguments.fill_child:
        path, count, hosts = arguments.fill_child
        fill_child(Path(path), int(count), int(hosts))
        return
    if arguments.reopen_child:
        reopen_child(Path(arguments.reopen_child[0]))
        return
    throughput(arguments.requests, arguments.hosts, arguments.rounds)
    if arguments.memory:
        print()
        memory(*arguments.memory)


if __name__ == "__main__":
    main()
