"""The scheduler's CPU per request: one scrapy-aimd process, one fleet worker
(Redis), and scrapy-redis's scheduler, crawling the same farm in one run.

Each crawl is a real ``scrapy crawl`` in its own process (``tests/crawlrunner.py``)
against a fresh farm of fast hosts that never push back, and for the two Redis
schedulers a fresh ``redis-server`` child. In that process the scheduler's
entry points are timed with the thread's CPU clock (``time.thread_time``: the
time spent waiting for Redis is not CPU): ``enqueue_request``,
``next_request``, ``has_pending_requests`` and, for scrapy-aimd, the feedback
handlers (``response_feedback`` and ``request_reached_downloader``), which is
where a fleet worker applies the controller's rules to the host's state in
Redis. The dupefilter runs inside ``enqueue_request`` for all three.
scrapy-redis has no feedback: its cost is its queue and dupefilter alone.

Per request answered: the scheduler's CPU, its wall time (Redis round trips
included), the whole process's CPU, and the Redis server's CPU (``INFO cpu``).

The machine's load moves a crawl's CPU per request by more than the gap
between the crawlers (the same crawl took 152 and 256 us in two rounds), and
load changes over seconds to minutes: so the crawlers take turns in
``--rounds`` rounds, every crawler once a round, in the opposite order every
other round (A B C, C B A: each crawler's mean position is the same, so a
drift in the load counts alike for all), and what counts is each round's
ratio to the one process of the same round. The ratio reported is the median
of those paired ratios, with their range; the CPU per request of each crawler
is the median of its rounds.

    pip install scrapy-redis      # the comparison only: not a scrapy-aimd dependency
    PYTHONPATH=. python benchmarks/bench_fleet_cpu.py [--hosts 12] [--pages 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

#: What is timed, by class: the scheduler's entry points and its feedback handlers.
TIMED: dict[str, list[str]] = {
    "scrapy_aimd.scheduler.AimdScheduler": [
        "enqueue_request",
        "next_request",
        "has_pending_requests",
        "_on_feedback",
        "_on_reached_downloader",
    ],
    "scrapy_aimd.fleet_scheduler.FleetScheduler": ["_on_feedback", "_on_reached_downloader"],
    "scrapy_redis.scheduler.Scheduler": [
        "enqueue_request",
        "next_request",
        "has_pending_requests",
    ],
}

#: Where the child writes its cProfile stats (``--profile``), if set.
PROFILE_ENV = "AIMD_BENCH_PROFILE"
#: Functions the child also times, each inclusive of what it calls (``--detail``):
#: ``module:Class.method`` or ``module:function`` (patched where it is looked up).
DETAIL_ENV = "AIMD_BENCH_DETAIL"

CRAWLERS = ("scrapy-aimd, one process", "scrapy-aimd, fleet worker", "scrapy-redis")
#: ``--codec-baseline``: a fleet worker whose ``RequestCodec`` takes no shortcut
#: (``Request.to_dict`` and ``request_from_dict`` for every request), as before it had one.
CODEC_BASELINE = "scrapy-aimd, fleet worker, codec by to_dict"
#: Set in the child's environment for ``CODEC_BASELINE``.
CODEC_ENV = "AIMD_BENCH_CODEC_SHORTCUT"


class Meter:
    """CPU and wall seconds inside the timed methods (the outermost call only)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.wall = 0.0
        self.calls: dict[str, int] = {}
        self.by_method: dict[str, float] = {}
        self.depth = 0

    def wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        # No functools.wraps: Scrapy's signals read the receiver's own arguments,
        # and these take any (**kwargs).
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.depth:
                return method(*args, **kwargs)
            self.depth += 1
            self.calls[name] = self.calls.get(name, 0) + 1
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent = time.thread_time() - cpu
                self.cpu += spent
                self.by_method[name] = self.by_method.get(name, 0.0) + spent
                self.wall += time.perf_counter() - wall
                self.depth -= 1

        return timed


class Detail:
    """CPU seconds inside each of some functions, inclusive, nested or not."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        depth = [0]

        def timed(*args: Any, **kwargs: Any) -> Any:
            if depth[0]:
                return function(*args, **kwargs)
            depth[0] += 1
            self.calls[name] = self.calls.get(name, 0) + 1
            cpu = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.cpu[name] = self.cpu.get(name, 0.0) + time.thread_time() - cpu
                depth[0] -= 1

        return timed

    def patch(self, target: str) -> None:
        """Time ``module:Class.method`` or ``module:function``."""
        module_name, _, attribute = target.partition(":")
        owner: Any = importlib.import_module(module_name)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        if isinstance(original, (classmethod, staticmethod)):
            wrapped: Any = type(original)(self.wrap(target, original.__func__))
        else:
            wrapped = self.wrap(target, original)
        setattr(owner, name, wrapped)


def child(config_path: str) -> None:
    """Run one crawl with the scheduler's methods timed; write ``cpu.json``."""
    import crawlrunner

    if os.environ.get(CODEC_ENV) == "off":
        from scrapy_aimd.jobdir import RequestCodec

        RequestCodec.shortcut = False
    meter = Meter()
    for path, methods in TIMED.items():
        module_name, _, class_name = path.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except ImportError:
            continue
        for name in methods:
            setattr(cls, name, meter.wrap(f"{class_name}.{name}", getattr(cls, name)))
    detail = Detail()
    for target in filter(None, os.environ.get(DETAIL_ENV, "").split(",")):
        detail.patch(target)
    config = json.loads(Path(config_path).read_text())
    profile = os.environ.get(PROFILE_ENV)
    if profile:
        import cProfile

        profiler = cProfile.Profile(time.thread_time)
        profiler.runcall(crawlrunner.main, config_path)
        profiler.dump_stats(profile)
    else:
        crawlrunner.main(config_path)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out = Path(config["out"])
    (out / "cpu.json").write_text(
        json.dumps(
            {
                "scheduler_cpu": meter.cpu,
                "scheduler_wall": meter.wall,
                "calls": meter.calls,
                "cpu_by_method": meter.by_method,
                "detail": {"cpu": detail.cpu, "calls": detail.calls},
                "process_cpu": usage.ru_utime + usage.ru_stime,
            }
        )
    )


def crawl(kind: str, hosts: int, pages: int, out: Path) -> dict[str, Any]:
    import redis
    from fleetcrawl import start_worker, wait_for
    from redis_server import RedisServer

    from sitefarm import HostSpec, start_farm

    specs = [HostSpec(name=f"c{n:02d}", pages=pages, latency=0.005, seed=n) for n in range(hosts)]
    settings: dict[str, Any] = {"ROBOTSTXT_OBEY": False, "CONCURRENT_REQUESTS": 16}
    server = RedisServer().start() if kind != CRAWLERS[0] else None
    url = server.url if server else None
    if kind == "scrapy-redis":
        settings |= {
            "ADDONS": {},
            "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
            "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
            "REDIS_URL": url,
        }
        url = None
    elif kind != CRAWLERS[0]:
        settings["AIMD_FLEET_IDLE_CLOSE"] = 1.0
    os.environ.pop(CODEC_ENV, None)
    if kind == CODEC_BASELINE:
        os.environ[CODEC_ENV] = "off"  # read by the child
    try:
        before = _redis_cpu(redis.Redis.from_url(server.url)) if server else 0.0
        with start_farm(specs, max_seconds=300) as farm:
            runner = [sys.executable, str(Path(__file__).resolve()), "--child"]
            worker = start_worker(
                [u + "/" for u in farm.urls.values()], out, url, settings, runner=runner
            )
            wait_for([worker], 300)
        after = _redis_cpu(redis.Redis.from_url(server.url)) if server else 0.0
    finally:
        os.environ.pop(CODEC_ENV, None)
        if server is not None:
            server.close()
    cpu_file = out / "cpu.json"
    if not cpu_file.exists():
        raise RuntimeError(f"{kind}: the crawl wrote no figures\n{worker.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(cpu_file.read_text())
    stats = worker.stats()
    figures["requests"] = int(stats.get("response_received_count", 0))
    figures["redis_cpu"] = after - before
    figures["expected"] = hosts * (pages + 1)
    return figures


def _redis_cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=12)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="rounds of one crawl by each crawler; the ratios are the median of "
        "each round's (default 5)",
    )
    parser.add_argument(
        "--no-scrapy-redis", action="store_true", help="scrapy-aimd's two crawlers only"
    )
    parser.add_argument(
        "--codec-baseline",
        action="store_true",
        help="also crawl, in the same rounds, with a fleet worker whose request codec "
        "takes no shortcut (Request.to_dict and request_from_dict for every request)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--keep", type=Path, default=None)
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="crawl with the fleet worker once, under cProfile (thread CPU), and "
        "write its stats to this file (read with python -m pstats)",
    )
    parser.add_argument(
        "--detail",
        default="",
        help="also time these functions in each crawl, each inclusive "
        "(module:Class.method or module:function, comma-separated; patched where "
        "they are looked up)",
    )
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.detail:
        os.environ[DETAIL_ENV] = args.detail
    if args.profile is not None:
        import tempfile

        os.environ[PROFILE_ENV] = str(args.profile.resolve())
        with tempfile.TemporaryDirectory(prefix="aimd-fleet-profile-") as tmp:
            figures = crawl(CRAWLERS[1], args.hosts, args.pages, Path(tmp))
        print(f"{figures['requests']} requests; profile in {args.profile}")
        return
    from redis_server import REDIS_SERVER, SKIP_REASON

    if REDIS_SERVER is None:
        sys.exit(SKIP_REASON)
    crawlers = list(CRAWLERS[:2] if args.no_scrapy_redis else CRAWLERS)
    if args.codec_baseline:
        crawlers.append(CODEC_BASELINE)
    if not args.no_scrapy_redis:
        try:
            importlib.import_module("scrapy_redis")
        except ImportError:
            sys.exit("scrapy-redis is not installed: pip install scrapy-redis")
    import tempfile

    rounds: dict[str, list[dict[str, Any]]] = {kind: [] for kind in crawlers}
    with tempfile.TemporaryDirectory(prefix="aimd-fleet-cpu-") as tmp:
        base = args.keep or Path(tmp)
        for number in range(args.rounds):
            # A B C, then C B A: a drift in the machine's load counts alike for all.
            for kind in crawlers if number % 2 == 0 else crawlers[::-1]:
                out = base / f"round{number}" / kind.replace(" ", "-").replace(",", "")
                figures = crawl(kind, args.hosts, args.pages, out)
                print(
                    f"round {number + 1}, {kind}: {figures['requests']} requests, "
                    f"scheduler CPU {per(figures, 'scheduler_cpu') * 1e6:.0f} us/request",
                    file=sys.stderr,
                )
                rounds[kind].append(figures)
    report(rounds, args)


def per(figures: dict[str, Any], key: str) -> float:
    """``figures[key]`` per request answered."""
    value: float = figures[key] / max(1, figures["requests"])
    return value


def ratios(rounds: dict[str, list[dict[str, Any]]], kind: str, base: str) -> list[float]:
    """Each round's scheduler CPU per request of ``kind`` over ``base``'s."""
    return [
        per(mine, "scheduler_cpu") / per(theirs, "scheduler_cpu")
        for mine, theirs in zip(rounds[kind], rounds[base], strict=True)
    ]


def report(rounds: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    def median(kind: str, key: str) -> float:
        return statistics.median(per(figures, key) for figures in rounds[kind])

    base = CRAWLERS[0]
    count = len(rounds[base])
    print(
        f"\n{args.hosts} hosts of {args.pages} pages (5 ms), CONCURRENT_REQUESTS 16, "
        f"{count} rounds taking turns; per request answered, the median of the rounds "
        f'("vs one process": the median of each round\'s ratio, and its range):\n'
    )
    print(
        "| crawler | requests | scheduler CPU (us) | vs one process | range "
        "| scheduler wall (us) | process CPU (ms) | Redis CPU (us) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    kinds = [kind for kind in (*CRAWLERS, CODEC_BASELINE) if kind in rounds]
    for kind in kinds:
        paired = ratios(rounds, kind, base)
        answered = min(figures["requests"] for figures in rounds[kind])
        print(
            f"| {kind} | {answered} of {rounds[kind][0]['expected']} "
            f"| {median(kind, 'scheduler_cpu') * 1e6:.0f} | {statistics.median(paired):.2f}x "
            f"| {min(paired):.2f}-{max(paired):.2f}x "
            f"| {median(kind, 'scheduler_wall') * 1e6:.0f} "
            f"| {median(kind, 'process_cpu') * 1e3:.2f} | {median(kind, 'redis_cpu') * 1e6:.0f} |"
        )
    print("\nScheduler CPU per request (us) in each round, and the ratios to one process:\n")
    short = [kind.removeprefix("scrapy-aimd, ") for kind in kinds]
    print("| round | " + " | ".join([*short, *(f"{k} / one" for k in short[1:])]) + " |")
    print("|---:|" + "---:|" * (2 * len(kinds) - 1))
    for number in range(count):
        cpus = [f"{per(rounds[kind][number], 'scheduler_cpu') * 1e6:.0f}" for kind in kinds]
        paired = [f"{ratios(rounds, kind, base)[number]:.2f}x" for kind in kinds[1:]]
        print(f"| {number + 1} | " + " | ".join(cpus + paired) + " |")
    for kind in kinds:
        print(f"\n{kind}, per request answered (us, the median of the rounds):")
        by_method = {name for figures in rounds[kind] for name in figures["cpu_by_method"]}
        for name in sorted(by_method, key=lambda n: -_median_of(rounds[kind], "cpu_by_method", n)):
            print(f"  {name}: {_median_of(rounds[kind], 'cpu_by_method', name) * 1e6:.0f}")
        detail = {name for figures in rounds[kind] for name in figures["detail"]["cpu"]}
        for name in sorted(detail, key=lambda n: -_median_of(rounds[kind], "detail", n)):
            calls = statistics.median(f["detail"]["calls"].get(name, 0) for f in rounds[kind])
            spent = _median_of(rounds[kind], "detail", name)
            print(f"  {name}: {spent * 1e6:.1f} ({calls:.0f} calls)")
    paired = ratios(rounds, CRAWLERS[1], base)
    line = (
        f"\nfleet worker / one process: {statistics.median(paired):.2f}x "
        f"(target 1.5x; median of {count} rounds, range {min(paired):.2f}-{max(paired):.2f}x)"
    )
    if CRAWLERS[2] in rounds:
        against = [a / b for a, b in zip(paired, ratios(rounds, CRAWLERS[2], base), strict=True)]
        line += f"; fleet worker / scrapy-redis: {statistics.median(against):.2f}x"
    if CODEC_BASELINE in rounds:
        against = ratios(rounds, CRAWLERS[1], CODEC_BASELINE)
        line += (
            f"; fleet worker / the same with the codec by to_dict: "
            f"{statistics.median(against):.2f}x (range {min(against):.2f}-{max(against):.2f}x)"
        )
    print(line)


def _median_of(rounds: list[dict[str, Any]], field: str, name: str) -> float:
    """The median over the rounds of one timed method's (or detail's) CPU per request."""

    def spent(figures: dict[str, Any]) -> float:
        table = figures[field]["cpu"] if field == "detail" else figures[field]
        value: float = table.get(name, 0.0) / max(1, figures["requests"])
        return value

    return statistics.median(spent(figures) for figures in rounds)


if __name__ == "__main__":
    main()
