"""The frontier store of a fleet worker: with ``AIMD_REDIS_URL`` the frontier,
the seen set and every host's politeness live in Redis (:mod:`scrapy_aimd.fleet`).

:class:`FleetStore` is ``AimdScheduler``'s store (:mod:`scrapy_aimd.store`), as
the local one is in a single process: requests go to the fleet's queues
(checked against the shared seen set, start requests too), ``pop`` claims one
whose host may start now fleet-wide, and each answer is judged by the host's
controller as Redis holds it. The batching of pushes and answers, the claims
in batches, the leases, their renewal, the worker's heartbeat and the flush
timer all live here. A claimed request stays leased until the engine is done
with it (its callback ran and its children are pushed): a worker killed at
any moment loses nothing, its leases expire and their requests are queued
again.

What stays in this worker: robots.txt requests, each sent only once it holds a
place on its host fleet-wide, as a claim would, and only by the one worker
that takes the origin's fetch: the others read its answer from Redis
(:mod:`scrapy_aimd.fleet.robots_store`), their requests of the origin held
until it is there; and requests that cannot be serialized (callbacks that
are not spider methods: handed out from here, without fleet politeness).

The fleet closes when nothing is queued or leased fleet-wide for
``AIMD_FLEET_IDLE_CLOSE`` seconds; a worker never deletes the shared state.
Redis lost mid-crawl stops this worker with an ERROR line; its leases come
back to the queues once they expire on a Redis that is back.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import deque
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from scrapy import signals as scrapy_signals
from scrapy.utils.asyncio import call_later, create_looping_call

from scrapy_aimd._compat import requests_in_progress
from scrapy_aimd.core.controller import HostController, gate
from scrapy_aimd.core.controller.gate import Limits
from scrapy_aimd.core.dedup import SeenSet
from scrapy_aimd.core.robots import Verdict
from scrapy_aimd.crawl import (
    FORBIDDEN_META,
    THROTTLE_RETRIES_META,
    crawl_parts,
    may_be_refusal,
    origin_host,
    request_depth,
    request_host,
    stop_crawl,
    when_written,
)
from scrapy_aimd.dupefilter import AimdDupeFilter
from scrapy_aimd.fingerprint import (
    key_at_url_function,
    redirected_to_same_key,
    request_key_function,
    rules_id_of,
)
from scrapy_aimd.fleet import (
    Claim,
    Fleet,
    FleetConnectionLost,
    FleetFrontier,
    FleetRobots,
    FleetStoreError,
    Item,
    SharedRobots,
)
from scrapy_aimd.fleet.redis_store import lease_time
from scrapy_aimd.fleet.worker_log import FleetReporter, worker_name
from scrapy_aimd.request_codec import RequestCodec
from scrapy_aimd.robots_middleware import (
    ROBOTS_META,
    RobotsAnswer,
    RobotsTxtMiddleware,
)
from scrapy_aimd.settings import FleetSettings, masked_url, read_fleet_settings, read_float
from scrapy_aimd.store import Handout
from scrapy_aimd.wake import WakeTimer

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.utils.asyncio import CallLaterResult

    from scrapy_aimd.core.controller import Reaction
    from scrapy_aimd.fleet import FleetStatus
    from scrapy_aimd.reporter import Reporter
    from scrapy_aimd.robots_middleware import RobotsListener
    from scrapy_aimd.scheduler import AimdScheduler

logger = logging.getLogger(__name__)

#: The longest the wake timer waits: other workers push and free places too
#: (an idle worker asks Redis five times a second, one round trip each).
POLL = 0.2
#: Seconds a fleet status is reused for ``has_pending_requests``.
STATUS_TTL = 0.1
#: Seconds between two checks for requests the engine is done with.
DONE_EVERY = 0.05
#: Seconds that requests to queue, answers, sends and leases done wait for the
#: next claim to carry them before they go alone (requests claimed together are
#: handed out without a round trip, so some do wait that long).
FLUSH_AFTER = 0.02
#: Seconds before its due time that the flush timer may fire and send what waits
#: (timers' clocks and this worker's may differ that much).
FLUSH_EARLY = 0.001
#: Seconds a closing worker goes on sending answers that lose their race or wait
#: for another worker's turn on their host (each turn lasts 50 ms at most).
CLOSE_FLUSH = 1.0
#: Pushes buffered before one round trip takes them all.
PUSH_BUFFER = 500
#: A worker renews the leases it holds this often, as a share of their hold
#: after an answer: a callback or pipeline that runs longer keeps its request.
RENEW_SHARE = 1 / 3
#: The stats a request buffered for the fleet counts in (Scrapy's as scrapy-redis
#: writes them), and leaves if the shared seen set held it.
ENQUEUED_STATS = ("aimd/enqueued", "scheduler/enqueued", "scheduler/enqueued/redis")
#: Seconds between writes of the ``aimd/fleet/*`` counts to the stats, so that
#: Scrapy's periodic stats and monitoring see them during the crawl.
COUNTS_EVERY = 1.0
#: Most requests claimed in one round trip: as many as the downloader has room
#: for (the engine asks for them one after the other, in one reactor turn).
CLAIM_BATCH = 8
#: Seconds a request claimed with others may wait to be handed out; older ones
#: go back to their queues (the engine stopped asking), and their places with them.
CLAIMED_FOR = 0.1
#: Seconds after a claim that made fewer claims than asked (no host could start
#: for more) during which a claim that would carry nothing is taken to make none
#: too (see ``_ran_out``): the engine asks again at once for the room left.
RAN_OUT_FOR = 0.01
#: robots.txt requests a worker looks at per ``next_request`` call (it tries to
#: place one of them: a round trip).
ROBOTS_PER_CALL = 8
#: Seconds before a claimed request is a gap old that ``_give_back_held`` looks
#: again (times of day on Redis's clock differ from their float sums by less).
HELD_MARGIN = 1e-6
#: No limit on requests in flight: the gate asked about the gap alone.
_NO_LIMIT = 2**62
#: Keys of the shared seen set that a worker also keeps, to drop repeats without a
#: round trip (about 12 B each: 12 MB at most).
KNOWN_KEYS = 1_000_000
#: Seconds with nothing queued fleet-wide and only other workers' leases left
#: before a worker says it waits for them (the end of every crawl has a moment
#: of it), and then how often it says so.
LEASE_WAIT_QUIET = 2.0
LEASE_WAIT_EVERY = 10.0


class FleetStore:
    """``AimdScheduler``'s frontier store in Redis (one per crawl)."""

    #: Requests set aside (disallowed, given up) stay in this worker.
    where = "memory"
    #: A stopping worker's cancelled downloads go back to the fleet's queues.
    resumable = True
    gave_up_note = (
        ", and so do the requests of it that come later, in any worker (given up fleet-wide)"
    )

    def __init__(self, crawler: Crawler, settings: FleetSettings, fleet: Fleet) -> None:
        parts = crawl_parts(crawler)
        self.crawler = crawler
        self.stats = crawler.stats
        self.settings = settings
        self.fleet = fleet
        self.configs = parts.configs
        self.flights = parts.flights
        self.clock = parts.clock
        self.worker = worker_name()
        timeout = read_float(crawler.settings, "DOWNLOAD_TIMEOUT", 180.0)
        self._lease_time = lease_time(timeout)
        self.frontier: FleetFrontier[Request] | None = None
        self.shared_robots = FleetRobots(fleet, lease_time=self._lease_time)
        self._request_key: Callable[[Request], int] = request_key_function(
            crawler.request_fingerprinter
        )
        self._key_at = key_at_url_function(crawler.request_fingerprinter)
        #: The scheduler's parts (from ``open()``).
        self.scheduler: AimdScheduler | None = None
        self.spider: Spider | None = None
        self.df: BaseDupeFilter | None = None
        self.robots: RobotsTxtMiddleware | None = None
        self.reporter: Reporter | None = None
        self.wake = WakeTimer(crawler)
        #: Renews the leases this worker holds (from ``open()``).
        self._renewal: Any = None
        #: Keeps this worker's heartbeat alive (from ``open()``).
        self._beating: Any = None
        self._counting: Any = None
        #: Requests that cannot be serialized: they stay in this worker.
        self.local: deque[Request] = deque()
        #: Requests of hosts given up on, for the scheduler to fail with
        #: ``HostGaveUp``: claimed before their host was given up on, or local.
        self.gave_up: list[tuple[str, Request]] = []
        #: The key of each request that ``seen`` let through, until it is pushed.
        self._keys: WeakKeyDictionary[Request, int | None] = WeakKeyDictionary()
        #: robots.txt requests waiting for a place on their host (see ``_hold_robots``),
        #: each with when to ask again (this worker's clock).
        self.robots_waiting: list[list[Any]] = []
        #: The latest call made a robots.txt hold: the next one claims (they take turns).
        self._held_robots = False
        #: robots.txt answers applied once the engine is done with their requests
        #: (see ``answer``): when they came (the fleet's clock), the feedback.
        self.robots_answers: dict[Request, tuple[float, Mapping[str, Any]]] = {}
        #: Requests to push, taken by one round trip at the next chance.
        self.pending: list[Item[Request]] = []
        #: Keys this worker sent to the shared seen set (see ``_know``).
        self.known = SeenSet()
        #: Requests claimed by this worker whose leases are still held.
        self.claims: dict[Request, Claim[Request]] = {}
        #: Claimed with others in one round trip, not handed out yet: each with
        #: when it was claimed (this worker's clock).
        self.claimed: deque[tuple[Claim[Request], float]] = deque()
        #: When the latest claim was made (this worker's clock).
        self._claimed_at = -math.inf
        #: Hosts whose robots.txt this worker has settled (fetched or read from
        #: Redis): until then every send of the host is reported (see
        #: ``reached_downloader``).
        self.robots_settled_hosts: set[str] = set()
        self._status: FleetStatus | None = None
        self._status_at = -math.inf
        #: Since when the fleet has had only other workers' leases (inf: not so),
        #: when that was last logged, and the fleet's expired leases last seen.
        self._lease_wait_since = math.inf
        self._lease_wait_logged = -math.inf
        self._reaped_seen: int | None = None
        self._done_at = -math.inf
        #: Sends what waits for the next claim if none comes (``FLUSH_AFTER``): the
        #: timer and when it fires, and when what waits must go (this worker's
        #: clock), set since the frontier's call ``_flush_calls`` (``exchanges``):
        #: a call after it took what waited then, and the wait starts again.
        self._flush_call: CallLaterResult | None = None
        self._flush_at = math.inf
        self._flush_due = math.inf
        self._flush_calls = 0
        #: ``_give_back_held`` found none to give back at this ``FleetFrontier.changes``,
        #: and need not look again before this time (the fleet's clock) unless it moves.
        self._held_changes = -1
        self._held_at = self._held_until = -math.inf
        #: Redis was lost: nothing more is asked of it.
        self.lost = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FleetStore:
        """Connects at once, so that an unreachable Redis stops ``scrapy crawl``
        before it starts, with an error that names ``AIMD_REDIS_URL``."""
        settings = read_fleet_settings(crawler.settings, getattr(crawler.spidercls, "name", None))
        assert settings is not None, "a fleet store without AIMD_REDIS_URL"
        fleet = Fleet(
            settings.url,
            settings.key,
            rules_id=rules_id_of(crawler.request_fingerprinter),
            heartbeat=settings.heartbeat,
        )
        return cls(crawler, settings, fleet)

    # -- the store's protocol (scrapy_aimd.store.FrontierStore) ---------------------

    def check(self, dupefilter: BaseDupeFilter) -> None:
        pass

    def make_reporter(self, crawler: Crawler, events_file: str | None) -> Reporter:
        return FleetReporter(crawler, events_file=events_file, worker=self.worker)

    def open(self, scheduler: AimdScheduler) -> None:
        self.scheduler = scheduler
        self.spider, self.df = scheduler.spider, scheduler.df
        self.robots, self.reporter, self.wake = scheduler.robots, scheduler.reporter, scheduler.wake
        assert self.spider is not None
        codec = RequestCodec(self.spider)
        self.frontier = FleetFrontier(
            self.fleet,
            encode=codec.encode,
            decode=codec.decode,
            config=self.configs.for_host,
            lease_time=self._lease_time,
            in_use=self.claims.__contains__,
            again=self._flush_again,
        )
        # Leases that expired before this worker joined are no news of its. (A
        # Redis that fails here fails the first status too, which stops the worker.)
        with contextlib.suppress(FleetConnectionLost, FleetStoreError):
            self._reaped_seen = self.frontier.status().reaped
        self._beating = create_looping_call(self._beat)
        self._beating.start(self.fleet.heartbeat_ms / 3000, now=True)
        self._renewal = create_looping_call(self._renew_leases)
        self._renewal.start(self.frontier.callback_time * RENEW_SHARE, now=False)
        self._counting = create_looping_call(self._write_counts)
        self._counting.start(COUNTS_EVERY, now=False)
        logger.info(
            "Fleet worker %s on %s, key prefix %s (closes after %.1fs with nothing "
            "queued or leased fleet-wide)",
            self.worker,
            masked_url(self.settings.url),
            self.settings.key,
            self.settings.idle_close,
        )
        self.stats.set_value("aimd/fleet/worker", self.worker)
        if not isinstance(self.df, AimdDupeFilter):
            kind = type(self.df)
            logger.warning(
                "DUPEFILTER_CLASS %s.%s does not filter in a fleet: the fleet's shared "
                "seen set drops repeats, by scrapy-aimd's request keys (the filter "
                "only logs them); dont_filter=True still sends a request",
                kind.__module__,
                kind.__qualname__,
            )

    def robots_listener(self, scheduler: AimdScheduler) -> RobotsListener:
        return _SharingListener(scheduler, self)

    def hosts_view(self) -> None:
        """No live line of the hosts: the fleet's are in Redis."""
        return None

    def close(self, reason: str, now: float) -> list[tuple[str, HostController]]:
        for loop in (self._beating, self._renewal, self._counting):
            if loop is not None and loop.running:
                loop.stop()
        held = len(self.claims)
        self.stats.set_value("aimd/in_flight_at_close", held)
        hosts: list[tuple[str, HostController]] = []
        if not self.lost and self.frontier is not None:
            try:
                self._flush()
                self._finish_done(force=True)
                self._give_back_claimed()
                if not self.frontier.flush_all(CLOSE_FLUSH):
                    logger.warning(
                        "Fleet at close: answers not stored within %.1fs (their leases "
                        "go back with this worker's heartbeat, and their requests are "
                        "fetched again)",
                        CLOSE_FLUSH,
                    )
                if self.claims:  # never finished here: back to the queues now
                    given = self.frontier.give_back([c.lease for c in self.claims.values()])
                    self.stats.set_value("aimd/fleet/given_back", given)
                    self.claims.clear()
                self.fleet.beat(alive=False)  # and every lease still held goes back
                status = self.frontier.status()
                self.stats.set_value("aimd/queued_at_close", status.queued)
                totals = self.reporter.totals if self.reporter is not None else {}
                for host in sorted(totals):
                    controller = self.frontier.controller(host)
                    if controller is not None:
                        hosts.append((host, controller))
            except Exception as exc:
                logger.error("Fleet at close: %s (leases come back when they expire)", exc)
        if self._flush_call is not None:  # the steps above sent what it would have
            self._flush_call.cancel()
            self._flush_call = None
            self._flush_at = math.inf
        if self.frontier is not None:
            self._write_counts()
            counters = self.fleet.counters
            if reason == "finished" and not counters.claims and counters.duplicates:
                logger.warning(
                    "This worker fetched nothing: the fleet under %s had seen its %d "
                    "requests already (a finished crawl's seen set stays in Redis). To "
                    "crawl again, reset the fleet (scrapy_aimd.fleet.clear_fleet, see "
                    "docs/fleet.rst) or set another AIMD_FLEET_KEY",
                    self.settings.key,
                    counters.duplicates,
                )
            by_host = self.frontier.feedbacks_by_host
            if by_host:
                logger.info(
                    "Fleet feedbacks by host (of which applied again): %s",
                    ", ".join(f"{h} {n} ({again})" for h, (n, again) in sorted(by_host.items())),
                )
        return hosts

    def shut(self) -> None:
        self.fleet.close()  # the shared state stays: other workers may go on

    def failed(self, exc: BaseException, where: str) -> bool:
        """Every error stops this worker (see ``_stop``)."""
        if not isinstance(exc, Exception):
            return False
        self._stop(exc, where)
        return True

    def _write_counts(self) -> None:
        """The ``aimd/fleet/*`` counts, as they are now (every ``COUNTS_EVERY``
        seconds, and at close)."""
        if self.frontier is None:
            return
        counted = {**self.frontier.counters.as_stats(), **self.frontier.contention.as_stats()}
        for name, value in counted.items():
            self.stats.set_value(name, value)
        self.stats.set_value("aimd/fleet/stray_starts", self.frontier.stray_starts)

    def has_pending(self) -> bool:
        if self.local or self.pending or self.claims or self.claimed or self.robots_waiting:
            return True
        if self.gave_up:
            return True
        if self.frontier is not None and self.frontier.waiting:
            return True
        if self.lost or self.frontier is None:
            return False
        status = self._fleet_status()
        if status is None:
            return False
        self._log_lease_wait(status)
        if status.queued or status.leased:
            return True
        return status.idle_for < self.settings.idle_close

    def _log_lease_wait(self, status: FleetStatus) -> None:
        """Say what the fleet waits for when this worker holds nothing, nothing is
        queued and other workers hold leases: a worker that died holds them until
        they expire, and a silent wait looks like a hang. Say too when expired
        leases came back."""
        now = self.clock()
        if self._reaped_seen is not None and status.reaped > self._reaped_seen:
            logger.info(
                "%d leases of other workers came back to the queues (a worker died or "
                "stalled: their requests are fetched again)",
                status.reaped - self._reaped_seen,
            )
        self._reaped_seen = status.reaped
        if status.queued or not status.leased:
            self._lease_wait_since = math.inf
            return
        self._lease_wait_since = min(self._lease_wait_since, now)
        if (
            now - self._lease_wait_since >= LEASE_WAIT_QUIET
            and now - self._lease_wait_logged >= LEASE_WAIT_EVERY
        ):
            self._lease_wait_logged = now
            logger.info(
                "Nothing queued fleet-wide: waiting for %d requests leased by other "
                "workers (a dead worker's leases come back once its heartbeat expires, "
                "within %.0fs)",
                status.leased,
                self.fleet.heartbeat_ms / 1000,
            )

    def seen(self, request: Request) -> bool:
        """A repeat of a key this worker sent to the shared seen set (the scheduler
        logs it as the dupefilter logs one; the engine says it was dropped, as in
        one process). Its key is checked unless ``dont_filter`` asks otherwise
        (start requests are checked all the same: every worker sends them)."""
        key: int | None = None
        if not request.dont_filter or _a_start_request(request):
            key = self._key(request)
            if key is not None:
                if key in self.known:
                    self.fleet.counters.duplicates += 1
                    return True
                self._know(key)
        if key is not None:
            self._keys[request] = key
        return False

    def restore_robots(self, request: Request) -> None:
        """The rules of an origin come from Redis as robots.txt is fetched."""

    def push(self, request: Request, host: str) -> str | None:
        """Buffered for the fleet (pushed with the next claim); robots.txt
        requests wait here for a place on their host (``_hold_robots``)."""
        if self.lost:
            return None
        if ROBOTS_META in request.meta:
            self.robots_waiting.append([request, -math.inf])
            return "memory"
        self.pending.append(
            Item(
                host,
                request,
                priority=request.priority,
                depth=request_depth(request),
                key=self._keys.pop(request, None),
            )
        )
        if len(self.pending) >= PUSH_BUFFER:
            self._flush()
        return "redis"

    def keep(self, request: Request, host: str) -> str:
        """Set aside in this worker: nothing of it is in Redis."""
        return "memory"

    def handed_out(self, request: Request) -> None:
        pass

    def tick(self, now: float) -> None:
        if self.lost or self.frontier is None:
            return
        self._flush()
        if now - self._done_at >= DONE_EVERY:
            self._done_at = now
            self._finish_done(force=False)

    def take_given_up(self) -> list[tuple[str, Request]]:
        """Requests of hosts given up on: claimed before, local, or that Redis
        handed to this worker (drained by it, pushed by it since, back from a
        lease)."""
        taken, self.gave_up = self.gave_up, []
        if self.frontier is not None:
            taken.extend(self.frontier.take_gave_up())
        return taken

    def give_up(self, host: str) -> tuple[bool, int]:
        """This worker's budget for the host ran out: the host is given up on
        fleet-wide, unless another worker did first (then it was counted and
        logged there); its queue comes back from ``take_given_up``."""
        assert self.frontier is not None
        return self.frontier.give_up(host)

    def _key(self, request: Request) -> int | None:
        """The request's 64-bit key; None for a redirect to a URL of the same key as
        where it came from (it would be dropped as its own duplicate: scrapy #1225)."""
        key = self._request_key(request)
        if redirected_to_same_key(request, key, partial(self._key_at, request)):
            self.stats.inc_value("aimd/dupefilter/redirect_same_key")
            return None
        return key

    def _flush(self) -> None:
        """Push what is buffered, with the next claim (up to 500 requests; more go
        at once, one round trip per 500)."""
        if not self.pending or self.frontier is None:
            return
        items, self.pending = self.pending, []
        self.frontier.push_later(items, partial(self._pushed, items))
        self._flush_soon()

    def _pushed(self, items: list[Item[Request]], results: list[bool | None]) -> None:
        for item, queued in zip(items, results, strict=True):
            if queued is None:  # cannot be serialized: stays here
                self.stats.inc_value("aimd/fleet/local")
                self.local.append(item.item)
            elif not queued:
                self._duplicate(item.item)
                self._dropped(item.item)
                # Counted as queued when it was buffered: no longer, as one process
                # never counts a duplicate.
                for name in ENQUEUED_STATS:
                    self.stats.inc_value(name, -1)
        self._status = None
        taken = self.frontier.take_gave_up() if self.frontier is not None else []
        if taken:  # of hosts given up on: failed at the next call
            self.gave_up.extend(taken)
            self.wake.now()

    def _duplicate(self, request: Request) -> None:
        """A request the shared seen set already held: logged as the dupefilter
        logs one. Counted in ``counters.duplicates`` (by the caller or the push),
        which ``aimd/fleet/duplicates`` shows (see ``_fleet_status`` and
        ``close``): a stats call per duplicate costs more than the rest of it."""
        if self.df is not None and self.spider is not None:
            self.df.log(request, self.spider)

    def _dropped(self, request: Request) -> None:
        """``request_dropped``, for a request the engine was told was queued: the
        shared seen set held it (another worker sent it), or the robots.txt gate
        held a repeat, as one process's engine says of a duplicate."""
        self.crawler.signals.send_catch_log(
            signal=scrapy_signals.request_dropped, request=request, spider=self.spider
        )

    def _know(self, key: int) -> None:
        """Remember a key sent to the shared seen set (at most KNOWN_KEYS, then
        afresh): its repeats, most of a crawl's links, are dropped here, without
        being serialized and sent only to be refused."""
        if len(self.known) >= KNOWN_KEYS:
            self.known = SeenSet()
        self.known.add(key)

    def pop(self, now: float) -> Handout | None:
        if self.lost or self.frontier is None:
            return None
        if self.robots_waiting:
            if self._held_robots:
                # A claim's turn; the engine's next ask holds again.
                self._held_robots = False
                self.wake.arm(now, now)
            else:
                robots = self._hold_robots(now)
                if self._held_robots:
                    # One hold a call, and no claim after it: the engine's next ask
                    # claims (_hold_robots armed the wake timer for it), so that
                    # neither holds nor claims wait for all of the other.
                    return robots
        if self.local:
            request = self.local.popleft()
            host = request_host(request)
            if host in self.frontier.given_up:
                self.gave_up.append((host, request))
                return None
            # Never left this process: no fleet politeness (see the module's docstring).
            return Handout(request, None, None, now, "memory")
        if self.claimed and now - self.claimed[0][1] > CLAIMED_FOR:
            self._give_back_claimed()
        if self.claimed:
            self._give_back_held()
        if not self.claimed:
            if self._ran_out(now):
                return None
            claims = self.frontier.claim_many(self._room())
            taken = self.frontier.take_gave_up()
            if taken:  # pushed for, or back in the queues of, given-up hosts
                self.gave_up.extend(taken)
                if isinstance(claims, list):
                    self.claimed.extend((claim, now) for claim in claims)
                    self._claimed_at = now
                return None
            if not isinstance(claims, list):
                wait = min(POLL, max(0.0, claims.ready_at - claims.now))
                self.wake.arm(now + wait, now)
                return None
            self.claimed.extend((claim, now) for claim in claims)
            self._claimed_at = now
        claim, claimed_at = self.claimed.popleft()
        if self.claimed:  # the engine asks again at once; if not, soon
            self.wake.arm(now + CLAIMED_FOR / 2, now)
        request = claim.item
        if claim.host in self.frontier.given_up:
            # Claimed before its host was given up on: its lease goes (its place
            # freed with it), and it fails in the scheduler.
            self.frontier.done_later([claim.lease])
            self._flush_soon()
            self.gave_up.append((claim.host, request))
            return None
        if self._waits_for_robots(request):
            # Another worker queued it; this one has yet to read the origin's
            # robots.txt (its fetch is started). Sent later, after the rules came,
            # it would reach the host closer to the next start than the gap: back
            # to the queue, for a worker that knows the rules, or this one later.
            self.frontier.give_back_later([claim.lease])  # with the next call
            self._flush_soon()
            self.stats.inc_value("aimd/fleet/robots_given_back")
            self.wake.arm(now + POLL, now)
            return None
        # Handed out as if now was its claim: its send is timed from there.
        return self._hand_out(request, claim, claimed_at)

    def _ran_out(self, now: float) -> bool:
        """The latest call was a claim that made fewer claims than the room it
        asked for (no host could start for more), under ``RAN_OUT_FOR`` ago, and
        nothing waits to go with another (no answer freed a place, no request
        was queued since): the engine asks again at once for the room left,
        and that claim would make none before the first host is ready. None,
        without a round trip; the wake timer is set as for a claim that made
        none. (Another worker's news in those few milliseconds is seen with
        the next claim, as it is when it comes just after a claim.)"""
        assert self.frontier is not None
        ran_out = self.frontier.ran_out
        if ran_out is None or now - self._claimed_at >= RAN_OUT_FOR or self.frontier.waiting:
            return False
        wait = ran_out.ready_at - self.fleet.now()
        if wait <= 0:
            return False
        self.wake.arm(now + min(POLL, wait), now)
        return True

    def _room(self) -> int:
        """How many requests to claim: as many as the downloader has room for (the
        engine asks for them in one go), at most ``CLAIM_BATCH``, at least one."""
        downloader = getattr(self.crawler.engine, "downloader", None)
        active = getattr(downloader, "active", None)
        total = getattr(downloader, "total_concurrency", None)
        if not isinstance(total, int) or active is None:
            return 1
        return max(1, min(CLAIM_BATCH, total - len(active)))

    def _give_back_claimed(self) -> None:
        """Requests claimed with others that the engine did not ask for in time:
        back to their queues, with the next call (``next_request`` claims at once)."""
        if self.claimed and self.frontier is not None:
            leases = [claim.lease for claim, _ in self.claimed]
            self.claimed.clear()
            self.frontier.give_back_later(leases)
            self._flush_soon()
            logger.debug("Gave back %d claimed requests the engine did not ask for", len(leases))

    def _give_back_held(self) -> None:
        """Requests claimed with others whose host may no longer start, as this
        worker knows it (a refusal stored since: a pause, a lower limit), or
        claimed a gap ago or more: back to their queues, not out inside the pause
        or above the limit. (Redis holds a host with a gap until its claim's send
        is reported, two gaps at most: one sent later than a gap after its claim
        would let another worker's start come closer to it than the gap.) They go
        with the next call: ``next_request``'s claim if none is left, else within
        ``FLUSH_AFTER``.

        A check that found none to give back holds until a host's data changes
        (``FleetFrontier.changes``) or the first of the rest is a gap old: until
        then the same controllers say the same of fewer requests (a pause over
        at the check is over later, unless the fleet's clock went back), and it
        returns at once."""
        assert self.frontier is not None
        now, back = self.fleet.now(), []
        changes = self.frontier.changes
        if changes == self._held_changes and self._held_at <= now < self._held_until:
            return
        # Per host, asked once a call: its limits and how many it has in flight.
        hosts: dict[str, list[Any]] = {}
        until = math.inf
        for entry in list(self.claimed):
            claim = entry[0]
            known = hosts.get(claim.host)
            if known is None:
                controller = self._controller(claim.host)
                known = hosts[claim.host] = [controller.limits, controller.in_flight]
            limits, in_flight = known
            # The gate's own rule (core.controller.gate): could this claim start
            # now beside the others in flight, the host paused or not? And when
            # would the next start after it be due? Past that, sent now, it
            # would come closer than the gap to another worker's next start.
            # The gap, not a doubled limit's ramp (``spacing``): a claim held a
            # few ms longer only starts later than the ramp asks.
            next_due = gate.ready_at(
                Limits(limits.gap, _NO_LIMIT, -math.inf), 0, claim.started, now
            )
            if gate.ready_at(limits, in_flight - 1, -math.inf, now) > now or (
                limits.gap > 0 and next_due <= now
            ):
                known[1] -= 1
                self.claimed.remove(entry)
                back.append(claim.lease)
            elif limits.gap > 0:
                # Checked again from a little before it is a gap old (the margin
                # keeps clear of rounding at Redis's time of day).
                until = min(until, next_due - HELD_MARGIN)
        if back:
            self._held_changes = -1
            self.frontier.give_back_later(back)
            self._flush_soon()
        else:
            self._held_changes, self._held_at, self._held_until = changes, now, until

    def _hand_out(self, request: Request, claim: Claim[Request], now: float) -> Handout:
        """The claim's request, for the scheduler to hand out (its place in flight,
        its slot, the reporter's start)."""
        self.claims[request] = claim
        self._status = None
        return Handout(request, claim.host, None, now, "redis")

    def _hold_robots(self, now: float) -> Handout | None:
        """A robots.txt request whose host has a place now, held there fleet-wide
        (``FleetFrontier.hold``): three workers' robots.txt requests must not
        reach a host that takes one request at a time together, nor inside its
        Crawl-delay. Only one worker fetches an origin's robots.txt: while
        another holds its lock the request waits, and once its answer is stored
        this worker reads it instead (``aimd/fleet/robots/shared``). None if no
        host of them may start yet (the wake timer is set for the first that may).
        One of them is tried a call (a round trip, said in ``_held_robots``): then
        the engine is asked to ask again at once, for the next or for a claim."""
        assert self.frontier is not None
        wake, self._held_robots = math.inf, False
        for entry in list(self.robots_waiting)[:ROBOTS_PER_CALL]:
            request, not_before = entry
            if not_before > now:
                wake = min(wake, not_before)
                continue
            if self._held_robots:
                break
            self._held_robots = True
            origin = request.meta[ROBOTS_META]
            held = self.frontier.hold(request_host(request), request, origin)
            if isinstance(held, SharedRobots):
                self.robots_waiting.remove(entry)
                self._read_shared(origin, held)
                continue
            if isinstance(held, Claim):
                self.robots_waiting.remove(entry)
                self.stats.inc_value("aimd/fleet/robots/fetched")
                return self._hand_out(request, held, now)
            entry[1] = now + min(POLL, max(0.0, held.ready_at - held.now))
            wake = min(wake, entry[1])
            # To the back: the ones behind it are looked at before it comes again.
            self.robots_waiting.remove(entry)
            self.robots_waiting.append(entry)
        # After a round trip the engine asks again at once: for the next robots.txt,
        # the requests an answer released, or a claim (see pop).
        self.wake.arm(now if self._held_robots else wake, now)
        return None

    def _read_shared(self, origin: str, shared: SharedRobots) -> None:
        """Another worker's answer for ``origin``, read as if fetched here."""
        self.stats.inc_value("aimd/fleet/robots/shared")
        if self.robots is not None:
            self.robots.read_shared(origin, _answer_of(shared))

    def _waits_for_robots(self, request: Request) -> bool:
        return (
            self.robots is not None
            and ROBOTS_META not in request.meta
            and self.robots.verdict(request) is Verdict.WAIT
        )

    def _finish_done(self, *, force: bool) -> None:
        """Forget the leases of requests the engine is done with (their children are
        pushed first): one round trip for all of them."""
        if not self.claims or self.frontier is None:
            return
        busy = requests_in_progress(self.crawler)
        if busy is None and not force:
            return
        done = [r for r in self.claims if busy is None or r not in busy]
        if not done:
            return
        self._flush()
        for request in done:
            answer = self.robots_answers.pop(request, None)
            if answer is not None and not self.lost:
                self._answer(request, self.claims[request], *answer)
        # A download that AIMD_SHUTDOWN_GRACE cancelled was never done: queued again.
        back = [self.claims.pop(r).lease for r in done if self.flights.cancelled(r)]
        finished = [self.claims.pop(r).lease for r in done if r in self.claims]
        if back:
            self.frontier.give_back_later(back)
        self.frontier.done_later(finished)  # with the next claim
        self._flush_soon()
        for request in done:
            self.flights.settle(request)

    def _flush_soon(self, delay: float = FLUSH_AFTER) -> None:
        """What waits for the next claim goes alone after ``delay`` if no claim took
        it: other workers see each answer soon, whatever this one does. A call that
        took what waited (a claim, most often) ends its wait: what comes after it
        waits its own ``delay`` from then (answers that still wait for their
        turn on a host, no longer than the turn), not the rest of the wait
        before, which would send it alone a few milliseconds before the next
        claim would have taken it. The timer armed for the earlier wait is kept:
        when it fires, it waits on to the new due time (see ``_flush_waiting``)."""
        now = self.clock()
        due = now + delay
        frontier = self.frontier
        calls = 0 if frontier is None else frontier.exchanges
        if calls != self._flush_calls:  # what waited when the due was set went since
            self._flush_calls, self._flush_due = calls, math.inf
            retry = None if frontier is None else frontier.retry_in()
            if retry is not None:
                due = min(due, now + retry)
        if self._flush_due <= due:
            return
        self._flush_due = due
        if self._flush_call is not None:
            if self._flush_at <= due:
                return  # it fires first and waits on to the due time
            self._flush_call.cancel()
        self._flush_at = due
        self._flush_call = call_later(max(0.0, due - now), self._flush_waiting)

    def _flush_again(self) -> None:
        """Answers that went and were not stored (a lost race, another worker's turn
        on their host) go again as soon as they may: in a reactor turn of their
        own, one round trip, never in a loop inside this one."""
        retry = None if self.frontier is None else self.frontier.retry_in()
        if retry is not None:
            self._flush_soon(retry)

    def _flush_waiting(self) -> None:
        self._flush_call, self._flush_at = None, math.inf
        if self.lost or self.frontier is None:
            return
        if not self.frontier.waiting:
            self._flush_due = math.inf
            return
        now = self.clock()
        if self.frontier.exchanges == self._flush_calls and now < self._flush_due - FLUSH_EARLY:
            # What waits came after a call took what waited before: its own due time.
            self._flush_at = self._flush_due
            self._flush_call = call_later(self._flush_due - now, self._flush_waiting)
            return
        self._flush_due = math.inf
        try:
            self.frontier.flush()
        except Exception as exc:
            self._stop(exc, "feedback")
            return
        if self.frontier.waiting:  # answers that wait for a turn, or came meanwhile
            retry = self.frontier.retry_in()
            self._flush_soon(FLUSH_AFTER if retry is None else retry)

    def _fleet_status(self) -> FleetStatus | None:
        now = self.clock()
        if self._status is None or now - self._status_at >= STATUS_TTL:
            assert self.frontier is not None
            try:
                self._status = self.frontier.status()
            except Exception as exc:
                self._stop(exc, "has_pending_requests")
                return None
            self._status_at = now
            self.stats.set_value("aimd/fleet/seen", self._status.seen)
            self.stats.set_value("aimd/fleet/duplicates", self.fleet.counters.duplicates)
        return self._status

    def controller(self, host: str) -> HostController:
        """The host as this worker knows it (its latest state read from Redis)."""
        return self._controller(host)

    def _controller(self, host: str) -> HostController:
        assert self.frontier is not None
        known = self.frontier.controller(host)
        return known if known is not None else HostController(self.configs.for_host(host))

    def _renew_leases(self) -> None:
        """Every lease this worker holds holds on: a request whose callback (or
        pipeline) outlasts its lease's hold after the answer is not queued again
        while the worker is alive. A callback that blocks the reactor longer still
        can lose it."""
        if self.lost or self.frontier is None or not self.claims:
            return
        try:
            self.frontier.renew(
                [claim.lease for claim in self.claims.values()], self.frontier.callback_time
            )
        except Exception as exc:
            self._stop(exc, "lease renewal")

    def _beat(self) -> None:
        """This worker is alive: its heartbeat key lives on (``AIMD_FLEET_HEARTBEAT``,
        renewed every third of it). A
        reactor blocked longer than the heartbeat loses this worker's leases to
        another worker's next claim: their requests are fetched again (a
        duplicate, never a lost page)."""
        if self.lost or self.frontier is None:
            return
        try:
            reaped = self.fleet.beat()
        except Exception as exc:
            self._stop(exc, "heartbeat")
            return
        if reaped:
            self._declared_dead()

    def _declared_dead(self) -> None:
        """Another worker's claim took this worker for dead (its reactor was blocked
        past the heartbeat) and put its leases back: their requests may be claimed
        again already. What it claimed and has not handed out is dropped here, for
        the other worker to fetch: sent from here too, it would reach its host
        beside the other's (the fleet counting one in flight). Requests already
        handed to the downloader go on (docs/fleet.rst, "A worker that dies")."""
        dropped = len(self.claimed)
        self.claimed.clear()
        self.stats.inc_value("aimd/fleet/declared_dead")
        logger.warning(
            "This fleet worker was taken for dead (its reactor was blocked past its "
            "%.0fs heartbeat, AIMD_FLEET_HEARTBEAT): other workers took back its %d "
            "leases; dropped the %d requests it had claimed and not sent (the fleet "
            "fetches them), and the ones already sent may be fetched twice",
            self.fleet.heartbeat_ms / 1000,
            len(self.claims) + dropped,
            dropped,
        )

    def _stop(self, exc: Exception, where: str) -> None:
        """Stop this worker: Redis lost (an ERROR line, leases come back when they
        expire), or anything else (logged with its traceback)."""
        if isinstance(exc, FleetConnectionLost):
            self.lost = True
            logger.error(
                "Stopping this fleet worker: %s. Its %d leased requests go back to the "
                "queues when their leases expire on a Redis that is back with its data.",
                str(exc).rstrip("."),
                len(self.claims) + len(self.claimed),
            )
            self.stats.inc_value("aimd/fleet/redis_lost")
            reason = "aimd_redis_lost"
        else:
            logger.error("Stopping the crawl: the fleet's %s failed", where, exc_info=exc)
            self.stats.inc_value("aimd/errors")
            reason = "aimd_error"
        stop_crawl(self.crawler, reason)

    # -- feedback ------------------------------------------------------------------

    def reached_downloader(self, request: Request) -> None:
        """Time the host's gap from the send, where the host has a gap: a worker's
        reactor may send a request tens of milliseconds after its claim, and
        another worker's next start must not come that much closer (one round
        trip at the socket write, :func:`~scrapy_aimd.crawl.when_written`;
        skipped for hosts that go without a gap)."""
        claim = self.claims.get(request)
        if claim is None or self.lost or self.frontier is None:
            return
        if self._gap_counts_from_send(request, claim.host):
            when_written(lambda: self._report_sent(request, claim))

    def _gap_counts_from_send(self, request: Request, host: str) -> bool:
        """The host's gap counts from this request's send: a host with a gap, and
        robots.txt always, and every send of a host until its robots.txt is
        settled here: its answer may bring a Crawl-delay that this worker's view
        of the host does not show yet (the report goes with the next claim)."""
        return (
            ROBOTS_META in request.meta
            or self._controller(host).spacing > 0
            or (self.robots is not None and host not in self.robots_settled_hosts)
        )

    def _report_sent(self, request: Request, claim: Claim[Request]) -> None:
        if self.claims.get(request) is not claim or self.lost or self.frontier is None:
            return  # answered or released meanwhile: its feedback said all
        self.frontier.sent_later(claim)  # with the next claim, timed now
        self._flush_soon()

    def answer(self, request: Request, feedback: Mapping[str, Any]) -> str | None:
        """``response_feedback``: the answer goes to the host's state in Redis. A
        robots.txt answer goes there once the engine is done with it (its rules
        read, its Crawl-delay stored): its place on the host, freed before that,
        would let another worker's robots.txt start inside the delay."""
        claim = self.claims.get(request)
        if claim is None or self.lost or self.frontier is None:
            return None  # a local request, or not ours
        if not feedback.get("downloaded", True) or self.flights.cancelled(request):
            if self.reporter is not None:
                self.reporter.cancelled()
            return None  # the lease goes with done(), which frees its place
        at = self._answered_at(request, claim, feedback.get("latency"))
        if at is None:
            at = self.fleet.now()
        flight = self.flights.get(request)
        if (
            flight is not None
            and flight.new_connection
            and feedback.get("status") is not None
            and self._gap_counts_from_send(request, claim.host)
        ):
            # Written once its connection was up, by when the host had it at the
            # latest: the gap counts from now (scrapy_aimd.core.connections; the
            # answer's time reckoned from the claim may be earlier than the send).
            # The report goes before the answer, which frees the lease's place.
            self.frontier.sent_later(claim)
        if ROBOTS_META in request.meta:
            self.robots_answers[request] = (at, feedback)
        else:
            self._answer(request, claim, at, feedback, later=self._may_wait(claim.host, feedback))
        return None if self.lost else claim.host

    def _may_wait(self, host: str, feedback: Mapping[str, Any]) -> bool:
        """The answer can wait for the next claim: its reaction cannot be a refusal
        (not a throttle status, not a timeout), so the feedback middleware has
        nothing to requeue and need not know it now."""
        status = None if feedback.get("exception") is not None else feedback.get("status")
        cfg = self.configs.for_host(host)
        return not may_be_refusal(cfg, status, timeout=bool(feedback.get("timeout")))

    def _answer(
        self,
        request: Request,
        claim: Claim[Request],
        at: float,
        feedback: Mapping[str, Any],
        *,
        later: bool = False,
    ) -> None:
        """Apply an answer that came at ``at`` (the fleet's clock) to its host's
        state: now, or ``later`` with the next claim (then reported once stored)."""
        assert self.frontier is not None
        host, now = claim.host, self.clock()
        known = self._controller(host)
        before = (known.delay, known.concurrency)
        status, exception = feedback.get("status"), feedback.get("exception")
        timeout = bool(feedback.get("timeout"))
        told: dict[str, Any]
        failed = exception is not None or status is None
        if failed:
            told = {"error": type(exception).__name__, "timeout": timeout}
        else:
            told = {"status": status, "latency": feedback.get("latency")}

        def then(reaction: Reaction | None) -> None:
            self._answered(request, host, now, before, told, reaction, later=True)

        reaction: Reaction | None = None
        try:
            if status is None or failed:
                if later:
                    self.frontier.fail_later(claim, timeout=timeout, now=at, then=then)
                else:
                    reaction = self.frontier.fail(claim, timeout=timeout, now=at)
            elif later:
                self.frontier.finish_later(
                    claim,
                    status=status,
                    latency=feedback.get("latency"),
                    now=at,
                    quota=feedback.get("quota"),
                    again=FORBIDDEN_META in request.meta,
                    then=then,
                )
            else:
                reaction = self.frontier.finish(
                    claim,
                    status=status,
                    latency=feedback.get("latency"),
                    retry_after=feedback.get("retry_after"),
                    now=at,
                    page=ROBOTS_META not in request.meta,
                    quota=feedback.get("quota"),
                    again=FORBIDDEN_META in request.meta,
                )
        except Exception as exc:
            self._stop(exc, "feedback")
            return
        if later:
            self._flush_soon()
        else:
            self._answered(request, host, now, before, told, reaction, later=False)

    def _answered(
        self,
        request: Request,
        host: str,
        now: float,
        before: tuple[float, int],
        told: dict[str, Any],
        reaction: Reaction | None,
        *,
        later: bool,
    ) -> None:
        """The stored reaction to an answer handled at ``now``: to the reporter, and
        to the feedback middleware unless it was stored later (it could not be a
        refusal: nothing for the middleware to do)."""
        if reaction is None:
            return
        if reaction.paused_until is not None:
            # The pause ends on the Redis server's clock: the reporter counts on ours.
            local_end = now + (reaction.paused_until - self.fleet.now())
            reaction = replace(reaction, paused_until=local_end)
        if self.reporter is not None:
            self.reporter.answered(host, now, reaction, self._controller(host), before, **told)
        flight = self.flights.get(request) if not later else None
        if flight is not None:
            flight.reaction = reaction

    def _answered_at(self, request: Request, claim: Claim[Request], latency: Any) -> float | None:
        """When the answer came, on the fleet's clock: its claim, moved on by the time
        this worker took to send it, plus the fetch latency; never later than now
        (None: now). Ordered by it, the answer goes before the starts that other
        workers claimed while this one was busy with other work, as in a single
        process, where nothing starts between an answer and its handling: such a
        start, at the limit the answer is about to lower, is not of its round."""
        flight = self.flights.get(request)
        if (
            flight is None
            or flight.sent_at is None
            or flight.handed_at is None
            or not isinstance(latency, (int, float))
            or not math.isfinite(latency)
        ):
            return None
        sent = claim.started + max(0.0, flight.sent_at - flight.handed_at)
        return min(self.fleet.now(), sent + max(0.0, latency))

    # -- robots.txt news (scrapy_aimd.robots_middleware.RobotsListener) --------------

    def robots_settled(self, origin: str) -> None:
        self.robots_settled_hosts.add(origin_host(origin))

    def robots_known(self, origin: str) -> RobotsAnswer | None:
        """The answer another worker stored for ``origin`` (one round trip, once per
        origin and ``AIMD_ROBOTS_MAX_AGE``); None: this worker sends the request,
        and its hold takes the fetch, or waits for the worker that has it."""
        if self.lost:
            return None
        try:
            shared = self.shared_robots.known(origin)
        except Exception as exc:
            self._stop(exc, "robots_known")
            return None
        if shared is None:
            return None
        self.stats.inc_value("aimd/fleet/robots/shared")
        return _answer_of(shared)

    def robots_share(self, origin: str, answer: RobotsAnswer, max_age: float) -> None:
        if self.lost:
            return
        try:
            self.shared_robots.share(
                origin,
                status=answer.status,
                body=answer.body,
                truncated=answer.truncated,
                gave_up=answer.gave_up,
                max_age=max_age,
            )
        except Exception as exc:
            self._stop(exc, "robots_share")

    def robots_retrying(self, origin: str, retry_in: float) -> None:
        if self.lost:
            return
        try:
            self.shared_robots.retrying(origin, retry_in)
        except Exception as exc:
            self._stop(exc, "robots_retrying")

    def set_crawl_delay(self, host: str, floor: float) -> HostController | None:
        if self.lost or self.frontier is None:
            return None
        try:
            changed = self.frontier.update_host(
                host, lambda controller: controller.set_crawl_delay(floor)
            )
        except Exception as exc:
            self._stop(exc, "set_crawl_delay")
            return None
        # The delay that holds with it, also while it waits to be stored (it lost
        # its race to another worker's store: the host as this worker knows it
        # does not show it yet).
        return changed if changed is not None else self._controller(host)


class _SharingListener:
    """The robots middleware's listener in a fleet: the scheduler's, and the
    fleet's shared answers (``RobotsSharing``): only one worker fetches an
    origin's robots.txt, the others read its answer from Redis."""

    def __init__(self, scheduler: AimdScheduler, store: FleetStore) -> None:
        self.scheduler, self.store = scheduler, store

    @property
    def reporter(self) -> Reporter:
        return self.scheduler.reporter

    def robots_settled(self, origin: str, released: int) -> None:
        self.scheduler.robots_settled(origin, released)

    def set_crawl_delay(self, host: str, crawl_delay: float, floor: float) -> None:
        self.scheduler.set_crawl_delay(host, crawl_delay, floor)

    def robots_known(self, origin: str) -> RobotsAnswer | None:
        return self.store.robots_known(origin)

    def robots_share(self, origin: str, answer: RobotsAnswer, max_age: float) -> None:
        self.store.robots_share(origin, answer, max_age)

    def robots_retrying(self, origin: str, retry_in: float) -> None:
        self.store.robots_retrying(origin, retry_in)


def _a_start_request(request: Request) -> bool:
    """A start request as the spider sent it (``dont_filter`` by Scrapy's default
    ``start()``): checked against the seen set, or every worker fetches it. Not
    once it is sent again (a retry or a requeue after a refusal keeps its meta):
    that one is already in the set."""
    meta = request.meta
    return bool(
        meta.get("is_start_request")
        and not meta.get("retry_times")
        and THROTTLE_RETRIES_META not in meta
    )


def _answer_of(shared: SharedRobots) -> RobotsAnswer:
    return RobotsAnswer(
        shared.status,
        shared.body,
        truncated=shared.truncated,
        gave_up=shared.gave_up,
        age=shared.age,
    )
