"""The scheduler's CPU per request: one scrapy-aimd process, one fleet worker
(Redis), and scrapy-redis's scheduler, crawling the same farm in one run.

Each crawl is a real ``scrapy crawl`` in its own process (``tests/crawlrunner.py``)
against a fresh farm of fast hosts that never push back, and for the two Redis
schedulers a fresh ``redis-server`` child. In that process the scheduler's
entry points are timed with the thread's CPU clock (``time.thread_time``:
the time spent waiting for Redis is not CPU): ``open``, ``close``,
``enqueue_request``, ``next_request``, ``has_pending_requests`` and, for scrapy-aimd, the feedback
handlers (``response_feedback`` and ``request_reached_downloader``), which is
where a fleet worker applies the controller's rules to the host's state in
Redis, and for the fleet worker its own timer and callbacks (``TIMED`` lists
every path). The dupefilter runs inside ``enqueue_request`` for all three.
scrapy-redis has no feedback: its cost is its queue and dupefilter alone.

Per request answered: the scheduler's CPU, its wall time (Redis round trips
included), the whole process's CPU, and the Redis server's CPU (``INFO cpu``).

The machine (2 shared cores) moves a crawl's CPU per request by more than
the gap between the crawlers (one process took 152 and 256 us in two rounds
of one run), so:

- The crawlers take turns in ``--rounds`` rounds, each once a round, in the
  opposite order every other round (A B C, then C B A: a drift in the load
  counts alike for all), and each crawler is compared with the one process
  of the same round: the ratio reported is the median of the rounds' ratios,
  with their range.
- The garbage collector's CPU is left out of the scheduler's (and shown
  apart): a collection runs inside whichever call tips the allocation count,
  and one full collection of a crawl's heap takes milliseconds.
- The ratio reported is the plain one: each round's scheduler CPU per
  request over that of the one process in the same round, the median of the
  rounds and their range.
- "Probe-corrected": each crawl's scheduler CPU is first divided by the CPU of
  the speed probe, a fixed piece of Python work timed between the
  scheduler's calls in the same thread (the same task in every crawl). It
  assumes the probe slows down as the scheduler's code does when the machine
  is busier; the output shows how far apart the paired crawls' probes were
  ("probe vs one process"): near 1.00x, the correction changes little.

Every path of the scheduler is timed, the fleet worker's timer and callbacks
included (``_flush_waiting``, the 20 ms timer that sends buffered pushes and
answers when no claim took them; ``_pushed``, ``_queue_held`` and ``_route``, the
callbacks of the pushes and of the robots.txt gate), and ``open`` and
``close``: what is left, "rest", is the engine, the downloader, the spider and
the garbage collector outside the scheduler. "process sys CPU" is the kernel's
share of the whole process's CPU (system calls: sockets, and a fleet worker's
waits for Redis's replies).

    pip install scrapy-redis      # the comparison only: not a scrapy-aimd dependency
    PYTHONPATH=. python benchmarks/bench_fleet_cpu.py [--hosts 12] [--pages 100] [--rounds 5]
        [--no-scrapy-redis] [--codec-baseline] [--against DIR] [--detail MOD:FUNC,...]
        [--profile FILE]

``--against DIR`` crawls, in the same rounds, with a fleet worker running the
scrapy_aimd of another source tree (``git worktree add --detach DIR COMMIT``):
two versions' fleet workers compared round by round, their crawls seconds
apart, which the ratios to one process cannot do finely (they move by a
third from one round to the next).
"""

from __future__ import annotations

import argparse
import gc
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

#: What is timed, by class: every way into the scheduler's code: the entry points,
#: the signal handlers, and the timer and callbacks it schedules itself (read
#: scrapy_aimd/scheduler.py, local_store.py and fleet/worker.py for each
#: ``call_later``, ``hold`` and ``push_later`` when they change). The scheduler's
#: entry points call its store's (counted once: only the outermost call is timed).
TIMED: dict[str, list[str]] = {
    "scrapy_aimd.scheduler.AimdScheduler": [
        "open",
        "close",
        "enqueue_request",
        "next_request",
        "has_pending_requests",
        "_on_feedback",
        "_on_reached_downloader",
        "_resume",  # the robots.txt gate's resume
    ],
    "scrapy_aimd.fleet.worker.FleetStore": [
        "_flush_waiting",  # the FLUSH_AFTER timer
        "_write_counts",  # the COUNTS_EVERY timer
        "_pushed",  # a push's answer
    ],
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
#: ``--against DIR``: a fleet worker running the scrapy_aimd of another source tree
#: (a git worktree of another commit), crawling in the same rounds.
AGAINST = "scrapy-aimd, fleet worker, --against"


#: A probe runs after every this many timed calls.
PROBE_EVERY = 16


def probe_work() -> int:
    """A fixed piece of Python work like the scheduler's (small dicts, strings,
    a sort): the CPU it takes says how fast the machine runs Python at that
    moment."""
    table: dict[str, int] = {}
    for number in range(60):
        table[f"h{number % 13}:{number}"] = number * 7 % 11
    return len(sorted(table, key=table.__getitem__))


class Meter:
    """CPU and wall seconds inside the timed methods (the outermost call only),
    and the CPU of the speed probe (``probe_work``), run between timed calls in
    the same thread so that it sees the machine as the scheduler does."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.wall = 0.0
        self.calls: dict[str, int] = {}
        self.by_method: dict[str, float] = {}
        self.depth = 0
        self.outer = 0
        self.probes: list[float] = []
        #: The cyclic garbage collector's CPU: in all, and inside the timed
        #: methods (by method). A collection runs in whichever call tips the
        #: allocation count over its threshold, and a full one of a crawl's heap
        #: takes milliseconds: left in, it moves a method's figure at random.
        self.gc_total = 0.0
        self.gc_by_method: dict[str, float] = {}
        self.current = ""
        self.gc_started = 0.0

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.gc_started = time.thread_time()
            return
        spent = time.thread_time() - self.gc_started
        self.gc_total += spent
        if self.depth:
            self.gc_by_method[self.current] = self.gc_by_method.get(self.current, 0.0) + spent

    def probe(self) -> None:
        cpu = time.thread_time()
        probe_work()
        self.probes.append(time.thread_time() - cpu)

    def wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        # No functools.wraps: Scrapy's signals read the receiver's own arguments,
        # and these take any (**kwargs).
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.depth:
                return method(*args, **kwargs)
            self.depth += 1
            self.current = name
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
                self.outer += 1
                if self.outer % PROBE_EVERY == 0:
                    self.probe()

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
        from scrapy_aimd.request_codec import RequestCodec

        RequestCodec.shortcut = False
    meter = Meter()
    gc.callbacks.append(meter.on_gc)
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
                # The scheduler's CPU without the collector's (reported apart).
                "scheduler_cpu": meter.cpu - sum(meter.gc_by_method.values()),
                "scheduler_gc": sum(meter.gc_by_method.values()),
                "gc_cpu": meter.gc_total,
                "scheduler_wall": meter.wall,
                "calls": meter.calls,
                "cpu_by_method": {
                    name: spent - meter.gc_by_method.get(name, 0.0)
                    for name, spent in meter.by_method.items()
                },
                "detail": {"cpu": detail.cpu, "calls": detail.calls},
                "process_cpu": usage.ru_utime + usage.ru_stime,
                "process_sys": usage.ru_stime,
                "probe_cpu": statistics.median(meter.probes) if meter.probes else None,
                "probes": len(meter.probes),
            }
        )
    )


def crawl(
    kind: str, hosts: int, pages: int, out: Path, against: Path | None = None
) -> dict[str, Any]:
    """One crawl by ``kind`` in its own process; ``AGAINST``'s imports scrapy_aimd
    from ``against`` (first on the crawl's path), the others from this tree."""
    import fleetcrawl
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
    root = fleetcrawl.ROOT
    if kind == AGAINST:
        assert against is not None
        fleetcrawl.ROOT = against  # first on the crawl's PYTHONPATH
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
        fleetcrawl.ROOT = root
        os.environ.pop(CODEC_ENV, None)
        if server is not None:
            server.close()
    cpu_file = out / "cpu.json"
    if not cpu_file.exists():
        raise RuntimeError(f"{kind}: the crawl wrote no figures\n{worker.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(cpu_file.read_text())
    stats = worker.stats()
    figures["requests"] = int(stats.get("response_received_count", 0))
    figures["round_trips"] = int(stats.get("aimd/fleet/round_trips", 0))
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
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        metavar="DIR",
        help="also crawl, in the same rounds, with a fleet worker running the "
        "scrapy_aimd of the source tree DIR (a git worktree of another commit); the "
        "last line gives the fleet worker's ratio to it, round by round",
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
    if args.against is not None:
        args.against = args.against.resolve()
        if not (args.against / "scrapy_aimd" / "__init__.py").is_file():
            parser.error(f"--against {args.against}: no scrapy_aimd package there")
        crawlers.append(AGAINST)
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
                figures = crawl(kind, args.hosts, args.pages, out, args.against)
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


def rest(figures: dict[str, Any]) -> float:
    """The process's CPU outside the scheduler, per request: the engine, the
    downloader, the spider, start-up and the collector outside the scheduler.
    Not the same work in each crawl (a fleet worker's reactor also carries its
    Redis connection), so nothing is divided by it."""
    return per(figures, "process_cpu") - per(figures, "scheduler_cpu")


Rounds = dict[str, list[dict[str, Any]]]


def ratios(rounds: Rounds, kind: str, base: str, probed: bool = False) -> list[float]:
    """Each round's scheduler CPU per request of ``kind`` over ``base``'s;
    ``probed``: each first divided by its crawl's speed probe."""

    def cpu(figures: dict[str, Any]) -> float:
        return per(figures, "scheduler_cpu") / (figures["probe_cpu"] if probed else 1.0)

    return [
        cpu(mine) / cpu(theirs) for mine, theirs in zip(rounds[kind], rounds[base], strict=True)
    ]


def probe_ratios(rounds: Rounds, kind: str, base: str) -> list[float]:
    """Each round's speed probe of ``kind`` over ``base``'s: how far apart the
    machine's speed was between the two crawls, as the probe saw it."""
    return [
        mine["probe_cpu"] / theirs["probe_cpu"]
        for mine, theirs in zip(rounds[kind], rounds[base], strict=True)
    ]


def spread(values: list[float]) -> str:
    """The median and the range of some ratios."""
    return f"{statistics.median(values):.2f}x | {min(values):.2f}-{max(values):.2f}x"


def report(rounds: Rounds, args: argparse.Namespace) -> None:
    def median(kind: str, value: Callable[[dict[str, Any]], float]) -> float:
        return statistics.median(value(figures) for figures in rounds[kind])

    def us(key: str) -> Callable[[dict[str, Any]], float]:
        return lambda figures: per(figures, key) * 1e6

    base = CRAWLERS[0]
    count = len(rounds[base])
    kinds = [kind for kind in (*CRAWLERS, CODEC_BASELINE, AGAINST) if kind in rounds]
    print(
        f"\n{args.hosts} hosts of {args.pages} pages (5 ms), CONCURRENT_REQUESTS 16, "
        f"{count} rounds taking turns; per request answered, the median of the rounds. "
        f"The scheduler's CPU is every path of the scheduler (timers and callbacks "
        f"included) without the garbage collector's (its column). "
        f'"vs one process": the median of each round\'s ratio, and their range; '
        f'"probe-corrected": each crawl\'s figure first divided by its speed probe '
        f"(a fixed task, the same in every crawl; this assumes the scheduler's code "
        f'slows down with the machine as the probe does); "probe vs one process": '
        f"how far apart the paired crawls' probes were:\n"
    )
    print(
        "| crawler | requests | scheduler CPU (us) | vs one process | range "
        "| probe-corrected | range | probe vs one process | range "
        "| GC in the scheduler (us) | scheduler wall (us) | process CPU (ms) "
        "| process sys CPU (us) | rest (us) | Redis CPU (us) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind in kinds:
        answered = min(figures["requests"] for figures in rounds[kind])
        print(
            f"| {kind} | {answered} of {rounds[kind][0]['expected']} "
            f"| {median(kind, us('scheduler_cpu')):.0f} | {spread(ratios(rounds, kind, base))} "
            f"| {spread(ratios(rounds, kind, base, probed=True))} "
            f"| {spread(probe_ratios(rounds, kind, base))} "
            f"| {median(kind, us('scheduler_gc')):.1f} | {median(kind, us('scheduler_wall')):.0f} "
            f"| {median(kind, us('process_cpu')) / 1e3:.2f} "
            f"| {median(kind, us('process_sys')):.0f} "
            f"| {median(kind, lambda f: rest(f) * 1e6):.0f} "
            f"| {median(kind, us('redis_cpu')):.0f} |"
        )
    print("\nScheduler CPU per request (us) in each round, and the ratios to one process:\n")
    short = [kind.removeprefix("scrapy-aimd, ") for kind in kinds]
    print("| round | " + " | ".join([*short, *(f"{k} / one" for k in short[1:])]) + " |")
    print("|---:|" + "---:|" * (2 * len(kinds) - 1))
    for number in range(count):
        cpus = [f"{per(rounds[kind][number], 'scheduler_cpu') * 1e6:.0f}" for kind in kinds]
        paired = [f"{ratios(rounds, k, base)[number]:.2f}x" for k in kinds[1:]]
        print(f"| {number + 1} | " + " | ".join(cpus + paired) + " |")
    for kind in kinds:
        print(f"\n{kind}, per request answered (us, the median of the rounds):")
        by_method = {name for figures in rounds[kind] for name in figures["cpu_by_method"]}
        for name in sorted(by_method, key=lambda n: -_median_of(rounds[kind], "cpu_by_method", n)):
            print(f"  {name}: {_median_of(rounds[kind], 'cpu_by_method', name) * 1e6:.1f}")
        detail = {name for figures in rounds[kind] for name in figures["detail"]["cpu"]}
        for name in sorted(detail, key=lambda n: -_median_of(rounds[kind], "detail", n)):
            calls = statistics.median(f["detail"]["calls"].get(name, 0) for f in rounds[kind])
            spent = _median_of(rounds[kind], "detail", name)
            print(f"  {name}: {spent * 1e6:.1f} ({calls:.0f} calls)")
    for kind in kinds:
        if any(figures.get("round_trips") for figures in rounds[kind]):
            trips = [per(figures, "round_trips") for figures in rounds[kind]]
            print(
                f"\n{kind}: {statistics.median(trips):.3f} Redis round trips per request "
                f"(the median of the rounds; {min(trips):.3f} to {max(trips):.3f})"
            )
    fleet = CRAWLERS[1]
    raw = ratios(rounds, fleet, base)
    probed = ratios(rounds, fleet, base, probed=True)
    probes = probe_ratios(rounds, fleet, base)
    line = (
        f"\nfleet worker / one process: {statistics.median(raw):.2f}x, range "
        f"{min(raw):.2f}-{max(raw):.2f}x (median of {count} rounds; target 1.5x); "
        f"probe-corrected {statistics.median(probed):.2f}x, range "
        f"{min(probed):.2f}-{max(probed):.2f}x (the probes {min(probes):.2f}-"
        f"{max(probes):.2f}x apart)"
    )
    if CRAWLERS[2] in rounds:
        against = ratios(rounds, fleet, CRAWLERS[2])
        line += f"; fleet worker / scrapy-redis: {statistics.median(against):.2f}x"
    if CODEC_BASELINE in rounds:
        against = ratios(rounds, fleet, CODEC_BASELINE)
        line += (
            f"; fleet worker / the same with the codec by to_dict: "
            f"{statistics.median(against):.2f}x (range {min(against):.2f}-{max(against):.2f}x)"
        )
    if AGAINST in rounds:
        against = ratios(rounds, fleet, AGAINST)
        quartiles = statistics.quantiles(against, n=4) if count > 1 else [against[0]] * 3
        line += (
            f"; fleet worker / the fleet worker of --against {args.against}: "
            f"{statistics.median(against):.3f}x (quartiles {quartiles[0]:.2f}-"
            f"{quartiles[2]:.2f}x, range {min(against):.2f}-{max(against):.2f}x)"
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
