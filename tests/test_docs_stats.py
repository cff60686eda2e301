"""Every stat key the code writes as a literal is documented in docs/signals.rst."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "scrapy_aimd"
SIGNALS_RST = ROOT / "docs" / "signals.rst"

#: A whole stat key as a string literal: "aimd/robots/ignored", "scheduler/unserializable".
LITERAL = re.compile(r"""(["'])((?:aimd|scheduler)/[a-z_]+(?:/[a-z_]+)*)\1""")


def stats_in_code() -> set[str]:
    keys: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        keys.update(match[2] for match in LITERAL.finditer(path.read_text(encoding="utf-8")))
    return keys


def test_the_scan_finds_stats() -> None:
    assert {"aimd/enqueued", "aimd/robots/disallowed", "scheduler/unserializable"} <= (
        stats_in_code()
    )


def test_every_stat_the_code_writes_is_documented() -> None:
    documented = SIGNALS_RST.read_text(encoding="utf-8")
    missing = sorted(key for key in stats_in_code() if f"``{key}``" not in documented)
    assert not missing, f"stats missing from docs/signals.rst: {missing}"


def test_every_fleet_counter_is_documented() -> None:
    """The ``aimd/fleet/*`` counters are written by name (``as_stats``), not as
    literals: each has its row all the same."""
    from scrapy_aimd.fleet.connection import FleetCounters

    documented = SIGNALS_RST.read_text(encoding="utf-8")
    missing = sorted(key for key in FleetCounters().as_stats() if f"``{key}``" not in documented)
    assert not missing, f"stats missing from docs/signals.rst: {missing}"
