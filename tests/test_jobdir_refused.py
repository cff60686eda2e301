"""A JOBDIR that cannot be resumed stops the crawl as it starts, with one error
that names the file: not an error buried under Scrapy's failures to close a
spider that never opened ("Scraper slot not assigned", "Scheduler close failure")."""

from __future__ import annotations

import signal
from pathlib import Path

from test_jobdir_crawl import Job

from scrapy_aimd.jobdir import FRONTIER_FILENAME
from sitefarm import HostSpec, start_farm

#: What Scrapy logs when the scheduler's open() raised.
CASCADE = ("Scheduler close failure", "Scraper close failure", "slot not assigned")


def assert_one_clean_error(log: str, message: str) -> None:
    assert message in log, log[-3000:]
    assert not [line for line in CASCADE if line in log], log[-3000:]


def test_a_truncated_frontier_is_refused_as_the_crawl_starts(tmp_path: Path) -> None:
    specs = [HostSpec(name="site", pages=400, latency=0.005)]
    with start_farm(specs, max_seconds=120) as farm:
        job = Job(farm, tmp_path, {"CLOSESPIDER_PAGECOUNT": 100})
        assert job.wait(job.start()) == 0
        frontier = job.jobdir / FRONTIER_FILENAME
        size = frontier.stat().st_size
        assert size > 4 * 4096 and not Path(f"{frontier}-wal").exists()
        with frontier.open("r+b") as file:
            file.truncate(size // 2)
        served = len(farm.read_log())
        run = job.start()
        assert job.wait(run, read_frontier=False) != 0
        assert len(farm.read_log()) == served, "a crawl started over the broken file"
    assert_one_clean_error(run.log(), f"{frontier} is corrupted")


def test_a_jobdir_in_use_by_another_crawl_is_refused_as_the_crawl_starts(tmp_path: Path) -> None:
    specs = [HostSpec(name="site", pages=400, latency=0.05)]
    with start_farm(specs, max_seconds=120) as farm:
        job = Job(farm, tmp_path, {})
        first = job.start()
        job.wait_for_requests(first, 20)
        second = job.start()
        code = job.wait(second, read_frontier=False)
        job.stop(first, signal.SIGINT, timeout=60)
    assert code != 0
    assert_one_clean_error(
        second.log(), f"{job.jobdir / FRONTIER_FILENAME} is in use by another crawl"
    )


def test_a_jobdir_of_another_spider_is_refused_as_the_crawl_starts(tmp_path: Path) -> None:
    specs = [HostSpec(name="site", pages=400, latency=0.005)]
    with start_farm(specs, max_seconds=120) as farm:
        job = Job(farm, tmp_path, {"CLOSESPIDER_PAGECOUNT": 50})
        assert job.wait(job.start()) == 0
        served = len(farm.read_log())
        job.spider = "components.OtherNameSpider"
        run = job.start()
        assert job.wait(run, read_frontier=False) != 0
        assert len(farm.read_log()) == served, "the other spider crawled"
    assert_one_clean_error(
        run.log(), "belongs to another crawl (spider 'farm', this crawl: 'other')"
    )


def test_a_frontier_that_is_no_database_is_refused_as_the_crawl_starts(tmp_path: Path) -> None:
    specs = [HostSpec(name="site", pages=40, latency=0.005)]
    with start_farm(specs, max_seconds=120) as farm:
        job = Job(farm, tmp_path, {})
        frontier = job.jobdir / FRONTIER_FILENAME
        job.jobdir.mkdir()
        frontier.write_bytes(b"not a frontier\n" * 100)
        run = job.start()
        assert job.wait(run, read_frontier=False) != 0
        assert not farm.read_log(), "a crawl started over the foreign file"
    assert_one_clean_error(run.log(), f"{frontier} is not a scrapy-aimd frontier")
