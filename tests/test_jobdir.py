"""The JOBDIR protocol piece by piece: the request codec, the checks on a
JOBDIR's files, the dupefilter's hook, and when a request's row may go."""

from __future__ import annotations

import asyncio
import logging
import pickle
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from scrapy import Request, Spider
from scrapy.utils.test import get_crawler

from scrapy_aimd.dupefilter import BATCH_KEYS, AimdDupeFilter
from scrapy_aimd.jobdir import FRONTIER_FILENAME, JobdirError, RequestCodec, check_jobdir
from scrapy_aimd.robots_middleware import ROBOTS_META
from scrapy_aimd.scheduler import AimdScheduler
from scrapy_aimd.settings import AimdSettingsError
from scrapy_aimd.shutdown import read_grace
from scrapy_aimd.sqlite_store import SqliteQueueStore


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
    assert scheduler.jobdir is not None
    conn = scheduler.jobdir.store._conn
    rows = conn.execute("SELECT item FROM queue UNION ALL SELECT item FROM kept").fetchall()
    return {pickle.loads(row[0])["url"] for row in rows}


def test_a_row_goes_only_once_the_engine_is_done_with_its_request(tmp_path: Path) -> None:
    asyncio.run(a_row_goes_only_once_the_engine_is_done_with_its_request(tmp_path))


async def a_row_goes_only_once_the_engine_is_done_with_its_request(tmp_path: Path) -> None:
    scheduler, engine, spider = open_scheduler(tmp_path)
    jobdir = scheduler.jobdir
    assert jobdir is not None
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
    jobdir = scheduler.jobdir
    dupefilter = scheduler.df
    assert jobdir is not None and isinstance(dupefilter, AimdDupeFilter)
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


def test_a_failing_jobdir_stops_the_crawl(tmp_path: Path) -> None:
    asyncio.run(a_failing_jobdir_stops_the_crawl(tmp_path))


async def a_failing_jobdir_stops_the_crawl(tmp_path: Path) -> None:
    scheduler, engine, spider = open_scheduler(tmp_path)
    assert scheduler.jobdir is not None
    scheduler.enqueue_request(Request("http://example.com/", callback=spider.parse_page))
    scheduler.jobdir.store._conn.close()  # as a disk that fails
    assert scheduler.next_request() is None
    assert scheduler.enqueue_request(Request("http://example.com/2", callback=spider.parse_page))
    await asyncio.sleep(0)
    assert engine.closed == ["jobdir_error"]
    assert scheduler.stats.get_value("aimd/jobdir/errors") == 1
