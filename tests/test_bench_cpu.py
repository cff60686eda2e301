"""The CPU benchmark runs (tiny inputs: the figures are not checked)."""

from __future__ import annotations

from benchmarking import run_benchmark


def test_bench_cpu_prints_the_ratio_to_stock_scrapy() -> None:
    stdout = run_benchmark("bench_cpu.py", "--hosts", "4", "--pages", "3", "--rounds", "1")
    assert "| stock Scrapy |" in stdout and "| scrapy-aimd |" in stdout, stdout
    assert "scrapy-aimd / stock Scrapy, CPU a page: " in stdout, stdout
