"""Spiders of tests/test_settings_interplay.py, loaded by import path in the crawl's process."""

from __future__ import annotations

from typing import Any

from crawlrunner import FarmSpider


class PoliteSpider(FarmSpider):
    """Asks for more politeness than the project's floor, in its own settings."""

    name = "polite"
    custom_settings: dict[str, Any] = {"DOWNLOAD_DELAY": 0.4}
