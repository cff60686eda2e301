"""A farm of simulated sites on loopback, for tests, benchmarks and the demo crawl.

Each host listens on its own 127.0.0.N address (ephemeral port) and behaves like a real
site: latency, capacity limits, token buckets, Retry-After pauses, failures, redirects,
tracking-parameter links and the RFC 9309 robots.txt cases (see ``HostSpec``). Standard
library only; no Scrapy import.

From a test or a benchmark, in a child process so the crawler's loop is undisturbed::

    from sitefarm import HostSpec, start_farm, summarize

    specs = [HostSpec(name="limited", pages=50, rate=5, burst=5),
             HostSpec(name="slow", pages=20, latency=1.0)]
    with start_farm(specs, max_seconds=120) as farm:
        start_urls = [url + "/" for url in farm.urls.values()]
        ...  # crawl
        records = farm.read_log()
    print(summarize(records, specs)["limited"].throttled)

From a shell: ``python -m sitefarm CONFIG.json --log LOG.jsonl`` (or
``--preset demo``) prints one line, ``{"hosts": {name: base URL}, "started": time}``, once
every host listens, and serves until SIGTERM, SIGINT, stdin EOF or ``--max-seconds``.

Every request is one record (a JSON line in the log file, a dict in memory)::

    host           the host's name
    method, path   as requested: the raw target, tracking parameters and all
    page           the page the answer was for ("/", "/p/3", "/p/3?lang=en&view=full"):
                   set on 200 pages and on error_rate 500s, else null
    status         the status sent; 0 when the connection was reset
    reason         why: page, hang, error, redirect, not_found, robots, sitemap,
                   pause, outage, rate, capacity, window, sliding, block, method,
                   bad_request, reset
    arrived        wall-clock time (time.time()) the request line arrived
    finished       wall-clock time the response was written
    in_flight      requests being served at the host when it arrived, itself included
                   (a refused one shows capacity + 1)
    retry_after    the Retry-After value sent, or null
    bytes          the body's length
    connection     the host's connection counter (equal values: one keep-alive connection)
    client_closed  the client had gone before the response was written (a timeout)
    user_agent     the User-Agent header, or null
"""

from __future__ import annotations

from sitefarm.analysis import (
    HostSummary,
    over_capacity_seconds,
    queued_request_seconds,
    summarize,
    totals,
)
from sitefarm.presets import (
    benchmark_farm,
    demo_farm,
    farm_page_ids,
    host_possible_seconds,
    limiter_farm,
    possible_crawl_seconds,
    requests_needed,
)
from sitefarm.runner import (
    FarmError,
    FarmProcess,
    FarmThread,
    farm_in_thread,
    read_log_file,
    start_farm,
)
from sitefarm.server import Farm
from sitefarm.spec import (
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
    "limiter_farm",
    "over_capacity_seconds",
    "possible_crawl_seconds",
    "queued_request_seconds",
    "read_log_file",
    "requests_needed",
    "specs_from_json",
    "specs_to_json",
    "start_farm",
    "summarize",
    "totals",
]
