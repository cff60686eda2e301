"""Every AIMD_* setting the code reads is documented in docs/settings.rst, and
every setting documented there is one the code reads."""

from __future__ import annotations

import re
from pathlib import Path

from scrapy_aimd.addon import REMOVED_SETTINGS
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
    # A removed setting is named only to warn about it (and docs/migrating.rst says so).
    undocumented = settings_in_code() - set(settings_in_docs()) - set(REMOVED_SETTINGS)
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


#: A row of the table at the top: "   * - :setting:`NAME`" and four "     - cell" lines.
TABLE_ROW = re.compile(
    r"^   \* - :setting:`(AIMD_[A-Z0-9_]+)`\n"
    r"     - (?P<type>.+)\n     - (?P<default>.+)\n     - (?P<unit>.+)\n     - (?P<what>.+)$",
    re.M,
)
#: What each type's default may look like: its last literal, as in ``60.0`` or ``"strip"``.
DEFAULT_LOOKS = {
    "bool": re.compile(r"True|False"),
    "int": re.compile(r"\d+"),
    "float": re.compile(r"\d+(\.\d+)?"),
    "dict": re.compile(r"\{.*\}"),
    "str": re.compile(r'".*"'),
    "list of int": re.compile(r"\[[\d, ]*\]"),
    "list of str": re.compile(r"\[.*\]"),
}


def table_rows() -> dict[str, re.Match[str]]:
    text = SETTINGS_RST.read_text(encoding="utf-8")
    table = text[: text.index(".. setting::")]
    return {row[1]: row for row in TABLE_ROW.finditer(table)}


def entries() -> dict[str, str]:
    """Each documented setting's entry, from its heading to the next setting's."""
    text = SETTINGS_RST.read_text(encoding="utf-8")
    parts = re.split(r"^\.\. setting:: (\S+)\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def expected_row(name: str, entry: str) -> str:
    default = re.search(r"^Default: (.+)$", entry, re.M)
    return (
        f"   * - :setting:`{name}`\n     - TYPE\n     - {default[1] if default else '?'}\n"
        "     - UNIT\n     - WHAT IT SETS"
    )


def test_the_table_at_the_top_lists_every_setting_in_the_order_of_the_page() -> None:
    rows, documented = table_rows(), entries()
    missing = [expected_row(name, entry) for name, entry in documented.items() if name not in rows]
    assert not missing, "add these rows to the table in docs/settings.rst:\n" + "\n".join(missing)
    assert list(rows) == list(documented)


def test_the_table_gives_each_settings_own_default_type_and_unit() -> None:
    rows, documented = table_rows(), entries()
    for name, row in rows.items():
        entry = documented[name]
        default = re.search(r"^Default: (.+)$", entry, re.M)
        assert default is not None, name
        assert row["default"] == default[1], f"{name}: the table's default is not the entry's"
        kind = row["type"].removesuffix(" or None")
        assert kind in DEFAULT_LOOKS, f"{name}: unknown type {row['type']!r}"
        literals = re.findall(r"``([^`]+)``", row["default"])
        assert literals, name
        last = literals[-1]
        if last == "None":
            assert row["type"].endswith(" or None"), name
        else:
            assert DEFAULT_LOOKS[kind].fullmatch(last), f"{name}: {last} is not a {kind}"
        if row["unit"] == "seconds":
            assert "second" in entry.lower(), f"{name}: the entry never says seconds"
        if "in seconds" in entry.split("\n\n", 3)[2]:
            assert row["unit"] == "seconds", f"{name}: the entry says seconds, the table not"


def test_aimd_hosts_lists_every_field_an_entry_may_set() -> None:
    from scrapy_aimd.settings import _CONTROLLER_FIELDS

    text = SETTINGS_RST.read_text(encoding="utf-8")
    section = text[
        text.index("\nAIMD_HOSTS\n") : text.index("Example::", text.index("\nAIMD_HOSTS\n"))
    ]
    listed = set(re.findall(r"``([a-z_]+)``", section))
    assert set(_CONTROLLER_FIELDS.values()) <= listed, set(_CONTROLLER_FIELDS.values()) - listed
