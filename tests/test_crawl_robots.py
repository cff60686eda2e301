"""robots.txt outcomes (RFC 9309) in one real crawl of a farm with every case.

One farm, one crawl (module-scoped: a crawl takes seconds); each test reads
what one host saw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from crawling import AIMD, CrawlResult, arrival_gaps, run_crawl

from sitefarm import HostSpec, start_farm

RULES = "User-agent: *\nDisallow: /p/2\n"

SPECS = [
    HostSpec(name="rules", pages=12, robots=RULES, crawl_delay=0.4),
    HostSpec(name="notfound", pages=8, robots_mode="404", robots=RULES),
    HostSpec(name="flaky", pages=8, robots_mode="503_then_200", robots_fail_first=2, robots=RULES),
    HostSpec(name="down", pages=8, robots_mode="503"),
    HostSpec(name="refused", pages=8, refused=True),
    HostSpec(
        name="redirected", pages=8, robots_mode="redirect", robots_redirect_hops=3, robots=RULES
    ),
    HostSpec(name="huge", pages=8, robots_mode="huge", robots=RULES),
    HostSpec(name="garbage", pages=8, robots_mode="garbage", robots=RULES),
    HostSpec(name="healthy", pages=30),
]


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> tuple[CrawlResult, list[dict[str, Any]]]:
    out: Path = tmp_path_factory.mktemp("robots")
    with start_farm(SPECS, max_seconds=300) as farm:
        result = run_crawl(
            [url + "/" for url in farm.urls.values()],
            out,
            {**AIMD, "ROBOTSTXT_OBEY": True, "AIMD_ROBOTS_RETRIES": 2},
        )
        log = farm.read_log()
    assert result.stats.get("aimd/in_flight_at_close") == 0
    return result, log


def host_log(crawl: tuple[CrawlResult, list[dict[str, Any]]], host: str) -> list[dict[str, Any]]:
    return [r for r in crawl[1] if r["host"] == host]


def page_paths(records: list[dict[str, Any]]) -> set[str]:
    return {r["page"] for r in records if r["status"] == 200 and r["page"]}


def robots_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["reason"] == "robots" or r["path"].startswith("/robots")]


def test_rules_disallow_and_crawl_delay(crawl: tuple[CrawlResult, list[dict[str, Any]]]) -> None:
    records = host_log(crawl, "rules")
    assert records[0]["path"] == "/robots.txt"
    fetched = page_paths(records)
    assert "/p/2" not in fetched
    assert {"/", "/p/0", "/p/1", "/p/3"} <= fetched
    gaps = arrival_gaps(records)
    assert min(gaps) >= 0.4 - 0.01, f"Crawl-delay 0.4 s violated: {min(gaps):.3f} s"
    assert crawl[0].stats.get("aimd/robots/disallowed", 0) >= 1


def test_404_allows_everything(crawl: tuple[CrawlResult, list[dict[str, Any]]]) -> None:
    assert "/p/2" in page_paths(host_log(crawl, "notfound"))


def test_503_then_200_fetches_nothing_before_the_rules(
    crawl: tuple[CrawlResult, list[dict[str, Any]]],
) -> None:
    records = host_log(crawl, "flaky")
    robots = robots_records(records)
    assert [r["status"] for r in robots][:3] == [503, 503, 200]
    rules_at = robots[2]["finished"]
    pages = [r for r in records if r not in robots]
    assert pages and min(r["arrived"] for r in pages) >= rules_at
    assert "/p/2" not in page_paths(records)


def test_503_forever_skips_the_origin(crawl: tuple[CrawlResult, list[dict[str, Any]]]) -> None:
    records = host_log(crawl, "down")
    assert records and all(r["path"] == "/robots.txt" for r in records)
    assert len(records) == 3  # the first fetch and AIMD_ROBOTS_RETRIES=2
    assert crawl[0].stats.get("aimd/robots/origins_skipped", 0) >= 1


def test_connection_refused_skips_the_origin_and_not_the_others(
    crawl: tuple[CrawlResult, list[dict[str, Any]]],
) -> None:
    assert host_log(crawl, "refused") == []
    healthy = page_paths(host_log(crawl, "healthy"))
    assert len(healthy) >= 31  # "/" and its 30 pages


def test_redirect_chain_is_followed(crawl: tuple[CrawlResult, list[dict[str, Any]]]) -> None:
    records = host_log(crawl, "redirected")
    assert len(robots_records(records)) == 4  # three hops and the file
    assert "/p/2" not in page_paths(records)
    assert "/p/3" in page_paths(records)


def test_only_the_first_500_kib_of_a_huge_file(
    crawl: tuple[CrawlResult, list[dict[str, Any]]],
) -> None:
    fetched = page_paths(host_log(crawl, "huge"))
    assert "/p/2" not in fetched  # a rule at the top
    assert "/p/1" in fetched  # the file's last line, past 500 KiB, is not read
    assert crawl[0].stats.get("aimd/robots/truncated", 0) >= 1


def test_garbage_is_ignored_line_by_line(crawl: tuple[CrawlResult, list[dict[str, Any]]]) -> None:
    fetched = page_paths(host_log(crawl, "garbage"))
    assert "/p/2" not in fetched
    assert "/p/3" in fetched


def test_sitemaps_from_robots_reach_the_spiders_sitemap_callback(tmp_path: Path) -> None:
    specs = [
        HostSpec(name="mapped", pages=10, robots="User-agent: *\nDisallow: /p/4\n", sitemap=True)
    ]
    with start_farm(specs, max_seconds=120) as farm:
        result = run_crawl(
            [farm.urls["mapped"] + "/"],
            tmp_path / "crawl",
            {**AIMD, "ROBOTSTXT_OBEY": True, "AIMD_ROBOTS_SITEMAPS": True},
            follow=False,
            spider="components.SitemapFollowingSpider",
        )
        log = farm.read_log()
    assert any(r["path"] == "/sitemap.xml" for r in log)
    fetched = page_paths(log)
    assert {f"/p/{i}" for i in range(10) if i != 4} <= fetched
    assert "/p/4" not in fetched  # the sitemap lists it; robots.txt still decides
    assert result.stats.get("aimd/robots/sitemaps") == 1


def test_past_the_robots_memory_budget_an_origin_is_fetched_again_and_obeyed(
    tmp_path: Path,
) -> None:
    """With AIMD_ROBOTS_MEMORY too small for more than the origin at hand, each
    origin is forgotten once another's rules come in: its robots.txt is
    fetched again when its next request is scheduled, and its rules still hold."""
    specs = [HostSpec(name=name, pages=8, robots=RULES) for name in ("one", "two", "three")]
    settings = {**AIMD, "ROBOTSTXT_OBEY": True, "AIMD_ROBOTS_MEMORY": 1}
    with start_farm(specs, max_seconds=120) as farm:
        result = run_crawl(
            [url + "/" for url in farm.urls.values()], tmp_path / "crawl", settings, timeout=90
        )
        log = farm.read_log()
    assert result.stats.get("finish_reason") == "finished"
    for spec in specs:
        records = [r for r in log if r["host"] == spec.name]
        assert page_paths(records) == {"/"} | {f"/p/{i}" for i in range(8)} - {"/p/2"}
    fetched = sum(1 for r in log if r["path"] == "/robots.txt")
    assert fetched > len(specs)
    assert result.stats.get("aimd/robots/requests") == fetched
    assert result.stats.get("aimd/robots/evicted", 0) >= fetched - len(specs)
    assert result.stats.get("aimd/in_flight_at_close") == 0


def test_a_robotstxt_parser_of_the_users_is_named_as_not_used(tmp_path: Path) -> None:
    """Scrapy's ROBOTSTXT_PARSER plugs a parser into Scrapy's robots middleware, which
    the add-on replaces: a WARNING says so, and robots.txt is still obeyed."""
    with start_farm([HostSpec(name="rules", pages=4, robots=RULES)], max_seconds=120) as farm:
        result = run_crawl(
            [farm.urls["rules"] + "/"],
            tmp_path / "crawl",
            {
                **AIMD,
                "ROBOTSTXT_OBEY": True,
                "ROBOTSTXT_PARSER": "scrapy.robotstxt.PythonRobotParser",
            },
        )
        log = farm.read_log()
    assert (
        "WARNING: ROBOTSTXT_PARSER=scrapy.robotstxt.PythonRobotParser is not used: "
        "scrapy-aimd's robots.txt middleware parses robots.txt by RFC 9309"
    ) in result.log
    assert "/p/2" not in page_paths(log)
    assert page_paths(log) >= {"/p/0", "/p/1", "/p/3"}


def test_scrapys_default_robotstxt_parser_is_not_warned_about(
    crawl: tuple[CrawlResult, list[dict[str, Any]]],
) -> None:
    assert "ROBOTSTXT_PARSER" not in crawl[0].log


def test_scrapys_robotstxt_stats_are_written_as_scrapy_writes_them(
    crawl: tuple[CrawlResult, list[dict[str, Any]]],
) -> None:
    """Monitoring reads Scrapy's ``robotstxt/*`` stats: they count what
    ``aimd/robots/*`` counts, under Scrapy's names."""
    stats = crawl[0].stats
    assert stats["robotstxt/forbidden"] == stats["aimd/robots/disallowed"]
    assert stats["robotstxt/request_count"] == stats["aimd/robots/requests"]
    statuses = {k.rpartition("/")[2]: v for k, v in stats.items() if "/robots/status/" in k}
    scrapys = "robotstxt/response_status_count/"
    assert statuses
    assert {k.rpartition("/")[2]: v for k, v in stats.items() if k.startswith(scrapys)} == statuses
    assert stats["robotstxt/response_count"] == sum(statuses.values())
    exceptions = sum(v for k, v in stats.items() if k.startswith("robotstxt/exception_count/"))
    assert exceptions == stats["aimd/robots/errors"] > 0  # the refused host's
