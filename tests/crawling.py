"""Run real crawls in a subprocess and read what they did."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RUNNER = Path(__file__).resolve().parent / "crawlrunner.py"

#: Settings of every test crawl: scrapy-aimd through its add-on, quiet logs.
AIMD = {"ADDONS": {"scrapy_aimd.Addon": 500}}


@dataclass
class CrawlResult:
    stats: dict[str, Any]
    items: list[dict[str, Any]]
    log: str

    @property
    def urls(self) -> list[str]:
        return [item["url"] for item in self.items]


def run_crawl(
    start_urls: list[str],
    out: Path,
    settings: dict[str, Any] | None = None,
    *,
    follow: bool = True,
    spider: str | None = None,
    timeout: float = 120,
) -> CrawlResult:
    """Crawl from ``start_urls`` with ``settings`` in a fresh Python process."""
    out.mkdir(parents=True, exist_ok=True)
    config = out / "config.json"
    config.write_text(
        json.dumps(
            {
                "start_urls": start_urls,
                "settings": settings or {},
                "out": str(out),
                "follow": follow,
                "spider": spider,
            }
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT), str(RUNNER.parent), os.environ.get("PYTHONPATH", "")]
        ),
    }
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    log = (out / "crawl.log").read_text() if (out / "crawl.log").exists() else ""
    if proc.returncode != 0:
        raise AssertionError(f"crawl failed ({proc.returncode}):\n{proc.stderr}\n{log[-5000:]}")
    items_path = out / "items.jsonl"
    items = (
        [json.loads(line) for line in items_path.read_text().splitlines()]
        if items_path.exists()
        else []
    )
    stats = json.loads((out / "stats.json").read_text())
    return CrawlResult(stats, items, log)


def arrival_gaps(records: list[dict[str, Any]]) -> list[float]:
    """Seconds between consecutive request arrivals in a farm log."""
    arrivals = sorted(r["arrived"] for r in records)
    return [b - a for a, b in itertools.pairwise(arrivals)]


def start_gaps(events_file: Path, host: str | None = None) -> list[float]:
    """Seconds between consecutive request starts in an AIMD_EVENTS_FILE, as the
    scheduler timed them (a host's arrivals at the server jitter around these)."""
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    starts = [e["t"] for e in events if e["event"] == "start" and host in (None, e.get("host"))]
    return [b - a for a, b in itertools.pairwise(starts)]
