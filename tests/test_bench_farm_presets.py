"""``bench_farm.py --farm``: a preset by name (``limiters``) or a config file."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sitefarm import HostSpec, benchmark_farm, limiter_farm, specs_to_json

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench_farm() -> Iterator[Any]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_farm

        yield bench_farm
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_farm_presets_by_name_or_a_config_file(bench_farm: Any, tmp_path: Path) -> None:
    assert bench_farm.farm_specs(None) == benchmark_farm()
    assert bench_farm.farm_specs("benchmark") == benchmark_farm()
    assert bench_farm.farm_specs("limiters") == limiter_farm()
    config = tmp_path / "farm.json"
    config.write_text(json.dumps(specs_to_json([HostSpec(name="a", pages=3)])))
    assert bench_farm.farm_specs(str(config)) == [HostSpec(name="a", pages=3)]
    args = bench_farm.parse_args(["--farm", "limiters", "--only", "aimd"])
    assert args.farm == "limiters"
