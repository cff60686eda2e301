"""The scrapy_aimd wheel is what a user installs: the add-on and its data, no test server.

The wheel is built from a copy of the source tree (so that no ``build/`` or
``*.egg-info`` left in the checkout can add or hide files), the farm included: it must be
left out by the package's own configuration, not by its absence.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: What a copy of the tree leaves out: the .gitignore's build and cache directories.
IGNORED = shutil.ignore_patterns(
    ".git", ".venv*", ".tox", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
    ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", "_build", "*.jsonl",
)  # fmt: skip


def can_build_here() -> bool:
    """setuptools builds wheels by itself from 70.1, with the ``wheel`` package before."""
    if importlib.util.find_spec("setuptools") is None:
        return False
    return (
        importlib.util.find_spec("setuptools.command.bdist_wheel") is not None
        or importlib.util.find_spec("wheel") is not None
    )


def build_wheel(source: Path, out: Path) -> Path:
    """``pip wheel --no-deps``; without build isolation when this environment can build,
    so that the test then needs no package index."""
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out)]
    if can_build_here():
        command.append("--no-build-isolation")
    result = subprocess.run(
        [*command, str(source)], capture_output=True, text=True, timeout=300, cwd=source
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    (wheel,) = out.glob("scrapy_aimd-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    base = tmp_path_factory.mktemp("wheel")
    source = base / "src"
    shutil.copytree(ROOT, source, ignore=IGNORED)
    assert (source / "sitefarm" / "src" / "sitefarm" / "server.py").exists()
    with zipfile.ZipFile(build_wheel(source, base / "dist")) as wheel:
        return wheel.namelist()


def test_the_wheel_holds_no_test_server(wheel_names: list[str]) -> None:
    packages = {name.split("/", 1)[0] for name in wheel_names}
    assert {p for p in packages if not p.endswith((".dist-info", ".data"))} == {"scrapy_aimd"}
    assert not [n for n in wheel_names if "sitefarm" in n.lower()]
    assert not [n for n in wheel_names if n.rsplit("/", 1)[-1] in ("server.py", "runner.py")]
    assert not [n for n in wheel_names if n.startswith(("tests/", "benchmarks/", "example"))]


def test_the_wheel_holds_the_type_marker_and_the_tracking_list(wheel_names: list[str]) -> None:
    assert "scrapy_aimd/py.typed" in wheel_names
    assert "scrapy_aimd/data/tracking_params.json" in wheel_names
    assert "scrapy_aimd/core/controller/policy.py" in wheel_names
    assert "scrapy_aimd/addon.py" in wheel_names
