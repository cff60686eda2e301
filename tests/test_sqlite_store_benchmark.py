"""The frontier store benchmark runs (small input: only the memory bound is checked)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_frontier_store_smoke() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_frontier_store.py"),
            *("--requests", "2000", "--hosts", "50", "--rounds", "1"),
            *("--memory", "50000", "5000"),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert "SQLite / scrapy" in result.stdout
    frontier = re.search(r"of which the frontier ([\d.,]+) MiB", result.stdout)
    assert frontier is not None, result.stdout
    # Per host, not per request: 5,000 hosts in a few MiB.
    assert float(frontier.group(1).replace(",", "")) < 30, result.stdout
    assert "5,000 hosts, 45,000 requests" in result.stdout
