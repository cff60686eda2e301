"""Real crawls: the live line about the hosts and the end-of-crawl summary
(issue 13, items 8 and 9)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from crawling import AIMD, run_crawl
from local_http import Answer, serve

from sitefarm import HostSpec, start_farm

LINE = re.compile(r"^(\S+ \S+) \[scrapy_aimd\.reporter\] INFO: (Hosts: .*)$", re.M)


def test_the_live_line_and_the_summary_name_the_hosts_that_hold_the_crawl_back(
    tmp_path: Path,
) -> None:
    specs = [
        HostSpec(name="paused", pages=4, pause_first=5.0, pause_retry_after=5),
        HostSpec(name="steady", pages=40, latency=0.02),  # 40 x 0.25 s: 10 s
        HostSpec(name="quiet1", pages=1),
        HostSpec(name="quiet2", pages=1),
    ]
    with start_farm(specs, max_seconds=300) as farm:
        urls = dict(farm.urls)
        steady = urlsplit(urls["steady"]).netloc
        result = run_crawl(
            [url + "/" for url in urls.values()],
            tmp_path / "crawl",
            {
                **AIMD,
                "LOGSTATS_INTERVAL": 2,
                "AIMD_SUMMARY_ROWS": 2,
                "AIMD_HOSTS": {steady: {"min_delay": 0.25}},
            },
        )
        log = farm.read_log()
    paused = urlsplit(urls["paused"]).netloc
    started = min(r["arrived"] for r in log)
    assert max(r["finished"] for r in log) - started >= 9  # a 10 s crawl

    lines = LINE.findall(result.log)
    assert len(lines) >= 3, result.log[-3000:]
    first_429 = min(r["finished"] for r in log if r["status"] == 429)
    pause_end = first_429 + 5.0
    during = []
    for stamp, line in lines:
        assert re.match(
            r"Hosts: \d+ active, \d+ waiting on their gap, \d+ at their limit, "
            r"\d+ paused, \d+ throttled in the last \d+s",
            line,
        ), line
        written = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()
        if first_429 + 1 <= written <= pause_end - 1:
            during.append(line)
    assert during, (first_429, lines)
    assert any(re.search(rf"{re.escape(paused)} \(paused [\d.]+s more", x) for x in during)
    assert any("1 paused" in x for x in during)
    assert re.search(rf"{re.escape(paused)} \([^)]*gap [\d.]+s, limit \d+\)", during[0])

    table = result.log[result.log.rindex("Per-host summary") :].splitlines()[1:6]
    header = re.split(r"\s{2,}", table[0].strip())
    assert header[:9] == ["host", "requests", "2xx", "3xx", "4xx", "429", "5xx", "503", "cached"]
    assert {"paused s", "gap s", "best ms"} <= set(header)
    first = re.split(r"\s{2,}", table[1].strip())
    assert first[0] == paused  # the troubled host first
    assert int(first[header.index("429")]) >= 1
    assert first[header.index("4xx")] == "0"  # a 429 is not counted twice
    assert table[3].startswith("... and 2 more hosts")
    assert "best ms: the host's latency baseline" in table[4]


def odd_status(path: str) -> Answer:
    """Answers /<status> with that status, as some sites send 999 or 600."""
    return int(path.strip("/")), {}, b""


def summary_rows(log: str) -> dict[str, dict[str, str]]:
    """The last per-host summary table of a crawl log, by host, by column."""
    table = log[log.rindex("Per-host summary") :].splitlines()[1:]
    header = re.split(r"\s{2,}", table[0].strip())
    rows = {}
    for line in table[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) != len(header):
            break
        rows[cells[0]] = dict(zip(header, cells, strict=True))
    return rows


def test_every_answer_is_in_a_column_and_a_pause_ends_with_the_crawl(tmp_path: Path) -> None:
    """A row's columns add up to its requests (999 and 600 under ``other``); a
    Retry-After longer than the rest of the crawl counts only up to the crawl's
    end; data: requests are listed as ``data:``."""
    events = tmp_path / "events.jsonl"
    with serve(odd_status) as odd_site:
        odd = urlsplit(odd_site.url).netloc
        specs = [HostSpec(name="paused", pages=3, pause_first=60.0, pause_retry_after=60)]
        with start_farm(specs, max_seconds=120) as farm:
            paused = urlsplit(farm.urls["paused"]).netloc
            result = run_crawl(
                [
                    farm.urls["paused"] + "/",
                    *(f"http://{odd}/{status}" for status in (999, 600, 200)),
                    "data:text/html,<p>here</p>",
                ],
                tmp_path / "crawl",
                {**AIMD, "CLOSESPIDER_TIMEOUT": 3, "AIMD_EVENTS_FILE": str(events)},
            )
    rows = summary_rows(result.log)
    counted = ("2xx", "3xx", "4xx", "429", "5xx", "503", "cached", "errors", "other")
    for host, row in rows.items():
        assert sum(int(row[c]) for c in counted) == int(row["requests"]), (host, row)
    assert (rows[odd]["other"], rows[odd]["2xx"]) == ("2", "1")
    assert rows["data:"]["2xx"] == "1"
    assert "" not in rows
    assert int(rows[paused]["429"]) >= 1
    assert 0 < float(rows[paused]["paused s"]) <= 5  # not the 60 s asked for
    close = json.loads(events.read_text().splitlines()[-1])
    assert 0 < close["hosts"][paused]["paused_seconds"] <= 5
    assert close["hosts"]["data:"]["requests"] == 1
