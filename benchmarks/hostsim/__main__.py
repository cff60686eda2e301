"""Print the controller's score on the tuning set and the held-out set.

PYTHONPATH=. python -m benchmarks.hostsim [--set tuning|held-out|all]
    [--host NAME] [--seconds 300 | --pages N] [--json FILE] [--controller module:factory]

With ``--pages N`` each host is a short crawl of N pages, as most hosts of a real
crawl are: the score is the fastest fixed crawler's time over the controller's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import sys
import time
from typing import Any

from benchmarks.hostsim.bench import (
    TODAY,
    Score,
    ShortScore,
    load_factory,
    score,
    short_score,
    summary,
)
from benchmarks.hostsim.sets import SETS


def _score(job: tuple[str, int, float, int | None, str, int | None]) -> Score | ShortScore:
    """Score one host, named by its set and place (a spec's model does not pickle)."""
    set_name, index, seconds, pages, factory, concurrency = job
    spec = SETS[set_name][index]
    if pages is not None:
        return short_score(spec, pages, factory, concurrency)
    return score(spec, seconds, factory, concurrency)


def _finite(figures: dict[str, object]) -> dict[str, object]:
    """JSON has no infinity: a best that found no page has no gap."""
    return {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in figures.items()
    }


def _gap(seconds: float) -> str:
    return "0" if seconds == 0 else f"{seconds:.3g}s"


def _print_short(name: str, scores: list[ShortScore]) -> None:
    print(f"\n{name} set, short crawls of {scores[0].pages} pages")
    print(
        f"{'host':48} {'ratio':>6} {'s':>7} {'refused':>7} {'best s':>7}"
        f" {'best c x gap':>13} {'refused':>7}"
    )
    for s in scores:
        print(
            f"{s.host:48} {s.ratio:6.2f} {s.seconds:7.2f} {s.refused:7.1%} {s.best_seconds:7.2f}"
            f" {s.best_concurrency:>5d} x {_gap(s.best_gap):>5}"
            f" {s.best_refused:7.1%}{' ' if s.best_capped else '*'}"
        )
    lowest, median = summary(scores)
    print(f"{name}: {len(scores)} hosts, lowest ratio {lowest:.2f}, median {median:.2f}")
    if not all(s.best_capped for s in scores):
        print("* no fixed setting kept within 5 % refused: the best is the soonest at any")


def _print(name: str, scores: list[Score]) -> None:
    print(f"\n{name} set")
    print(
        f"{'host':48} {'s':>4} {'ratio':>6} {'refused':>7} {'pages':>7} {'in fl.':>6} {'best':>7}"
        f" {'best c x gap':>13} {'refused':>7} {'waiting':>7}"
    )
    for s in scores:
        waiting = "" if s.waiting is None else f"{s.waiting:.2f}"
        print(
            f"{s.host:48} {s.seconds:4.0f} {s.ratio:6.2f} {s.refused:7.1%} {s.pages:7d}"
            f" {s.in_flight:6.2f} {s.best_pages:7d}"
            f" {s.best_concurrency:>5d} x {_gap(s.best_gap):>5}"
            f" {s.best_refused:7.1%}{' ' if s.best_capped else '*'} {waiting:>7}"
        )
    lowest, median = summary(scores)
    print(f"{name}: {len(scores)} hosts, lowest ratio {lowest:.2f}, median {median:.2f}")
    if not all(s.best_capped for s in scores):
        print("* no fixed setting kept within 5 % refused: the best is the most pages at any")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hostsim", description=__doc__)
    parser.add_argument("--set", choices=("tuning", "held-out", "all"), default="all")
    parser.add_argument("--host", help="only the hosts whose name contains this")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument(
        "--pages", type=int, help="short crawls of this many pages instead of --seconds"
    )
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--controller", default=TODAY, help="module:factory (default: %(default)s)")
    parser.add_argument(
        "--max-concurrency",
        type=int,
        help="the most in flight for the controller and the fixed grid (default: each host's)",
    )
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    names = list(SETS) if args.set == "all" else [args.set]
    chosen = {
        name: [i for i, s in enumerate(SETS[name]) if args.host is None or args.host in s.name]
        for name in names
    }
    if args.pages is not None and args.pages < 1:
        parser.error("--pages must be at least 1")
    jobs = [
        (name, i, args.seconds, args.pages, args.controller, args.max_concurrency)
        for name in names
        for i in chosen[name]
    ]
    if not jobs:
        parser.error(f"no host matches {args.host!r}")
    try:
        load_factory(args.controller)
    except (ImportError, AttributeError, ValueError) as error:
        parser.error(f"--controller {args.controller!r}: {error}")
    began = time.monotonic()
    if args.processes > 1 and len(jobs) > 1:
        with multiprocessing.Pool(args.processes) as pool:
            scores = pool.map(_score, jobs, chunksize=1)
    else:
        scores = [_score(job) for job in jobs]
    results: dict[str, list[Any]] = {}
    for name, specs in chosen.items():
        results[name], scores = scores[: len(specs)], scores[len(specs) :]
        if specs:
            (_print if args.pages is None else _print_short)(name, results[name])
    print(f"\n({time.monotonic() - began:.0f} s)")
    if args.json:
        figures = {
            name: [_finite({**dataclasses.asdict(s), "ratio": s.ratio}) for s in found]
            for name, found in results.items()
        }
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
