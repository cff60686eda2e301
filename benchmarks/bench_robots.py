"""What robots.txt rules cost in memory per origin, for a crawl of 100,000 origins.

Issue 12 asks for 100,000 origins in at most 200 MB. In a fresh process, one
``RobotsBook`` takes a robots.txt body for each of N origins through the crawl's
own path (``RobotsBook.fetched``: a real Protego parse of the first 500 KiB) and
is then asked a verdict for one URL of each origin, in the order a crawl of
many hosts would ask (round robin). The growth of the process's resident set
size over both, divided by N, is the cost of an origin.

The bodies are generated (seeded, the same in every run) from a vocabulary of
path words, so that they compress as real files do, not as random bytes:

- 60 % small: one group, 2 to 12 rules (100 to 500 bytes);
- 30 % medium: up to 4 groups, 20 to 150 rules, wildcards, a Crawl-delay now
  and then, 1 to 3 sitemaps (1 to 5 KB);
- 9.9 % large: 300 to 1,500 rules in up to 30 groups (10 to 50 KB);
- 0.1 % huge: 10,000 to 16,000 rules (300 to 500 KB).

    PYTHONPATH=. python benchmarks/bench_robots.py [--origins 100000] [--memory BYTES]

``--memory`` sets ``RobotsConfig.memory`` (:setting:`AIMD_ROBOTS_MEMORY`).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

from scrapy_aimd.core.robots import RobotsBook, RobotsConfig

TARGET_ORIGINS = 100_000
TARGET_BYTES = 200 * 1000 * 1000
USER_AGENT = "Mozilla/5.0 (compatible; Scrapy/2.19)"

_VOCABULARY_RNG = random.Random(12)
WORDS = [
    "".join(_VOCABULARY_RNG.choices("abcdefghijklmnopqrstuvwxyz0123456789-", k=n))
    for n in _VOCABULARY_RNG.choices(range(3, 11), k=3000)
]
AGENTS = ["*", "Googlebot", "Bingbot", "GPTBot", "CCBot", "AhrefsBot", "Baiduspider"]


def kind_of(index: int) -> str:
    slot = index % 1000
    if slot == 999:
        return "huge"
    if slot >= 900:
        return "large"
    if slot >= 600:
        return "medium"
    return "small"


RULES = {"small": (2, 12), "medium": (20, 150), "large": (300, 1500), "huge": (10_000, 16_000)}
GROUPS = {"small": 1, "medium": 4, "large": 30, "huge": 60}


def body(index: int) -> bytes:
    """Origin ``index``'s robots.txt (the same for the same index)."""
    kind = kind_of(index)
    rng = random.Random(index)
    rules = rng.randint(*RULES[kind])
    groups = rng.randint(1, GROUPS[kind])
    lines: list[str] = []
    for group in range(groups):
        lines.append(f"User-agent: {AGENTS[group % len(AGENTS)]}")
        if kind != "small" and rng.random() < 0.2:
            lines.append(f"Crawl-delay: {rng.choice([1, 2, 5, 10])}")
        for _ in range(max(1, rules // groups)):
            path = "/" + "/".join(rng.choices(WORDS, k=rng.randint(1, 4)))
            roll = rng.random()
            if roll < 0.6:
                lines.append(f"Disallow: {path}")
            elif roll < 0.8:
                lines.append(f"Allow: {path}/")
            elif roll < 0.95:
                lines.append(f"Disallow: {path}*?{rng.choice(WORDS)}=")
            else:
                lines.append(f"Disallow: /*.{rng.choice(WORDS)[:4]}$")
        lines.append("")
    for _ in range(rng.randint(0, 3) if kind != "small" else rng.randint(0, 1)):
        lines.append(f"Sitemap: https://o{index}.test/{rng.choice(WORDS)}.xml")
    return "\n".join(lines).encode()


def rss_bytes() -> int:
    """The resident set size now (VmRSS on Linux; the peak elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(origins: int, memory: int | None) -> None:
    """One measurement, in this (fresh) process; prints JSON."""
    config = RobotsConfig() if memory is None else RobotsConfig(memory=memory)
    book = RobotsBook(config)
    body(0), body(999)  # warm the generator and Protego up
    gc.collect()
    before = rss_bytes()
    text_bytes = 0
    began = time.perf_counter()
    for index in range(origins):
        data = body(index)
        text_bytes += min(len(data), config.max_bytes)
        book.fetched(f"https://o{index}.test", float(index), 200, data, USER_AGENT)
    fetched = time.perf_counter() - began
    began = time.perf_counter()
    for index in range(origins):
        book.verdict(f"https://o{index}.test", f"https://o{index}.test/a/b", USER_AGENT)
    asked = time.perf_counter() - began
    gc.collect()
    grown = rss_bytes() - before
    print(
        json.dumps(
            {
                "origins": origins,
                "grown": grown,
                "text": text_bytes,
                "fetch_ms": 1000 * fetched / origins,
                "verdict_ms": 1000 * asked / origins,
                "stats": book.memory_stats(),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--origins", type=int, default=TARGET_ORIGINS)
    parser.add_argument("--memory", type=int, default=None, help="RobotsConfig.memory, bytes")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.origins, args.memory)
        return
    command = [sys.executable, __file__, "--child", "--origins", str(args.origins)]
    if args.memory is not None:
        command += ["--memory", str(args.memory)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.splitlines()[-1])
    per_origin = result["grown"] / result["origins"]
    total = per_origin * TARGET_ORIGINS
    verdict = "within" if total <= TARGET_BYTES else "OVER"
    print(f"origins: {result['origins']:,} (mix: 60 % small, 30 % medium, 9.9 % large, 0.1 % huge)")
    print(f"robots.txt text parsed: {result['text'] / result['origins']:,.0f} B per origin")
    print(f"memory: {per_origin:,.0f} B per origin (RSS growth of a fresh process)")
    print(
        f"for {TARGET_ORIGINS:,} origins: {total / 1e6:,.1f} MB, {verdict} the budget of "
        f"{TARGET_BYTES / 1e6:.0f} MB"
    )
    print(
        f"time: {result['fetch_ms']:.3f} ms per fetched file, "
        f"{result['verdict_ms']:.3f} ms per verdict (round robin over the origins)"
    )
    for name, value in sorted(result["stats"].items()):
        print(f"  {name}: {value:,}")


if __name__ == "__main__":
    main()
