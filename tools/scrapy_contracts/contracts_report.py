"""pytest plugin: one JSON record per test id, for the harness to compare.

Loaded with ``-p contracts_report``; writes to ``$SCRAPY_CONTRACTS_REPORT``.
JUnit XML would do, but it loses the exact node id (module and class are
merged in ``classname``), and the node id is what ``expected-failures.txt``
lists.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

_results: dict[str, dict[str, Any]] = {}
_status: list[int] = []


def _first_line(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    if report.skipped and isinstance(report.longrepr, tuple):
        text = str(report.longrepr[2])
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _results.setdefault(
        report.nodeid, {"outcome": "passed", "message": "", "duration": 0.0}
    )
    entry["duration"] += report.duration
    if entry["outcome"] in ("failed", "error"):
        return
    if report.failed:
        entry["outcome"] = "failed" if report.when == "call" else "error"
        entry["message"] = (
            f"{report.when}: {_first_line(report)}"
            if report.when != "call"
            else _first_line(report)
        )
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        entry["message"] = _first_line(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _results[report.nodeid] = {
            "outcome": "error",
            "message": f"collection: {str(report.longrepr).splitlines()[-1][:300]}",
            "duration": 0.0,
        }


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _status.append(int(exitstatus))
    path = os.environ.get("SCRAPY_CONTRACTS_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as out:
            json.dump({"exitstatus": int(exitstatus), "tests": _results}, out, indent=1)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Exit now: after a timeout has killed the reactor, its thread pool is never
    stopped and the interpreter would wait for those threads for ever."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_status[0] if _status else 0)
