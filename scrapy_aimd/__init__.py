"""scrapy-aimd: fast and polite crawling for Scrapy.

The Scrapy-facing classes are imported lazily, so that the pure core
(``scrapy_aimd.core.controller``, ``scrapy_aimd.core.canonical``, ``scrapy_aimd.core.frontier``
...) can be used and tested without importing Scrapy.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Addon": "scrapy_aimd.addon",
    "AimdScheduler": "scrapy_aimd.scheduler",
    "AimdDownloaderMiddleware": "scrapy_aimd.feedback_middleware",
    "AimdRequestFingerprinter": "scrapy_aimd.fingerprint",
    "AimdDupeFilter": "scrapy_aimd.dupefilter",
    "RobotsTxtMiddleware": "scrapy_aimd.robots_middleware",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'scrapy_aimd' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
