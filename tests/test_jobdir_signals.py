"""Real crawls on a JOBDIR stopped by the signals a user sends: Ctrl-C twice
(Scrapy's forced stop, which skips the close) and SIGTERM (a service manager's
stop), then resumed until done. The farm's request log is the truth."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from test_jobdir_crawl import Job, in_flight_at_stop, page_fetches

from sitefarm import HostSpec, start_farm, summarize


def test_ctrl_c_twice_loses_no_page(tmp_path: Path) -> None:
    """The second Ctrl-C stops the reactor without closing the scheduler: the
    last checkpoint is what the resume finds."""
    # Pages slow enough that the graceful stop is still waiting at the second one,
    # with a second to spare on a busy machine.
    specs = [HostSpec(name=f"site{i}", pages=30, latency=1.5) for i in range(4)]
    with start_farm(specs, max_seconds=300) as farm:
        job = Job(farm, tmp_path, {})
        first = job.start()
        job.wait_for_requests(first, 40)
        first.process.send_signal(signal.SIGINT)
        # The second only once the first is handled: two that reach a process
        # starved of CPU before it runs its handler are handled as one.
        deadline = time.monotonic() + 30
        while "shutting down gracefully" not in first.log() and time.monotonic() < deadline:
            time.sleep(0.01)
        job.stop(first, signal.SIGINT)
        job.finish()
        log = farm.read_log()
    assert "forcing unclean shutdown" in first.log()
    assert "Spider closed" not in first.log()
    for name, summary in summarize(log, specs).items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)
    fetches = page_fetches(job, log)
    twice = {url for url, count in fetches.items() if count > 1}
    assert twice <= in_flight_at_stop(job, 0, log), sorted(twice)


def test_sigterm_pauses_cleanly_and_resumes(tmp_path: Path) -> None:
    specs = [HostSpec(name=f"site{i}", pages=300, latency=0.005) for i in range(4)]
    with start_farm(specs, max_seconds=300) as farm:
        job = Job(farm, tmp_path, {})
        first = job.start()
        job.wait_for_requests(first, 150)
        assert job.stop(first, signal.SIGTERM) == 0, first.log()[-3000:]
        paused = first.stats()
        last = job.finish()
        log = farm.read_log()
    assert paused["finish_reason"] == "shutdown"
    assert paused["aimd/jobdir/queued_at_close"] > 0
    for name, summary in summarize(log, specs).items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)
    fetches = page_fetches(job, log)
    assert max(fetches.values()) == 1, [url for url, n in fetches.items() if n > 1]
    assert last.stats()["aimd/jobdir/restored"] == paused["aimd/jobdir/queued_at_close"]
