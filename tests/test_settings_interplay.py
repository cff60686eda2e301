"""Settings a user brings from stock Scrapy, and values from ``-s`` on the command
line, as the add-on and the readers take them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from crawling import AIMD, run_crawl, start_gaps
from scrapy.settings import Settings

from scrapy_aimd.addon import Addon
from scrapy_aimd.settings import AimdSettingsError, controller_configs, read_bool
from sitefarm import HostSpec, start_farm


def apply(project: dict[str, object], spider: dict[str, object] | None = None) -> Settings:
    settings = Settings()
    settings.setdict(project, priority="project")
    settings.setdict(spider or {}, priority="spider")
    Addon().update_settings(settings)
    return settings


# -- CONCURRENT_REQUESTS_PER_IP ------------------------------------------------------


@pytest.mark.filterwarnings("ignore:The CONCURRENT_REQUESTS_PER_IP setting is deprecated")
def test_the_users_per_ip_limit_moves_to_the_controller() -> None:
    """Scrapy's downloader puts a non-zero CONCURRENT_REQUESTS_PER_IP above
    CONCURRENT_REQUESTS_PER_DOMAIN; the add-on sets it to 0, so it must not be lost."""
    settings = apply({"CONCURRENT_REQUESTS_PER_IP": 2, "CONCURRENT_REQUESTS_PER_DOMAIN": 6})
    assert settings.getint("AIMD_MAX_CONCURRENCY") == 2
    assert settings.getint("CONCURRENT_REQUESTS_PER_IP") == 0
    assert controller_configs(settings).default.max_concurrency == 2
    # The user's own AIMD_MAX_CONCURRENCY wins, as over CONCURRENT_REQUESTS_PER_DOMAIN.
    settings = apply({"CONCURRENT_REQUESTS_PER_IP": 2}, {"AIMD_MAX_CONCURRENCY": 5})
    assert settings.getint("AIMD_MAX_CONCURRENCY") == 5
    # Unset (0), CONCURRENT_REQUESTS_PER_DOMAIN is carried as before.
    settings = apply({"CONCURRENT_REQUESTS_PER_DOMAIN": 3})
    assert settings.getint("AIMD_MAX_CONCURRENCY") == 3


@pytest.mark.filterwarnings("ignore:The CONCURRENT_REQUESTS_PER_IP setting is deprecated")
def test_a_crawl_keeps_the_users_per_ip_limit(tmp_path: Path) -> None:
    specs = [HostSpec(name="site", pages=12, links_per_page=4, latency=0.2)]
    with start_farm(specs, max_seconds=120) as farm:
        result = run_crawl(
            [url + "/" for url in farm.urls.values()],
            tmp_path / "crawl",
            {**AIMD, "CONCURRENT_REQUESTS_PER_IP": 1, "AIMD_ADAPTIVE_CONCURRENCY": False},
        )
        log = farm.read_log()
    assert len(result.items) >= 12
    assert max(r["in_flight"] for r in log) == 1
    assert "CONCURRENT_REQUESTS_PER_IP=1 → AIMD_MAX_CONCURRENCY=1" in result.log


# -- booleans from ``-s`` -------------------------------------------------------------


@pytest.mark.parametrize("value", ["", " ", "none"])
def test_a_boolean_setting_refuses_an_empty_or_unknown_word(value: str) -> None:
    """``-s AIMD_ADAPTIVE_CONCURRENCY=`` is a mistake, not False (Scrapy's getbool
    refuses it too): it turned the adaptive limit off without a word."""
    with pytest.raises(AimdSettingsError, match="AIMD_ADAPTIVE_CONCURRENCY"):
        controller_configs({"AIMD_ADAPTIVE_CONCURRENCY": value})
    with pytest.raises(AimdSettingsError, match="AIMD_ODD"):
        read_bool({"AIMD_ODD": value}, "AIMD_ODD", True)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", False), ("off", False), ("No", False), (" true ", True), ("1", True), ("ON", True)],
)
def test_a_boolean_setting_reads_the_documented_words(value: str, expected: bool) -> None:
    assert read_bool({"AIMD_ODD": value}, "AIMD_ODD", not expected) is expected


# -- errors in a carried value name the setting the user set ---------------------------


class DelaySpider:
    download_delay = -1


@pytest.mark.parametrize(
    ("project", "named"),
    [
        ({"DOWNLOAD_DELAY": -1}, "DOWNLOAD_DELAY=-1"),
        ({"DOWNLOAD_DELAY": "1.5s"}, "DOWNLOAD_DELAY='1.5s'"),
        # above an AIMD_MAX_DELAY the user set (the default one is raised to it)
        ({"DOWNLOAD_DELAY": 100, "AIMD_MAX_DELAY": 60}, "DOWNLOAD_DELAY=100"),
        ({"CONCURRENT_REQUESTS_PER_DOMAIN": 0}, "CONCURRENT_REQUESTS_PER_DOMAIN=0"),
        ({"CONCURRENT_REQUESTS_PER_DOMAIN": "2.5"}, "CONCURRENT_REQUESTS_PER_DOMAIN='2.5'"),
    ],
)
def test_an_invalid_carried_value_names_the_users_setting(
    project: dict[str, object], named: str
) -> None:
    """The add-on moves DOWNLOAD_DELAY and CONCURRENT_REQUESTS_PER_DOMAIN into
    AIMD_MIN_DELAY and AIMD_MAX_CONCURRENCY; an error named those, which the
    user never set."""
    settings = apply(project)
    with pytest.raises(AimdSettingsError, match=f"Invalid setting {re.escape(named)}"):
        controller_configs(settings)


def test_an_invalid_spider_attribute_is_named_as_the_spiders() -> None:
    settings = Settings()
    Addon(_CrawlerOf(DelaySpider)).update_settings(settings)  # type: ignore[arg-type]
    with pytest.raises(AimdSettingsError, match=r"the spider's download_delay=-1"):
        controller_configs(settings)


class _CrawlerOf:
    """What the add-on reads of a crawler: its spider class."""

    def __init__(self, spidercls: type) -> None:
        self.spider = None
        self.spidercls = spidercls


# -- a carried setting given at a higher priority than the controller's ----------------


def test_a_spiders_or_command_lines_delay_wins_over_the_projects_floor() -> None:
    """Scrapy's priorities: a spider's custom_settings and ``-s`` win over settings.py."""
    settings = apply({"AIMD_MIN_DELAY": 0.05}, {"DOWNLOAD_DELAY": 0.4})
    assert controller_configs(settings).default.min_delay == 0.4
    settings = Settings()
    settings.set("AIMD_MIN_DELAY", 0.05, priority="project")
    settings.set("DOWNLOAD_DELAY", 2, priority="cmdline")
    settings.set("CONCURRENT_REQUESTS_PER_DOMAIN", 2, priority="cmdline")
    settings.set("AIMD_MAX_CONCURRENCY", 6, priority="project")
    Addon().update_settings(settings)
    assert controller_configs(settings).default.min_delay == 2.0
    assert controller_configs(settings).default.max_concurrency == 2
    # At the same priority, or below, the AIMD_* setting wins, as before.
    settings = apply({"AIMD_MIN_DELAY": 0.05, "DOWNLOAD_DELAY": 0.4})
    assert controller_configs(settings).default.min_delay == 0.05
    settings = apply({"DOWNLOAD_DELAY": 0.4}, {"AIMD_MIN_DELAY": 0.05})
    assert controller_configs(settings).default.min_delay == 0.05


def test_a_crawl_keeps_the_spiders_delay_over_the_projects_floor(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    specs = [HostSpec(name="site", pages=5, links_per_page=2)]
    with start_farm(specs, max_seconds=120) as farm:
        result = run_crawl(
            [url + "/" for url in farm.urls.values()],
            tmp_path / "crawl",
            {**AIMD, "AIMD_MIN_DELAY": 0.05, "AIMD_EVENTS_FILE": str(events)},
            spider="interplay_spiders.PoliteSpider",
        )
    assert len(result.items) >= 6
    assert min(start_gaps(events)) >= 0.4 - 1e-3
    assert "DOWNLOAD_DELAY=0.4 → AIMD_MIN_DELAY=0.4" in result.log
