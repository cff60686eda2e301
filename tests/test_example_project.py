"""``cd example_project && scrapy crawl demo``, as the README says, checked end to end.

One real crawl of the bundled demo site in a subprocess; the tests read its
output, its items, the demo site's own request log and the events file.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from scrapy_aimd.core.canonical import canonicalize_url
from scrapy_aimd.core.hosts import host_key
from scrapy_aimd.report import read_events
from scrapy_aimd.robots_middleware import crawl_delay_floor
from sitefarm import demo_farm, read_log_file, summarize

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "example_project"
#: The demo crawl takes about 16 s on a quiet 2-core machine.
TIME_LIMIT = 60.0


class DemoCrawl:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.items_path = out / "items.jsonl"
        self.farm_log = out / "farm.jsonl"
        self.events_path = out / "events.jsonl"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
            ),
        }
        command = [
            *(sys.executable, "-m", "scrapy", "crawl", "demo"),
            *("-O", str(self.items_path)),
            *("-a", f"farm_log={self.farm_log}"),
            *("-s", f"AIMD_EVENTS_FILE={self.events_path}"),
        ]
        started = time.monotonic()
        proc = subprocess.run(
            command,
            cwd=PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT * 3,
        )
        self.seconds = time.monotonic() - started
        self.returncode = proc.returncode
        self.output = proc.stdout + proc.stderr

    def items(self) -> list[dict[str, Any]]:
        lines = self.items_path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines]

    def events(self) -> list[dict[str, Any]]:
        lines = self.events_path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> DemoCrawl:
    return DemoCrawl(tmp_path_factory.mktemp("demo"))


def test_the_crawl_succeeds_in_time(crawl: DemoCrawl) -> None:
    assert crawl.returncode == 0, crawl.output[-5000:]
    assert "Traceback" not in crawl.output, crawl.output[-5000:]
    assert crawl.seconds < TIME_LIMIT, crawl.seconds


def test_the_output_ends_with_the_per_host_summary(crawl: DemoCrawl) -> None:
    output = crawl.output
    assert "Per-host summary (finished):" in output, output[-5000:]
    tail = output[output.index("Per-host summary (finished):") :]
    header = tail.splitlines()[1].split()
    assert header[:2] == ["host", "requests"] and header[-5:] == ["gap", "s", "limit", "best", "ms"]
    assert {"429", "503", "cached"} <= set(header)
    rows = [line.split() for line in tail.splitlines()[2:6]]
    assert len(rows) == 4 and all(re.fullmatch(r"127\.0\.0\.\d+:\d+", row[0]) for row in rows)
    # The crawl's last words: where its events are, the command to draw them.
    assert f"The crawl's events are in {crawl.events_path}" in tail
    assert f"python -m scrapy_aimd.report {crawl.events_path} -o " in tail
    assert "Spider closed (finished)" in tail


def test_every_demo_page_is_fetched_once(crawl: DemoCrawl) -> None:
    """Titles name the host and the page ("fast: page 3 (en, full)"), whatever
    spelling of the URL the link had; canonical URLs are all distinct."""
    items = crawl.items()
    assert {item["status"] for item in items} == {200}
    expected = Counter()
    for spec in demo_farm():
        for page in spec.page_ids():
            if page == "/":
                expected[f"{spec.name}: home"] += 1
            else:
                number, _, query = page[3:].partition("?")
                expected[f"{spec.name}: page {number}" + (" (en, full)" if query else "")] += 1
    assert Counter(item["title"] for item in items) == expected
    canonical = Counter(canonicalize_url(item["url"]) for item in items)
    assert [url for url, n in canonical.items() if n > 1] == []


def test_the_demo_site_saw_a_polite_complete_crawl(crawl: DemoCrawl) -> None:
    specs = demo_farm()
    # Arrivals at the server may bunch up by a few ms on a busy machine; the
    # events test below checks the gap on the crawler's own clock, exactly.
    summaries = summarize(read_log_file(crawl.farm_log), specs, crawl_delay_tolerance=0.05)
    for name, summary in summaries.items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)
        assert summary.duplicate_fetches == 0, (name, summary)
    polite = summaries["polite"]
    assert polite.crawl_delay_violations == 0, polite
    # The per-spider override of the example: at most 2 at once on the slow host.
    assert summaries["slow"].max_in_flight <= 2, summaries["slow"]
    # ... and AIMD_MAX_CONCURRENCY = 4 everywhere.
    assert all(s.max_in_flight <= 4 for s in summaries.values()), summaries


def test_the_events_show_the_crawl_delay_and_the_pauses(crawl: DemoCrawl) -> None:
    events = crawl.events()
    assert events[0]["event"] == "open" and events[0]["spider"] == "demo"
    assert events[-1]["event"] == "close" and events[-1]["reason"] == "finished"
    hosts = events[-1]["hosts"]
    names = {item["title"].partition(":")[0]: host_key(item["url"]) for item in crawl.items()}
    polite = names["polite"]
    # The Crawl-delay, plus the margin for the send jitter of the request before.
    assert hosts[polite]["delay"] == pytest.approx(crawl_delay_floor(0.5))
    starts = [e["t"] for e in events if e["event"] == "start" and e.get("host") == polite]
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert gaps and min(gaps) >= 0.5 - 0.005, min(gaps)
    # The rate-limited host answered 429 with Retry-After: it was paused, and
    # its refused requests were queued again (every page was fetched, above).
    assert hosts[names["limited"]]["pauses"] > 0
    assert {host for host, row in hosts.items() if row["pauses"]} == {names["limited"]}
    # The Crawl-delay's arrival is an event, before the host's first page starts,
    # so that the report draws the floor from the start.
    floors = [e for e in events if e["event"] == "change" and "crawl_delay" in e]
    assert [(e["host"], e["crawl_delay"]) for e in floors] == [(polite, 0.5)]
    assert floors[0]["delay"] == pytest.approx(crawl_delay_floor(0.5), abs=1e-4)
    assert floors[0]["t"] <= starts[1]


def test_the_events_say_what_each_robots_txt_came_to(crawl: DemoCrawl) -> None:
    """One ``robots`` event per origin, read back by the report."""
    names = {item["title"].partition(":")[0]: host_key(item["url"]) for item in crawl.items()}
    robots = {e["host"]: e for e in crawl.events() if e["event"] == "robots"}
    assert set(robots) == set(names.values())
    polite = robots[names["polite"]]
    assert (polite["status"], polite["outcome"], polite["crawl_delay"]) == (200, "rules", 0.5)
    assert polite["origin"] == "http://" + names["polite"]
    crawl_read = read_events(crawl.events_path)
    assert {origin.outcome for origin in crawl_read.robots.values()} <= {"rules", "allow_all"}
    assert len(crawl_read.robots) == len(names)


def test_the_summary_is_the_fold_of_the_events(crawl: DemoCrawl) -> None:
    """The close line's counts are what the report counts from the same events."""
    crawl_read = read_events(crawl.events_path)
    close = crawl.events()[-1]["hosts"]
    for host, row in close.items():
        counted = crawl_read.hosts[host].counted
        assert row["requests"] == counted.requests, host
        assert row["responses"] == dict(counted.responses), host
        assert (row["failures"], row["throttles"], row["pauses"]) == (
            counted.failures,
            counted.throttles,
            counted.pauses,
        ), host
        assert row["paused_seconds"] == pytest.approx(counted.paused_seconds, abs=0.01), host
