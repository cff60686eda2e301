"""The fingerprint + dedup benchmark runs (tiny input: figures are not checked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_dedup_smoke() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_dedup.py"),
            "--urls",
            "300",
            "--rounds",
            "1",
            "--memory-keys",
            "20000",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "fingerprint + dedup ratio" in result.stdout
    assert "(100 filtered)" in result.stdout
    memory_row = result.stdout.strip().splitlines()[-1]
    assert memory_row.split()[0] == "20,000"
    assert memory_row.count(" B") == 3
