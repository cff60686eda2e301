"""Real crawls of hosts that block with 403 or tell their quota: a block host of the
farm loses no page, a lone forbidden page is fetched once more and handed on
without slowing its host, and a host that tells its quota in ``X-RateLimit-*``
headers is paced by it. Real HAProxy and mod_evasive: tests/test_bench_servers.py."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

from crawling import AIMD, run_crawl
from local_http import Answer, serve

from sitefarm import HostSpec, start_farm

PAGES = 50
FORBIDDEN = frozenset({"/p/1.html", "/p/11.html", "/p/21.html"})
"""Lone: more apart than a host's requests in flight (8 at most), so that the answer
after each is a page's, never another forbidden page's 403 (read as a block's, the
cautious side); and early, so that many pages are answered after the last one."""


def forbidden_pages(path: str) -> Answer:
    """A site of ``PAGES`` pages linked from its root; three of them answer 403."""
    if path in FORBIDDEN:
        return 403, {"Content-Type": "text/html"}, b"forbidden"
    links = "".join(f'<a href="/p/{i}.html">{i}</a>' for i in range(PAGES))
    body = (links if path == "/" else "<p>page</p>").encode()
    return 200 if path != "/robots.txt" else 404, {"Content-Type": "text/html"}, body


def test_a_lone_forbidden_page_is_fetched_once_more_and_never_slows_its_host(
    tmp_path: Path,
) -> None:
    events = tmp_path / "events.jsonl"
    with serve(forbidden_pages) as site:
        result = run_crawl(
            [site.url + "/"], tmp_path / "crawl", {**AIMD, "AIMD_EVENTS_FILE": str(events)}
        )
    hits = Counter(site.paths)
    assert all(hits[path] == 2 for path in FORBIDDEN), hits  # once more, then handed on
    assert len(result.items) == 1 + PAGES - len(FORBIDDEN)
    assert result.stats["aimd/forbidden"] == 3
    assert "aimd/blocked/hosts" not in result.stats
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert not [r for r in records if r["event"] in ("block", "pause", "throttle")]


def test_a_block_host_loses_no_page_and_is_probed_not_hammered(tmp_path: Path) -> None:
    """More than 10 requests in 2 s block the client for 3 s, renewed by every hit."""
    spec = HostSpec(
        name="block", pages=40, latency=0.02, block_limit=10, block_interval=2.0, block_seconds=3.0
    )
    with start_farm([spec], max_seconds=300) as farm:
        url = farm.urls["block"]
        result = run_crawl([url + "/"], tmp_path / "crawl", {**AIMD, "LOGSTATS_INTERVAL": 1})
        log = farm.read_log()
    served = {r["path"] for r in log if r["status"] == 200}
    blocked = {r["path"] for r in log if r["status"] == 403}
    assert blocked and blocked <= served  # no page lost to the blocks
    assert len(result.items) == len(served) >= 40  # every page reached the spider
    refused = sum(r["status"] == 403 for r in log)
    assert result.stats["aimd/blocked/hosts"] >= 1
    assert refused <= 0.3 * len(log), Counter(r["status"] for r in log)  # stock: most of them
    assert "blocks the crawl" in result.log
    host = urlsplit(url).netloc
    assert (
        re.search(rf"{re.escape(host)} \(blocked", result.log)
        or result.stats["aimd/blocked/seconds"] < 2
    )  # the live line names it while a block lasts a line's second
    table = result.log[result.log.rindex("Per-host summary") :].splitlines()
    header = re.split(r"\s{2,}", table[1].strip())
    row = re.split(r"\s{2,}", table[2].strip())
    assert int(row[header.index("blocks")]) >= 1


def test_a_told_quota_paces_the_host_without_a_refusal(tmp_path: Path) -> None:
    """A fixed window of 30 requests per 5 s that tells its quota in GitHub's headers."""
    spec = HostSpec(
        name="github",
        pages=40,
        latency=0.02,
        window_limit=30,
        window_seconds=5.0,
        quota_headers="github",
    )
    with start_farm([spec], max_seconds=300) as farm:
        result = run_crawl([farm.urls["github"] + "/"], tmp_path / "crawl", AIMD)
        log = farm.read_log()
    statuses = Counter(r["status"] for r in log)
    assert statuses[429] <= 1, statuses  # none as a rule; one at a window's edge at most
    assert len(result.items) == statuses[200]
    assert result.stats["aimd/quota/told"] >= len(log) - 2  # robots.txt may say nothing
    assert result.stats["aimd/quota/paced"] >= 1
    assert "aimd/quota/garbled" not in result.stats
