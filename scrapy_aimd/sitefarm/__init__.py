"""A farm of simulated sites on loopback, for tests, benchmarks and the demo crawl.

Each host listens on its own 127.0.0.N address (ephemeral port) and behaves like a real
site: latency, capacity limits, token buckets, Retry-After pauses, failures, redirects,
tracking-parameter links and the RFC 9309 robots.txt cases. Every request is logged.
Standard library only; no Scrapy import.
"""

from __future__ import annotations

from scrapy_aimd.sitefarm.analysis import HostSummary, over_capacity_seconds, summarize, totals
from scrapy_aimd.sitefarm.presets import (
    benchmark_farm,
    demo_farm,
    farm_page_ids,
    host_possible_seconds,
    possible_crawl_seconds,
    requests_needed,
)
from scrapy_aimd.sitefarm.runner import (
    FarmError,
    FarmProcess,
    FarmThread,
    farm_in_thread,
    read_log_file,
    start_farm,
)
from scrapy_aimd.sitefarm.server import Farm
from scrapy_aimd.sitefarm.spec import (
    ROBOTS_MODES,
    HostSpec,
    Redirect,
    SpecError,
    specs_from_json,
    specs_to_json,
)

__all__ = [
    "ROBOTS_MODES",
    "Farm",
    "FarmError",
    "FarmProcess",
    "FarmThread",
    "HostSpec",
    "HostSummary",
    "Redirect",
    "SpecError",
    "benchmark_farm",
    "demo_farm",
    "farm_in_thread",
    "farm_page_ids",
    "host_possible_seconds",
    "over_capacity_seconds",
    "possible_crawl_seconds",
    "read_log_file",
    "requests_needed",
    "specs_from_json",
    "specs_to_json",
    "start_farm",
    "summarize",
    "totals",
]
