"""The canonicalization benchmark runs (on a tiny input: figures are not checked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_canonical_smoke() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_canonical.py"),
            "--urls",
            "300",
            "--rounds",
            "1",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "URLs: 300 generated" in result.stdout
    assert "canonicalization ratio" in result.stdout


def test_generated_urls_cover_the_variants() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from bench_canonical import generate_urls
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    urls = generate_urls(2000)
    assert urls == generate_urls(2000)  # the same set in every run
    joined = "\n".join(urls)
    for variant in ("utm_", "fbclid", "#", ":80/", ":443/", ":8080/", "%7E", "bücher", "résumé"):
        assert variant in joined, variant
    assert any(url != url.lower() for url in urls)
