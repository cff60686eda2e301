"""Every setting a crawl reads at start, given a value no setting can hold,
stops it with ``AimdSettingsError`` naming that setting: an integer too large
for a float (``10**400``), "1e400", NaN, a word. The crawler is built as
``scrapy crawl`` builds it (add-ons, then the middlewares and the scheduler)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from crawling import AIMD, run_crawl
from scrapy import Spider
from scrapy.utils.test import get_crawler

from scrapy_aimd.feedback_middleware import AimdDownloaderMiddleware
from scrapy_aimd.robots_middleware import RobotsTxtMiddleware
from scrapy_aimd.scheduler import AimdScheduler
from scrapy_aimd.settings import AimdSettingsError

DOCS = Path(__file__).resolve().parent.parent / "docs" / "settings.rst"
DOCUMENTED = re.findall(r"^\.\. setting:: (\S+)\s*$", DOCS.read_text(encoding="utf-8"), re.M)
#: Scrapy's own settings that scrapy-aimd reads or carries.
CARRIED = ["DOWNLOAD_DELAY", "CONCURRENT_REQUESTS_PER_DOMAIN", "DOWNLOAD_TIMEOUT"]
#: Read only in a fleet: given an unreachable one, they are read before it is asked.
FLEET_ONLY = {"AIMD_FLEET_KEY", "AIMD_FLEET_IDLE_CLOSE"}


class StartSpider(Spider):
    name = "start"


def start(settings: dict[str, object]) -> None:
    crawler = get_crawler(
        StartSpider, {"ADDONS": {"scrapy_aimd.Addon": 500}, "ROBOTSTXT_OBEY": True, **settings}
    )
    crawler._apply_settings()
    AimdDownloaderMiddleware.from_crawler(crawler)
    RobotsTxtMiddleware.from_crawler(crawler)
    AimdScheduler.from_crawler(crawler)


@pytest.mark.parametrize("value", [10**400, -(10**400)], ids=["10**400", "-10**400"])
@pytest.mark.parametrize("name", DOCUMENTED + CARRIED)
def test_an_int_too_large_for_a_float_names_the_setting(name: str, value: int) -> None:
    settings: dict[str, object] = {name: value}
    if name in FLEET_ONLY:
        settings["AIMD_REDIS_URL"] = "redis://127.0.0.1:9"
    with pytest.raises(AimdSettingsError, match=f"Invalid setting {name}="):
        start(settings)


@pytest.mark.parametrize("value", ["1e400", float("nan"), "x"])
@pytest.mark.parametrize(
    "name", ["AIMD_MIN_DELAY", "AIMD_MAX_DELAY", "AIMD_MAX_CONCURRENCY", *CARRIED]
)
def test_a_number_setting_refuses_what_is_no_number(name: str, value: object) -> None:
    with pytest.raises(AimdSettingsError, match=f"Invalid setting {name}="):
        start({name: value})


def test_a_crawl_with_an_int_too_large_for_a_float_shows_the_one_error(tmp_path: Path) -> None:
    with pytest.raises(AssertionError) as failed:
        run_crawl(
            ["http://127.0.0.1:9/"],
            tmp_path / "crawl",
            {**AIMD, "AIMD_MIN_DELAY": 10**400},
            timeout=60,
        )
    shown = str(failed.value)
    assert "Invalid setting AIMD_MIN_DELAY=" in shown
    assert "Crawler.stats is not set yet" not in shown
    assert "OverflowError" not in shown
