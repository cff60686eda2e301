"""A full disk under JOBDIR, on a real small filesystem: the frontier store and
the seen-keys file keep only what can be resumed, and the crawl stops with an
error that says the disk is full.

The small filesystem is a tmpfs mounted for the test (root only). Where that is
not permitted, these tests are skipped with a reason that says they did not run.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import scrapy
from crawling import AIMD, run_crawl
from scrapy import Request
from test_jobdir_crawl import Job, Run

from scrapy_aimd.dupefilter import (
    SEEN_KEYS_FILENAME,
    AimdDupeFilter,
    SeenKeysFileError,
    read_seen_keys,
)
from scrapy_aimd.sqlite_store import SqliteQueueStore, StoreError
from sitefarm import HostSpec, start_farm, summarize

NOT_MOUNTED = "NOT TESTED: a full disk needs a small tmpfs, and mounting one is not permitted"


class SmallDisk:
    """A tmpfs of a given size, and a filler file that takes the space left."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler"

    def fill(self) -> int:
        """Take every free byte; the bytes taken."""
        taken = 0
        with self.filler.open("ab", buffering=0) as file:
            block = b"\0" * 4096
            while True:
                try:
                    written = file.write(block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    return taken
                taken += written or 0

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def resize(self, kib: int) -> None:
        _mount(["-o", f"remount,size={kib}k", str(self.path)])


def _mount(arguments: list[str]) -> None:
    done = subprocess.run(["mount", *arguments], capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.skip(f"{NOT_MOUNTED}: mount {' '.join(arguments)}: {done.stderr.strip()}")


@contextlib.contextmanager
def small_disk(parent: Path, kib: int, name: str = "disk") -> Iterator[SmallDisk]:
    """A tmpfs of ``kib`` KiB at ``parent / name``, unmounted afterwards."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip(f"{NOT_MOUNTED} (not root, or no mount command)")
    path = parent / name
    path.mkdir()
    _mount(["-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(path)])
    try:
        yield SmallDisk(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def encode(item: str) -> bytes:
    return item.encode()


def decode(data: bytes) -> str:
    return data.decode()


def open_store(path: Path) -> SqliteQueueStore[str]:
    return SqliteQueueStore(path, encode=encode, decode=decode, stamp={"spider": "s"})


def rows(path: Path) -> list[str]:
    """Every item the file holds, by reopening it (a resume)."""
    store = open_store(path)
    try:
        items = []
        while (item := store.pop("h")) is not None:
            items.append(item)
        return sorted(items)
    finally:
        store.close()


# -- the frontier store ------------------------------------------------------------------


def push_until_full(store: SqliteQueueStore[str]) -> None:
    """Push big children and commit every 50, until the store raises."""
    for n in range(100_000):
        store.push("h", (0, 0, 100 + n), f"child-{n}-" + "x" * 2000)
        if n % 50 == 0:
            store.commit()


def test_after_a_commit_fails_on_a_full_disk_nothing_more_is_durable(tmp_path: Path) -> None:
    """The bug: SQLite rolls back on "disk full", the store kept writing as if in a
    transaction, so later writes were each durable alone: the deletes of done
    parents stuck while their children's inserts were gone."""
    with small_disk(tmp_path, 1024) as disk:
        path = disk.path / "frontier.sqlite"
        store = open_store(path)
        parents = [f"parent-{n}" for n in range(20)]
        for n, item in enumerate(parents):
            store.push("h", (0, 0, n), item)
        store.commit()
        assert [store.pop("h") for _ in parents] == parents
        disk.fill()
        with pytest.raises(StoreError, match="disk is full"):
            push_until_full(store)
        disk.free()
        # The crawl is stopping; the engine finishes what is in flight.
        refused = []
        for item in parents:
            try:
                store.done(item)
            except StoreError as exc:
                refused.append(str(exc))
        with contextlib.suppress(StoreError):
            store.commit()
        with contextlib.suppress(StoreError):
            store.close()
        restored = rows(path)
        assert set(parents) <= set(restored)  # every parent is fetched again
        assert len(refused) == len(parents)
        assert all("nothing more is written" in message for message in refused)
        assert store.failed


def test_after_fail_no_write_is_durable(tmp_path: Path) -> None:
    path = tmp_path / "frontier.sqlite"
    store = open_store(path)
    store.push("h", (0, 0, 0), "kept")
    store.commit()
    store.push("h", (0, 0, 1), "not committed")
    assert store.pop("h") == "kept"
    store.fail("the seen keys cannot be written")
    with pytest.raises(StoreError, match="the seen keys cannot be written"):
        store.done("kept")
    with pytest.raises(StoreError, match="the seen keys cannot be written"):
        store.commit()
    store.close()
    assert rows(path) == ["kept"]


def test_a_transaction_rolled_back_behind_the_store_fails_it(tmp_path: Path) -> None:
    path = tmp_path / "frontier.sqlite"
    store = open_store(path)
    store.push("h", (0, 0, 0), "a")
    store.commit()
    store.push("h", (0, 0, 1), "b")
    store._conn.execute("ROLLBACK")  # as SQLite does on its own after SQLITE_FULL
    with pytest.raises(StoreError, match="rolled back"):
        store.push("h", (0, 0, 2), "c")
    store.close()
    assert rows(path) == ["a"]


# -- the seen-keys file ---------------------------------------------------------------------


def keys_in(path: Path, dupefilter: AimdDupeFilter) -> int:
    keys, intact = read_seen_keys(path, dupefilter.rules_id)
    assert intact == path.stat().st_size  # whole batches only
    return len(keys)


def test_no_space_while_writing_keys_leaves_whole_batches(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with small_disk(tmp_path, 256) as disk:
        errors: list[BaseException] = []
        dupefilter = AimdDupeFilter(str(disk.path))
        dupefilter.on_error = errors.append
        dupefilter.before_flush = lambda: None
        path = disk.path / SEEN_KEYS_FILENAME
        written = 0
        for n in range(4000):  # 100 batches of 40 keys: 32 KiB
            dupefilter.request_seen(Request(f"http://example.com/{n}"))
            if n % 40 == 39:
                dupefilter.flush()
                written = n + 1
                if n == 1999:
                    disk.fill()
                    disk.free()
                    # Leave room for part of a batch only.
                    with disk.filler.open("wb") as filler:
                        filler.write(b"\0" * (256 * 1024 - path.stat().st_size - 4096 - 100))
                    disk.fill()
        assert len(errors) == 1
        assert isinstance(errors[0], SeenKeysFileError)
        assert str(path) in str(errors[0])
        assert "the disk is full" in str(errors[0])
        assert isinstance(errors[0].__cause__, OSError)
        assert errors[0].__cause__.errno == errno.ENOSPC
        assert "ERROR" not in caplog.text  # on_error logs it
        assert dupefilter.failure is errors[0]
        on_disk = keys_in(path, dupefilter)
        assert 2000 <= on_disk < written
        disk.free()
        dupefilter.request_seen(Request("http://example.com/after"))
        dupefilter.close("jobdir_error")  # writes nothing more, raises nothing
        assert len(errors) == 1
        assert keys_in(path, dupefilter) == on_disk
        with caplog.at_level(logging.WARNING):
            resumed = AimdDupeFilter(str(disk.path))
        assert len(resumed) == on_disk


def test_the_flush_timer_survives_a_full_disk(tmp_path: Path) -> None:
    with small_disk(tmp_path, 64) as disk:
        timers: list[object] = []

        class Timer:
            def __init__(self, delay: float, function: object) -> None:
                timers.append(function)

            def cancel(self) -> None:
                pass

        errors: list[BaseException] = []
        dupefilter = AimdDupeFilter(str(disk.path), call_later=Timer)
        dupefilter.on_error = errors.append
        dupefilter.before_flush = lambda: None
        disk.fill()  # the file's last page has room still: a batch of 8 KiB has not
        for n in range(1000):
            dupefilter.request_seen(Request(f"http://example.com/{n}"))
        (fire,) = timers
        assert callable(fire)
        fire()  # raised OSError into the reactor before
        assert len(errors) == 1
        assert "the disk is full" in str(errors[0])


# -- a real crawl that fills the disk, then resumes with space -------------------------


def test_a_crawl_that_fills_the_disk_stops_and_resumes_with_every_page(tmp_path: Path) -> None:
    """The crawl stops with an ERROR that says the disk is full. Space comes back
    while it closes (another process freed some, or SQLite reuses the space of
    the frames it rolled back): before, the deletes of its finished requests then
    became durable one by one while their children's inserts had been rolled
    back, and the resumed crawl never fetched those children. Twice over, then
    a resume with space: every page must have been fetched."""
    # Answers take 0.2 s: the crawl closes that long after the error, with
    # requests in flight that finish meanwhile.
    specs = [HostSpec(name=f"site{i}", pages=200, latency=0.2, seed=i) for i in range(4)]
    with small_disk(tmp_path, 4096) as disk, start_farm(specs, max_seconds=300) as farm:
        job = Job(farm, tmp_path, {"JOBDIR": str(disk.path / "job")})
        for _ in range(2):
            run = job.start()
            job.wait_for_requests(run, 120)
            disk.fill()
            wait_for_an_error(run.out / "crawl.log", run.process)
            disk.free()  # while the crawl closes: nothing more may be committed
            assert job.wait(run, read_frontier=False) == 0, run.log()[-3000:]
            assert "disk is full" in first_error(run.log())
            assert run.stats()["finish_reason"] == "jobdir_error"
        disk.resize(64 * 1024)
        last = job.finish()
        records = farm.read_log()
    for name, summary in summarize(records, specs).items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)
    assert last.stats()["aimd/jobdir/restored"] > 0


def test_a_crawl_whose_seen_keys_fill_their_disk_resumes_with_every_page(
    tmp_path: Path,
) -> None:
    """The seen-keys file lives on a disk of its own (a symlink from the JOBDIR)
    that fills during the crawl, then gets space back while the crawl closes.
    Before, the batch cut short stayed in the file and was written again whole
    after it at close, and the resume failed with "checksum mismatch"."""
    specs = [HostSpec(name=f"site{i}", pages=300, latency=0.2, seed=i) for i in range(4)]
    with small_disk(tmp_path, 64, "keys") as keys, start_farm(specs, max_seconds=300) as farm:
        job = Job(farm, tmp_path, {})
        run = start_with_keys_on(keys, job)
        job.wait_for_requests(run, 100)
        keys.fill()  # what is left of the file's last page still takes a batch or two
        wait_for_an_error(run.out / "crawl.log", run.process)
        keys.free()  # while the crawl closes: nothing more may be written
        assert job.wait(run, read_frontier=False) == 0, run.log()[-3000:]
        assert "disk is full" in first_error(run.log())
        assert "Traceback" not in run.log(), run.log()[-3000:]  # stopped cleanly
        last = job.finish()
        records = farm.read_log()
    for name, summary in summarize(records, specs).items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)
    assert last.stats()["aimd/dupefilter/loaded"] > 0


def test_with_scrapys_scheduler_a_full_disk_for_the_keys_stops_the_crawl(tmp_path: Path) -> None:
    """Nothing sets ``on_error`` there: the dupefilter stops the crawl itself."""
    specs = [HostSpec(name=f"site{i}", pages=300, latency=0.2, seed=i) for i in range(4)]
    settings = {"ADDONS": {}, "DUPEFILTER_CLASS": "scrapy_aimd.dupefilter.AimdDupeFilter"}
    with small_disk(tmp_path, 64, "keys") as keys, start_farm(specs, max_seconds=300) as farm:
        job = Job(farm, tmp_path, settings)
        run = start_with_keys_on(keys, job)
        job.wait_for_requests(run, 100)
        keys.fill()
        assert job.wait(run, read_frontier=False) == 0, run.log()[-3000:]
    assert "disk is full" in first_error(run.log())
    assert run.stats()["finish_reason"] == "jobdir_error"


def start_with_keys_on(keys: SmallDisk, job: Job) -> Run:
    """Start a crawl whose seen-keys file is on ``keys`` (a symlink from the JOBDIR)."""
    job.jobdir.mkdir()
    (job.jobdir / SEEN_KEYS_FILENAME).symlink_to(keys.path / SEEN_KEYS_FILENAME)
    return job.start()


def first_error(log: str) -> str:
    """The first ERROR line of a crawl log."""
    errors = [line for line in log.splitlines() if "ERROR" in line]
    assert errors, log[-3000:]
    return errors[0]


def wait_for_an_error(log: Path, process: subprocess.Popen[bytes]) -> None:
    """Until the crawl logs an ERROR (or ends), looking every 5 ms."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if log.exists() and "ERROR" in log.read_text():
            return
        time.sleep(0.005)


def test_fail_after_close_is_harmless(tmp_path: Path) -> None:
    store = open_store(tmp_path / "frontier.sqlite")
    store.close()
    store.fail("late")
    assert store.failed


def test_an_unreadable_frontier_names_its_path(tmp_path: Path) -> None:
    path = tmp_path / "frontier.sqlite"
    path.mkdir()  # reading it is an OSError (IsADirectoryError)
    (path / "x").write_bytes(b"x")
    with pytest.raises(StoreError, match="cannot be read") as error:
        open_store(path)
    assert str(path) in str(error.value)


#: Links on /p/0 of the fan-out site: more than a checkpoint's writes (2000).
FAN = 2500


class FanOutSpider(scrapy.Spider):
    """``/`` links to ``/p/0``, which alone links to ``/p/1`` .. ``/p/{FAN}``.

    With the setting ``FAULTS_FILL_DIR``, the callback of ``/p/0`` fills that
    disk before it yields its links and frees it after: the commit that comes
    in the middle of them (every 2000 writes) fails, while ``/p/0`` is not done.
    """

    name = "fanout"

    def __init__(self, start_urls: list[str], follow: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = start_urls

    def parse(self, response: scrapy.http.Response) -> Any:
        yield response.follow("/p/0", self.parse_fan)

    def parse_fan(self, response: scrapy.http.Response) -> Any:
        fill = self.settings.get("FAULTS_FILL_DIR")
        disk = SmallDisk(Path(fill)) if fill else None
        if disk is not None:
            disk.fill()
        for number in range(1, FAN + 1):
            yield response.follow(f"/p/{number}", self.parse_leaf)
        if disk is not None:
            disk.free()  # before the crawl closes and forgets the requests it finished

    def parse_leaf(self, response: scrapy.http.Response) -> Any:
        yield {"url": response.url}


def test_a_page_whose_links_fill_the_disk_is_fetched_again_with_them(tmp_path: Path) -> None:
    """The commit in the middle of /p/0's links fails on a full disk, and SQLite
    rolls them back. Before, the store went on in autocommit once the space was
    back: /p/0's delete, when the crawl closed, was durable, its key was on disk,
    and the resumed crawl filtered /p/0 and never fetched one of its links."""
    # /p/0 answers after 1 s: its key is on disk by then (written within 0.25 s).
    specs = [HostSpec(name="fan", pages=FAN + 1, hang_paths=["/p/0"], hang_seconds=1.0)]
    with small_disk(tmp_path, 4096) as disk, start_farm(specs, max_seconds=300) as farm:
        settings = {
            **AIMD,
            "JOBDIR": str(disk.path / "job"),
            "AIMD_MAX_CONCURRENCY": 16,
            "CONCURRENT_REQUESTS": 16,
        }
        starts = [farm.url("fan", "/")]
        spider = f"{__name__}.FanOutSpider"
        first = run_crawl(
            starts,
            tmp_path / "run0",
            {**settings, "FAULTS_FILL_DIR": str(disk.path)},
            spider=spider,
        )
        assert "disk is full" in first_error(first.log)
        assert first.stats["finish_reason"] == "jobdir_error"
        disk.resize(64 * 1024)
        last = run_crawl(starts, tmp_path / "run1", settings, spider=spider)
        records = farm.read_log()
    assert last.stats["finish_reason"] == "finished"
    served = {r["path"] for r in records if r["status"] == 200}
    missing = [n for n in range(FAN + 1) if f"/p/{n}" not in served]
    assert not missing, f"{len(missing)} pages never fetched, from /p/{missing[0]}"
