"""Run a benchmark script on a tiny input, as the smoke tests do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_benchmark(script: str, *args: str) -> str:
    """The stdout of ``benchmarks/SCRIPT ARGS``; fails the test if it fails."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout
