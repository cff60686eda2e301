"""Faults a user meets with Scrapy itself around the add-on (issue 12): real crawls
against local servers that behave this way."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from crawling import AIMD, run_crawl
from local_http import Answer, serve

from scrapy_aimd.dupefilter import SEEN_KEYS_FILENAME
from sitefarm import HostSpec, start_farm

PAGE: Answer = (200, {"Content-Type": "text/html"}, b"<html><body>page</body></html>")


def test_a_request_swapping_middleware_does_not_stall_the_host(tmp_path: Path) -> None:
    specs = [HostSpec(name="site", pages=3, links_per_page=0)]
    settings = {
        **AIMD,
        "DOWNLOADER_MIDDLEWARES": {"components.SwapRequests": 500},
        "DOWNLOAD_TIMEOUT": 5,
        "AIMD_MAX_CONCURRENCY": 1,
    }
    with start_farm(specs, max_seconds=120) as farm:
        urls = [f"{farm.urls['site']}/p/{i}" for i in range(3)]
        began = time.monotonic()
        result = run_crawl(urls, tmp_path / "crawl", settings, follow=False, timeout=100)
        took = time.monotonic() - began
    assert sorted(result.urls) == sorted(urls)
    # Without the fix each swapped original held the place until the sweep: 70 s and more.
    assert took < 40, took
    assert "aimd/in_flight/expired" not in result.stats
    assert result.stats.get("aimd/in_flight/no_feedback") == 3
    assert result.stats.get("aimd/in_flight_at_close") == 0


def fetches(log: list[dict[str, object]], path: str) -> int:
    return sum(1 for r in log if r["path"] == path)


@pytest.mark.parametrize(
    ("settings", "spider"),
    [
        ({"RETRY_ENABLED": False}, None),
        ({}, "components.NoRetrySpider"),
    ],
    ids=["RETRY_ENABLED=False", "max_retry_times=0"],
)
def test_retry_opt_outs_win_over_throttle_requeues(
    tmp_path: Path, settings: dict[str, object], spider: str | None
) -> None:
    specs = [
        HostSpec(name="down", pages=2, links_per_page=0, outage_seconds=600),
        HostSpec(name="hangs", pages=2, links_per_page=0, hang_paths=["/p/0"], hang_seconds=30),
    ]
    with start_farm(specs, max_seconds=120) as farm:
        urls = [f"{farm.urls['down']}/p/0", f"{farm.urls['hangs']}/p/0"]
        began = time.monotonic()
        result = run_crawl(
            urls,
            tmp_path / "crawl",
            {**AIMD, "DOWNLOAD_TIMEOUT": 1, **settings},
            follow=False,
            spider=spider,
            timeout=60,
        )
        took = time.monotonic() - began
        log = farm.read_log()
    down = [r for r in log if r["host"] == "down"]
    assert fetches(down, "/p/0") == 1
    assert result.stats.get("downloader/request_count") == 2  # one each, robots.txt off
    assert "aimd/requeued" not in result.stats
    # The controller still learnt from both answers.
    assert result.stats.get("aimd/throttle/503") == 1
    assert result.stats.get("aimd/throttle/timeout") == 1
    assert took < 40, took


def test_max_retry_times_bounds_requeues_and_retries_together(tmp_path: Path) -> None:
    # 429 with Retry-After: 1 to everything for 30 s: every attempt is refused.
    specs = [
        HostSpec(name="closed", pages=2, links_per_page=0, pause_first=30, pause_retry_after=1)
    ]
    with start_farm(specs, max_seconds=120) as farm:
        url = f"{farm.urls['closed']}/p/0"
        result = run_crawl(
            [url],
            tmp_path / "crawl",
            AIMD,
            follow=False,
            spider="components.OneRetrySpider",
            timeout=60,
        )
        log = farm.read_log()
    assert fetches(log, "/p/0") == 2  # as stock Scrapy: one try and one retry
    assert result.stats.get("aimd/requeued") == 1
    assert result.stats.get("aimd/requeue/gave_up") == 1


def test_one_request_that_cannot_be_queued_is_dropped_and_the_crawl_goes_on(
    tmp_path: Path,
) -> None:
    specs = [HostSpec(name="site", pages=8, links_per_page=2)]
    with start_farm(specs, max_seconds=120) as farm:
        root = farm.urls["site"]
        result = run_crawl(
            [root + "/"], tmp_path / "crawl", AIMD, spider="components.BadPrioritySpider"
        )
    assert result.stats.get("finish_reason") == "finished"
    # Each link to /p/3 (several pages have one) is dropped and named.
    errors = [line for line in result.log.splitlines() if "ERROR" in line and "/p/3" in line]
    assert errors
    assert all("priority None is not an integer" in line for line in errors)
    assert result.stats.get("aimd/enqueue/invalid") == len(errors)
    assert "aimd/errors" not in result.stats
    pages = {url for url in result.urls if "/p/" in url}
    assert pages == {f"{root}/p/{i}" for i in range(8)} - {f"{root}/p/3"}


def test_a_given_up_url_is_counted_and_logged_once(tmp_path: Path) -> None:
    # 429s without Retry-After: queued again whether or not the host answered well.
    specs = [
        HostSpec(name="down", pages=1, links_per_page=0, pause_first=600, pause_retry_after=None)
    ]
    settings = {**AIMD, "AIMD_THROTTLE_RETRIES": 1, "RETRY_TIMES": 2, "AIMD_MAX_DELAY": 0.5}
    with start_farm(specs, max_seconds=120) as farm:
        url = f"{farm.urls['down']}/p/0"
        result = run_crawl([url], tmp_path / "crawl", settings, follow=False, timeout=60)
        log = farm.read_log()
    # One throttle requeue, then RetryMiddleware's two copies of the given-up request.
    assert fetches(log, "/p/0") == 4
    assert result.stats.get("retry/count") == 2
    assert result.stats.get("aimd/requeue/gave_up") == 1
    assert result.log.count("Gave up on") == 1


def test_robots_txt_in_a_redirect_loop_or_too_far_is_unavailable_allow_all(
    tmp_path: Path,
) -> None:
    def looping(path: str) -> Answer:
        if path == "/robots.txt":
            return 301, {"Location": "/robots.txt"}, b""
        return PAGE

    robots = {**AIMD, "ROBOTSTXT_OBEY": True}
    far = HostSpec(name="far", pages=3, robots_mode="redirect", robots_redirect_hops=8)
    far.robots = "User-agent: *\nDisallow: /\n"  # never reached
    with serve(looping) as site, start_farm([far], max_seconds=120) as farm:
        far_url = farm.urls["far"]
        urls = [f"{site.url}/a", f"{far_url}/p/0"]
        result = run_crawl(urls, tmp_path / "crawl", robots, follow=False, timeout=60)
    assert sorted(result.urls) == sorted(urls)  # allowed: no rules were found
    # RFC 9309: five redirects followed, then "unavailable", fetched once, not retried.
    assert site.paths.count("/robots.txt") == 6
    assert "aimd/robots/origins_skipped" not in result.stats
    assert result.stats.get("aimd/robots/redirects_exhausted") == 2


def test_an_error_in_handling_robots_txt_settles_the_origin(tmp_path: Path) -> None:
    # A Crawl-delay whose gap floor overflows to inf makes the controller refuse it.
    settings = {**AIMD, "ROBOTSTXT_OBEY": True, "AIMD_MAX_CRAWL_DELAY": 1.79e308}
    specs = [
        HostSpec(
            name="site", pages=3, links_per_page=0, robots="User-agent: *\nCrawl-delay: 1.79e308\n"
        )
    ]
    with start_farm(specs, max_seconds=120) as farm:
        urls = [f"{farm.urls['site']}/p/{i}" for i in range(3)]
        result = run_crawl(urls, tmp_path / "crawl", settings, follow=False, timeout=60)
    assert sorted(result.urls) == sorted(urls)
    assert result.stats.get("aimd/robots/callback_errors") == 1
    assert "Could not handle" in result.log


def test_a_dead_origin_is_unreachable_not_disallowed(tmp_path: Path) -> None:
    settings = {**AIMD, "ROBOTSTXT_OBEY": True, "AIMD_ROBOTS_RETRIES": 0}
    specs = [HostSpec(name="dead", pages=2, refused=True), HostSpec(name="live", pages=2)]
    with start_farm(specs, max_seconds=120) as farm:
        urls = [f"{farm.urls['dead']}/p/{i}" for i in range(2)]
        userinfo = farm.urls["live"].replace("http://", "http://user:secret@") + "/p/0"
        result = run_crawl(
            [*urls, userinfo],
            tmp_path / "crawl",
            settings,
            spider="components.ErrbackSpider",
            timeout=60,
        )
    errors = {item["url"]: item.get("error") for item in result.items}
    assert {errors[url] for url in urls} == {"DownloadConnectionRefusedError"}
    assert errors.get(userinfo) != "IgnoreRequest", result.items
    assert result.stats.get("aimd/robots/unreachable", 0) >= 2
    assert "aimd/robots/disallowed" not in result.stats


def startup_error(tmp_path: Path, settings: dict[str, object]) -> str:
    """What a crawl that cannot start shows (its stderr and log)."""
    with pytest.raises(AssertionError) as failed:
        run_crawl(["http://127.0.0.1:9/"], tmp_path / "crawl", {**AIMD, **settings}, timeout=60)
    return str(failed.value)


def test_a_bad_shutdown_grace_is_the_one_error_shown(tmp_path: Path) -> None:
    shown = startup_error(tmp_path, {"AIMD_SHUTDOWN_GRACE": "soon"})
    assert "AIMD_SHUTDOWN_GRACE" in shown
    assert "Engine slot not assigned" not in shown
    assert "Spider opened" not in shown


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AIMD_SUMMARY_ROWS", "0"),
        ("AIMD_SUMMARY_ROWS", "x"),
        ("AIMD_LOGSTATS_INTERVAL", "-1"),
        ("AIMD_LOGSTATS_INTERVAL", "x"),
        ("AIMD_EVENTS_FILE", "out-%(nosuchattr)s.jsonl"),
    ],
)
def test_a_bad_reporting_setting_is_the_one_error_shown(
    tmp_path: Path, name: str, value: str
) -> None:
    shown = startup_error(tmp_path, {name: value})
    assert f"Invalid setting {name}={value!r}" in shown
    assert "Engine slot not assigned" not in shown
    assert "Spider opened" not in shown


@pytest.mark.parametrize("blocker", ["a file", "a directory"])
def test_an_events_file_that_cannot_be_written_is_named_at_startup(
    tmp_path: Path, blocker: str
) -> None:
    """A parent that is a file, or a path that is a directory: the error names the
    setting and the path, and nothing else follows it."""
    if blocker == "a file":
        (tmp_path / "afile").write_text("")
        path = tmp_path / "afile" / "events.jsonl"
    else:
        path = tmp_path / "adir"
        path.mkdir()
    shown = startup_error(tmp_path, {"AIMD_EVENTS_FILE": str(path)})
    assert f"Invalid setting AIMD_EVENTS_FILE={str(path)!r}" in shown
    assert "Engine slot not assigned" not in shown
    assert "Spider opened" not in shown


def test_a_corrupt_seen_keys_file_is_the_one_error_shown(tmp_path: Path) -> None:
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    (jobdir / SEEN_KEYS_FILENAME).write_bytes(b"not a seen-keys file at all")
    shown = startup_error(tmp_path, {"JOBDIR": str(jobdir)})
    assert SEEN_KEYS_FILENAME in shown
    assert "Engine slot not assigned" not in shown


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_the_stock_schedulers_stats_are_written(tmp_path: Path, where: str) -> None:
    settings = {**AIMD, "ROBOTSTXT_OBEY": True}
    if where == "disk":
        settings["JOBDIR"] = str(tmp_path / "job")
    specs = [HostSpec(name="site", pages=6, links_per_page=2)]
    with start_farm(specs, max_seconds=120) as farm:
        result = run_crawl([farm.urls["site"] + "/"], tmp_path / "crawl", settings)
    stats = result.stats
    fetched = stats["downloader/request_count"]  # robots.txt included
    assert stats.get("scheduler/enqueued") == fetched
    assert stats.get("scheduler/dequeued") == fetched
    assert stats.get(f"scheduler/dequeued/{where}") == fetched
    if where == "memory":
        assert stats.get("scheduler/enqueued/memory") == fetched
        assert "scheduler/enqueued/disk" not in stats
    else:  # robots.txt's request (its callback is the middleware's) is not stored
        assert stats.get("scheduler/enqueued/disk") == fetched - 1
        assert stats.get("scheduler/enqueued/memory") == 1
        assert "scheduler/unserializable" not in stats


def test_a_host_that_only_refuses_is_given_up_on_and_kept_for_a_resume(tmp_path: Path) -> None:
    jobdir = str(tmp_path / "job")
    # Refused at 0, 1 and 3 s (the gap doubles from 1 s): 2.5 s of trouble is
    # past at the third refusal, well before the pause ends (3 s was just at it).
    settings = {**AIMD, "AIMD_HOST_GIVE_UP": 2.5, "JOBDIR": jobdir, "RETRY_TIMES": 0}
    # 429s without Retry-After for 8 s: refusals whether or not the host answered well.
    specs = [
        HostSpec(name="down", pages=5, links_per_page=0, pause_first=8, pause_retry_after=None)
    ]
    with start_farm(specs, max_seconds=120) as farm:
        began = time.monotonic()
        urls = [f"{farm.urls['down']}/p/{i}" for i in range(5)]
        first = run_crawl(
            urls, tmp_path / "first", settings, spider="components.ErrbackSpider", timeout=60
        )
        took = time.monotonic() - began
        time.sleep(max(0.0, 8.5 - (time.monotonic() - began)))  # the pause is over
        second = run_crawl(
            urls, tmp_path / "second", settings, spider="components.ErrbackSpider", timeout=60
        )
    assert took < 30, took
    assert sorted(item["url"] for item in first.items) == sorted(urls)
    assert {item["error"] for item in first.items} == {"HostGaveUp"}
    assert first.stats.get("aimd/host_gave_up/requests") == 5
    assert first.stats.get("aimd/host_gave_up/hosts") == 1
    assert first.log.count("Giving up on") == 1
    assert sorted(second.urls) == sorted(urls)  # kept in the JOBDIR, fetched on resume


def test_a_gzip_bomb_robots_txt_is_parsed_up_to_500_kib(tmp_path: Path) -> None:
    rules = b"User-agent: *\nDisallow: /private\n"
    bomb = gzip.compress(rules + b"# padding padding padding\n" * 400_000, compresslevel=9)

    def answer(path: str) -> Answer:
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain", "Content-Encoding": "gzip"}, bomb
        return PAGE

    settings = {**AIMD, "ROBOTSTXT_OBEY": True, "DOWNLOAD_MAXSIZE": 4 * 1024 * 1024}
    with serve(answer) as site:
        urls = [f"{site.url}/public", f"{site.url}/private"]
        result = run_crawl(urls, tmp_path / "crawl", settings, follow=False, timeout=60)
    assert len(bomb) < 100_000  # 10 MiB inflated
    assert result.urls == [f"{site.url}/public"]
    assert "/private" not in site.paths
    assert result.stats.get("aimd/robots/truncated") == 1
    assert result.stats.get("aimd/robots/disallowed") == 1


@pytest.mark.parametrize("jobdir", [False, True], ids=["memory", "JOBDIR"])
def test_a_crawl_without_a_twisted_reactor(tmp_path: Path, jobdir: bool) -> None:
    settings: dict[str, object] = {**AIMD, "TWISTED_REACTOR_ENABLED": False, "ROBOTSTXT_OBEY": True}
    if jobdir:
        settings["JOBDIR"] = str(tmp_path / "job")
    specs = [
        HostSpec(name="site", pages=8, links_per_page=2, robots="User-agent: *\nDisallow: /p/5\n")
    ]
    with start_farm(specs, max_seconds=120) as farm:
        root = farm.urls["site"]
        result = run_crawl(
            [root + "/"], tmp_path / "crawl", settings, spider="components.ReactorWatchingSpider"
        )
    # No Twisted reactor when the crawl began (Scrapy itself may import one later).
    assert not min(result.items, key=lambda item: item["t"])["reactor"]
    assert result.stats.get("finish_reason") == "finished"
    assert "ERROR" not in result.log
    pages = {url for url in result.urls if "/p/" in url}
    assert pages == {f"{root}/p/{i}" for i in range(8)} - {f"{root}/p/5"}
    assert result.stats.get("aimd/in_flight_at_close") == 0


def test_the_longest_of_several_retry_after_headers_is_honoured(tmp_path: Path) -> None:
    arrivals: list[float] = []

    def answer(path: str) -> Answer:
        arrivals.append(time.monotonic())
        if len(arrivals) == 1:
            return 429, [("Retry-After", "3"), ("Retry-After", "1")], b""
        return PAGE

    with serve(answer) as site:
        result = run_crawl([f"{site.url}/a"], tmp_path / "crawl", AIMD, follow=False, timeout=60)
    assert result.urls == [f"{site.url}/a"]
    assert len(arrivals) == 2
    assert arrivals[1] - arrivals[0] >= 2.9  # the 3 s one, not the last one


@pytest.mark.parametrize("value", [0, 59.9])
def test_a_robots_max_age_under_a_minute_is_refused(tmp_path: Path, value: float) -> None:
    shown = startup_error(tmp_path, {"ROBOTSTXT_OBEY": True, "AIMD_ROBOTS_MAX_AGE": value})
    assert "AIMD_ROBOTS_MAX_AGE" in shown
    assert ">= 60" in shown


def test_requests_a_jobdir_cannot_store_count_as_scrapys_do(tmp_path: Path) -> None:
    settings = {**AIMD, "JOBDIR": str(tmp_path / "job")}
    specs = [HostSpec(name="site", pages=2, links_per_page=0)]
    with start_farm(specs, max_seconds=120) as farm:
        urls = [f"{farm.urls['site']}/p/{i}" for i in range(2)]
        result = run_crawl(
            urls,
            tmp_path / "crawl",
            settings,
            follow=False,
            spider="components.UnserializableSpider",
        )
    assert sorted(result.urls) == sorted(urls)
    assert result.stats.get("scheduler/unserializable") == 2
    assert result.stats.get("scheduler/enqueued/memory") == 2
    assert "scheduler/enqueued/disk" not in result.stats
    assert result.log.count("Unable to serialize request") == 1  # once per callback


def refusing(kind: str, *, answered_well: bool, refusals: int) -> Callable[[str], Answer]:
    """A site whose /p/1 answers ``kind`` to its first ``refusals`` requests, then
    the page. With ``answered_well`` the crawl starts at /p/0, a good page that
    links to /p/1, so the host has answered well before it refuses."""
    seen = {"/p/1": 0}

    def answer(path: str) -> Answer:
        if path == "/p/0":
            return 200, {"Content-Type": "text/html"}, b'<html><a href="/p/1">1</a></html>'
        if path != "/p/1":
            return 404, {}, b""
        seen[path] += 1
        if seen[path] > refusals:
            return PAGE
        if kind == "timeout":
            time.sleep(2.5)  # DOWNLOAD_TIMEOUT is 1
            return PAGE
        if kind == "503 with Retry-After":
            return 503, {"Retry-After": "1"}, b""
        return int(kind), {}, b""

    return answer


@pytest.mark.parametrize("kind", ["503", "timeout"])
def test_a_host_that_never_answered_well_is_left_to_retry_middleware(
    tmp_path: Path, kind: str
) -> None:
    """A 503 without Retry-After or a timeout from a host that never answered
    well is a plain failure, as in stock Scrapy: RETRY_TIMES retries, "Gave up
    retrying", the errback; not a dozen throttled attempts at growing gaps."""
    settings = {**AIMD, "DOWNLOAD_TIMEOUT": 1, "RETRY_TIMES": 2}
    with serve(refusing(kind, answered_well=False, refusals=1000)) as site:
        began = time.monotonic()
        result = run_crawl(
            [f"{site.url}/p/1"],
            tmp_path / "crawl",
            settings,
            spider="components.ErrbackSpider",
            timeout=60,
        )
        took = time.monotonic() - began
    assert site.paths.count("/p/1") == 3  # the first attempt and RETRY_TIMES retries
    assert result.stats.get("retry/count") == 2
    assert result.log.count("Gave up retrying") == 1
    error = "HttpError" if kind == "503" else "DownloadTimeoutError"
    assert result.items == [{"url": f"{site.url}/p/1", "error": error}]
    assert "aimd/requeued" not in result.stats
    # The controller learnt from each answer all the same.
    assert result.stats.get(f"aimd/throttle/{kind}") == 3
    assert took < 30, took


@pytest.mark.parametrize(
    ("kind", "answered_well"),
    [
        ("503", True),
        ("timeout", True),
        ("503 with Retry-After", False),
        ("429", False),
    ],
    ids=["503 after a good page", "timeout after a good page", "Retry-After", "429"],
)
def test_a_refusal_is_queued_again_and_the_page_fetched(
    tmp_path: Path, kind: str, answered_well: bool
) -> None:
    """From a host that has answered well, a 503 or a timeout is overload: the
    page is queued again past RETRY_TIMES (3 refusals, where stock gives up after
    2 retries). A 429 or a Retry-After always is."""
    settings = {**AIMD, "DOWNLOAD_TIMEOUT": 1, "RETRY_TIMES": 2}
    with serve(refusing(kind, answered_well=answered_well, refusals=3)) as site:
        start = f"{site.url}/p/0" if answered_well else f"{site.url}/p/1"
        result = run_crawl([start], tmp_path / "crawl", settings, timeout=90)
    assert f"{site.url}/p/1" in result.urls
    assert site.paths.count("/p/1") == 4
    reason = "timeout" if kind == "timeout" else kind.split()[0]
    assert result.stats.get(f"aimd/requeued/{reason}") == 3
    assert "retry/count" not in result.stats
    assert "Gave up" not in result.log


@pytest.mark.parametrize("value", [-1, 1.5, "lots"])
def test_a_bad_robots_memory_is_refused_naming_it(tmp_path: Path, value: object) -> None:
    shown = startup_error(tmp_path, {"ROBOTSTXT_OBEY": True, "AIMD_ROBOTS_MEMORY": value})
    assert "AIMD_ROBOTS_MEMORY" in shown
    assert "a whole number >= 0" in shown


@pytest.mark.parametrize("retry_after", ["0", "Mon, 01 Jan 2001 00:00:00 GMT"])
def test_a_host_that_refuses_every_page_with_no_pause_is_not_hammered(
    tmp_path: Path, retry_after: str
) -> None:
    # 429 with Retry-After: 0 (or a date in the past, read as 0) to every page: the
    # gap grows from 1 s as for a 429 without one, so ten start URLs see a handful
    # of requests in 6 s, not one after another as fast as the host answers.
    def answer(path: str) -> Answer:
        if path == "/robots.txt":
            return 404, {}, b""
        return 429, {"Retry-After": retry_after}, b""

    with serve(answer) as site:
        result = run_crawl(
            [f"{site.url}/p{i}" for i in range(10)],
            tmp_path / "crawl",
            {**AIMD, "CLOSESPIDER_TIMEOUT": 6, "RETRY_TIMES": 0},
            timeout=60,
        )
    pages = [p for p in site.paths if p != "/robots.txt"]
    assert result.stats.get("finish_reason") == "closespider_timeout", result.log[-2000:]
    assert 1 <= len(pages) <= 8, pages
    assert not result.stats.get("aimd/requeue/gave_up"), result.stats


def test_a_host_closed_for_a_while_is_crawled_at_its_pace_once_it_opens(tmp_path: Path) -> None:
    # 429 with Retry-After: 1 to every page for 4 s from the first, then every page at
    # once: the refusals, one a pause, say the host is closed, not its pace. Read as
    # its pace, the gap stayed near 2 s after it opened (20 pages, 40 s and more).
    closed = 4.0
    first: list[float] = []
    served: list[float] = []
    lock = threading.Lock()

    def answer(path: str) -> Answer:
        if path == "/robots.txt":
            return 404, {}, b""
        now = time.monotonic()
        with lock:
            first.append(now)
            if now < first[0] + closed:
                return 429, {"Retry-After": "1"}, b""
            served.append(now)
        return PAGE

    with serve(answer) as site:
        result = run_crawl(
            [f"{site.url}/p{i}" for i in range(20)],
            tmp_path / "crawl",
            {**AIMD, "CLOSESPIDER_TIMEOUT": 60},
            timeout=120,
        )
    assert result.stats.get("finish_reason") == "finished", result.log[-2000:]
    pages = {p for p in site.paths if p != "/robots.txt"}
    assert len(pages) == 20 and len(served) == 20, (pages, served)
    # Once open: the first page within a quarter of the closed time and a pause, the
    # other 19 within a few seconds more (generous: a loaded machine).
    opened = first[0] + closed
    assert served[0] - opened <= 0.25 * closed + 1.0 + 1.5, served[0] - opened
    assert served[-1] - served[0] <= 6.0, served[-1] - served[0]
