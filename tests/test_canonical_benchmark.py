"""The canonicalization benchmark runs (on a tiny input: figures are not checked)."""

from __future__ import annotations

import sys

from benchmarking import ROOT, run_benchmark


def test_bench_canonical_smoke() -> None:
    stdout = run_benchmark("bench_canonical.py", "--urls", "300", "--rounds", "1")
    assert "URLs: 300 generated" in stdout
    assert "canonicalization ratio" in stdout


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
