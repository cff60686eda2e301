"""What the Scrapy-side parts of one crawl share, built once per crawler.

The scheduler and the feedback middleware (and the JOBDIR and the shutdown
grace through the scheduler) work on the same hosts and the same requests:
one :class:`~scrapy_aimd.settings.HostConfigs` read from the settings, one
:class:`~scrapy_aimd.inflight.InFlight` registry and one clock. Here too: the
host key and the robots.txt origin of a request, from Scrapy's per-request
parsed-URL cache, so that each URL is parsed once, whoever asks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary, WeakSet

from scrapy.utils.asyncio import call_later
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.httpobj import urlparse_cached

from scrapy_aimd.core.controller.answer import is_refusal
from scrapy_aimd.core.hosts import host_key_from_netloc, origin_from_netloc
from scrapy_aimd.events import check_events_file, spider_params
from scrapy_aimd.give_up import META as GIVE_UP_META
from scrapy_aimd.inflight import InFlight
from scrapy_aimd.settings import (
    HostConfigs,
    controller_configs,
    read_logstats_interval,
    read_summary_rows,
)

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

    from scrapy_aimd.core.controller import ControllerConfig
    from scrapy_aimd.outside import OutsideGate


@dataclass
class CrawlParts:
    configs: HostConfigs
    flights: InFlight[Request] = field(default_factory=InFlight)
    clock: Callable[[], float] = time.monotonic
    #: Where requests that came around the scheduler wait for their host's turn,
    #: while a single-process scheduler is open.
    outside: OutsideGate | None = None


_PARTS: WeakKeyDictionary[Crawler, CrawlParts] = WeakKeyDictionary()


def crawl_parts(crawler: Crawler) -> CrawlParts:
    """The crawler's shared parts; the first call reads the controller settings and
    checks the reporter's (an invalid one raises ``AimdSettingsError`` naming it).

    The feedback middleware asks first, as the engine is made: Scrapy builds the
    scheduler and its reporter only as the spider opens, where an error is
    followed by ``RuntimeError: Engine slot not assigned``."""
    parts = _PARTS.get(crawler)
    if parts is None:
        configs = controller_configs(crawler.settings)
        check_reporting(crawler)
        parts = _PARTS[crawler] = CrawlParts(configs)
    return parts


def check_reporting(crawler: Crawler) -> None:
    """Read the reporter's settings, and check that the events file can be written."""
    settings = crawler.settings
    read_summary_rows(settings)
    read_logstats_interval(settings)
    events_file = settings.get("AIMD_EVENTS_FILE") or None
    if events_file is not None:
        check_events_file(events_file, spider_params(crawler, "spider"))


#: Reactor turns between a request reaching the downloader and its socket write:
#: the downloader starts the download as a task (one turn), and the transport
#: writes its buffer when the reactor next polls (another).
TURNS_TO_WRITE = 2


def when_written(report: Callable[[], None], turns: int = TURNS_TO_WRITE) -> None:
    """Call ``report()`` ``turns`` reactor turns after a request reached the
    downloader: its socket write happens then. A callback that keeps the reactor
    (a slow parse) holds the write back by as long, and a gap counted from the
    downloader would reach the server shorter by that much, below a Crawl-delay;
    counted from the write, it does not (tests/test_crawl_send_jitter.py)."""
    if turns <= 0:
        report()
    else:
        call_later(0, when_written, report, turns - 1)


#: The meta key that remembers which ``download_slot`` the crawl set itself, so
#: that a copy that carried it over (a redirect to another host, scrapy #2141)
#: is told from a slot that the user chose.
AUTO_SLOT_META = "aimd_auto_slot"

#: The meta key counting how often a refused request was queued again
#: (:setting:`AIMD_THROTTLE_RETRIES`): the feedback middleware writes it, and a
#: fleet worker reads it to tell a requeued start request from another worker's repeat.
THROTTLE_RETRIES_META = "aimd_throttle_retries"

#: The meta key that marks a request whose page answered a block status (403) with
#: no block proven: the feedback middleware writes it, and the store tells the
#: host's controller that the page's next one is its own (no news of a block).
FORBIDDEN_META = "aimd_forbidden_again"


def request_host(request: Request) -> str:
    """The politeness key of a request: the ``download_slot`` the user set on it,
    else its URL's host key (see ``scrapy_aimd.core.hosts``). Requests that share
    a slot share one controller, as Scrapy's downloader slots do.

    A URL without a host (``data:``, ``file:///``) is keyed by its scheme,
    ``data:`` or ``file:``: the summary, the stats and the events name it so,
    where an empty name would be read as none."""
    slot = user_slot(request)
    if slot is not None:
        return slot
    parts = urlparse_cached(request)
    host = host_key_from_netloc(parts.scheme, parts.netloc)
    if not host and parts.scheme:
        return f"{parts.scheme.lower()}:"
    return host


def user_slot(request: Request) -> str | None:
    """The ``download_slot`` that the user set, or None (not set, or set by the crawl)."""
    slot = request.meta.get("download_slot")
    if slot is None or slot == request.meta.get(AUTO_SLOT_META):
        return None
    return str(slot)


def assign_slot(request: Request) -> None:
    """Before a request goes to the downloader: keep the user's slot; otherwise set
    Scrapy's own slot key for its URL (the hostname, without port), as the
    downloader would, and remember that the crawl set it. The hostname, not the
    host key with its port: ``DOWNLOAD_SLOTS`` is keyed so (Scrapy's default
    slot), and a user's per-slot settings must meet the requests they name. Every
    mode sets the slot here."""
    if user_slot(request) is not None:
        return
    slot = urlparse_cached(request).hostname or ""
    request.meta["download_slot"] = request.meta[AUTO_SLOT_META] = slot


def may_be_refusal(cfg: ControllerConfig, status: int | None, *, timeout: bool) -> bool:
    """Whether an answer may read as a refusal (``Reaction.refused``) before the
    controller has read it: a throttle status, or a timeout. The one place
    outside the controller that says so (a fleet worker sends the others
    only such answers at once: the rest may wait for its next claim)."""
    return is_refusal(status, timeout, cfg.refusal_codes)


def request_depth(request: Request) -> int:
    """The request's depth (``meta["depth"]``, set by DepthMiddleware), 0 when
    missing or not an integer: the frontier orders a host's requests by it."""
    depth = request.meta.get("depth", 0)
    return depth if isinstance(depth, int) else 0


def hand_out_given_up(request: Request, stats: StatsCollector | None) -> Request:
    """A request of a host given up on (``AIMD_HOST_GIVE_UP``), handed out for the
    feedback middleware to fail with ``HostGaveUp``: marked with its host's
    name, not its copies' (an errback's fallback to another host goes on)."""
    request.meta[GIVE_UP_META] = request_host(request)
    if stats is not None:
        stats.inc_value("aimd/host_gave_up/requests")
    return request


def stop_crawl(crawler: Crawler, reason: str) -> bool:
    """Close the spider with ``reason`` (an error of scrapy-aimd's: the engine's loop
    must not break quietly); False if it is closed or closing already."""
    engine = crawler.engine
    if engine is None or engine.spider is None or crawler in _STOPPED:
        return False
    _STOPPED.add(crawler)
    deferred_from_coro(engine.close_spider_async(reason=reason))
    return True


#: Crawlers whose spider ``stop_crawl`` closed.
_STOPPED: WeakSet[Crawler] = WeakSet()


def origin_host(origin: str) -> str:
    """The host key of a robots.txt origin (``scheme://host[:port]``)."""
    scheme, _, netloc = origin.partition("://")
    return host_key_from_netloc(scheme, netloc)


def request_origin(request: Request) -> str:
    """scheme://host[:port] without user information: robots.txt is per scheme,
    host and port, and a password must not reach its URL or the log. One
    spelling per site (see ``scrapy_aimd.core.hosts.origin_from_netloc``):
    ``http://host:80``, ``http://host.`` and ``http://HOST`` are one origin,
    whose robots.txt is fetched once."""
    parts = urlparse_cached(request)
    return origin_from_netloc(parts.scheme, parts.netloc)
