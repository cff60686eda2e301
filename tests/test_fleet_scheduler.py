"""The fleet scheduler in one process, against a real redis-server: a real
crawler and engine (never started), its scheduler's calls made as the engine
makes them, so that what a worker hands out can be checked request by request.
Each test runs in a running asyncio loop, as a crawl's scheduler does (Scrapy's
``call_later`` needs one, or a reactor, which this process must not install)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fleet_probe import claim_one, host_view
from fleet_schedulers import Workers, fleet_schedulers, in_a_loop
from redis_server import REDIS_SERVER, SKIP_REASON, RedisServer, fleet_prefix, serve
from scrapy import Request, signals
from scrapy.utils.test import get_crawler

from scrapy_aimd.fleet import Claim, FleetStatus, Wait
from scrapy_aimd.fleet.connection import REPLY_TIMEOUT
from scrapy_aimd.fleet.worker import (
    FLUSH_AFTER,
    FLUSH_EARLY,
    LEASE_WAIT_EVERY,
    LEASE_WAIT_QUIET,
    RAN_OUT_FOR,
)
from scrapy_aimd.robots_middleware import ROBOTS_META, RobotsAnswer, crawl_delay_floor
from scrapy_aimd.scheduler import AimdScheduler
from scrapy_aimd.settings import AimdSettingsError, read_fleet_settings

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

server = pytest.fixture(scope="module")(serve)
prefix = pytest.fixture(fleet_prefix)


@pytest.fixture
def worker(server: RedisServer, prefix: str) -> Iterator[Workers]:
    """Fleet schedulers of one fleet, opened: each call makes another."""
    yield from fleet_schedulers(server.url, prefix)


def answer(scheduler: AimdScheduler, request: Request, status: int, **feedback: Any) -> None:
    """The feedback middleware's ``response_feedback`` for ``request``."""
    scheduler._on_feedback(request, status=status, latency=0.01, **feedback)


@in_a_loop
def test_a_leftover_claim_of_a_host_paused_since_is_given_back(worker: Workers) -> None:
    scheduler = worker(AIMD_ADAPTIVE_CONCURRENCY=False, AIMD_MAX_CONCURRENCY=4)
    for n in range(4):
        scheduler.enqueue_request(Request(f"http://h.test/{n}", dont_filter=True))
    first = scheduler.next_request()
    assert first is not None
    assert len(scheduler.store.claimed) == 3  # claimed together, not handed out yet
    answer(scheduler, first, 429, retry_after=30.0)
    # The host is paused for 30 s: none of its leftovers may go out.
    assert scheduler.next_request() is None
    assert not scheduler.store.claimed
    assert list(scheduler.store.claims) == [first]
    host = host_view(scheduler.store.frontier, "h.test") if scheduler.store.frontier else None
    assert host is not None and host.queued == 3 and host.in_flight == 0  # its place freed


@in_a_loop
def test_a_leftover_claim_older_than_its_hosts_gap_is_given_back(worker: Workers) -> None:
    """Redis holds a host with a gap until its claim's send is reported, for two
    gaps at most: a leftover sent later than one gap after its claim would let
    another worker's start come closer to it than the gap."""
    gap = 0.04
    scheduler = worker(AIMD_MIN_DELAY=gap)
    for n in range(3):
        scheduler.enqueue_request(Request(f"http://h{n}.test/", dont_filter=True))
    assert scheduler.next_request() is not None
    assert len(scheduler.store.claimed) == 2
    time.sleep(1.5 * gap)  # under CLAIMED_FOR: the leftovers are still there
    request = scheduler.next_request()
    if request is not None:  # claimed afresh, never a leftover out of its time
        assert scheduler.store.fleet.now() - scheduler.store.claims[request].started < gap
    assert all(
        scheduler.store.fleet.now() - claim.started < gap for claim, _ in scheduler.store.claimed
    )


@in_a_loop
def test_a_request_on_a_new_connection_counts_its_hosts_gap_from_its_response(
    worker: Workers,
) -> None:
    """Written once its connection was up, it reached the host as late as its
    response: another worker's next start of the host waits a gap from the
    response, not from the send reported at the write (the report goes before
    the answer, which frees the lease's place)."""
    gap, handshake = 0.3, 0.2
    scheduler, other = worker(AIMD_MIN_DELAY=gap), worker(AIMD_MIN_DELAY=gap)
    for n in range(2):
        scheduler.enqueue_request(Request(f"http://h.test/{n}"))
    scheduler.store._flush()
    request = scheduler.next_request()
    assert request is not None and scheduler.store.frontier is not None
    scheduler.store._report_sent(request, scheduler.store.claims[request])  # at the write
    scheduler.store.frontier.flush()
    flight = scheduler.flights.get(request)
    assert flight is not None
    flight.new_connection = True  # as the feedback middleware tells it
    time.sleep(handshake)
    answered_at = scheduler.store.fleet.now()
    answer(scheduler, request, 200)
    scheduler.store.frontier.flush()
    wait = claim_one(other.store.frontier) if other.store.frontier is not None else None
    assert isinstance(wait, Wait) and wait.queued == 1, wait  # the other request waits
    assert wait.ready_at >= answered_at + gap - 0.001, (
        f"the next start {wait.ready_at - answered_at:.3f} s after the response"
    )


@in_a_loop
def test_leftovers_found_fine_are_given_back_once_a_pause_is_stored(worker: Workers) -> None:
    """A check of the leftovers that found none to give back is not taken for
    later ones once a host's state moved (here a Retry-After pause)."""
    scheduler = worker(AIMD_ADAPTIVE_CONCURRENCY=False, AIMD_MAX_CONCURRENCY=4)
    for n in range(4):
        scheduler.enqueue_request(Request(f"http://h.test/{n}", dont_filter=True))
    first = scheduler.next_request()
    second = scheduler.next_request()  # the leftovers checked: all may go
    assert first is not None and second is not None
    assert len(scheduler.store.claimed) == 2
    assert scheduler.next_request() is not None  # nothing moved: the check holds
    answer(scheduler, first, 429, retry_after=30.0)
    assert scheduler.next_request() is None
    assert not scheduler.store.claimed


@in_a_loop
def test_leftovers_found_fine_are_given_back_once_a_gap_old(worker: Workers) -> None:
    """A check of the leftovers that found none to give back holds only until the
    first of them is a gap old, with nothing else moving meanwhile."""
    gap = 0.04
    scheduler = worker(AIMD_MIN_DELAY=gap)
    for n in range(4):
        scheduler.enqueue_request(Request(f"http://h{n}.test/", dont_filter=True))
    assert scheduler.next_request() is not None
    assert scheduler.next_request() is not None  # the leftovers checked: all may go
    assert len(scheduler.store.claimed) == 2
    changes = scheduler.store.frontier.changes if scheduler.store.frontier else None
    time.sleep(1.5 * gap)  # under CLAIMED_FOR: the leftovers are still there
    assert scheduler.store.frontier is not None and scheduler.store.frontier.changes == changes
    request = scheduler.next_request()
    if request is not None:  # claimed afresh, never a leftover out of its time
        assert scheduler.store.fleet.now() - scheduler.store.claims[request].started < gap
    assert all(
        scheduler.store.fleet.now() - claim.started < gap for claim, _ in scheduler.store.claimed
    )


@in_a_loop
def test_a_request_pushed_again_while_in_flight_is_handed_out_as_another_object(
    worker: Workers,
) -> None:
    """A spider that yields ``response.request`` again (``dont_filter``) while its
    first claim is in flight: one object must not hold two leases."""
    scheduler = worker(AIMD_ADAPTIVE_CONCURRENCY=False, AIMD_MAX_CONCURRENCY=4)
    request = Request("http://h.test/", dont_filter=True)
    scheduler.enqueue_request(request)
    assert scheduler.next_request() is request  # its own, as it is
    first = scheduler.store.claims[request]
    scheduler.enqueue_request(request)
    again = scheduler.next_request()
    assert again is not None and again is not request
    assert again.url == request.url
    assert scheduler.store.claims[request] is first
    assert scheduler.store.claims[again].lease != first.lease


@in_a_loop
def test_a_users_slot_keeps_the_largest_crawl_delay_of_its_hosts(worker: Workers) -> None:
    """A ``download_slot`` that groups hosts is their only controller: it takes the
    Crawl-delay of each host whose request is queued in it, the largest of them."""
    scheduler = worker(ROBOTSTXT_OBEY=True)
    robots = scheduler.robots
    assert robots is not None and scheduler.store.frontier is not None
    for origin, delay in (("http://a.test", 0.5), ("http://b.test", 0.2)):
        robots.read_shared(
            origin, RobotsAnswer(200, f"User-agent: *\nCrawl-delay: {delay}\n".encode())
        )
    for name in ("a", "b"):
        scheduler.enqueue_request(Request(f"http://{name}.test/", meta={"download_slot": "group"}))
    group = host_view(scheduler.store.frontier, "group")
    assert group is not None and group.delay == pytest.approx(crawl_delay_floor(0.5))


@in_a_loop
def test_leftover_claims_above_a_limit_lowered_since_are_given_back(worker: Workers) -> None:
    scheduler = worker(AIMD_MAX_CONCURRENCY=8)
    for n in range(100):
        scheduler.enqueue_request(Request(f"http://h.test/{n}", dont_filter=True))
    for _ in range(20):  # good rounds, until the host takes 4 at once (bounded)
        if scheduler.store._controller("h.test").concurrency >= 4:
            break
        out = []
        while (request := scheduler.next_request()) is not None:
            out.append(request)
        for request in out:
            answer(scheduler, request, 200)
        assert scheduler.store.frontier is not None
        scheduler.store.frontier.flush()
    first = scheduler.next_request()
    assert first is not None
    assert len(scheduler.store.claimed) >= 2  # claimed with it, not handed out yet
    answer(scheduler, first, 503)  # an overload: the limit is halved
    limit = scheduler.store._controller("h.test").concurrency
    assert limit < len(scheduler.store.claimed)
    out = []
    while (request := scheduler.next_request()) is not None:
        out.append(request)
    assert len(out) <= limit


@in_a_loop
def test_what_comes_after_a_claim_waits_its_own_flush_time(worker: Workers) -> None:
    """A claim takes what waited; an answer that comes after it waits for the next
    claim for FLUSH_AFTER from when it came, not for the rest of the wait before
    the claim (it went alone a few milliseconds before the next claim would have
    carried it: a round trip for nothing). It never waits longer."""
    scheduler = worker(AIMD_ADAPTIVE_CONCURRENCY=False, AIMD_MAX_CONCURRENCY=4)
    frontier = scheduler.store.frontier
    assert frontier is not None
    for n in range(4):
        scheduler.enqueue_request(Request(f"http://h.test/{n}", dont_filter=True))
    first = scheduler.next_request()  # the pushes wait for it, the timer is set
    assert first is not None and not frontier.waiting
    assert scheduler.store._flush_call is not None
    time.sleep(FLUSH_AFTER / 2)
    came = scheduler.clock()
    answer(scheduler, first, 200)  # it waits for the next claim
    assert frontier.waiting
    scheduler.store._flush_waiting()  # the timer set before the claim fires (called early)
    if scheduler.clock() < came + FLUSH_AFTER - FLUSH_EARLY:  # not late on a busy machine
        assert frontier.waiting  # not sent alone: it waits its own time
        assert scheduler.store._flush_call is not None
    time.sleep(FLUSH_AFTER)
    scheduler.store._flush_waiting()  # fired at its due time: sent
    assert not frontier.waiting
    host = host_view(frontier, "h.test")
    # Stored: its place freed (the three claimed with it hold theirs).
    assert host is not None and host.version == 1 and host.in_flight == 3


@in_a_loop
def test_after_a_claim_that_ran_out_the_next_ask_costs_no_round_trip(worker: Workers) -> None:
    """A claim made fewer claims than the room it asked for: no host may start for
    more. The engine asks again at once for the room left; with nothing to carry
    (no answer freed a place, no request queued) that claim would make none: None
    without a round trip. What is carried next claims as ever."""
    scheduler = worker(AIMD_ADAPTIVE_CONCURRENCY=False, AIMD_MAX_CONCURRENCY=1)
    frontier = scheduler.store.frontier
    assert frontier is not None
    for n in range(3):
        scheduler.enqueue_request(Request(f"http://h.test/{n}", dont_filter=True))
    first = scheduler.next_request()  # room for 8, one made: the host takes one at once
    assert first is not None and not scheduler.store.claimed
    assert frontier.ran_out is not None and frontier.ran_out.ready_at == math.inf
    trips = scheduler.store.fleet.counters.round_trips
    claimed_at = scheduler.store._claimed_at
    assert scheduler.next_request() is None
    # Timed from the claim, as the scheduler times it (the rest of the first call
    # counts too), so that a stalled machine skips the check rather than fails it.
    if scheduler.clock() - claimed_at < RAN_OUT_FOR:
        assert scheduler.store.fleet.counters.round_trips == trips
    answer(scheduler, first, 200)  # waits for the next claim, which frees its place
    second = scheduler.next_request()
    assert second is not None and second is not first
    assert scheduler.store.fleet.counters.round_trips == trips + 1
    host = host_view(frontier, "h.test")
    assert host is not None and host.in_flight == 1 and host.queued == 1


@in_a_loop
def test_a_request_queued_after_a_claim_that_ran_out_is_claimed_at_once(
    worker: Workers,
) -> None:
    scheduler = worker(AIMD_ADAPTIVE_CONCURRENCY=False, AIMD_MAX_CONCURRENCY=1)
    scheduler.enqueue_request(Request("http://h.test/", dont_filter=True))
    assert scheduler.next_request() is not None
    assert scheduler.store.frontier is not None and scheduler.store.frontier.ran_out is not None
    scheduler.enqueue_request(Request("http://other.test/", dont_filter=True))
    request = scheduler.next_request()  # the push goes with a claim, which takes it
    assert request is not None and request.url == "http://other.test/"


@in_a_loop
def test_a_wait_for_other_workers_leases_is_said_and_their_return(
    worker: Workers, caplog: pytest.LogCaptureFixture
) -> None:
    """A silent wait for a dead worker's leases looks like a hang: after
    LEASE_WAIT_QUIET of it the worker says what it waits for, again every
    LEASE_WAIT_EVERY, and says when expired or dead workers' leases come back."""
    scheduler = worker()
    now = [100.0]
    scheduler.store.clock = lambda: now[0]

    def status(queued: int = 0, leased: int = 3, reaped: int = 0) -> FleetStatus:
        return FleetStatus(queued, leased, 0.0, now[0], reaped, 10)

    def said() -> list[str]:
        lines = [r.getMessage() for r in caplog.records if "leases" in r.getMessage()]
        caplog.clear()
        return lines

    with caplog.at_level(logging.INFO, logger="scrapy_aimd.fleet.worker"):
        for t in (100.0, 100.5, 100.0 + LEASE_WAIT_QUIET - 0.1):
            now[0] = t
            scheduler.store._log_lease_wait(status())
        assert said() == []
        now[0] = 100.0 + LEASE_WAIT_QUIET
        scheduler.store._log_lease_wait(status())
        assert said() == [
            "Nothing queued fleet-wide: waiting for 3 requests leased by other workers "
            "(a dead worker's leases come back once its heartbeat expires, within 10s)"
        ]
        now[0] += LEASE_WAIT_EVERY - 0.1
        scheduler.store._log_lease_wait(status())
        assert said() == []
        now[0] += 0.1
        scheduler.store._log_lease_wait(status(reaped=2))
        assert said() == [
            "2 leases of other workers came back to the queues (a worker died or "
            "stalled: their requests are fetched again)",
            "Nothing queued fleet-wide: waiting for 3 requests leased by other workers "
            "(a dead worker's leases come back once its heartbeat expires, within 10s)",
        ]
        # Work queued again ends the wait; a new one is quiet at first.
        scheduler.store._log_lease_wait(status(queued=2, reaped=2))
        now[0] += LEASE_WAIT_QUIET - 0.1
        scheduler.store._log_lease_wait(status(reaped=2))
        assert said() == []


@in_a_loop
def test_a_duplicate_is_dropped_as_one_process_drops_it(worker: Workers) -> None:
    """A request the scheduler refuses is one Scrapy says was dropped
    (``request_dropped``), as in one process: a repeat of one this worker sent
    (``enqueue_request`` says False, and the engine sends the signal), and one that
    the shared seen set held (another worker's: the scheduler sends it once its
    push is answered)."""
    a, b = worker(), worker()
    dropped: list[Request] = []

    def on_dropped(request: Request, spider: object) -> None:
        dropped.append(request)

    b.crawler.signals.connect(on_dropped, signal=signals.request_dropped, weak=False)
    assert a.enqueue_request(Request("http://h.test/page")) is True
    assert a.next_request() is not None  # pushed with the claim, and claimed
    assert a.enqueue_request(Request("http://h.test/page")) is False  # this worker's repeat
    theirs = Request("http://h.test/page")
    assert b.enqueue_request(theirs) is True  # not known here: asked of the fleet
    assert b.next_request() is None
    assert dropped == [theirs]
    # Not counted as queued, as one process never counts a duplicate.
    for name in ("aimd/enqueued", "scheduler/enqueued", "scheduler/enqueued/redis"):
        assert b.stats.get_value(name, 0) == 0, name
        assert a.stats.get_value(name) == 1, name
    assert a.enqueue_request(Request("http://h.test/page", dont_filter=True)) is True


@in_a_loop
def test_a_users_dupefilter_is_said_not_to_filter_in_a_fleet(
    worker: Workers, caplog: pytest.LogCaptureFixture
) -> None:
    """The shared seen set finds a fleet's duplicates: a DUPEFILTER_CLASS of the
    user's own (here Scrapy's BaseDupeFilter, which filters nothing) would
    otherwise be ignored without a word."""
    with caplog.at_level(logging.WARNING, logger="scrapy_aimd.fleet.worker"):
        worker()
    assert "DUPEFILTER_CLASS scrapy.dupefilters.BaseDupeFilter does not filter in a fleet" in (
        caplog.text
    )


@in_a_loop
def test_a_worker_reads_the_fleets_robots_answers_one_round_trip_a_call(
    worker: Workers,
) -> None:
    """A worker joining a fleet finds the robots.txt answers of its origins stored
    by another: each takes a round trip (a hold), and a ``next_request`` makes at
    most one, so that it never blocks the reactor for several; the rest are read
    on the engine's next asks."""
    first, joining = worker(ROBOTSTXT_OBEY=True), worker(ROBOTSTXT_OBEY=True)
    origins = [f"http://r{n}.test" for n in range(4)]
    for origin in origins:
        first.store.robots_share(
            origin, RobotsAnswer(200, b"User-agent: *\nAllow: /\n"), max_age=60
        )
        joining.enqueue_request(Request(f"{origin}/robots.txt", meta={ROBOTS_META: origin}))
    trips = []
    for _ in range(3 * len(origins)):
        before = joining.store.fleet.counters.round_trips
        joining.next_request()
        trips.append(joining.store.fleet.counters.round_trips - before)
        if joining.stats.get_value("aimd/fleet/robots/shared") == len(origins):
            break
    assert joining.stats.get_value("aimd/fleet/robots/shared") == len(origins), trips
    assert max(trips) == 1, trips


@in_a_loop
def test_a_repeat_of_a_request_held_for_robots_txt_is_dropped_at_once(worker: Workers) -> None:
    """Two requests of one URL while the origin's robots.txt is unknown: the
    repeat is dropped as it comes, before the robots gate, as one process's
    dupefilter drops it (the engine says so: ``enqueue_request`` is False), and
    the first is queued once when the rules release it; nothing is said dropped
    twice."""
    scheduler = worker(ROBOTSTXT_OBEY=True)
    dropped: list[Request] = []

    def on_dropped(request: Request, spider: object) -> None:
        dropped.append(request)

    scheduler.crawler.signals.connect(on_dropped, signal=signals.request_dropped, weak=False)
    first, repeat = Request("http://held.test/a"), Request("http://held.test/a")
    assert scheduler.enqueue_request(first) is True  # held: not known yet
    assert scheduler.enqueue_request(repeat) is False
    assert scheduler.robots is not None
    scheduler.robots.read_shared("http://held.test", RobotsAnswer(200, b"User-agent: *\n"))
    assert dropped == []
    assert scheduler.stats.get_value("scheduler/enqueued") == 1
    assert [item.item for item in scheduler.store.pending] == [first]


@in_a_loop
def test_robots_txt_holds_and_claims_take_turns(worker: Workers) -> None:
    """A worker that joins with many origins' robots.txt to read claims all the
    same, every other call: its first page does not wait for every origin."""
    first, joining = worker(ROBOTSTXT_OBEY=True), worker(ROBOTSTXT_OBEY=True)
    origins = [f"http://t{n}.test" for n in range(12)]
    for origin in origins:
        first.store.robots_share(
            origin, RobotsAnswer(200, b"User-agent: *\nAllow: /\n"), max_age=60
        )
        joining.enqueue_request(Request(f"{origin}/robots.txt", meta={ROBOTS_META: origin}))
    first.enqueue_request(Request("http://t0.test/page"))
    first.store._flush()
    assert first.store.frontier is not None
    first.store.frontier.flush()
    handed = [joining.next_request() for _ in range(4)]
    assert any(r is not None and r.url == "http://t0.test/page" for r in handed), handed
    assert joining.stats.get_value("aimd/fleet/robots/shared") in (1, 2)


@in_a_loop
def test_a_robots_txt_that_waits_goes_behind_the_others(worker: Workers) -> None:
    """Origins whose robots.txt lock another worker holds wait their turn behind
    the rest: the ninth origin's stored answer is read although the eight before
    it keep waiting."""
    first, joining = worker(ROBOTSTXT_OBEY=True), worker(ROBOTSTXT_OBEY=True)
    assert first.store.frontier is not None
    locked = [f"http://w{n}.test" for n in range(8)]
    for origin in locked:  # the first worker is fetching these: their locks are taken
        request = Request(f"{origin}/robots.txt", meta={ROBOTS_META: origin})
        assert isinstance(first.store.frontier.hold(origin.split("//")[1], request, origin), Claim)
    answered = "http://w8.test"
    first.store.robots_share(answered, RobotsAnswer(200, b"User-agent: *\nAllow: /\n"), max_age=60)
    for origin in [*locked, answered]:
        joining.enqueue_request(Request(f"{origin}/robots.txt", meta={ROBOTS_META: origin}))
    for _ in range(40):
        joining.next_request()
        if joining.stats.get_value("aimd/fleet/robots/shared"):
            break
    assert joining.stats.get_value("aimd/fleet/robots/shared") == 1


@in_a_loop
def test_a_worker_declared_dead_while_alive_drops_what_it_claimed_and_did_not_send(
    worker: Workers, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose reactor was blocked past its heartbeat lost its leases to
    another worker's claim, which may claim their requests again: its next beat
    says so, and the requests it claimed and has not handed out are dropped
    here (the other worker fetches them), not sent a second time to their hosts
    at once."""
    a, b = worker(), worker()
    for n in range(3):
        a.enqueue_request(Request(f"http://h{n}.test/", dont_filter=True))
    assert a.next_request() is not None
    assert len(a.store.claimed) == 2  # claimed together, not handed out yet
    # Its heartbeat expires (a blocked reactor renews nothing) and b's claim reaps.
    a.store.fleet.redis.delete(a.store.fleet.key(f"hb:{a.store.fleet.token}"))
    again = [b.next_request() for _ in range(3)]
    assert len([r for r in again if r is not None]) == 3
    with caplog.at_level(logging.WARNING, logger="scrapy_aimd.fleet.worker"):
        a.store._beat()
    assert not a.store.claimed
    assert a.next_request() is None  # nothing of what b fetches now
    assert a.stats.get_value("aimd/fleet/declared_dead") == 1
    assert any("taken for dead" in r.getMessage() for r in caplog.records)
    a.store._beat()  # said once
    assert a.stats.get_value("aimd/fleet/declared_dead") == 1


@in_a_loop
def test_the_heartbeat_is_a_setting_of_ten_seconds_by_default(
    worker: Workers,
) -> None:
    """AIMD_FLEET_HEARTBEAT: 10 s by default, twice the Redis reply timeout, so
    that a Redis stall of a few seconds (a BGSAVE fork, an AOF rewrite) does not
    expire every worker's heartbeat together; renewed every third of it."""
    assert worker().store.fleet.heartbeat_ms == 10_000
    assert worker(AIMD_FLEET_HEARTBEAT=7.5).store.fleet.heartbeat_ms == 7_500


@pytest.mark.parametrize("value", [-1, 0, "x", float("nan"), 10**400, 5.0, 4])
def test_a_heartbeat_not_above_the_reply_timeout_is_refused_at_start(
    server: RedisServer, prefix: str, value: object
) -> None:
    crawler = get_crawler(
        settings_dict={
            "AIMD_REDIS_URL": server.url,
            "AIMD_FLEET_KEY": prefix,
            "AIMD_FLEET_HEARTBEAT": value,
        }
    )
    with pytest.raises(AimdSettingsError, match="Invalid setting AIMD_FLEET_HEARTBEAT=") as raised:
        read_fleet_settings(crawler.settings, None)
    if isinstance(value, (int, float)) and 0 < value < 1e300:
        assert f"{REPLY_TIMEOUT:g}" in str(raised.value)
        assert "reply timeout" in str(raised.value)
