"""Real crawls: the Scrapy habits a user brings (issue 13, items 1-7; issue 12, 17-18).

Each test crawls local farm hosts in a subprocess and checks what the hosts
received, what the crawl logged and, where the downloader is involved, the
delay of the downloader's own slot as each page saw it (``SlotDelaySpider``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from crawling import AIMD, ROOT, CrawlResult, arrival_gaps, run_crawl, start_gaps
from local_http import Answer, serve

from sitefarm import HostSpec, start_farm


def host_key(url: str) -> str:
    return urlsplit(url).netloc


def pages(log: list[dict[str, Any]], host: str) -> list[dict[str, Any]]:
    return [r for r in log if r["host"] == host and r["reason"] != "robots"]


def crawl(
    specs: list[HostSpec],
    tmp_path: Path,
    settings: dict[str, Any] | None = None,
    *,
    spider: str | None = None,
    name: str = "crawl",
) -> tuple[CrawlResult, list[dict[str, Any]], dict[str, str]]:
    with start_farm(specs, max_seconds=300) as farm:
        urls = dict(farm.urls)
        extra = settings(urls) if callable(settings) else settings
        result = run_crawl(
            [url + "/" for url in urls.values()],
            tmp_path / name,
            {**AIMD, **(extra or {})},
            spider=spider,
        )
        log = farm.read_log()
    return result, log, urls


# -- 1. the spider's download_delay ---------------------------------------------------


def test_the_spiders_download_delay_is_the_hosts_floor_and_not_the_downloaders(
    tmp_path: Path,
) -> None:
    events = tmp_path / "events.jsonl"
    specs = [HostSpec(name="site", pages=6, links_per_page=2)]
    result, log, _ = crawl(
        specs,
        tmp_path,
        {"AIMD_EVENTS_FILE": str(events)},
        spider="components.DelayAttributeSpider",
    )
    assert len(pages(log, "site")) >= 7
    assert min(start_gaps(events)) >= 0.4 - 1e-3  # the controller keeps it
    assert {item["slot_delay"] for item in result.items} == {0.0}  # the downloader does not
    assert "the spider's download_delay=0.4 → AIMD_MIN_DELAY=0.4" in result.log
    assert "also delays every request in the downloader" not in result.log
    close = json.loads(events.read_text().splitlines()[-1])
    assert [row["delay"] for row in close["hosts"].values()] == [0.4]


# -- 2. DOWNLOAD_SLOTS ------------------------------------------------------------------


def test_download_slots_feed_the_hosts_controller_by_hostname_or_host_and_port(
    tmp_path: Path,
) -> None:
    events = tmp_path / "events.jsonl"
    specs = [
        HostSpec(name="byname", pages=5, links_per_page=2),
        HostSpec(name="byport", pages=5, links_per_page=2),
    ]

    def settings(urls: dict[str, str]) -> dict[str, Any]:
        return {
            "AIMD_EVENTS_FILE": str(events),
            "DOWNLOAD_SLOTS": {
                urlsplit(urls["byname"]).hostname: {"delay": 0.5, "concurrency": 1},
                host_key(urls["byport"]): {"delay": 0.3},
            },
        }

    result, log, urls = crawl(specs, tmp_path, settings, spider="components.SlotDelaySpider")
    for name, floor in (("byname", 0.5), ("byport", 0.3)):
        assert len(pages(log, name)) >= 6
        assert min(start_gaps(events, host_key(urls[name]))) >= floor - 1e-3, name
        assert min(arrival_gaps(pages(log, name))) >= floor - 0.1, name
    assert {item["slot_delay"] for item in result.items} == {0.0}
    hostname = urlsplit(urls["byname"]).hostname
    assert (
        f"DOWNLOAD_SLOTS['{hostname}'].delay=0.5 → AIMD_HOSTS['{hostname}'].min_delay=0.5"
        in result.log
    )
    assert max(r["in_flight"] for r in pages(log, "byname")) == 1


def test_a_download_slots_key_that_names_no_host_paces_the_requests_of_that_slot(
    tmp_path: Path,
) -> None:
    """Scrapy takes any string as a slot key; its delay and concurrency pace the
    requests whose ``download_slot`` it is, and no AIMD_HOSTS error stops the crawl."""
    from components import OddSlotSpider

    slot = OddSlotSpider.slot
    specs = [HostSpec(name=name, pages=5, links_per_page=2) for name in ("one", "two")]
    result, log, _ = crawl(
        specs,
        tmp_path,
        {"DOWNLOAD_SLOTS": {slot: {"delay": 0.3, "concurrency": 1}}},
        spider="components.OddSlotSpider",
    )
    assert "AIMD_HOSTS=" not in result.log
    fetched = [r for r in log if r["reason"] != "robots"]
    assert len(fetched) >= 12
    assert {r["host"] for r in fetched} == {"one", "two"}
    assert min(arrival_gaps(fetched)) >= 0.3 - 0.1  # one gap for both hosts
    assert {item["slot"] for item in result.items} == {slot}
    assert {item["slot_delay"] for item in result.items} == {0.0}
    assert f"DOWNLOAD_SLOTS[{slot!r}].delay=0.3 → " in result.log


def test_a_download_slots_entry_paces_its_slot_and_not_the_subdomains(tmp_path: Path) -> None:
    """``DOWNLOAD_SLOTS = {"example.test": ...}`` is the slot of example.test only, as
    in Scrapy; an AIMD_HOSTS entry of the user's own still covers the subdomains."""
    events = tmp_path / "events.jsonl"
    names = {"apex": "example.test", "www": "www.example.test", "api": "api.example.org"}
    specs = [HostSpec(name=name, pages=5, links_per_page=2) for name in names]

    def settings(urls: dict[str, str]) -> dict[str, Any]:
        return {
            "AIMD_EVENTS_FILE": str(events),
            "FARM_PROXIES": {hostname: urls[name] for name, hostname in names.items()},
            "DOWNLOAD_SLOTS": {"example.test": {"delay": 0.6}},
            "AIMD_HOSTS": {"example.org": {"min_delay": 0.3}},
        }

    with start_farm(specs, max_seconds=300) as farm:
        result = run_crawl(
            [f"http://{hostname}/" for hostname in names.values()],
            tmp_path / "crawl",
            {**AIMD, **settings(dict(farm.urls))},
            spider="components.ProxiedSpider",
        )
        log = farm.read_log()
    for name in names:
        assert len(pages(log, name)) >= 6, name
    assert min(start_gaps(events, "example.test")) >= 0.6 - 1e-3
    assert min(start_gaps(events, "api.example.org")) >= 0.3 - 1e-3  # the user's entry
    assert min(start_gaps(events, "www.example.test")) < 0.3  # not example.test's slot
    assert (
        "DOWNLOAD_SLOTS['example.test'].delay=0.6 → "
        "AIMD_HOSTS['example.test'].min_delay=0.6, for that slot only"
    ) in result.log


# -- 3. meta["download_slot"] -------------------------------------------------------------


def test_requests_in_one_slot_share_one_controller_and_keep_their_slot(tmp_path: Path) -> None:
    """Two hosts the user put in one slot are crawled one request at a time, spaced
    by the slot's gap; each host's robots.txt is still its own."""
    specs = [HostSpec(name=name, pages=6, links_per_page=2) for name in ("one", "two")]
    result, log, _ = crawl(
        specs,
        tmp_path,
        {"AIMD_MIN_DELAY": 0.3, "ROBOTSTXT_OBEY": True},
        spider="components.SharedSlotSpider",
    )
    fetched = [r for r in log if r["reason"] != "robots"]
    assert len(fetched) >= 14
    assert {r["host"] for r in fetched} == {"one", "two"}
    assert min(arrival_gaps(fetched)) >= 0.3 - 0.1  # one gap for both hosts
    assert {item["slot"] for item in result.items} == {"shared"}
    robots = [r for r in log if r["reason"] == "robots"]
    assert sorted(r["host"] for r in robots) == ["one", "two"]
    assert result.stats.get("aimd/in_flight_at_close") == 0


def test_a_crawl_delay_holds_for_a_slot_that_groups_its_host_with_others(
    tmp_path: Path,
) -> None:
    """A robots.txt Crawl-delay of one host of a user's slot is the floor of the
    slot's gap: the slot is the host's only controller, so the host's requests are
    never closer than its delay (its requests and the other host's, being one
    slot's, never either)."""
    specs = [
        HostSpec(name="delayed", pages=6, links_per_page=2, crawl_delay=0.3),
        HostSpec(name="other", pages=6, links_per_page=2),
    ]
    result, log, _ = crawl(
        specs, tmp_path, {"ROBOTSTXT_OBEY": True}, spider="components.SharedSlotSpider"
    )
    delayed = [r for r in log if r["host"] == "delayed"]
    assert len([r for r in delayed if r["reason"] != "robots"]) >= 7
    assert min(arrival_gaps(delayed)) >= 0.3 - 0.01, arrival_gaps(delayed)
    assert "Crawl-delay of slot shared: 0.30s" in result.log
    assert result.stats.get("aimd/in_flight_at_close") == 0


# -- 4 and 5. where each value went; misspelled settings -------------------------------


def test_the_log_says_where_each_value_went_and_names_misspelled_settings(
    tmp_path: Path,
) -> None:
    specs = [HostSpec(name="site", pages=20, latency=0.2)]
    result, log, _ = crawl(
        specs,
        tmp_path,
        {
            "DOWNLOAD_DELAY": 0.1,
            "CONCURRENT_REQUESTS_PER_DOMAIN": 2,
            "AIMD_MAX_CONCURENCY": 3,
            "AIMD_DELAY_STEP": 0.1,
        },
        spider="components.SlotDelaySpider",
    )
    assert "DOWNLOAD_DELAY=0.1 → AIMD_MIN_DELAY=0.1 (the downloader's own delay is now 0)" in (
        result.log
    )
    assert "CONCURRENT_REQUESTS_PER_DOMAIN=2 → AIMD_MAX_CONCURRENCY=2" in result.log
    assert re.search(
        r"WARNING: Unknown setting AIMD_MAX_CONCURENCY is ignored; "
        r"did you mean AIMD_MAX_CONCURRENCY\?",
        result.log,
    )
    assert re.search(
        r"WARNING: AIMD_DELAY_STEP was removed: the gap now closes by what the host accepted",
        result.log,
    )
    assert max(r["in_flight"] for r in pages(log, "site")) <= 2  # the carried limit holds
    assert {item["slot_delay"] for item in result.items} == {0.0}


# -- 6. the events file's name; scrapy fetch and shell ------------------------------------


def test_the_events_file_name_expands_the_spider_name_and_time(tmp_path: Path) -> None:
    template = tmp_path / "events" / "%(name)s-%(time)s.jsonl"
    result, _, _ = crawl(
        [HostSpec(name="site", pages=3)], tmp_path, {"AIMD_EVENTS_FILE": str(template)}
    )
    (written,) = (tmp_path / "events").iterdir()
    assert re.fullmatch(r"farm-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\+00-00\.jsonl", written.name)
    assert json.loads(written.read_text().splitlines()[0])["spider"] == "farm"
    assert result.stats.get("aimd/started", 0) >= 4


def make_project(root: Path, events: Path) -> Path:
    """A Scrapy project whose settings write an events file, as a user's would."""
    (root / "proj").mkdir(parents=True)
    (root / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    (root / "proj" / "__init__.py").write_text("")
    (root / "proj" / "settings.py").write_text(
        'ADDONS = {"scrapy_aimd.Addon": 500}\n'
        f"AIMD_EVENTS_FILE = {str(events)!r}\n"
        "TELNETCONSOLE_ENABLED = False\n"
    )
    return root


#: The project's events file, from a crawl before: a command that is no crawl keeps it.
EARLIER_EVENTS = '{"event":"open","t":0}\n'


def run_scrapy(project: Path, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``scrapy ARGS`` in the project's directory, as a user runs it there."""
    return subprocess.run(
        [sys.executable, "-m", "scrapy", *args],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("command", "label"),
    [(["fetch"], "scrapy fetch"), (["shell", "-c", "response.status"], "scrapy shell")],
)
def test_fetch_and_shell_leave_the_projects_events_file_alone(
    tmp_path: Path, command: list[str], label: str
) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text(EARLIER_EVENTS)
    project = make_project(tmp_path / "project", events)
    with start_farm([HostSpec(name="site", pages=2)], max_seconds=60) as farm:
        url = farm.urls["site"] + "/"
        proc = run_scrapy(project, [command[0], url, *command[1:]], timeout=60)
        served = farm.read_log()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert any(r["reason"] != "robots" for r in served)
    assert events.read_text() == EARLIER_EVENTS
    assert f"AIMD_EVENTS_FILE=None under {label}" in proc.stderr


SPIDER = """
import scrapy


class SiteSpider(scrapy.Spider):
    name = "site"

    def parse(self, response):
        \"\"\"A page of the farm.

        @url {url}
        @returns requests 0
        \"\"\"
        yield {{"url": response.url}}
"""


@pytest.mark.parametrize(
    "command",
    [
        ["parse", "{url}", "--spider", "site", "-c", "parse"],
        ["check", "site"],
        ["bench", "-s", "CLOSESPIDER_TIMEOUT=1"],
    ],
    ids=["parse", "check", "bench"],
)
def test_parse_check_and_bench_leave_the_projects_events_file_alone(
    tmp_path: Path, command: list[str]
) -> None:
    """Scrapy's commands that crawl a page or a benchmark with the project's
    settings are not the project's crawl: its events file is kept."""
    events = tmp_path / "events.jsonl"
    events.write_text(EARLIER_EVENTS)
    project = make_project(tmp_path / "project", events)
    with start_farm([HostSpec(name="site", pages=2)], max_seconds=60) as farm:
        url = farm.urls["site"] + "/"
        (project / "proj" / "spiders").mkdir()
        (project / "proj" / "spiders" / "__init__.py").write_text("")
        (project / "proj" / "spiders" / "site.py").write_text(SPIDER.format(url=url))
        with (project / "proj" / "settings.py").open("a") as settings:
            settings.write('SPIDER_MODULES = ["proj.spiders"]\n')
        proc = run_scrapy(project, [a.format(url=url) for a in command], timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert events.read_text() == EARLIER_EVENTS


# -- 7. cached responses --------------------------------------------------------------


def test_cached_responses_are_counted_in_the_summary(tmp_path: Path) -> None:
    specs = [HostSpec(name="site", pages=4, links_per_page=2)]
    cache = {"HTTPCACHE_ENABLED": True, "HTTPCACHE_DIR": str(tmp_path / "cache")}
    with start_farm(specs, max_seconds=300) as farm:
        urls = [farm.urls["site"] + "/"]
        first = run_crawl(urls, tmp_path / "first", {**AIMD, **cache})
        served_first = len(farm.read_log())
        second = run_crawl(urls, tmp_path / "second", {**AIMD, **cache}, timeout=100)
        served_second = len(farm.read_log())
    assert served_second == served_first  # the second crawl came from the cache
    assert len(second.items) == len(first.items) == 5
    assert second.stats.get("aimd/cached") == 5
    header, row = summary_table(second.log)[:2]
    assert row[header.index("cached")] == "5"
    assert row[header.index("2xx")] == "0"


def test_the_cache_keeps_a_redirect_to_a_url_of_the_same_key(tmp_path: Path) -> None:
    """``/shoes`` redirects to ``/shoes/``, one canonical URL: with the cache's
    key the canonical one, the hop was answered from the cache with the very
    redirect it followed, and the page behind it was lost without a word."""

    def answer(path: str) -> Answer:
        pages = {
            "/": b'<a href="/shoes">shoes</a>',
            "/shoes/": b'<a href="/shoes/red">red</a> <a href="/shoes/blue">blue</a>',
            "/shoes/red": b"red",
            "/shoes/blue": b"blue",
        }
        if path == "/shoes":
            return 301, {"Location": "/shoes/"}, b""
        if path in pages:
            return 200, {"Content-Type": "text/html"}, b"<html><body>%s</body></html>" % pages[path]
        return 404, {}, b""

    cache = {"HTTPCACHE_ENABLED": True, "HTTPCACHE_DIR": str(tmp_path / "cache")}
    with serve(answer) as site:
        first = run_crawl([site.url + "/"], tmp_path / "first", {**AIMD, **cache})
        served_first = len(site.paths)
        second = run_crawl([site.url + "/"], tmp_path / "second", {**AIMD, **cache})
        served_second = len(site.paths)
    expected = sorted(site.url + path for path in ("/", "/shoes/", "/shoes/red", "/shoes/blue"))
    assert sorted(first.urls) == expected, first.log[-3000:]
    assert sorted(second.urls) == expected, second.log[-3000:]
    asked_first = sorted(site.paths[:served_first])
    assert asked_first == ["/", "/shoes", "/shoes/", "/shoes/blue", "/shoes/red"]
    assert served_second == served_first  # the second crawl came from the cache
    header, row = summary_table(second.log)[:2]
    assert row[header.index("requests")] == row[header.index("cached")] == "5"


def summary_table(log: str) -> list[list[str]]:
    """The rows of the last per-host summary in a crawl log, the header first."""
    text = log[log.rindex("Per-host summary") :]
    lines = text.splitlines()[1:]
    table = []
    for line in lines:
        if not line.strip() or line.startswith(("... and", "4xx and 5xx")) or "[" in line[:30]:
            break
        table.append(re.split(r"\s{2,}", line.strip()))
    return table


# -- issue 12, 18: the user's own components --------------------------------------------


def test_a_users_own_fingerprinter_is_kept_with_one_warning(tmp_path: Path) -> None:
    """With Scrapy's fingerprints the tracking variants of a page are fetched again:
    that is the cost the warning names."""
    specs = [HostSpec(name="site", pages=6, tracking_links=True)]
    result, log, _ = crawl(
        specs, tmp_path, {"REQUEST_FINGERPRINTER_CLASS": "components.OwnFingerprinter"}
    )
    warnings = re.findall(r"WARNING: scrapy-aimd keeps REQUEST_FINGERPRINTER_CLASS=.*", result.log)
    assert len(warnings) == 1
    assert "components.OwnFingerprinter" in warnings[0]
    assert "tracking parameters" in warnings[0]
    fetched = pages(log, "site")
    assert len({r["page"] for r in fetched if r.get("page") is not None}) >= 6
    assert len(fetched) > 7  # variants fetched again: the user's fingerprints decide


def test_a_foreign_scheduler_is_refused_at_startup_by_name(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"SCHEDULER='components\.OwnScheduler'"):
        crawl(
            [HostSpec(name="site", pages=2)],
            tmp_path,
            {"SCHEDULER": "components.OwnScheduler"},
        )
