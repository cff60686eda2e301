"""Proves which configuration a run really had: one real crawl, its log read.

The harness copies this file into the extracted Scrapy ``tests/`` folder (so
that Scrapy's ``conftest.py`` and ``mockserver`` fixture apply) and runs it
first in both runs. ``SCRAPY_CONTRACTS_EXPECT_ADDON=1`` says the add-on must
be enabled, ``0`` that it must not be: a shim that silently stopped working
would otherwise make the add-on run look like a clean stock run.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from scrapy import Spider
from scrapy.utils.test import get_crawler
from tests.utils.decorators import inline_callbacks_test

if TYPE_CHECKING:
    import pytest
    from tests.mockserver.http import MockServer


class _OnePage(Spider):
    name = "aimd_contracts_probe"

    def parse(self, response: Any) -> Any:
        yield {"status": response.status}


@inline_callbacks_test
def test_addon_configuration(caplog: pytest.LogCaptureFixture, mockserver: MockServer):  # type: ignore[no-untyped-def]
    expect = os.environ["SCRAPY_CONTRACTS_EXPECT_ADDON"] == "1"
    with caplog.at_level(logging.INFO):
        crawler = get_crawler(_OnePage)  # add-ons are applied (and logged) here
        yield crawler.crawl(start_urls=[mockserver.url("/status?n=200")])
    enabled = [r.getMessage() for r in caplog.records if "Enabled addons" in r.getMessage()]
    assert len(enabled) == 1, enabled
    assert ("scrapy_aimd" in enabled[0]) is expect, enabled[0]
    scheduler = crawler.settings["SCHEDULER"]
    assert (scheduler == "scrapy_aimd.scheduler.AimdScheduler") is expect, scheduler
    assert crawler.stats.get_value("item_scraped_count") == 1
    if expect:
        assert any(r.name.startswith("scrapy_aimd") for r in caplog.records)
