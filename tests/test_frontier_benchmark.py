"""The frontier benchmark runs (small farms: figures are not checked)."""

from __future__ import annotations

from benchmarking import run_benchmark


def test_bench_frontier_smoke() -> None:
    stdout = run_benchmark("bench_frontier.py", "--hosts", "100", "1000")
    rows = [line for line in stdout.splitlines() if line.startswith("| 1")]
    assert [row.split("|")[1].strip() for row in rows] == ["100", "1,000"]
    assert rows[0].rstrip(" |").endswith("1.00x")
