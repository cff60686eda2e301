"""Every AIMD_* setting the code reads is documented in docs/settings.rst, and
every setting documented there is one the code reads."""

from __future__ import annotations

import re
from pathlib import Path

from scrapy_aimd.fingerprint import CANONICAL_SETTINGS
from scrapy_aimd.settings import CONTROLLER_SETTINGS

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "scrapy_aimd"
SETTINGS_RST = ROOT / "docs" / "settings.rst"

#: A setting name as a whole string literal: "AIMD_MIN_DELAY" or 'AIMD_HOSTS'.
LITERAL = re.compile(r"""(["'])(AIMD_[A-Z0-9_]+)\1""")
#: A documented setting: ".. setting:: AIMD_MIN_DELAY", as in Scrapy's docs.
DIRECTIVE = re.compile(r"^\.\. setting:: (\S+)\s*$", re.M)


def settings_in_code() -> set[str]:
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        names.update(match[2] for match in LITERAL.finditer(path.read_text(encoding="utf-8")))
    return names


def settings_in_docs() -> list[str]:
    return DIRECTIVE.findall(SETTINGS_RST.read_text(encoding="utf-8"))


def test_the_scan_finds_the_exported_lists() -> None:
    from scrapy_aimd.robots_middleware import ROBOTS_SETTINGS

    code = settings_in_code()
    for name in (*CONTROLLER_SETTINGS, *CANONICAL_SETTINGS, *ROBOTS_SETTINGS):
        assert name in code
    assert {"AIMD_EVENTS_FILE", "AIMD_THROTTLE_RETRIES"} <= code


def test_every_setting_the_code_reads_is_documented() -> None:
    undocumented = settings_in_code() - set(settings_in_docs())
    assert not undocumented, f"add these to docs/settings.rst: {sorted(undocumented)}"


def test_every_documented_setting_is_read_by_the_code() -> None:
    stale = set(settings_in_docs()) - settings_in_code()
    assert not stale, f"docs/settings.rst documents settings nothing reads: {sorted(stale)}"


def test_each_setting_is_documented_once_under_its_own_heading() -> None:
    text = SETTINGS_RST.read_text(encoding="utf-8")
    names = settings_in_docs()
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for name in names:
        heading = re.search(rf"^\.\. setting:: {name}\n\n{name}\n(-+)\n", text, re.M)
        assert heading is not None and len(heading[1]) >= len(name), name
        entry = text[heading.end() :].split(".. setting::", 1)[0]
        assert re.search(r"^Default: ", entry, re.M), f"{name} has no 'Default:' line"
