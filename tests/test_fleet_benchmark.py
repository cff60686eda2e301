"""The fleet benchmarks run (tiny inputs: the figures are not checked)."""

from __future__ import annotations

import re

import pytest
from benchmarking import run_benchmark
from redis_server import REDIS_SERVER, SKIP_REASON

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)


def test_bench_fleet_seen_smoke() -> None:
    stdout = run_benchmark("bench_fleet_seen.py", "--urls", "20000", "--dupefilter-urls", "0")
    rows = [line for line in stdout.splitlines() if line.startswith("| 20,000")]
    assert len(rows) == 1
    assert "0 of 256 sampled" in rows[0]
    assert "RFPDupeFilter" not in stdout


def test_bench_fleet_seen_against_scrapy_redis_smoke() -> None:
    pytest.importorskip("scrapy_redis", reason="the comparison needs scrapy-redis")
    stdout = run_benchmark("bench_fleet_seen.py", "--urls", "2000", "--dupefilter-urls", "3000")
    rows = [line for line in stdout.splitlines() if line.startswith("| 3,000")]
    assert len(rows) == 1, stdout
    assert "own RFPDupeFilter, at 3,000 URLs" in stdout


def test_bench_fleet_claim_smoke() -> None:
    stdout = run_benchmark(
        "bench_fleet_claim.py", "--requests", "300", "--hosts", "7", "--workers", "2"
    )
    # 8 claims a round trip, each carrying the answers, leases done and children
    # of the one before: 300 requests in 300 / 8 round trips and a last flush.
    assert (
        "Round trips per request: 0.13 counted by the client, 0.13 EVALSHA by the server; "
        in stdout
    )
    assert "conflicts: 0;" in stdout
    assert "2 worker processes, 300 requests over 4 hosts" in stdout


def test_bench_fleet_cpu_smoke() -> None:
    pytest.importorskip("scrapy_redis", reason="the comparison needs scrapy-redis")
    stdout = run_benchmark("bench_fleet_cpu.py", "--hosts", "2", "--pages", "5", "--rounds", "1")
    rows = [line for line in stdout.splitlines() if line.startswith("| scrapy-")]
    assert len(rows) == 3
    assert all("| 12 of 12 |" in row for row in rows), rows
    assert "fleet worker / one process:" in stdout


def test_bench_fleet_farm_kill9_smoke() -> None:
    """The benchmark farm twice, the second time with a worker killed: ~40 s."""
    stdout = run_benchmark("bench_fleet_farm.py", "--farm", "kill9", "--no-scrapy-redis")
    codes = re.search(
        r"the busiest killed -9, exit codes \[(.*?)\]; worker (\d) \(the busiest\)", stdout
    )
    assert codes is not None, stdout
    assert sorted(codes[1].split(", ")) == ["-9", "0", "0"], stdout
    assert stdout.count("| all | ") == 1
    assert "Leases reaped by the survivors (aimd/fleet/reaped): " in stdout
