"""The JOBDIR protocol piece by piece: the request codec, the checks on a
JOBDIR's files, the dupefilter's hook, and when a request's row may go."""

from __future__ import annotations

import asyncio
import errno
import logging
import pickle
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from scrapy_aimd.core.controller import ControllerConfig, HostController, shift_state
from scrapy_aimd.core.frontier import Frontier
from scrapy_aimd.dupefilter import BATCH_KEYS, AimdDupeFilter
from scrapy_aimd.inflight import InFlight
from scrapy_aimd.jobdir import (
    FRONTIER_FILENAME,
    UNWRITTEN_KEYS,
    Jobdir,
    JobdirError,
    check_jobdir,
)
from scrapy_aimd.request_codec import RequestCodec
from scrapy_aimd.robots_middleware import ROBOTS_META
from scrapy_aimd.scheduler import AimdScheduler
from scrapy_aimd.settings import AimdSettingsError
from scrapy_aimd.shutdown import read_grace
from scrapy_aimd.sqlite_store import SqliteQueueStore, StoreError


class PagesSpider(Spider):
    name = "pages"

    def parse_page(self, response: Any) -> None:
        pass

    def on_error(self, failure: Any) -> None:
        pass


def make_spider() -> PagesSpider:
    crawler = get_crawler(PagesSpider)
    return PagesSpider.from_crawler(crawler)


# -- the codec --------------------------------------------------------------------


def test_a_request_survives_the_codec() -> None:
    spider = make_spider()
    codec = RequestCodec(spider)
    request = Request(
        "http://example.com/p/1?x=1",
        callback=spider.parse_page,
        errback=spider.on_error,
        priority=-3,
        headers={"X-Test": "1"},
        meta={"depth": 4, "aimd_throttle_retries": 1},
        cb_kwargs={"page": 1},
        dont_filter=True,
    )
    data = codec.encode(request)
    assert data is not None
    again = codec.decode(data)
    assert again.to_dict(spider=spider) == request.to_dict(spider=spider)
    assert again.callback == spider.parse_page


def test_defaults_are_left_out() -> None:
    spider = make_spider()
    codec = RequestCodec(spider)
    request = Request("http://example.com/p/1", callback=spider.parse_page)
    data = codec.encode(request)
    assert data is not None
    assert pickle.loads(data) == {"url": "http://example.com/p/1", "callback": "parse_page"}
    assert len(data) < len(pickle.dumps(request.to_dict(spider=spider), protocol=5)) / 2


class Elsewhere:
    def parse_page(self, response: Any) -> None:
        pass


def test_only_the_spiders_methods_are_stored() -> None:
    spider = make_spider()
    codec = RequestCodec(spider)
    assert codec.encode(Request("http://example.com/", callback=Elsewhere().parse_page)) is None
    assert codec.encode(Request("http://example.com/", errback=print)) is None
    # As to_dict has it: a method of the spider's class, by name.
    data = codec.encode(Request("http://example.com/", callback=make_spider().parse_page))
    assert data is not None and codec.decode(data).callback == spider.parse_page
    data = codec.encode(Request("http://example.com/", callback=spider.parse))
    assert data is not None and codec.decode(data).callback == spider.parse


def test_a_request_that_cannot_be_stored_is_logged_once_per_callback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    codec = RequestCodec(make_spider())
    caplog.set_level(logging.DEBUG, logger="scrapy_aimd.jobdir")
    assert codec.encode(Request("http://example.com/1", callback=lambda r: None)) is None
    assert codec.encode(Request("http://example.com/2", callback=lambda r: None)) is None
    robots = Request("http://example.com/robots.txt", meta={ROBOTS_META: "http://example.com"})
    robots.callback = print  # not a spider method
    assert codec.encode(robots) is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "a crash loses it" in warnings[0].getMessage()


# -- the files of a JOBDIR ---------------------------------------------------------


def test_a_jobdir_of_scrapys_own_scheduler_is_refused(tmp_path: Path) -> None:
    frontier = tmp_path / FRONTIER_FILENAME
    (tmp_path / "requests.seen").write_text("0123abcd\n")
    with pytest.raises(JobdirError, match=str(tmp_path / "requests.seen")):
        check_jobdir(tmp_path, frontier, AimdDupeFilter())
    frontier.write_bytes(b"...")  # RFPDupeFilter beside our frontier: fine
    check_jobdir(tmp_path, frontier, AimdDupeFilter())
    (tmp_path / "requests.queue").mkdir()
    with pytest.raises(JobdirError, match=str(tmp_path / "requests.queue")):
        check_jobdir(tmp_path, frontier, AimdDupeFilter())


def test_seen_keys_without_their_frontier_are_refused(tmp_path: Path) -> None:
    first = AimdDupeFilter(str(tmp_path))
    first.request_seen(Request("http://example.com/1"))
    first.close("shutdown")
    resumed = AimdDupeFilter(str(tmp_path))
    frontier = tmp_path / FRONTIER_FILENAME
    with pytest.raises(JobdirError) as error:
        check_jobdir(tmp_path, frontier, resumed)
    assert str(resumed.path) in str(error.value) and str(frontier) in str(error.value)
    check_jobdir(tmp_path, frontier, AimdDupeFilter())  # a new JOBDIR is fine


# -- the dupefilter's hook ------------------------------------------------------------


class FakeTimer:
    def __call__(self, delay: float, function: Any) -> FakeTimer:
        return self

    def cancel(self) -> None:
        pass


def test_keys_are_written_after_the_hook_and_a_full_batch_before_the_next_key(
    tmp_path: Path,
) -> None:
    dupefilter = AimdDupeFilter(str(tmp_path), call_later=FakeTimer())
    assert dupefilter.path is not None
    sizes: list[int] = []
    dupefilter.before_flush = lambda: sizes.append(dupefilter.path.stat().st_size)  # type: ignore[union-attr]
    header = dupefilter.path.stat().st_size
    for n in range(BATCH_KEYS):
        dupefilter.request_seen(Request(f"http://example.com/{n}"))
    assert sizes == [] and dupefilter.path.stat().st_size == header  # full, not written yet
    dupefilter.request_seen(Request("http://example.com/next"))
    assert sizes == [header]  # the hook came first
    assert len(AimdDupeFilter(str(tmp_path))) == BATCH_KEYS  # without the new key
    dupefilter.close("finished")
    assert sizes == [header, header + 8 * BATCH_KEYS + 8]
    assert len(AimdDupeFilter(str(tmp_path))) == BATCH_KEYS + 1


# -- AIMD_SHUTDOWN_GRACE -----------------------------------------------------------------


def test_shutdown_grace_is_read_and_checked() -> None:
    assert read_grace({}) is None
    assert read_grace({"AIMD_SHUTDOWN_GRACE": "2.5"}) == 2.5
    assert read_grace({"AIMD_SHUTDOWN_GRACE": 0}) == 0.0
    for bad in (-1, "soon", float("inf"), True):
        with pytest.raises(AimdSettingsError, match="AIMD_SHUTDOWN_GRACE"):
            read_grace({"AIMD_SHUTDOWN_GRACE": bad})


# -- when a row goes ---------------------------------------------------------------------


class FakeEngine:
    """What the scheduler reads of the engine: the requests in progress."""

    def __init__(self) -> None:
        self._slot = SimpleNamespace(
            inprogress=set(), closing=None, nextcall=SimpleNamespace(schedule=lambda: None)
        )
        self.downloader = SimpleNamespace(middleware=SimpleNamespace(middlewares=[]))
        self.spider: Spider | None = None
        self.closed: list[str] = []

    async def close_spider_async(self, *, reason: str) -> None:
        self.closed.append(reason)

    @property
    def inprogress(self) -> set[Request]:
        result: set[Request] = self._slot.inprogress
        return result


def open_scheduler(tmp_path: Path) -> tuple[AimdScheduler, FakeEngine, PagesSpider]:
    """A scheduler with a JOBDIR over a fake engine (call it in a running asyncio
    loop: the scheduler's timers need one)."""
    crawler = get_crawler(
        PagesSpider,
        {"ADDONS": {"scrapy_aimd.Addon": 500}, "JOBDIR": str(tmp_path / "job")},
    )
    spider = PagesSpider.from_crawler(crawler)
    crawler.spider = spider
    engine = FakeEngine()
    engine.spider = spider
    crawler.engine = engine  # type: ignore[assignment]
    scheduler = AimdScheduler.from_crawler(crawler)
    scheduler.open(spider)
    return scheduler, engine, spider


def stored_urls(scheduler: AimdScheduler) -> set[str]:
    """URLs with a row, as the scheduler's own connection sees them."""
    assert isinstance(scheduler.store.keeper, Jobdir)
    conn = scheduler.store.keeper.store._conn
    rows = conn.execute("SELECT item FROM queue UNION ALL SELECT item FROM kept").fetchall()
    return {pickle.loads(row[0])["url"] for row in rows}


def test_a_row_goes_only_once_the_engine_is_done_with_its_request(tmp_path: Path) -> None:
    asyncio.run(a_row_goes_only_once_the_engine_is_done_with_its_request(tmp_path))


async def a_row_goes_only_once_the_engine_is_done_with_its_request(tmp_path: Path) -> None:
    scheduler, engine, spider = open_scheduler(tmp_path)
    jobdir = scheduler.store.keeper
    assert isinstance(jobdir, Jobdir)
    parent = Request("http://example.com/", callback=spider.parse_page)
    assert scheduler.enqueue_request(parent)
    handed = scheduler.next_request()
    assert handed is not None and handed.url == parent.url
    engine.inprogress.add(handed)  # as the engine does in the same call
    jobdir.checkpoint()
    assert stored_urls(scheduler) == {parent.url}, "handed out: its row stays"
    child = Request("http://example.com/child", callback=spider.parse_page)
    assert scheduler.enqueue_request(child)  # the callback's output
    jobdir.checkpoint()
    assert stored_urls(scheduler) == {parent.url, child.url}, "the callback may yield more"
    engine.inprogress.discard(handed)  # the engine is done with it
    scheduler.next_request()  # commits first what the engine has finished
    assert jobdir.store.pending_writes == 0
    assert stored_urls(scheduler) == {child.url}
    scheduler.close("finished")


def test_seen_keys_are_written_only_when_every_row_is_committed(tmp_path: Path) -> None:
    asyncio.run(seen_keys_are_written_only_when_every_row_is_committed(tmp_path))


async def seen_keys_are_written_only_when_every_row_is_committed(tmp_path: Path) -> None:
    scheduler, engine, spider = open_scheduler(tmp_path)
    jobdir = scheduler.store.keeper
    dupefilter = scheduler.df
    assert isinstance(jobdir, Jobdir) and isinstance(dupefilter, AimdDupeFilter)
    assert dupefilter._file is not None
    real_write = dupefilter._file.write
    writes: list[int] = []

    def write(data: bytes) -> int:
        assert jobdir.store.pending_writes == 0, "keys written before their rows"
        writes.append(len(data))
        return real_write(data)

    dupefilter._file.write = write  # type: ignore[method-assign]
    for n in range(BATCH_KEYS + 10):
        url = f"http://h{n % 50}.example/{n}"
        scheduler.enqueue_request(Request(url, callback=spider.parse_page))
        if n % 1000 == 0:
            request = scheduler.next_request()
            assert request is not None
            engine.inprogress.add(request)
    jobdir.checkpoint()
    scheduler.close("shutdown")
    assert len(writes) >= 2
    store = SqliteQueueStore(
        tmp_path / "job" / FRONTIER_FILENAME, encode=lambda r: None, decode=pickle.loads
    )
    assert store.restored == BATCH_KEYS + 10  # those in progress too
    store.close()


def test_a_request_committed_before_its_key_was_written_is_seen_after_a_crash(
    tmp_path: Path,
) -> None:
    asyncio.run(a_request_committed_before_its_key_was_written_is_seen_after_a_crash(tmp_path))


async def a_request_committed_before_its_key_was_written_is_seen_after_a_crash(
    tmp_path: Path,
) -> None:
    """A checkpoint commits the frontier, then writes the seen keys: a crawl
    killed between the two leaves a request queued whose key is in no file. The
    resumed crawl must still know it as seen, or a link to it found again
    queues it a second time (fetched twice, though it was never in flight)."""
    scheduler, _, spider = open_scheduler(tmp_path / "first")
    jobdir = scheduler.store.keeper
    assert isinstance(jobdir, Jobdir)
    urls = [f"http://example.com/{n}" for n in range(3)]
    for url in urls[:2]:
        assert scheduler.enqueue_request(Request(url, callback=spider.parse_page))
    jobdir.checkpoint()  # keys and rows both written
    assert scheduler.enqueue_request(Request(urls[2], callback=spider.parse_page))
    jobdir.commit()  # the first half of a checkpoint; the crawl dies here
    shutil.copytree(tmp_path / "first" / "job", tmp_path / "crash" / "job")
    scheduler.close("shutdown")
    resumed, _, spider = open_scheduler(tmp_path / "crash")
    assert isinstance(resumed.store.keeper, Jobdir) and resumed.store.keeper.store.restored == 3
    for url in urls:
        assert not resumed.enqueue_request(Request(url, callback=spider.parse_page)), url
    assert resumed.stats.get_value("aimd/jobdir/seen_restored") == 1
    resumed.close("shutdown")
    again, _, _ = open_scheduler(tmp_path / "crash")  # the restored key is written now
    assert len(again.df) == 3  # type: ignore[arg-type]
    again.close("shutdown")


def test_keys_whose_write_failed_stay_stored_for_the_resume(tmp_path: Path) -> None:
    asyncio.run(keys_whose_write_failed_stay_stored_for_the_resume(tmp_path))


async def keys_whose_write_failed_stay_stored_for_the_resume(tmp_path: Path) -> None:
    """The keys file fails (a full disk) after their requests were committed: the
    crawl stops, and the keys stored with the commit stay for the resume, which
    must not queue the requests a second time when links to them turn up."""
    scheduler, engine, spider = open_scheduler(tmp_path)
    jobdir, dupefilter = scheduler.store.keeper, scheduler.df
    assert isinstance(jobdir, Jobdir) and isinstance(dupefilter, AimdDupeFilter)
    assert dupefilter._file is not None
    urls = [f"http://example.com/{n}" for n in range(3)]
    for url in urls:
        assert scheduler.enqueue_request(Request(url, callback=spider.parse_page))
    jobdir.commit()

    def full(data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    dupefilter._file.write = full  # type: ignore[method-assign]
    dupefilter.flush()
    await asyncio.sleep(0)
    assert engine.closed == ["jobdir_error"]
    scheduler.close("jobdir_error")
    resumed, _, spider = open_scheduler(tmp_path)
    for url in urls:
        assert not resumed.enqueue_request(Request(url, callback=spider.parse_page)), url
    assert resumed.stats.get_value("aimd/jobdir/seen_restored") == 3
    resumed.close("shutdown")


def test_corrupt_unwritten_keys_are_named_at_the_start(tmp_path: Path) -> None:
    first = open_jobdir(tmp_path, SAVED_AT, {})
    first.store.save_state(UNWRITTEN_KEYS, {"keys": "0123"})  # two bytes: no key
    first.close()
    with pytest.raises(StoreError, match=f"{FRONTIER_FILENAME}.*{UNWRITTEN_KEYS}"):
        open_jobdir(tmp_path, RESUMED_AT, {})


def test_a_failing_jobdir_stops_the_crawl(tmp_path: Path) -> None:
    asyncio.run(a_failing_jobdir_stops_the_crawl(tmp_path))


async def a_failing_jobdir_stops_the_crawl(tmp_path: Path) -> None:
    scheduler, engine, spider = open_scheduler(tmp_path)
    assert isinstance(scheduler.store.keeper, Jobdir)
    scheduler.enqueue_request(Request("http://example.com/", callback=spider.parse_page))
    scheduler.store.keeper.store._conn.close()  # as a disk that fails
    assert scheduler.next_request() is None
    assert scheduler.enqueue_request(Request("http://example.com/2", callback=spider.parse_page))
    await asyncio.sleep(0)
    assert engine.closed == ["jobdir_error"]
    assert scheduler.stats.get_value("aimd/jobdir/errors") == 1


# -- the hosts' state across clocks ------------------------------------------------------

#: The host's controller settings in both runs.
HOST_CFG = ControllerConfig(max_concurrency=4, min_delay=0.5)
#: The crawl's clock when the first run saves, and when the resumed run loads: the
#: monotonic clock restarted (a reboot).
SAVED_AT, RESUMED_AT = 5000.0, 10.0
#: Memory fields that are times on the controller's clock.
TIMES = ("last_start", "previous_start", "paused_until", "level_since", "probe_at", "hold_until")


def open_jobdir(path: Path, now: float, hosts: dict[str, HostController]) -> Jobdir:
    """A Jobdir on a clock stopped at ``now``, whose frontier's hosts are ``hosts``
    (a host not there is restored from the JOBDIR)."""
    crawler = get_crawler(PagesSpider)
    crawler.engine = FakeEngine()  # type: ignore[assignment]
    spider = PagesSpider.from_crawler(crawler)
    dupefilter = AimdDupeFilter(str(path), call_later=FakeTimer())
    jobdir = Jobdir(path, crawler, spider, dupefilter, InFlight(), clock=lambda: now)

    def make(host: str) -> HostController:
        return hosts.get(host) or jobdir.controller(host, HOST_CFG) or HostController(HOST_CFG)

    jobdir.frontier = Frontier(make, jobdir.store)
    return jobdir


def pushed_back(now: float) -> HostController:
    """A host that answered 429 without Retry-After at ``now`` (no pause: a wider
    gap) after a few good pages, then one more good page."""
    host = HostController(HOST_CFG)
    t = now - 20.0
    for _ in range(8):
        t = max(t, host.ready_at(t))
        host.finish(host.start(t), t + 0.1, status=200, latency=0.1)
        t += 0.1
    host.finish(host.start(max(t, host.ready_at(t))), now, status=429)
    start = host.ready_at(now)
    host.finish(host.start(start), start + 0.1, status=200, latency=0.1)
    assert host.state()["paused_until"] is None
    return host


def paused(now: float) -> HostController:
    """A host that asked for a 60 s pause at ``now``."""
    host = HostController(HOST_CFG)
    host.finish(host.start(now - 1.0), now, status=429, retry_after=60.0)
    assert host.state()["paused_until"] == now + 60.0
    return host


def save_and_resume(tmp_path: Path, hosts: dict[str, HostController]) -> Jobdir:
    """Save ``hosts`` at SAVED_AT, reopen the JOBDIR at RESUMED_AT."""
    first = open_jobdir(tmp_path, SAVED_AT, hosts)
    for host in hosts:
        first.frontier.controller(host)  # type: ignore[union-attr]
        first.host_changed(host)
    first.close()
    return open_jobdir(tmp_path, RESUMED_AT, {})


def assert_moved(restored: HostController, original: HostController, offset: float) -> None:
    """``restored`` is ``original`` with every time ``offset`` seconds later, give or
    take the real time that went by between the save and the load (a moment)."""
    expected = HostController.from_state(HOST_CFG, shift_state(original.state(), offset))
    assert (restored.delay, restored.concurrency) == (expected.delay, expected.concurrency)
    assert restored.paused_until == pytest.approx(expected.paused_until, abs=1.0)
    for ahead in (0.0, 0.3, 5.0, 100.0):
        now = RESUMED_AT + ahead
        assert restored.ready_at(now) == pytest.approx(expected.ready_at(now), abs=1.0), ahead
    got, want = restored.state(), expected.state()
    for key in TIMES:
        if want[key] is None:
            assert got[key] is None, key
        else:
            assert got[key] == pytest.approx(want[key], abs=1.0), key
    for key in ("run_start", "refused_since"):
        if want["rate"][key] is None:
            assert got["rate"][key] is None, key
        else:
            assert got["rate"][key] == pytest.approx(want["rate"][key], abs=1.0), key


@pytest.mark.parametrize("make", [pushed_back, paused], ids=["pushed-back", "paused"])
def test_a_hosts_times_come_back_on_the_resumed_crawls_clock(
    tmp_path: Path, make: Callable[[float], HostController]
) -> None:
    """After a reboot the crawl's clock starts again near zero: every time of a
    saved host (its round, its starts, its pace samples, its pause) moves to the
    new clock, so the host is ready when it was due, not in hours or at once."""
    original = make(SAVED_AT)
    resumed = save_and_resume(tmp_path, {"h": original})
    restored = resumed.frontier.controller("h")  # type: ignore[union-attr]
    assert resumed.stats.get_value("aimd/jobdir/hosts_restored") == 1
    assert_moved(restored, original, RESUMED_AT - SAVED_AT)
    due = original.ready_at(SAVED_AT) - SAVED_AT
    assert RESUMED_AT + due - 1.0 <= restored.ready_at(RESUMED_AT) <= RESUMED_AT + due + 0.01
    resumed.close()


def test_a_state_saved_by_the_previous_format_still_loads(tmp_path: Path) -> None:
    """The previous format saved ``paused_until`` alone as POSIX time, the rest on
    the saving run's clock, and its states were of version 3 at most: they load by
    their limits, with the pause on the new clock."""
    first = open_jobdir(tmp_path, SAVED_AT, {})
    wall = time.time() - SAVED_AT
    for name, host in (("paused", paused(SAVED_AT)), ("pushed", pushed_back(SAVED_AT))):
        state = {**host.state(), "version": 3}
        if state["paused_until"] is not None:
            state["paused_until"] += wall
        first.store.save_state(f"host:{name}", {"controller": state, "saved": time.time()})
    first.close()
    resumed = open_jobdir(tmp_path, RESUMED_AT, {})
    restored = resumed.frontier.controller("paused")  # type: ignore[union-attr]
    original = paused(SAVED_AT)
    assert restored.paused_until == pytest.approx(
        original.paused_until + RESUMED_AT - SAVED_AT, abs=1.0
    )
    assert (restored.delay, restored.concurrency) == (original.delay, original.concurrency)
    unmoved = resumed.frontier.controller("pushed")  # type: ignore[union-attr]
    original = pushed_back(SAVED_AT)
    assert (unmoved.delay, unmoved.concurrency) == (original.delay, original.concurrency)
    assert resumed.stats.get_value("aimd/jobdir/hosts_restored") == 2
    resumed.close()
