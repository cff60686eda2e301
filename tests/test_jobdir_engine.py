"""What ``scrapy_aimd._compat`` relies on in Scrapy's engine.

If one of these fails after a Scrapy upgrade, the crash-safe JOBDIR may delete
a request's row before the requests that its callback yields are stored, or
``AIMD_SHUTDOWN_GRACE`` no longer cancels downloads. Read ``_compat.py``
before changing anything.
"""

from __future__ import annotations

import inspect

from scrapy.core.downloader import Downloader
from scrapy.core.engine import ExecutionEngine, _Slot
from scrapy.core.scraper import Scraper


def source(function: object) -> str:
    return inspect.getsource(function)  # type: ignore[arg-type]


def test_the_engine_marks_a_request_in_progress_as_it_takes_it() -> None:
    take = source(ExecutionEngine._start_scheduled_request)
    assert take.index("scheduler.next_request()") < take.index("self._download(request)")
    download = source(ExecutionEngine._download)
    assert "@inlineCallbacks" in download
    assert download.index("self._slot.add_request(request)") < download.index("yield")
    assert "self.inprogress.add(request)" in source(_Slot.add_request)


def test_a_request_leaves_progress_after_its_output_is_handled() -> None:
    take = source(ExecutionEngine._start_scheduled_request)
    handled = take.index("d.addBoth(self._handle_downloader_output, request)")
    assert handled < take.index("partial(self._remove_request, request=request)")
    assert "self.inprogress.remove(request)" in source(_Slot.remove_request)
    output = source(ExecutionEngine._handle_downloader_output)
    assert "self.crawl(result)" in output  # a redirect or retry: scheduled first
    assert "yield self.scraper.enqueue_scrape(result, request)" in output
    scrape = source(Scraper._scrape)
    assert scrape.count("await self.handle_spider_output_async(output, request, result)") == 2
    spider_output = source(Scraper._process_spidermw_output_async)
    assert "self.crawler.engine.crawl(request=output)" in spider_output


def test_the_engine_marks_the_slot_closing_before_it_waits() -> None:
    assert "self.closing" in source(_Slot.__init__)
    close = source(_Slot.close)
    assert close.index("self.closing = Deferred()") < close.index("await")
    schedule = source(ExecutionEngine._start_scheduled_requests)
    assert "self._slot.closing is not None" in schedule


def test_every_download_goes_through_the_handlers_method() -> None:
    assert "await self.handlers.download_request_async(request)" in source(Downloader._download)
