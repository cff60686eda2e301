"""AimdDupeFilter: filtering, the redirect case, and keys persisted in JOBDIR."""

from __future__ import annotations

import errno
import logging
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy import Request, Spider
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from scrapy_aimd.core.canonical import Canonicalizer
from scrapy_aimd.dupefilter import (
    BATCH_KEYS,
    FLUSH_DELAY,
    SEEN_KEYS_FILENAME,
    AimdDupeFilter,
    SeenKeysFileError,
)
from scrapy_aimd.fingerprint import AimdRequestFingerprinter

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from scrapy.crawler import Crawler

SETTINGS = {
    "DUPEFILTER_CLASS": "scrapy_aimd.dupefilter.AimdDupeFilter",
    "REQUEST_FINGERPRINTER_CLASS": "scrapy_aimd.fingerprint.AimdRequestFingerprinter",
}


class FakeTimer:
    """Stands in for scrapy.utils.asyncio.call_later: runs only when told."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, Callable[[], None]]] = []
        self.cancelled = 0

    def __call__(self, delay: float, function: Callable[[], None]) -> FakeTimer:
        self.calls.append((delay, function))
        return self

    def cancel(self) -> None:
        self.cancelled += 1

    def fire(self) -> None:
        _, function = self.calls.pop()
        function()


def crawler_with(**settings: object) -> Crawler:
    return get_crawler(settings_dict={**SETTINGS, **settings})


def redirected(url: str, *sources: str) -> Request:
    return Request(url, meta={"redirect_urls": list(sources)})


def test_filters_canonical_duplicates() -> None:
    dupefilter = AimdDupeFilter()
    assert not dupefilter.request_seen(Request("http://example.com/a"))
    assert dupefilter.request_seen(Request("http://EXAMPLE.com:80/a/?utm_source=x#f"))
    assert not dupefilter.request_seen(Request("http://example.com/a", method="POST"))
    assert not dupefilter.request_seen(
        Request("http://example.com/a?utm_source=x", meta={"verbatim_url": True})
    )
    assert len(dupefilter) == 3


def test_from_crawler_and_log_stats(caplog: pytest.LogCaptureFixture) -> None:
    crawler = crawler_with()
    spider = Spider.from_crawler(crawler, name="s")
    dupefilter = build_from_crawler(AimdDupeFilter, crawler)
    assert dupefilter.fingerprinter is crawler.request_fingerprinter
    dupefilter.open()
    dupefilter.request_seen(Request("http://example.com/a"))
    with caplog.at_level(logging.DEBUG):
        for _ in range(2):
            request = Request("http://example.com/a/")
            assert dupefilter.request_seen(request)
            dupefilter.log(request, spider)
    assert crawler.stats.get_value("dupefilter/filtered") == 2
    assert sum("Filtered duplicate request" in r.message for r in caplog.records) == 1
    dupefilter.close("finished")
    assert crawler.stats.get_value("aimd/dupefilter/keys") == 1


def test_debug_logs_every_duplicate(caplog: pytest.LogCaptureFixture) -> None:
    crawler = crawler_with(DUPEFILTER_DEBUG=True)
    spider = Spider.from_crawler(crawler, name="s")
    dupefilter = build_from_crawler(AimdDupeFilter, crawler)
    dupefilter.request_seen(Request("http://example.com/a"))
    with caplog.at_level(logging.DEBUG):
        for _ in range(2):
            dupefilter.log(Request("http://example.com/a"), spider)
    assert sum("referer" in r.message for r in caplog.records) == 2


def test_works_with_scrapys_own_fingerprinter() -> None:
    crawler = get_crawler()
    dupefilter = build_from_crawler(AimdDupeFilter, crawler)
    assert not dupefilter.request_seen(Request("http://example.com/a"))
    assert dupefilter.request_seen(Request("http://example.com/a#f"))
    assert not dupefilter.request_seen(Request("http://example.com:80/a"))  # w3lib's rules
    assert dupefilter.rules_id == "fingerprinter:scrapy.utils.request.RequestFingerprinter"


# --- The redirect case (scrapy #1225) ----------------------------------------


def test_redirect_to_a_url_of_the_same_key_is_not_filtered() -> None:
    crawler = crawler_with()
    dupefilter = build_from_crawler(AimdDupeFilter, crawler)
    assert not dupefilter.request_seen(Request("http://example.com/a/"))
    # without the redirect, "/a" is the same page as "/a/"
    assert dupefilter.request_seen(Request("http://example.com/a"))
    # but the server answered "/a/" with a redirect to "/a": the page is there
    assert not dupefilter.request_seen(redirected("http://example.com/a", "http://example.com/a/"))
    assert crawler.stats.get_value("aimd/dupefilter/redirect_same_key") == 1


def test_redirect_chain_back_to_the_first_key_is_not_filtered() -> None:
    dupefilter = AimdDupeFilter()
    dupefilter.request_seen(Request("http://example.com/a?utm_source=x"))
    dupefilter.request_seen(
        redirected("http://example.com/login", "http://example.com/a?utm_source=x")
    )
    target = redirected(
        "http://example.com/a", "http://example.com/a?utm_source=x", "http://example.com/login"
    )
    assert not dupefilter.request_seen(target)


def test_redirect_loop_is_still_filtered() -> None:
    dupefilter = AimdDupeFilter()
    dupefilter.request_seen(Request("http://example.com/a/"))
    assert not dupefilter.request_seen(redirected("http://example.com/a", "http://example.com/a/"))
    back = redirected("http://example.com/a/", "http://example.com/a/", "http://example.com/a")
    assert dupefilter.request_seen(back)


def test_redirect_to_another_seen_page_is_filtered() -> None:
    dupefilter = AimdDupeFilter()
    dupefilter.request_seen(Request("http://example.com/b"))
    dupefilter.request_seen(Request("http://example.com/a"))
    assert dupefilter.request_seen(redirected("http://example.com/b", "http://example.com/a"))


def test_redirect_case_with_scrapys_own_fingerprinter() -> None:
    dupefilter = build_from_crawler(AimdDupeFilter, get_crawler())
    dupefilter.request_seen(Request("http://example.com/a#x"))
    assert not dupefilter.request_seen(
        redirected("http://example.com/a#y", "http://example.com/a#x")
    )


# --- JOBDIR -------------------------------------------------------------------


def seen_file(jobdir: Path) -> Path:
    return jobdir / SEEN_KEYS_FILENAME


def test_keys_persist_and_load(tmp_path: Path) -> None:
    first = AimdDupeFilter(str(tmp_path))
    for n in range(10):
        first.request_seen(Request(f"http://example.com/{n}"))
    first.close("finished")
    second = AimdDupeFilter(str(tmp_path))
    assert len(second) == 10
    assert second.request_seen(Request("http://example.com/3/"))
    assert not second.request_seen(Request("http://example.com/10"))
    second.close("finished")
    assert len(AimdDupeFilter(str(tmp_path))) == 11


def test_keys_are_written_within_the_flush_delay_without_close(tmp_path: Path) -> None:
    timer = FakeTimer()
    dupefilter = AimdDupeFilter(str(tmp_path), call_later=timer)
    header_only = seen_file(tmp_path).stat().st_size
    dupefilter.request_seen(Request("http://example.com/1"))
    dupefilter.request_seen(Request("http://example.com/2"))
    assert len(timer.calls) == 1  # one timer per batch, not per key
    assert timer.calls[0][0] == FLUSH_DELAY
    assert seen_file(tmp_path).stat().st_size == header_only
    timer.fire()
    # no close(): a crawl killed now keeps both keys
    assert len(AimdDupeFilter(str(tmp_path))) == 2
    dupefilter.request_seen(Request("http://example.com/3"))
    assert len(timer.calls) == 1


def test_a_full_batch_is_written_at_once(tmp_path: Path) -> None:
    timer = FakeTimer()
    dupefilter = AimdDupeFilter(str(tmp_path), call_later=timer)
    fingerprinter = AimdRequestFingerprinter()
    for n in range(BATCH_KEYS):
        dupefilter.request_seen(Request(f"http://example.com/{n}"))
    assert timer.cancelled == 1
    reloaded = AimdDupeFilter(str(tmp_path), fingerprinter=fingerprinter)
    assert len(reloaded) == BATCH_KEYS


def test_a_killed_process_keeps_its_keys(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os
        from scrapy import Request
        from scrapy_aimd.dupefilter import AimdDupeFilter
        dupefilter = AimdDupeFilter({str(tmp_path)!r})
        for n in range(100):
            dupefilter.request_seen(Request(f"http://example.com/{{n}}"))
        os._exit(0)  # no close(), no interpreter shutdown
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    assert len(AimdDupeFilter(str(tmp_path))) == 100


def test_other_rules_refuse_the_file(tmp_path: Path) -> None:
    AimdDupeFilter(str(tmp_path)).request_seen(Request("http://example.com/a"))
    keep = AimdRequestFingerprinter(canonicalizer=Canonicalizer(trailing_slash="keep"))
    with pytest.raises(SeenKeysFileError, match="other rules") as error:
        AimdDupeFilter(str(tmp_path), fingerprinter=keep)
    assert str(seen_file(tmp_path)) in str(error.value)


def test_settings_change_between_runs_is_refused(tmp_path: Path) -> None:
    crawler = crawler_with(JOBDIR=str(tmp_path))
    build_from_crawler(AimdDupeFilter, crawler).close("finished")
    changed = crawler_with(JOBDIR=str(tmp_path), AIMD_STRIP_PARAMS=["ref"])
    with pytest.raises(SeenKeysFileError, match="AIMD_STRIP_PARAMS"):
        build_from_crawler(AimdDupeFilter, changed)


def test_not_a_seen_keys_file(tmp_path: Path) -> None:
    seen_file(tmp_path).write_bytes(b"\x00\x01 something else\n")
    with pytest.raises(SeenKeysFileError, match="not a scrapy-aimd seen-keys file") as error:
        AimdDupeFilter(str(tmp_path))
    assert str(seen_file(tmp_path)) in str(error.value)


def test_corrupted_batch_is_refused(tmp_path: Path) -> None:
    dupefilter = AimdDupeFilter(str(tmp_path))
    for n in range(3):
        dupefilter.request_seen(Request(f"http://example.com/{n}"))
    dupefilter.close("finished")
    data = bytearray(seen_file(tmp_path).read_bytes())
    data[-10] ^= 0xFF
    seen_file(tmp_path).write_bytes(bytes(data))
    with pytest.raises(SeenKeysFileError, match="checksum") as error:
        AimdDupeFilter(str(tmp_path))
    assert str(seen_file(tmp_path)) in str(error.value)


def test_bad_batch_size_is_refused(tmp_path: Path) -> None:
    AimdDupeFilter(str(tmp_path)).request_seen(Request("http://example.com/a"))
    with seen_file(tmp_path).open("ab") as file:
        file.write((BATCH_KEYS + 1).to_bytes(4, "little") + b"\x00" * 64)
    with pytest.raises(SeenKeysFileError, match="batch size"):
        AimdDupeFilter(str(tmp_path))


def test_a_batch_cut_short_is_dropped_and_appends_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dupefilter = AimdDupeFilter(str(tmp_path))
    dupefilter.request_seen(Request("http://example.com/1"))
    dupefilter.request_seen(Request("http://example.com/2"))
    dupefilter.close("finished")
    path = seen_file(tmp_path)
    path.write_bytes(path.read_bytes()[:-5])  # the second batch, cut short
    with caplog.at_level(logging.WARNING):
        resumed = AimdDupeFilter(str(tmp_path))
    assert "cut short" in caplog.text
    assert len(resumed) == 1
    assert not resumed.request_seen(Request("http://example.com/3"))
    resumed.close("finished")
    assert len(AimdDupeFilter(str(tmp_path))) == 2


def test_loaded_count_in_stats(tmp_path: Path) -> None:
    AimdDupeFilter(str(tmp_path)).request_seen(Request("http://example.com/a"))
    crawler = crawler_with(JOBDIR=str(tmp_path))
    build_from_crawler(AimdDupeFilter, crawler)
    assert crawler.stats.get_value("aimd/dupefilter/loaded") == 1


def test_lazy_import_from_the_package() -> None:
    import scrapy_aimd

    assert scrapy_aimd.AimdDupeFilter is AimdDupeFilter


def test_a_torn_batch_written_again_after_it_is_read_past(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # What a failed write left before: part of a batch, then the whole batch again.
    dupefilter = AimdDupeFilter(str(tmp_path))
    for n in range(3):
        dupefilter.request_seen(Request(f"http://example.com/{n}"))
    dupefilter.close("finished")
    path = seen_file(tmp_path)
    data = path.read_bytes()
    last = data[-16:]  # a batch of one key: count, key, CRC
    path.write_bytes(data[:-16] + last[:7] + last)
    with caplog.at_level(logging.WARNING):
        resumed = AimdDupeFilter(str(tmp_path))
    assert "written again" in caplog.text
    assert len(resumed) == 3


def test_a_header_cut_short_starts_the_file_again(tmp_path: Path) -> None:
    AimdDupeFilter(str(tmp_path)).close("finished")
    path = seen_file(tmp_path)
    path.write_bytes(path.read_bytes()[:10])  # the disk filled as the file was made
    dupefilter = AimdDupeFilter(str(tmp_path))
    dupefilter.request_seen(Request("http://example.com/a"))
    dupefilter.close("finished")
    assert len(AimdDupeFilter(str(tmp_path))) == 1


def test_keys_are_not_written_when_the_frontier_cannot_commit(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def before_flush() -> None:
        raise RuntimeError("the frontier cannot commit")

    dupefilter = AimdDupeFilter(str(tmp_path))
    size = seen_file(tmp_path).stat().st_size
    dupefilter.before_flush = before_flush
    dupefilter.on_error = errors.append
    dupefilter.request_seen(Request("http://example.com/a"))
    dupefilter.flush()  # raises nothing: reported once
    dupefilter.before_flush = None
    dupefilter.request_seen(Request("http://example.com/b"))
    dupefilter.close("finished")
    assert [str(e) for e in errors] == ["the frontier cannot commit"]
    assert seen_file(tmp_path).stat().st_size == size  # nothing written after
    assert dupefilter.request_seen(Request("http://example.com/a"))  # still filtered


class _FullAfter:
    """A file on a disk with ``room`` bytes left: a write takes what fits, then
    the next one fails with ENOSPC, as write(2) does."""

    def __init__(self, file: Any, room: int) -> None:
        self.file = file
        self.room = room

    def write(self, data: bytes | memoryview) -> int:
        if not self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        written: int = self.file.write(bytes(data[: self.room]))
        self.room -= written
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)


@settings(max_examples=60, deadline=None)
@given(room=st.integers(0, 3000), batches=st.lists(st.integers(1, 60), min_size=1, max_size=8))
def test_a_write_cut_at_any_byte_resumes_with_the_whole_batches(
    tmp_path_factory: pytest.TempPathFactory, room: int, batches: list[int]
) -> None:
    jobdir = tmp_path_factory.mktemp("jobdir")
    dupefilter = AimdDupeFilter(str(jobdir))
    errors: list[BaseException] = []
    dupefilter.on_error = errors.append
    dupefilter.before_flush = lambda: None
    dupefilter._file = _FullAfter(dupefilter._file, room)  # type: ignore[assignment]
    durable = 0
    number = 0
    for size in batches:
        for _ in range(size):
            dupefilter.request_seen(Request(f"http://example.com/{number}"))
            number += 1
        dupefilter.flush()
        if not errors:
            durable += size
    dupefilter._file.room = 10**9  # space freed: still nothing more is written
    dupefilter.close("finished")
    assert len(errors) <= 1
    resumed = AimdDupeFilter(str(jobdir))  # never "checksum mismatch"
    assert len(resumed) == durable


def test_without_on_error_a_failed_write_is_one_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dupefilter = AimdDupeFilter(str(tmp_path))

    def before_flush() -> None:
        raise RuntimeError("the frontier cannot commit")

    dupefilter.before_flush = before_flush
    dupefilter.request_seen(Request("http://example.com/a"))
    with caplog.at_level(logging.ERROR):
        dupefilter.flush()
        dupefilter.flush()
    assert caplog.text.count("Stopping the crawl") == 1
    assert "the frontier did not commit" in caplog.text


#: A JOBDIR dupefilter driven directly, with no reactor installed and no loop
#: running (Scrapy's own ``test_dupefilter_path`` under ``TWISTED_REACTOR_ENABLED=False``).
DRIVEN_WITHOUT_A_LOOP = """
import sys
from scrapy import Request
from scrapy.utils.test import get_crawler
from scrapy_aimd.dupefilter import AimdDupeFilter

crawler = get_crawler(settings_dict={"JOBDIR": sys.argv[1], "TWISTED_REACTOR_ENABLED": False})
df = AimdDupeFilter.from_crawler(crawler)
assert not df.request_seen(Request("http://example.com/a"))
assert df.request_seen(Request("http://example.com/a"))
df.close("finished")
again = AimdDupeFilter.from_crawler(crawler)
assert again.request_seen(Request("http://example.com/a")), "the key was not written"
again.close("finished")
"""


def test_a_jobdir_dupefilter_works_with_no_loop_running(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-c", DRIVEN_WITHOUT_A_LOOP, str(tmp_path)], check=True, timeout=60
    )
