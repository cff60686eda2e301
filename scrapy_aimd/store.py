"""The one seam between the scheduler and where its frontier lives.

``AimdScheduler`` is plumbing: the dupefilter, the robots gate, then a store.
A store keeps the queued requests and the hosts' politeness, hands out only a
request whose host may start now, and hears each answer. Three of them:

- :class:`~scrapy_aimd.local_store.LocalStore` over memory (no ``JOBDIR``),
- the same over SQLite with ``JOBDIR`` (crash-safe, :mod:`scrapy_aimd.jobdir`),
- :class:`~scrapy_aimd.fleet.worker.FleetStore` over Redis with
  :setting:`AIMD_REDIS_URL`: its batching, claims, leases, heartbeats and
  flush timer live inside it.

The scheduler never asks which one it has;
:func:`scrapy_aimd.stores.build_store` is the one place that chooses, from the
settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter

    from scrapy_aimd.core.controller import HostController, Ticket
    from scrapy_aimd.live import QueuedHosts
    from scrapy_aimd.reporter import Reporter
    from scrapy_aimd.robots_middleware import RobotsListener
    from scrapy_aimd.scheduler import AimdScheduler


@dataclass(frozen=True, slots=True)
class Handout:
    """A request that may start now: its host (None: sent without politeness,
    as a request that cannot be stored in a fleet), the ticket its host issued
    (None where the store keeps the host's accounting itself), when it started,
    and where it came from for Scrapy's ``scheduler/dequeued/<where>`` stat."""

    request: Request
    host: str | None
    ticket: Ticket | None
    at: float
    where: str


class FrontierStore(Protocol):
    """Where the frontier, the seen set's shared part and the hosts' state live."""

    @property
    def where(self) -> str:
        """Where requests set aside are counted (``scheduler/dequeued/<where>``)."""

    @property
    def resumable(self) -> bool:
        """A stopping crawl's cancelled downloads go back to the queue."""

    @property
    def gave_up_note(self) -> str:
        """Said after "its N queued requests fail with HostGaveUp"."""

    def check(self, dupefilter: BaseDupeFilter) -> None:
        """At startup, once the dupefilter is built: its files agree with the
        store's (a JOBDIR)."""

    def make_reporter(self, crawler: Crawler, events_file: str | None) -> Reporter:
        """The crawl's reporter (a fleet worker's names it in the events)."""

    def open(self, scheduler: AimdScheduler) -> None:
        """Start: the scheduler's dupefilter, robots gate, reporter and wake timer
        are ready."""

    def robots_listener(self, scheduler: AimdScheduler) -> RobotsListener:
        """What the robots middleware tells of robots.txt news (a fleet's also
        shares the answers with the other workers)."""

    def hosts_view(self) -> QueuedHosts | None:
        """The hosts for the live line, where this process knows them all."""

    def seen(self, request: Request) -> bool:
        """Whether the request is a duplicate, to be dropped (and remembered if not)."""

    def restore_robots(self, request: Request) -> None:
        """Before the robots gate asks about ``request``: rules saved by an
        earlier run of its origin, if the store keeps them."""

    def push(self, request: Request, host: str) -> str | None:
        """Queue a request the gate let through: where (for the stats), or None
        when it cannot be queued (a lost Redis)."""

    def keep(self, request: Request, host: str) -> str:
        """Hold a request the scheduler keeps aside (for robots.txt, disallowed,
        given up) until the crawl is done with it, where the store is durable;
        where (for the stats)."""

    def handed_out(self, request: Request) -> None:
        """A request kept aside was handed out."""

    def tick(self, now: float) -> None:
        """At each ``next_request``, before anything is handed out."""

    def pop(self, now: float) -> Handout | None:
        """A request whose host may start now, started; None: the wake timer is
        armed for when one may (or the scheduler has requests set aside)."""

    def has_pending(self) -> bool:
        """Requests queued, held or in flight here, or fleet-wide until idle."""

    def take_given_up(self) -> list[tuple[str, Request]]:
        """Requests of hosts given up on, to fail with ``HostGaveUp``."""

    def give_up(self, host: str) -> tuple[bool, int]:
        """``AIMD_HOST_GIVE_UP`` ran out for ``host``: its queue ends (the requests
        come from ``take_given_up``). Whether this was the first to give it up,
        and how many were queued."""

    def answer(self, request: Request, feedback: Mapping[str, Any]) -> str | None:
        """``response_feedback``: the answer to its host's controller (reported);
        the host, or None when it is not one to count (not ours, cancelled)."""

    def reached_downloader(self, request: Request) -> None:
        """The host's gap counts from the send, not the hand-out."""

    def controller(self, host: str) -> HostController:
        """The host's controller as this process knows it."""

    def set_crawl_delay(self, host: str, floor: float) -> HostController | None:
        """robots.txt's Crawl-delay: the host's gap keeps to ``floor``."""

    def robots_settled(self, origin: str) -> None:
        """``origin``'s rules are known."""

    def close(self, reason: str, now: float) -> list[tuple[str, HostController]]:
        """Release what is in flight and write the closing stats; the hosts for
        the summary."""

    def shut(self) -> None:
        """Last, after the dupefilter closed: let go of the store."""

    def failed(self, exc: BaseException, where: str) -> bool:
        """An error of the store's (a disk, a Redis): stop the crawl as it says and
        return True; False: not the store's, the scheduler handles it."""
