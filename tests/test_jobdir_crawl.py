"""Real crawls with a JOBDIR that are killed, interrupted and resumed.

A farm of fast local hosts serves a few thousand pages. The crawl runs in a
child process (``tests/crawlrunner.py``) that the test kills with SIGKILL at
random moments, or interrupts with SIGINT, and starts again on the same
JOBDIR until it finishes. The farm's request log is the truth: every page must
have been served, and a page served twice must have been in flight when a
crawl died: that crawl had sent it to the farm, and its request was still in
the frontier after the kill (read from the database the killed crawl left).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from crawling import AIMD, ROOT, RUNNER

from scrapy_aimd.jobdir import FRONTIER_FILENAME
from sitefarm import FarmProcess, HostSpec, start_farm, summarize

#: Every test crawl: scrapy-aimd, fast hosts, a JOBDIR.
SETTINGS: dict[str, Any] = {
    **AIMD,
    "CONCURRENT_REQUESTS": 16,
    "AIMD_MAX_CONCURRENCY": 4,
    "DOWNLOAD_TIMEOUT": 30,
}


@dataclass
class Run:
    """One crawl process on the shared JOBDIR."""

    process: subprocess.Popen[bytes]
    out: Path
    started: float
    #: When the test sent it a signal to stop (inf: never).
    stopped: float = math.inf
    #: URLs of the requests in the frontier after the process died.
    left: set[str] = field(default_factory=set)

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = json.loads((self.out / "stats.json").read_text())
        return stats

    def log(self) -> str:
        path = self.out / "crawl.log"
        return path.read_text() if path.exists() else ""


class Job:
    """Crawls of one farm on one JOBDIR, started, stopped and resumed."""

    def __init__(self, farm: FarmProcess, tmp_path: Path, settings: dict[str, Any]) -> None:
        self.farm = farm
        self.tmp_path = tmp_path
        self.jobdir = tmp_path / "job"
        self.settings = {**SETTINGS, "JOBDIR": str(self.jobdir), **settings}
        self.runs: list[Run] = []
        #: The spider class's path (tests/components.py), None for the farm's own.
        self.spider: str | None = None

    def start(self) -> Run:
        out = self.tmp_path / f"run{len(self.runs)}"
        out.mkdir()
        config = out / "config.json"
        config.write_text(
            json.dumps(
                {
                    "start_urls": [url + "/" for url in self.farm.urls.values()],
                    "settings": self.settings,
                    "out": str(out),
                    "spider": self.spider,
                }
            )
        )
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(RUNNER.parent)]),
        }
        process = subprocess.Popen(
            [sys.executable, str(RUNNER), str(config)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        run = Run(process, out, time.time())
        self.runs.append(run)
        return run

    def wait_for_requests(self, run: Run, count: int, timeout: float = 60) -> None:
        """Until the farm has seen ``count`` requests from this run (or it ended)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and run.process.poll() is None:
            if sum(r["arrived"] >= run.started for r in self.farm.read_log()) >= count:
                return
            time.sleep(0.02)

    def stop(self, run: Run, how: signal.Signals, timeout: float = 60) -> int:
        run.stopped = time.time()
        run.process.send_signal(how)
        return self.wait(run, timeout)

    def wait(self, run: Run, timeout: float = 60, *, read_frontier: bool = True) -> int:
        try:
            code = run.process.wait(timeout)
        finally:
            if run.process.poll() is None:
                run.process.kill()
                run.process.wait()
        assert run.process.stderr is not None
        run.process.stderr.close()
        if read_frontier:
            run.left = frontier_urls(self.jobdir)
        return code

    def finish(self, timeout: float = 90) -> Run:
        run = self.start()
        code = self.wait(run, timeout)
        assert code == 0, run.log()[-3000:]
        assert run.stats().get("finish_reason") == "finished", run.stats()
        return run

    def url(self, record: dict[str, Any]) -> str:
        return self.farm.urls[record["host"]] + record["path"]


def read_frontier(jobdir: Path, query: str) -> list[Any]:
    """Rows of a JOBDIR's frontier, read from a copy of its files (the database
    and its write-ahead log, as a killed or a running crawl left them)."""
    source = jobdir / FRONTIER_FILENAME
    if not source.exists():
        return []
    copy = jobdir.parent / "frontier-copy"
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir()
    for suffix in ("", "-wal"):
        if Path(f"{source}{suffix}").exists():
            shutil.copy(f"{source}{suffix}", copy / f"{FRONTIER_FILENAME}{suffix}")
    conn = sqlite3.connect(copy / FRONTIER_FILENAME)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def frontier_urls(jobdir: Path) -> set[str]:
    """The URLs of the requests in a JOBDIR's frontier."""
    rows = read_frontier(jobdir, "SELECT item FROM queue UNION ALL SELECT item FROM kept")
    return {pickle.loads(row[0])["url"] for row in rows}


def saved_states(jobdir: Path, kind: str) -> list[dict[str, Any]]:
    """The host ("host") or robots.txt ("robots") states saved in a JOBDIR's frontier."""
    try:
        rows = read_frontier(jobdir, f"SELECT state FROM states WHERE name LIKE '{kind}:%'")
    except sqlite3.DatabaseError:  # copied while a checkpoint was writing
        return []
    return [json.loads(row[0]) for row in rows]


def page_fetches(job: Job, log: list[dict[str, Any]]) -> Counter[str]:
    """Pages served with 200, by URL; the start pages aside (Scrapy fetches
    them again at every start: they are ``dont_filter``)."""
    return Counter(
        job.url(r) for r in log if r["status"] == 200 and r["reason"] == "page" and r["path"] != "/"
    )


def sent_by(job: Job, record: dict[str, Any]) -> int:
    """The index of the run that sent the request of a farm record: the last
    run started before the request arrived, or the run before it when the farm
    found the client gone (``client_closed``) while that last run was still
    alive (not yet signalled when the farm finished the request). A loaded farm
    may read a request after the process that sent it died, and after the next
    run started; a run's connections close only when it dies."""
    arrived = record["arrived"]
    index = max((i for i, run in enumerate(job.runs) if run.started <= arrived), default=0)
    if index and record["client_closed"] and record["finished"] < job.runs[index].stopped:
        index -= 1
    return index


def in_flight_at_stop(job: Job, index: int, log: list[dict[str, Any]]) -> set[str]:
    """Requests that run ``index`` sent to the farm (see ``sent_by``) and that
    its crawl had not finished when it died: still in the frontier afterwards."""
    arrived = {job.url(r) for r in log if sent_by(job, r) == index}
    return arrived & job.runs[index].left


def test_sigkill_at_random_moments_loses_no_page(tmp_path: Path) -> None:
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    specs = [
        HostSpec(name=f"site{i}", pages=500, latency=0.005, robots="User-agent: *\nAllow: /\n")
        for i in range(6)
    ]
    with start_farm(specs, max_seconds=300) as farm:
        job = Job(farm, tmp_path, {"ROBOTSTXT_OBEY": True})
        for _ in range(3):
            run = job.start()
            job.wait_for_requests(run, rng.randint(60, 500))
            time.sleep(rng.uniform(0, 0.2))
            assert job.stop(run, signal.SIGKILL) == -signal.SIGKILL, f"seed {seed}"
        last = job.finish()
        log = farm.read_log()
    context = f"seed {seed}"
    for name, summary in summarize(log, specs).items():
        assert summary.pages_fetched == summary.pages_total, (context, name, summary)
    fetches = page_fetches(job, log)
    twice = {url for url, count in fetches.items() if count > 1}
    extra = sum(fetches[url] - 1 for url in twice)
    in_flight = [in_flight_at_stop(job, i, log) for i in range(len(job.runs) - 1)]
    print(
        f"seed {seed}: {len(log)} requests, {len(fetches)} pages,"
        f" in flight at the kills {[len(urls) for urls in in_flight]},"
        f" pages served twice {extra}"
    )
    assert extra <= sum(len(urls) for urls in in_flight), (
        context,
        sorted(twice),
        [len(urls) for urls in in_flight],
    )
    in_flight_once = set().union(*in_flight)
    assert twice <= in_flight_once, (context, sorted(twice - in_flight_once))
    stats = last.stats()
    assert stats["aimd/jobdir/restored"] > 0
    assert stats["aimd/jobdir/queued_at_close"] == 0
    assert stats.get("aimd/jobdir/unserializable", 0) <= 2 * len(specs)  # robots.txt only


def test_ctrl_c_pauses_cleanly_and_resumes(tmp_path: Path) -> None:
    specs = [HostSpec(name=f"site{i}", pages=300, latency=0.005) for i in range(4)]
    with start_farm(specs, max_seconds=300) as farm:
        job = Job(farm, tmp_path, {})
        first = job.start()
        job.wait_for_requests(first, 150)
        assert job.stop(first, signal.SIGINT) == 0, first.log()[-3000:]
        paused = first.stats()
        last = job.finish()
        log = farm.read_log()
    assert paused["finish_reason"] == "shutdown"
    assert paused["aimd/jobdir/queued_at_close"] > 0
    assert paused["aimd/in_flight_at_close"] == 0  # every request in flight finished
    assert not in_flight_at_stop(job, 0, log)
    for name, summary in summarize(log, specs).items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)
    fetches = page_fetches(job, log)
    assert max(fetches.values()) == 1, [url for url, n in fetches.items() if n > 1]
    assert last.stats()["aimd/jobdir/restored"] == paused["aimd/jobdir/queued_at_close"]


def test_shutdown_grace_cancels_slow_downloads_and_keeps_them(tmp_path: Path) -> None:
    slow = ["/p/2", "/p/3"]
    specs = [
        HostSpec(name="slow", pages=6, links_per_page=5, hang_paths=slow, hang_seconds=8.0),
        HostSpec(name="fast", pages=40, latency=0.01),
    ]
    settings = {"AIMD_SHUTDOWN_GRACE": 0.5, "AIMD_ADAPTIVE_CONCURRENCY": False}
    with start_farm(specs, max_seconds=300) as farm:
        job = Job(farm, tmp_path, settings)
        first = job.start()
        hanging = [farm.urls["slow"] + path for path in slow]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until both slow pages are stored
            with contextlib.suppress(sqlite3.DatabaseError):  # a copy taken mid-write
                if set(hanging) <= frontier_urls(job.jobdir):
                    break
            time.sleep(0.1)
        else:
            pytest.fail("the slow pages were never stored")
        time.sleep(0.5)
        stopping = time.monotonic()
        assert job.stop(first, signal.SIGINT) == 0, first.log()[-3000:]
        took = time.monotonic() - stopping
        stats = first.stats()
        last = job.finish()
        log = farm.read_log()
    assert took < 5.0, f"the crawl waited {took:.1f}s for downloads that take 8s"
    assert stats["aimd/shutdown/cancelled"] >= 1
    assert set(hanging) & first.left, "a cancelled request left the frontier"
    # What the stat says was left is what the next run finds: the cancelled ones too.
    assert stats["aimd/jobdir/queued_at_close"] == last.stats()["aimd/jobdir/restored"]
    for name, summary in summarize(log, specs).items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)


def test_a_corrupted_or_foreign_jobdir_stops_the_crawl_naming_the_path(tmp_path: Path) -> None:
    specs = [HostSpec(name="site", pages=5)]
    with start_farm(specs, max_seconds=120) as farm:
        job = Job(farm, tmp_path, {})
        job.jobdir.mkdir()
        frontier = job.jobdir / FRONTIER_FILENAME
        frontier.write_bytes(b"not a database" * 100)
        run = job.start()
        assert job.wait(run, read_frontier=False) != 0
        frontier.unlink()
        (job.jobdir / "requests.queue").mkdir()
        stock = job.start()
        assert job.wait(stock, read_frontier=False) != 0
    assert f"{frontier} is not a scrapy-aimd frontier" in run.log()
    assert f"{job.jobdir / 'requests.queue'} was written by Scrapy's own scheduler" in stock.log()
    assert not farm.read_log(), "a crawl started over the old data"
    # Refused, the JOBDIR is left as it was: Scrapy's own scheduler still resumes it.
    assert sorted(p.name for p in job.jobdir.iterdir()) == ["requests.queue"]


def test_a_resumed_crawl_keeps_the_pause_and_the_robots_rules(tmp_path: Path) -> None:
    specs = [
        HostSpec(
            name="paused", pages=10, pause_first=6.0, robots="User-agent: *\nDisallow: /p/7\n"
        ),
        HostSpec(name="fast", pages=300, latency=0.01, robots="User-agent: *\nAllow: /\n"),
    ]
    with start_farm(specs, max_seconds=300) as farm:
        job = Job(farm, tmp_path, {"ROBOTSTXT_OBEY": True})
        first = job.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until the pause and both rules are saved
            hosts = saved_states(job.jobdir, "host")
            if len(saved_states(job.jobdir, "robots")) == 2 and any(
                state["controller"]["paused_until"] is not None for state in hosts
            ):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the pause and the robots rules were never saved")
        assert job.stop(first, signal.SIGKILL) == -signal.SIGKILL
        last = job.finish()
        log = farm.read_log()
    refused = min((r for r in log if r["status"] == 429), key=lambda r: r["arrived"])
    pause_end = refused["finished"] + float(refused["retry_after"])
    resumed = [r for r in log if r["host"] == "paused" and r["arrived"] >= last.started]
    assert resumed, "the paused host was not crawled after the resume"
    assert min(r["arrived"] for r in resumed) >= pause_end - 0.05, "asked during its pause"
    robots = Counter(r["host"] for r in log if r["reason"] == "robots")
    assert robots == {"paused": 1, "fast": 1}, "robots.txt fetched again on resume"
    assert not any(r["host"] == "paused" and r["path"] == "/p/7" for r in log)
    summaries = summarize(log, specs)
    assert summaries["fast"].pages_fetched == summaries["fast"].pages_total
    assert summaries["paused"].pages_fetched == summaries["paused"].pages_total - 1
    stats = last.stats()
    assert stats["aimd/jobdir/hosts_restored"] >= 1
    assert stats["aimd/jobdir/robots_restored"] >= 2
