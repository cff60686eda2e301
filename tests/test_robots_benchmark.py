"""The robots.txt memory benchmark runs (tiny input: figures are not checked)."""

from __future__ import annotations

from benchmarking import run_benchmark


def test_bench_robots_smoke() -> None:
    stdout = run_benchmark("bench_robots.py", "--origins", "300", "--memory", "200000")
    assert "origins: 300" in stdout
    assert " B per origin (RSS growth" in stdout
    assert "for 100,000 origins:" in stdout
    evicted = next(line for line in stdout.splitlines() if line.strip().startswith("evicted:"))
    assert int(evicted.split(":")[1].replace(",", "")) > 0  # 200 kB holds fewer than 300
