"""The fingerprint + dedup benchmark runs (tiny input: figures are not checked)."""

from __future__ import annotations

from benchmarking import run_benchmark


def test_bench_dedup_smoke() -> None:
    stdout = run_benchmark(
        "bench_dedup.py", "--urls", "300", "--rounds", "1", "--memory-keys", "20000"
    )
    assert "fingerprint + dedup ratio" in stdout
    assert "(100 filtered)" in stdout
    memory_row = stdout.strip().splitlines()[-1]
    assert memory_row.split()[0] == "20,000"
    assert memory_row.count(" B") == 3
