"""The fleet's frontier against a real redis-server: order, claims, feedback, leases.

Every test has its own key prefix on one server for the module, so that the
fleets never see each other's keys.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from fleet_probe import claim_one, host_view, report_sent
from hypothesis import given
from hypothesis import strategies as st
from redis_server import REDIS_SERVER, SKIP_REASON, RedisServer, connect, fleet_prefix, serve
from test_controller import mixed_host_at

from scrapy_aimd.core.controller import ControllerConfig, HostController, Ticket
from scrapy_aimd.core.robots import MAX_BYTES
from scrapy_aimd.fleet import (
    Claim,
    Fleet,
    FleetFrontier,
    FleetRobots,
    FleetStoreError,
    Item,
    SharedRobots,
    Wait,
    redis_store,
)
from scrapy_aimd.fleet.connection import clear_fleet
from scrapy_aimd.fleet.host_state import Replica, limits_of
from scrapy_aimd.fleet.redis_store import read_claim_reply, sort_score, unpack_fields

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

server = pytest.fixture(scope="module")(serve)
prefix = pytest.fixture(fleet_prefix)
raw = pytest.fixture(connect)

FAST = ControllerConfig(min_delay=0.0, max_concurrency=4)
Frontiers = Callable[..., FleetFrontier[bytes]]


@pytest.fixture
def frontier(server: RedisServer, prefix: str) -> Iterator[Frontiers]:
    """Workers of one fleet: each call connects another."""
    made: list[Fleet] = []

    def make(
        cfg: ControllerConfig = FAST, lease_time: float = 30.0, heartbeat: float = 3.0
    ) -> FleetFrontier[bytes]:
        fleet = Fleet(server.url, prefix, heartbeat=heartbeat)
        made.append(fleet)
        return FleetFrontier(
            fleet, encode=bytes, decode=bytes, config=lambda host: cfg, lease_time=lease_time
        )

    yield make
    for fleet in made:
        fleet.close()


def claim_now(frontier: FleetFrontier[bytes], timeout: float = 5.0) -> Claim[bytes]:
    """The next claim, waiting (bounded) for a host to become ready."""
    deadline = time.monotonic() + timeout
    while True:
        claim = claim_one(frontier)
        if isinstance(claim, Claim):
            return claim
        assert time.monotonic() < deadline, f"nothing claimable: {claim}"
        time.sleep(max(0.001, min(0.05, claim.ready_at - claim.now)))


def test_sort_score_orders_as_the_frontier_sort_key() -> None:
    keys = [(p, d) for p in (-(2**31), -5, 0, 3, 2**31 - 1) for d in (0, 1, 7, 2**21 - 1)]
    by_score = sorted(keys, key=lambda k: sort_score(*k))
    assert by_score == sorted(keys, key=lambda k: (-k[0], k[1]))
    assert all(abs(sort_score(p, d)) < 2**53 for p, d in keys)
    assert sort_score(2**40, -3) == sort_score(2**31 - 1, 0)  # clipped to the range


def test_a_host_hands_out_by_priority_then_depth_then_arrival(frontier: Frontiers) -> None:
    worker = frontier()
    worker.push(
        [
            Item("h", b"late-shallow", depth=0),
            Item("h", b"deep", depth=3),
            Item("h", b"urgent", priority=10, depth=9),
            Item("h", b"shallow", depth=0),
            Item("h", b"mid", depth=1),
        ]
    )
    order = []
    for _ in range(5):
        claim = claim_now(worker)
        order.append(claim.item)
        worker.finish(claim, status=200, latency=0.001, done=True)
    assert order == [b"urgent", b"late-shallow", b"shallow", b"mid", b"deep"]
    assert claim_one(worker) == Wait(ready_at=float("inf"), now=pytest.approx(time.time(), abs=60),
                                  queued=0, leased=0)  # fmt: skip


def test_a_busy_host_never_blocks_another(frontier: Frontiers) -> None:
    worker = frontier(ControllerConfig(max_concurrency=1, adaptive=False))
    worker.push([Item("busy", b"b1"), Item("busy", b"b2"), Item("free", b"f1")])
    first = claim_one(worker)
    assert isinstance(first, Claim)
    second = claim_one(worker)
    assert isinstance(second, Claim)
    assert {first.host, second.host} == {"busy", "free"}
    # busy is at its limit: nothing claimable, and it waits on a place, not a time.
    third = claim_one(worker)
    assert isinstance(third, Wait)
    assert third.ready_at == float("inf")
    assert (third.queued, third.leased) == (1, 2)
    busy = first if first.host == "busy" else second
    worker.finish(busy, status=200, latency=0.001)
    again = claim_one(worker)
    assert isinstance(again, Claim)
    assert again.item == b"b2"


def test_the_gap_and_a_pause_hold_only_their_host(frontier: Frontiers) -> None:
    worker = frontier(ControllerConfig(min_delay=0.3, max_concurrency=4))
    worker.push([Item("slow", b"s1"), Item("slow", b"s2"), Item("paused", b"p1")])
    worker.push([Item("paused", b"p2"), Item("other", b"o1"), Item("other", b"o2")])
    claims = [claim_now(worker) for _ in range(3)]
    assert sorted(c.host for c in claims) == ["other", "paused", "slow"]
    paused = next(c for c in claims if c.host == "paused")
    reaction = worker.finish(paused, status=429, latency=0.001, retry_after=2.0)
    assert reaction is not None
    assert reaction.paused_until == pytest.approx(paused.started + 2.0, abs=0.5)
    for claim in claims:
        if claim is not paused:
            worker.finish(claim, status=200, latency=0.001, done=True)
    # The gap (0.3 s) holds slow and other; the pause holds paused for 2 s.
    wait = claim_one(worker)
    assert isinstance(wait, Wait)
    assert wait.ready_at == pytest.approx(min(c.started for c in claims) + 0.3, abs=0.05)
    later = [claim_now(worker), claim_now(worker)]
    assert sorted(c.host for c in later) == ["other", "slow"]
    assert later[0].started >= min(c.started for c in claims) + 0.3 - 1e-6
    view = host_view(worker, "paused")
    assert view is not None
    assert view.paused_until == pytest.approx(paused.started + 2.0, abs=0.5)
    assert view.queued == 1


def test_feedback_is_one_round_trip_and_a_claim_one(
    frontier: Frontiers, server: RedisServer
) -> None:
    worker = frontier()
    worker.push([Item(f"h{i % 3}", b"%d" % i) for i in range(30)])
    stats = Fleet(server.url, "aimd:observer").redis

    def evalsha_calls() -> int:
        info = stats.info("commandstats")
        return int(info.get("cmdstat_evalsha", {}).get("calls", 0))

    claim_now(worker)  # scripts loaded, host states cached
    for _ in range(10):
        client_before, server_before = worker.counters.round_trips, evalsha_calls()
        claim = claim_one(worker)
        assert isinstance(claim, Claim)
        assert (worker.counters.round_trips, evalsha_calls()) == (
            client_before + 1,
            server_before + 1,
        )
        worker.finish(claim, status=200, latency=0.001, done=True)
        assert (worker.counters.round_trips, evalsha_calls()) == (
            client_before + 2,
            server_before + 2,
        )
    assert worker.counters.conflicts == 0


def test_answers_sends_and_leases_done_go_with_the_next_claim(
    frontier: Frontiers, server: RedisServer
) -> None:
    """What need not be stored at once waits for the next claim and goes in its
    script: a fleet worker's request costs one round trip, not four (push, claim,
    feedback, done)."""
    gapped = replace(FAST, min_delay=0.2, adaptive=False)
    worker, other = frontier(gapped), frontier(gapped)
    worker.push([Item("a", b"a1"), Item("a", b"a2"), Item("b", b"b1"), Item("b", b"b2")])
    worker.push([Item("c", b"c1")])
    stats = Fleet(server.url, "aimd:observer2").redis  # connected before the claims

    def evalsha_calls() -> int:
        return int(stats.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))

    first, second = claim_now(worker), claim_now(worker)
    assert {first.host, second.host} == {"a", "b"}
    local = HostController(gapped)
    expected = local.finish(local.start(first.started), first.started + 0.01, 200, latency=0.01)
    told: list[object] = []
    before = (worker.counters.round_trips, evalsha_calls())
    worker.finish_later(first, status=200, latency=0.01, now=first.started + 0.01, then=told.append)
    sent_at = worker.fleet.now()
    worker.sent_later(second)
    worker.done_later([first.lease])
    pushed: list[object] = []
    worker.push_later([Item("d", b"d1", key=5), Item("d", b"d2", key=5)], pushed.append)
    assert worker.waiting and told == [] and pushed == []
    assert (worker.counters.round_trips, evalsha_calls()) == before  # nothing sent yet
    view = host_view(other, first.host)
    assert view is not None and view.in_flight == 1  # not stored yet: its place is taken
    server_before = evalsha_calls()
    third = claim_now(worker)
    assert third.host == "c"
    assert (worker.counters.round_trips, evalsha_calls()) == (before[0] + 1, server_before + 1)
    assert not worker.waiting
    assert told == [expected]
    assert pushed == [[True, False]]  # queued in the same script, the repeat seen
    view = host_view(other, first.host)
    assert view is not None and view.in_flight == 0 and view.version == 1
    assert worker.status().leased == 2  # the first's lease went with its answer
    # The second's send was told: its host's next start counts from it, a gap
    # on, and does not wait for two from its claim (as for a send no one told).
    ready = max(second.started + 0.3, sent_at + 0.22)
    assert ready < second.started + 0.4 - 0.02, "too slow to tell one gap from two"
    time.sleep(max(0.0, ready - other.fleet.now()))
    later = [claim_one(other), claim_one(other), claim_one(other)]
    assert all(isinstance(c, Claim) for c in later), later
    assert sorted(c.host for c in later if isinstance(c, Claim)) == ["a", "b", "d"]


def test_several_claims_in_one_round_trip_each_by_the_claims_rule(frontier: Frontiers) -> None:
    """As many claims as asked for (the downloader's room) in one script, each
    taken as a claim alone would be: a host at its limit gives no more."""
    worker = frontier()  # the limit starts at 1 a host
    worker.push([Item("a", b"a1"), Item("a", b"a2"), Item("b", b"b1"), Item("c", b"c1")])
    before = worker.counters.round_trips
    claims = worker.claim_many(4)
    assert isinstance(claims, list)
    assert worker.counters.round_trips == before + 1
    assert sorted(c.item for c in claims) == [b"a1", b"b1", b"c1"]
    assert len({c.lease for c in claims}) == 3
    assert len({c.started for c in claims}) == 1  # one script, one server time
    wait = worker.claim_many(4)
    assert isinstance(wait, Wait) and wait.leased == 3 and wait.queued == 1
    for claim in claims:
        assert worker.controller(claim.host) is not None
        worker.finish(claim, status=200, latency=0.001, done=True)
    assert [c.item for c in worker.claim_many(4)] == [b"a2"]  # type: ignore[union-attr]


def test_answers_of_a_host_carried_together_lose_their_race_together(
    frontier: Frontiers, raw: redis.Redis, prefix: str
) -> None:
    """Two answers of a host carried by one call are computed one on the other:
    when the first loses its race, the script takes neither, and both wait for
    the next call, to be stored in order on the newer state; the lease done with
    the second is not taken for a request dropped before its download."""
    fixed = ControllerConfig(min_delay=0.0, adaptive=False, max_concurrency=3)
    a, b = frontier(fixed), frontier(fixed)
    a.push([Item("h", b"%d" % n) for n in range(3)])
    one, two, three = claim_now(a), claim_now(a), claim_now(b)
    b.finish(three, status=200, latency=0.001, done=True)  # moves the version
    told: list[object] = []
    a.finish_later(one, status=200, latency=0.001, then=told.append)
    a.finish_later(two, status=404, latency=0.001, then=told.append)
    a.done_later([two.lease])
    before = a.counters.round_trips
    a.flush()
    assert a.counters.conflicts == 2
    assert a.counters.round_trips == before + 1  # never again in the same call
    assert told == [] and a.waiting
    assert a.retry_in() == 0.0  # they may go at once
    a.flush()
    assert a.counters.round_trips == before + 2  # both again, in one call
    assert not a.waiting
    assert len(told) == 2 and all(t is not None for t in told)
    view = host_view(a, "h")
    assert view is not None
    assert (view.in_flight, view.version) == (0, 3)
    assert a.status().leased == 1  # the first's lease stays until done
    log = [entry.decode() for entry in raw.lrange(f"{prefix}:e:h", 0, -1)]
    assert not [entry for entry in log if entry.startswith("c ")], log


def test_a_feedback_that_lost_a_race_retries_on_the_new_state(frontier: Frontiers) -> None:
    a, b = frontier(), frontier()
    a.push([Item("h", str(n).encode()) for n in range(12)])
    # The limit starts at 1: grow it to 2 with good answers (slow start needs
    # a round that used the limit, so it may take more than one).
    for _ in range(10):
        view = host_view(a, "h")
        if view is not None and view.concurrency >= 2:
            break
        a.finish(claim_now(a), status=200, latency=0.001, done=True)
    view = host_view(a, "h")
    assert view is not None and view.concurrency >= 2, view
    version = view.version
    claim_a, claim_b = claim_now(a), claim_now(b)
    b.finish(claim_b, status=200, latency=0.001, done=True)  # moves the version
    before = a.counters.round_trips
    told = a.finish(claim_a, status=503, latency=0.001, done=True)  # an older version
    assert a.counters.conflicts == 1
    assert a.counters.round_trips == before + 1  # told now, stored with the next call
    assert a.waiting and a.contention.turns == 1  # its loss gave it the host's turn
    a.flush()
    assert a.counters.round_trips == before + 2 and not a.waiting
    assert told is not None and told.decreased
    assert (a.contention.told_early, a.contention.told_changed) == (1, 0)
    view = host_view(a, "h")
    assert view is not None
    assert view.version == version + 2
    assert view.concurrency == 1  # the 503 was applied on b's state (limit 2), halved
    assert view.in_flight == 0


def test_an_answer_goes_before_the_starts_claimed_after_its_time(frontier: Frontiers) -> None:
    """Feedback is ordered by when the answer came, not by when its worker got to
    it: a start another worker claimed in between is not of the answer's round
    (a single process would have made its decrease first), and it does not make
    the feedback lose a race."""
    a, b = frontier(), frontier()
    a.push([Item("h", str(n).encode()) for n in range(12)])
    local = HostController(FAST)
    for _ in range(10):  # grow the limit to 2 or more, as the local controller
        view = host_view(a, "h")
        if view is not None and view.concurrency >= 2:
            break
        claim = claim_now(a)
        at = claim.started + 0.001
        local.finish(local.start(claim.started), at, 200, latency=0.001)
        a.finish(claim, status=200, latency=0.001, now=at, done=True)
    assert local.concurrency == host_view(a, "h").concurrency >= 2  # type: ignore[union-attr]
    first = claim_now(a)
    time.sleep(0.01)
    second = claim_now(b)
    answered = first.started + (second.started - first.started) / 2
    tickets = [local.start(first.started)]
    expected = local.finish(tickets[0], answered, 503, latency=0.001)
    tickets.append(local.start(second.started))
    before = (a.counters.round_trips, a.counters.conflicts)
    got = a.finish(first, status=503, latency=0.001, now=answered, done=True)
    assert got == expected and got is not None and got.decreased
    assert (a.counters.round_trips, a.counters.conflicts) == (before[0] + 1, before[1])
    at = second.started + 0.001
    expected = local.finish(tickets[1], at, 503, latency=0.001)
    got = b.finish(second, status=503, latency=0.001, now=at, done=True)
    assert got == expected and got is not None and got.decreased  # a round of its own
    view = host_view(b, "h")
    assert view is not None
    assert (view.delay, view.concurrency) == (local.delay, local.concurrency)


def _answer(
    worker: FleetFrontier[bytes],
    local: HostController,
    claim: Claim[bytes],
    ticket: Ticket,
    event: object,
    now: float,
) -> tuple[object, object]:
    """Give the same answer to the fleet and to the local controller."""
    if event == "timeout":
        expected = local.fail(ticket, now, timeout=True)
        return worker.fail(claim, timeout=True, now=now, done=True), expected
    status, retry_after = event if isinstance(event, tuple) else (event, None)
    assert isinstance(status, int)
    expected = local.finish(ticket, now, status, latency=0.004, retry_after=retry_after)
    got = worker.finish(
        claim, status=status, latency=0.004, retry_after=retry_after, now=now, done=True
    )
    return got, expected


def _drive(
    workers: list[FleetFrontier[bytes]], local: HostController, events: list[object]
) -> list[str]:
    """Feed the events to the fleet and to ``local``: each round, claim what the
    host allows (the workers by turns), then answer in claim order. Returns the
    differences, as text."""
    differences: list[str] = []
    turn = itertools.cycle(workers)
    pending = list(events)
    while pending:
        worker = next(turn)
        claims = [(worker, claim_now(worker))]
        while len(claims) < len(pending):
            worker = next(turn)
            more = claim_one(worker)
            if not isinstance(more, Claim):
                break
            claims.append((worker, more))
        tickets = []
        for _, claim in claims:
            # The claim script's readiness agrees with the controller's own.
            assert local.ready_at(claim.started) <= claim.started + 1e-9, len(pending)
            tickets.append(local.start(claim.started))
        now = max(claim.started for _, claim in claims)
        for (worker, claim), ticket in zip(claims, tickets, strict=True):
            event = pending.pop(0)
            now += 0.004
            got, expected = _answer(worker, local, claim, ticket, event, now)
            view = host_view(worker, "h")
            assert view is not None
            fleet = (view.delay, view.concurrency, view.paused_until, got)
            if fleet != (local.spacing, local.concurrency, local.paused_until, expected):
                differences.append(
                    f"{len(events) - len(pending)} {event}: fleet {fleet[:3]} local "
                    f"{(local.spacing, local.concurrency, local.paused_until)}"
                )
    return differences


SMALL = ControllerConfig(min_delay=0.0, max_delay=0.3, max_concurrency=4)
#: Growth, overload, rate limits, timeouts and Retry-After pauses, with requests
#: in flight together once the limit has grown.
EVENTS: list[object] = [200] * 5 + [503, 200, 200, 200, 429, 200, "timeout", 200, (503, 0.05)]
EVENTS += [200] * 4 + [(429, 0.05), 200, 200, 200, 503, 503] + [200] * 6


def test_one_worker_applies_every_rule_as_a_local_controller(frontier: Frontiers) -> None:
    """A host fed by one worker goes by the controller that the worker keeps: the
    same gap, limit, pause and reactions as in a single process, answer by answer."""
    worker = frontier(SMALL)
    worker.push([Item("h", b"%d" % i) for i in range(len(EVENTS))])
    assert _drive([worker], HostController(SMALL), EVENTS) == []
    assert worker.counters.conflicts == 0


def test_a_claim_reads_the_controllers_limits() -> None:
    """The claim script gates a host by the limits the controller decided: its
    gap, its limit and its pause (tests/test_gate_lua.py: the same gate)."""
    local, _ = mixed_host_at(8)  # robots.txt in 2 ms, pages of 0.4 s
    assert limits_of(local) == (local.delay, 8, -math.inf)
    assert tuple(limits_of(local)) == tuple(local.limits)


def test_workers_taking_turns_apply_what_the_state_carries(frontier: Frontiers) -> None:
    """Workers that take turns on a host restore its controller from the stored
    state: a first backoff, a Retry-After pause and the gap closing step by step
    carry (one request at a time: the round of a request in flight does not)."""
    fixed = replace(SMALL, adaptive=False, max_concurrency=1)
    workers = [frontier(fixed), frontier(fixed)]
    events: list[object] = [(429, 0.05)] + [200] * 4
    workers[0].push([Item("h", b"%d" % i) for i in range(len(events))])
    assert _drive(workers, HostController(fixed), events) == []
    assert sum(w.counters.conflicts for w in workers) == 0


def test_workers_taking_turns_apply_every_rule_as_a_local_controller(
    frontier: Frontiers,
) -> None:
    workers = [frontier(SMALL), frontier(SMALL)]
    workers[0].push([Item("h", b"%d" % i) for i in range(len(EVENTS))])
    assert _drive(workers, HostController(SMALL), EVENTS) == []


def test_one_worker_restores_a_host_from_its_json_state_once(
    frontier: Frontiers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Restoring a controller from JSON costs more than the rest of a feedback:
    while no other worker stores a newer state, the worker goes on with the one
    it holds (claims, views and feedbacks), and still agrees with a local one."""
    restored: list[int] = []
    of = Replica.of.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Replica], cfg: ControllerConfig, data: object) -> Replica:
        restored.append(1)
        return of(cls, cfg, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(Replica, "of", classmethod(counting))
    worker = frontier(SMALL)
    worker.push([Item("h", b"%d" % i) for i in range(len(EVENTS))])
    assert _drive([worker], HostController(SMALL), EVENTS) == []
    assert worker.controller("h") is not None
    assert len(restored) == 1
    other = frontier(SMALL)  # another worker's state: restored again, once
    other.push([Item("h", b"more"), Item("h", b"again"), Item("h", b"last")])
    worker.finish(claim_now(worker), status=200, latency=0.004, done=True)
    assert len(restored) == 1
    other.finish(claim_now(other), status=200, latency=0.004, done=True)
    assert len(restored) == 2  # the other worker's first
    claim = claim_now(worker)  # its reply shows the other worker's state
    assert worker.controller("h") is not None and len(restored) == 3
    worker.finish(claim, status=200, latency=0.004, done=True)
    assert len(restored) == 3


def test_a_lease_never_acked_comes_back_after_it_expires(frontier: Frontiers) -> None:
    dead = frontier(FAST, lease_time=0.3)
    dead.push([Item("h", b"held"), Item("h", b"next")])
    claim = claim_now(dead)
    assert claim.item == b"held"
    assert claim.expires == pytest.approx(claim.started + 0.3)
    # The worker dies without feedback. Its place is taken (limit 1) until expiry.
    survivor = frontier(FAST, lease_time=30.0)
    waiting = claim_one(survivor)
    assert isinstance(waiting, Wait)
    assert waiting.leased == 1
    time.sleep(0.4)
    back = claim_now(survivor)
    assert back.item == b"held"
    assert back.lease != claim.lease  # a claim's lease is its own, never reused
    assert survivor.counters.reaped == 1
    survivor.finish(back, status=200, latency=0.001, done=True)
    # The dead worker's late feedback changes nothing of the lease that came back.
    dead.finish(claim, status=200, latency=0.001, done=True)
    dead.flush()  # it lost its race to the survivor's answer: it goes again
    assert dead.counters.late_feedback == 1 and not dead.waiting
    last = claim_now(survivor)
    assert last.item == b"next"
    view = host_view(survivor, "h")
    assert view is not None
    assert view.in_flight == 1


def test_a_dead_workers_leases_come_back_once_its_heartbeat_expires(
    frontier: Frontiers,
) -> None:
    """A lease holds 30 s, the heartbeat 0.3 s: once the worker stops beating,
    another worker's next claim takes its leases back at once, their requests
    to the queue and their places freed."""
    dead = frontier(SMALL, lease_time=30.0, heartbeat=0.3)
    dead.push([Item("h", b"held"), Item("h", b"next")])
    claims = dead.claim_many(1)
    assert isinstance(claims, list) and [c.item for c in claims] == [b"held"]
    survivor = frontier(SMALL, lease_time=30.0, heartbeat=0.3)
    waiting = survivor.claim_many(1)
    assert isinstance(waiting, Wait) and waiting.leased == 1  # limit 1: its place is taken
    time.sleep(0.4)  # the dead worker renews nothing; the survivor's claims beat
    back = survivor.claim_many(1)
    assert isinstance(back, list) and [c.item for c in back] == [b"held"]
    assert survivor.counters.reaped == 1
    assert back[0].lease != claims[0].lease
    # The dead worker's late answer touches nothing of the lease that came back.
    dead.finish(claims[0], status=200, latency=0.001, done=True)
    dead.flush()
    assert dead.counters.late_feedback == 1


def test_a_live_worker_keeps_its_leases_past_its_heartbeat(frontier: Frontiers) -> None:
    """A worker that beats (its timer, or its claims) keeps its leases for as long
    as they hold: the lease, not the heartbeat, bounds a live worker."""
    live = frontier(SMALL, lease_time=30.0, heartbeat=0.3)
    live.push([Item("h", b"held"), Item("h", b"next")])
    claims = live.claim_many(1)
    assert isinstance(claims, list)
    other = frontier(SMALL, lease_time=30.0, heartbeat=0.3)
    for _ in range(4):
        time.sleep(0.15)
        live.fleet.beat()
        assert isinstance(other.claim_many(1), Wait)
    assert other.counters.reaped == 0
    # A worker that closes ends its heartbeat: nothing of it is reaped after.
    live.finish(claims[0], status=200, latency=0.001, done=True)
    live.fleet.beat(alive=False)
    assert live.fleet.redis.exists(live.fleet.key(f"hb:{live.fleet.token}")) == 0
    assert not live.fleet.redis.sismember(live.fleet.key("workers"), live.fleet.token)


def test_a_dead_workers_robots_lock_goes_with_its_hold(frontier: Frontiers) -> None:
    """A dead worker's robots.txt hold comes back with its heartbeat, and so does
    the origin's lock: another worker fetches it, not after the lease."""
    dead = frontier(FAST, lease_time=30.0, heartbeat=0.3)
    held = dead.hold("h", b"robots", "http://h")
    assert isinstance(held, Claim)
    survivor = frontier(FAST, lease_time=30.0, heartbeat=0.3)
    assert isinstance(survivor.hold("h", b"robots", "http://h"), Wait)  # locked
    time.sleep(0.4)
    assert isinstance(survivor.claim_many(1), Wait)  # nothing queued; the dead reaped
    again = survivor.hold("h", b"robots", "http://h")
    assert isinstance(again, Claim)
    assert survivor.fleet.redis.zcard(survivor.fleet.key("leases")) == 1


def stale_and_live(
    frontier: Frontiers, *, answered: bool
) -> tuple[FleetFrontier[bytes], Claim[bytes], FleetFrontier[bytes], Claim[bytes]]:
    """Worker A's lease of a request expires (its callback ran past the lease after
    an answer, or it held the claim unsent); worker B claims the request again.
    Returns A, A's stale claim, B and B's live claim of the same request."""
    stale = frontier(SMALL, lease_time=0.3)
    stale.push([Item("h", b"page")])
    old = claim_now(stale)
    if answered:
        stale.finish(old, status=200, latency=0.001)  # its callback still runs
    time.sleep(0.45)
    live = frontier(SMALL, lease_time=30.0)
    new = claim_now(live)
    assert new.item == b"page"
    assert live.counters.reaped == 1
    return stale, old, live, new


def test_a_stale_workers_done_leaves_the_new_lease_and_its_place(frontier: Frontiers) -> None:
    stale, old, live, new = stale_and_live(frontier, answered=True)
    assert stale.done([old.lease]) == 0
    view = host_view(live, "h")
    assert view is not None and view.in_flight == 1
    assert live.status().leased == 1
    # B's lease still holds the request: its answer is applied and frees the place.
    reaction = live.finish(new, status=200, latency=0.001, done=True)
    assert reaction is not None and live.counters.late_feedback == 0
    assert host_view(live, "h").in_flight == 0  # type: ignore[union-attr]
    assert live.status().leased == 0


def test_a_429_after_a_stale_workers_done_is_applied_and_requeued(frontier: Frontiers) -> None:
    stale, old, live, new = stale_and_live(frontier, answered=True)
    stale.done_later([old.lease])
    stale.flush()  # carried by a call, as a crawl sends it
    reaction = live.finish(new, status=429, latency=0.001)
    assert reaction is not None, "the live lease's answer was taken for a late one"
    assert reaction.decreased and reaction.refused
    assert live.counters.late_feedback == 0
    assert host_view(live, "h").in_flight == 0  # type: ignore[union-attr]


def test_a_stale_workers_give_back_leaves_a_request_another_holds(frontier: Frontiers) -> None:
    stale, old, live, _ = stale_and_live(frontier, answered=False)
    assert stale.give_back([old.lease]) == 0
    status = live.status()
    assert (status.queued, status.leased) == (0, 1)
    view = host_view(live, "h")
    assert view is not None and view.in_flight == 1
    other = frontier(SMALL)
    assert isinstance(claim_one(other), Wait)  # nothing to fetch twice


def test_a_stale_workers_late_answer_and_send_leave_the_new_lease(frontier: Frontiers) -> None:
    """A's answer and send report of its expired lease, carried by its next claim,
    count as late and leave B's lease, its place and its answer alone."""
    stale, old, live, new = stale_and_live(frontier, answered=False)
    stale.sent_later(old)
    stale.fail(old, timeout=False, done=True)
    stale.flush()  # it lost its race to B's claim: it goes again
    assert stale.counters.late_feedback == 1 and not stale.waiting
    assert host_view(live, "h").in_flight == 1  # type: ignore[union-attr]
    assert live.status().leased == 1
    reaction = live.finish(new, status=429, latency=0.001, done=True)
    assert reaction is not None and reaction.decreased
    assert live.counters.late_feedback == 0


def test_a_hold_takes_a_place_on_its_host_fleet_wide(frontier: Frontiers) -> None:
    """A request a worker keeps (its robots.txt) holds a place on its host by the
    claim's rule: another worker's claim waits for it, and its answer, not a page,
    frees the place and leaves the host's limit and gap as they were."""
    keeper, other = frontier(), frontier()
    robots = keeper.hold("h", "robots.txt")  # a host nothing was queued for yet
    assert isinstance(robots, Claim) and robots.item == "robots.txt"
    assert robots.expires == pytest.approx(robots.started + 30.0)
    other.push([Item("h", b"page")])
    waiting = claim_one(other)
    assert isinstance(waiting, Wait) and waiting.leased == 1  # the limit starts at 1
    assert isinstance(keeper.hold("h", "again"), Wait)
    reaction = keeper.finish(robots, status=404, latency=0.002, done=True, page=False)
    assert reaction is not None and not reaction.throttled
    view = host_view(other, "h")
    assert view is not None
    assert (view.in_flight, view.concurrency, view.delay) == (0, 1, 0.0)
    assert claim_now(other).item == b"page"
    assert keeper.status().queued == 0


def test_a_throttled_hold_slows_its_host_down(frontier: Frontiers) -> None:
    keeper, other = frontier(SMALL), frontier(SMALL)
    robots = keeper.hold("h", "robots.txt")
    assert isinstance(robots, Claim)
    reaction = keeper.finish(robots, status=503, latency=0.002, done=True, page=False)
    assert reaction is not None and reaction.decreased
    view = host_view(other, "h")
    assert view is not None and view.delay == SMALL.max_delay  # the default 1 s, capped
    other.push([Item("h", b"page")])
    waiting = claim_one(other)
    assert isinstance(waiting, Wait) and waiting.ready_at > waiting.now


def test_an_expired_hold_frees_its_place_and_queues_nothing(frontier: Frontiers) -> None:
    dead = frontier(FAST, lease_time=0.3)
    assert isinstance(dead.hold("h", "robots.txt"), Claim)
    survivor = frontier(FAST)
    survivor.push([Item("h", b"page")])
    assert isinstance(claim_one(survivor), Wait)
    time.sleep(0.4)
    assert claim_now(survivor).item == b"page"  # the claim reaped the hold
    assert survivor.status().queued == 0
    view = host_view(survivor, "h")
    assert view is not None and view.in_flight == 1


def test_the_fleet_is_idle_from_when_its_last_hold_went(frontier: Frontiers) -> None:
    """A hold (a worker's robots.txt request) that expires, or is given back, as the
    fleet's last lease, with nothing queued: the fleet is idle from then, not from
    before the hold (its workers would close at once, not after
    AIMD_FLEET_IDLE_CLOSE)."""
    dead = frontier(FAST, lease_time=0.5)
    time.sleep(0.3)  # idle since the fleet was made
    assert isinstance(dead.hold("h", "robots.txt"), Claim)
    assert dead.status().idle_for == 0.0  # a hold is leased: not idle
    time.sleep(0.6)
    assert isinstance(claim_one(dead), Wait)  # a claim puts expired leases back first
    assert dead.counters.reaped == 0  # the hold went; nothing to queue again
    assert dead.status().idle_for < 0.5  # from before the hold: 0.9 s or more
    alive = frontier(FAST)
    hold = alive.hold("g", "robots.txt")
    assert isinstance(hold, Claim)
    time.sleep(0.3)
    alive.give_back([hold.lease])
    assert alive.status().idle_for < 0.5


def test_a_claim_puts_back_what_expired_and_counts_it(frontier: Frontiers) -> None:
    worker = frontier(ControllerConfig(adaptive=False, max_concurrency=3), lease_time=0.2)
    worker.push([Item("h", b"1"), Item("h", b"2"), Item("g", b"3")])
    claims = [claim_now(worker) for _ in range(3)]
    assert worker.status().leased == 3
    time.sleep(0.3)
    again = worker.claim_many(3)
    assert worker.counters.reaped == 3
    assert isinstance(again, list)
    assert sorted(claim.item for claim in again) == [b"1", b"2", b"3"]
    status = worker.status()
    assert (status.queued, status.leased, status.reaped) == (0, 3, 3)
    assert len(again) == len(claims)
    # Reaping freed their places: taken again now, each host holds what it was given.
    views = {host: host_view(worker, host) for host in ("h", "g")}
    assert {host: view.in_flight for host, view in views.items() if view} == {"h": 2, "g": 1}


def test_a_lease_kept_after_feedback_holds_the_fleet_busy_until_done(frontier: Frontiers) -> None:
    worker = frontier()
    worker.push([Item("h", b"parent")])
    claim = claim_now(worker)
    worker.finish(claim, status=200, latency=0.001)  # the callback still runs
    status = worker.status()
    assert (status.queued, status.leased, status.idle_for) == (0, 1, 0.0)
    view = host_view(worker, "h")
    assert view is not None
    assert view.in_flight == 0  # its place is free for the next request
    worker.push([Item("h", b"child")])
    assert worker.done([claim.lease]) == 1
    assert worker.status().idle_for == 0.0
    child = claim_now(worker)
    worker.done([child.lease])  # dropped before its download: frees its place too
    assert host_view(worker, "h").in_flight == 0  # type: ignore[union-attr]
    time.sleep(0.2)
    status = worker.status()
    assert (status.queued, status.leased) == (0, 0)
    assert 0.15 <= status.idle_for < 5


def test_a_crawl_delay_set_on_a_host_holds_every_worker(frontier: Frontiers) -> None:
    a = frontier(ControllerConfig(adaptive=False, max_concurrency=4))
    b = frontier(ControllerConfig(adaptive=False, max_concurrency=4))
    a.push([Item("h", b"1"), Item("h", b"2")])
    a.update_host("h", lambda controller: controller.set_crawl_delay(0.5))
    first = claim_now(b)
    wait = claim_one(a)
    assert isinstance(wait, Wait)
    assert wait.ready_at == pytest.approx(first.started + 0.5)
    b.finish(first, status=200, latency=0.001, done=True)
    view = host_view(a, "h")
    assert view is not None
    assert view.delay == 0.5
    assert view.state is not None
    assert view.state["crawl_delay"] == 0.5


def test_a_crawl_delay_that_lost_its_race_is_shown_as_it_will_hold(frontier: Frontiers) -> None:
    """A Crawl-delay whose store lost its race to another worker's waits for the
    next call; the controller ``update_host`` returns has it all the same (the
    reporter's "change" event shows the delay that holds), while the host as
    stored, and as this worker's view shows it, goes without it until then."""
    a = frontier(ControllerConfig(adaptive=False, max_concurrency=4))
    b = frontier(ControllerConfig(adaptive=False, max_concurrency=4))
    a.push([Item("h", b"1"), Item("h", b"2")])
    mine = claim_now(a)
    theirs = claim_now(b)
    b.finish(theirs, status=200, latency=0.001, done=True)  # a's view is one behind
    changed = a.update_host("h", lambda controller: controller.set_crawl_delay(2.0))
    assert changed is not None and changed.delay == 2.0
    known = a.controller("h")
    assert known is not None and known.delay < 2.0  # it lost: stored with the next call
    view = host_view(a, "h")  # sends what waits first: the Crawl-delay, in the turn its loss took
    assert view is not None and view.delay == 2.0
    stored = a.update_host("h", lambda controller: controller.set_crawl_delay(3.0))
    assert stored is not None and stored.delay == 3.0 and stored is a.controller("h")
    a.finish(mine, status=200, latency=0.001, done=True)
    assert a.counters.conflicts >= 1


def test_the_gap_counts_from_the_send_when_a_worker_reports_it(frontier: Frontiers) -> None:
    """A request sent after its claim moves the host's gap with it, fleet-wide."""
    gapped = replace(FAST, min_delay=0.5, max_concurrency=2)
    a, b = frontier(gapped), frontier(gapped)
    a.push([Item("h", b"1"), Item("h", b"2")])
    first = claim_now(a)
    time.sleep(0.1)
    report_sent(a, first)
    wait = claim_one(b)
    assert isinstance(wait, Wait)
    assert wait.ready_at >= first.started + 0.5 + 0.09
    a.finish(first, status=200, latency=0.001, done=True)
    view = host_view(a, "h")
    assert view is not None
    report_sent(a, first)  # its place is free: nothing to move
    assert host_view(a, "h") == view


def test_the_next_start_of_a_host_with_a_gap_waits_for_the_send(frontier: Frontiers) -> None:
    """A worker whose reactor is busy sends its claimed request late: until it says
    it sent it, another worker's claim of the host waits (for one more gap at most,
    if no word comes), so that two arrivals are never closer than the gap."""
    gapped = replace(FAST, min_delay=0.3, max_concurrency=3, adaptive=False)
    a, b = frontier(gapped), frontier(gapped)
    a.push([Item("h", b"1"), Item("h", b"2"), Item("h", b"3")])
    first = claim_now(a)
    wait = claim_one(b)
    assert isinstance(wait, Wait)
    assert wait.ready_at == pytest.approx(first.started + 0.6)  # no word of the send yet
    time.sleep(0.35)
    assert isinstance(claim_one(b), Wait)  # past the gap, but the first is not sent
    report_sent(a, first)
    sent_at = a.fleet.now()
    wait = claim_one(b)
    assert isinstance(wait, Wait)
    assert sent_at + 0.3 - 0.02 <= wait.ready_at <= sent_at + 0.3 + 0.02
    second = claim_now(b)
    assert second.started >= sent_at + 0.3 - 0.02
    # No word of the second's send, nor ever: the third waits one more gap, then goes.
    third = claim_now(a)
    assert third.started >= second.started + 0.6 - 1e-6


def test_a_request_that_cannot_be_read_is_dropped_counted_and_logged(
    server: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    fleet = Fleet(server.url, prefix)

    def decode(data: bytes) -> bytes:
        if data == b"bad":
            raise ValueError("not a request")
        return data

    pusher = FleetFrontier(
        Fleet(server.url, prefix), encode=bytes, decode=bytes, config=lambda h: FAST, lease_time=30
    )
    pusher.push([Item("a", b"bad"), Item("b", b"good")])
    pusher.fleet.close()
    # Another worker's requests: this one reads them from Redis.
    worker = FleetFrontier(
        fleet, encode=bytes, decode=decode, config=lambda host: FAST, lease_time=30.0
    )
    claim = claim_now(worker)
    assert claim.item == b"good"
    assert worker.counters.undecodable == 1
    assert "cannot be read" in caplog.text
    assert worker.status().leased == 1
    fleet.close()


def test_a_worker_hands_out_what_it_pushed_itself_as_it_is(frontier: Frontiers) -> None:
    """A claim of a request this worker pushed hands out the object it pushed (no
    decoding, most of a claim's CPU); another worker's claim decodes its copy; an
    object pushed twice is handed out as itself once."""
    own, other = frontier(ROOMY), frontier(ROOMY)
    first, second = bytearray(b"first"), bytearray(b"second")
    assert own.push([Item("h", first), Item("h", second), Item("h", first)]) == [True] * 3
    claims = [claim_now(own), claim_now(other), claim_now(own)]
    assert claims[0].item is first
    assert claims[1].item == b"second" and claims[1].item is not second
    assert claims[2].item == b"first" and claims[2].item is not first


def test_a_request_that_cannot_be_serialized_stays_with_the_caller(
    server: RedisServer, prefix: str
) -> None:
    fleet = Fleet(server.url, prefix)
    worker: FleetFrontier[bytes] = FleetFrontier(
        fleet,
        encode=lambda item: None if item == b"local" else item,
        decode=bytes,
        config=lambda host: FAST,
        lease_time=30.0,
    )
    assert worker.push([Item("h", b"local"), Item("h", b"shared", key=7)]) == [None, True]
    assert worker.unserializable == 1
    assert worker.status().queued == 1
    fleet.close()


def test_scrapy_requests_go_through_the_jobdir_codec(server: RedisServer, prefix: str) -> None:
    scrapy = pytest.importorskip("scrapy")
    from scrapy_aimd.request_codec import RequestCodec

    class Spider(scrapy.Spider):  # type: ignore[misc]
        name = "fleet"

        def parse_item(self, response: object) -> None:
            pass

    spider = Spider()
    codec = RequestCodec(spider)
    fleet = Fleet(server.url, prefix)
    worker = FleetFrontier(
        fleet, encode=codec.encode, decode=codec.decode, config=lambda h: FAST, lease_time=30.0
    )
    request = scrapy.Request(
        "http://127.0.0.1:1/a?b=1",
        callback=spider.parse_item,
        meta={"depth": 2},
        priority=3,
        headers={"X-Test": "1"},
    )
    assert worker.push([Item("127.0.0.1:1", request, priority=3, depth=2, key=99)]) == [True]
    reader = FleetFrontier(  # another worker's request: decoded
        Fleet(server.url, prefix),
        encode=codec.encode,
        decode=codec.decode,
        config=lambda h: FAST,
        lease_time=30.0,
    )
    claim = claim_now(reader)
    assert claim.item is not request
    reader.fleet.close()
    assert claim.item.url == request.url
    assert claim.item.callback == spider.parse_item
    assert claim.item.meta == {"depth": 2}
    assert claim.item.priority == 3
    assert claim.item.headers.get("X-Test") == b"1"
    fleet.close()


def test_a_stopping_worker_gives_its_leases_back_at_once(frontier: Frontiers) -> None:
    stopping, other = frontier(lease_time=60.0), frontier(lease_time=60.0)
    stopping.push([Item("h", b"1"), Item("g", b"2")])
    claims = [claim_now(stopping), claim_now(stopping)]
    assert isinstance(claim_one(other), Wait)
    assert stopping.give_back([c.lease for c in claims] + ["0000000000000999"]) == 2
    assert sorted(claim_now(other).item for _ in claims) == [b"1", b"2"]
    assert other.status().reaped == 0  # given back, not expired
    for host in ("h", "g"):
        assert host_view(other, host).in_flight == 1  # type: ignore[union-attr]
    kept = other.controller("h")
    assert kept is not None
    assert kept.in_flight == 1


def test_leases_given_back_go_with_the_next_claim(frontier: Frontiers) -> None:
    """Requests given back with the next call (claimed with others and not handed
    out) cost no round trip of their own: the claim that carries them frees their
    places first, and may take them again by the claim's rule."""
    worker = frontier(ControllerConfig(min_delay=0.0, adaptive=False, max_concurrency=2))
    worker.push([Item("h", b"1"), Item("h", b"2"), Item("g", b"3")])
    claims = worker.claim_many(3)
    assert isinstance(claims, list) and len(claims) == 3
    assert isinstance(claim_one(worker), Wait)  # h at its limit, g emptied
    back = [c for c in claims if c.host == "h"]
    worker.give_back_later([c.lease for c in back])
    assert worker.waiting
    before = worker.counters.round_trips
    again = worker.claim_many(3)
    assert worker.counters.round_trips == before + 1
    assert isinstance(again, list)
    assert sorted(c.item for c in again) == [b"1", b"2"]
    assert {c.lease for c in again}.isdisjoint(c.lease for c in back)  # new leases
    assert host_view(worker, "h").in_flight == 2  # type: ignore[union-attr]
    assert worker.status().queued == 0


def test_scripts_are_packed_as_redis_py_packs_them() -> None:
    """The fleet packs its EVALSHA calls itself (a tenth of redis-py's CPU): the
    bytes on the wire are redis-py's own, for every kind of argument it sends."""
    from redis.connection import Connection

    from scrapy_aimd.fleet.connection import pack_evalsha

    arguments = ("aimd:x", "hôst:1", 3, -7, 0.1, float("-inf"), "", b"\x00\xff\r\n", "s 1 2.5")
    expected = b"".join(Connection().pack_command("EVALSHA", "f00", 0, *arguments))
    assert pack_evalsha("f00", arguments) == expected
    with pytest.raises(redis.DataError):
        pack_evalsha("f00", (True,))


def test_arguments_framed_ahead_are_packed_as_the_values_they_frame() -> None:
    """An ``Encoded`` (a pushed request's or an answer's values framed in one
    format) goes on the wire as its values would, one argument each."""
    from redis.connection import Connection

    from scrapy_aimd.fleet.connection import BULK, Encoded, pack_evalsha

    values = [b"h\xc3\xb4st", b"", b"\x00\r\n;", b"2.5"]
    framed = Encoded(b"".join(BULK % (len(value), value) for value in values), len(values))
    arguments = ("aimd:x", 3, framed, "s 1 2.5", Encoded(b"", 0), b"z")
    plain = ("aimd:x", 3, *values, "s 1 2.5", b"z")
    expected = b"".join(Connection().pack_command("EVALSHA", "f00", 0, *plain))
    assert pack_evalsha("f00", arguments) == expected


def test_a_push_frames_what_the_plain_arguments_were(frontier: Frontiers) -> None:
    """A pushed request's framed values are its 7 plain ones: host, score,
    request, seen bucket and member, the host's initial gap and limit."""
    from redis.connection import Connection

    from scrapy_aimd.fleet.connection import pack_evalsha

    worker = frontier()
    key = (0xABC << 52) | 12345
    batch = worker._pushable(
        [Item("hôst", b"req", priority=3, depth=2, key=key), Item("h2", b"r2")], lambda r: None
    )
    bucket, member = worker.seen.bucket_and_member(key)
    gap, limit = worker._initial("hôst")
    gap2, limit2 = worker._initial("h2")
    plain = ["hôst", sort_score(3, 2), b"req", bucket, member, gap, limit]
    plain += ["h2", sort_score(0, 0), b"r2", "", "", gap2, limit2]
    expected = b"".join(Connection().pack_command("EVALSHA", "f00", 0, *plain))
    assert pack_evalsha("f00", tuple(batch.args)) == expected


def _packed(values: list[bytes]) -> bytes:
    """``values`` as ``pack`` in common.lua writes them."""
    if not values:
        return b""
    return b",".join(b"%d" % len(value) for value in values) + b";" + b"".join(values)


@given(st.lists(st.binary(max_size=40), max_size=12))
def test_a_packed_reply_unpacks_to_its_values(values: list[bytes]) -> None:
    """The lengths, a ``;``, the values, as ``pack`` in common.lua writes them
    (values holding commas, semicolons and digits included)."""
    assert unpack_fields(_packed(values)) == values


def test_pack_in_the_scripts_writes_what_unpack_fields_reads(raw: redis.Redis) -> None:
    """common.lua's ``pack`` itself, run by Redis: values of every kind, and none."""
    folder = Path(redis_store.__file__).parent / "lua"
    common = (folder / "common.lua").read_text(encoding="utf-8")
    script = common + "return {pack({}), pack({1, '', 'a;b,c', 2.5, '0:1'})}"
    empty, packed = raw.eval(script, 0, "aimd:pack-test")
    assert unpack_fields(empty) == []
    assert unpack_fields(packed) == [b"1", b"", b"a;b,c", b"2.5", b"0:1"]


@pytest.mark.parametrize(
    "packed",
    [b"3;ab", b"x;ab", b"2ab", b"-2;ab", b"2,-1;a", b"1;ab", b";", b"1,;a", b"9" * 30 + b";a"],
)
def test_a_broken_reply_is_a_store_error(packed: bytes) -> None:
    """Cut short, a length that is not a number, no ';', a negative length (it
    would cut a value from the wrong end), more than its lengths: a
    FleetStoreError, never another error."""
    with pytest.raises(FleetStoreError, match="reply cannot be read"):
        unpack_fields(packed)


@given(st.binary(max_size=60))
def test_any_reply_unpacks_or_is_a_store_error(packed: bytes) -> None:
    try:
        fields = unpack_fields(packed)
    except FleetStoreError:
        return
    assert sum(len(field) for field in fields) <= len(packed)


def test_a_claim_reply_reads_as_its_parts() -> None:
    """claim.lua's one flat list: now, forgotten, given, the arrival numbers and the
    feedbacks' values each after their count, then each record after its size."""
    values = [b"12.5", b"2", b"1", b"2", b"7", b"0", b"3", b"1", b"4", b"0"]
    records = [[b"1", b"lease", b"h", b"m"], [b"0", b"inf", b"12.5", b"0", b"0", b"0"]]
    for record in records:
        values += [b"%d" % len(record), *record]
    reply = read_claim_reply(_packed(values))
    assert (reply.now, reply.forgotten, reply.given) == (b"12.5", 2, 1)
    assert reply.arrivals == [b"7", b"0"]
    assert reply.results == [b"1", b"4", b"0"]
    assert reply.records == records
    empty = read_claim_reply(_packed([b"1.0", b"0", b"0", b"0", b"0"]))
    assert (empty.arrivals, empty.results, empty.records) == ([], [], [])


@pytest.mark.parametrize(
    "values",
    [
        [],
        [b"1.0", b"0", b"0", b"0"],  # no feedbacks' count
        [b"1.0", b"0", b"0", b"3", b"7", b"0"],  # fewer arrivals than counted
        [b"1.0", b"0", b"0", b"-1", b"0"],
        [b"1.0", b"0", b"0", b"0", b"0", b"0"],  # an empty record
        [b"1.0", b"0", b"0", b"0", b"0", b"3", b"1"],  # a record cut short
        [b"1.0", b"x", b"0", b"0", b"0"],
    ],
)
def test_a_broken_claim_reply_is_a_store_error(values: list[bytes]) -> None:
    with pytest.raises(FleetStoreError, match="reply cannot be read"):
        read_claim_reply(_packed(values))


@given(st.lists(st.sampled_from([b"0", b"1", b"2", b"3", b"-1", b"x", b""]), max_size=12))
def test_any_claim_reply_reads_or_is_a_store_error(values: list[bytes]) -> None:
    try:
        reply = read_claim_reply(_packed(values))
    except FleetStoreError:
        return
    parts = 3 + 2 + len(reply.arrivals) + len(reply.results)
    assert parts + sum(1 + len(record) for record in reply.records) == len(values)


# -- robots.txt, fetched once per fleet (scrapy_aimd.fleet.robots_store) --------------

ORIGIN = "http://h"
#: A host with room for several at once: only the robots lock can make a hold wait.
ROOMY = ControllerConfig(min_delay=0.0, max_concurrency=4, adaptive=False)
RULES = b"User-agent: *\nDisallow: /x\n"


def shared(worker: FleetFrontier[bytes]) -> FleetRobots:
    """The worker's side of the shared robots.txt answers, on its connection."""
    return FleetRobots(worker.fleet, lease_time=worker.lease_time)


def share(worker: FleetFrontier[bytes], body: bytes = RULES, **changes: Any) -> bool:
    answer: dict[str, Any] = {"status": 200, "truncated": False, "gave_up": False, **changes}
    return shared(worker).share(ORIGIN, body=body, max_age=3600.0, **answer)


def test_one_worker_takes_the_robots_fetch_and_the_others_wait_for_its_answer(
    frontier: Frontiers, raw: redis.Redis, prefix: str
) -> None:
    fetcher, other = frontier(ROOMY), frontier(ROOMY)
    trips = fetcher.counters.round_trips
    assert shared(fetcher).known(ORIGIN) is None
    assert isinstance(fetcher.hold("h", b"robots.txt", ORIGIN), Claim)
    assert fetcher.counters.round_trips == trips + 2  # one each
    assert 29_000 < raw.pttl(f"{prefix}:rl:{ORIGIN}") <= 30_000  # the lock lasts the lease
    # The host has room, but the origin's fetch is taken: wait for the lock.
    waiting = other.hold("h", b"robots.txt", ORIGIN)
    assert isinstance(waiting, Wait)
    assert waiting.ready_at == pytest.approx(waiting.now + 30.0, abs=1.0)
    assert shared(other).known(ORIGIN) is None
    # Another origin of the host is not held up by it.
    assert isinstance(other.hold("h", b"robots.txt", "https://h"), Claim)
    trips = fetcher.counters.round_trips
    assert share(fetcher) is True
    assert fetcher.counters.round_trips == trips + 1
    assert raw.exists(f"{prefix}:rl:{ORIGIN}") == 0
    assert 3_500_000 < raw.pttl(f"{prefix}:r:{ORIGIN}") <= 3_600_000
    answer = other.hold("h", b"robots.txt", ORIGIN)
    assert isinstance(answer, SharedRobots)
    assert (answer.status, answer.body, answer.truncated, answer.gave_up) == (
        200, RULES, False, False,
    )  # fmt: skip
    assert 0 <= answer.age < 5
    known = shared(other).known(ORIGIN)
    assert known is not None and (known.status, known.body) == (200, RULES)
    # A hold that found the answer took no place.
    view = host_view(other, "h")
    assert view is not None and view.in_flight == 2


def test_the_robots_lock_holder_takes_its_own_fetch_again(frontier: Frontiers) -> None:
    """A redirect hop or a retry of the worker that holds the lock is not held up."""
    fetcher = frontier(ROOMY)
    assert isinstance(fetcher.hold("h", b"robots.txt", ORIGIN), Claim)
    assert isinstance(fetcher.hold("h", b"robots/real.txt", ORIGIN), Claim)


def test_a_robots_retry_keeps_the_lock_through_its_backoff(
    frontier: Frontiers, raw: redis.Redis, prefix: str
) -> None:
    fetcher, other = frontier(ROOMY, lease_time=5.0), frontier(ROOMY, lease_time=5.0)
    lock = f"{prefix}:rl:{ORIGIN}"
    assert isinstance(fetcher.hold("h", b"robots.txt", ORIGIN), Claim)
    assert shared(fetcher).retrying(ORIGIN, 20.0) is True
    assert 24_000 < raw.pttl(lock) <= 25_000
    waiting = other.hold("h", b"robots.txt", ORIGIN)
    assert isinstance(waiting, Wait) and waiting.ready_at > waiting.now + 20
    # A worker whose lock expired takes it again for its retry if no one has it,
    # and never from another worker.
    raw.delete(lock)
    assert shared(other).retrying(ORIGIN, 1.0) is False
    assert raw.get(lock) == other.fleet.token.encode()
    assert shared(fetcher).retrying(ORIGIN, 1.0) is False
    assert raw.get(lock) == other.fleet.token.encode()


def test_a_dead_workers_robots_lock_expires_with_its_hold(frontier: Frontiers) -> None:
    dead, survivor = frontier(ROOMY, lease_time=0.3), frontier(ROOMY, lease_time=0.3)
    assert isinstance(dead.hold("h", b"robots.txt", ORIGIN), Claim)
    assert isinstance(survivor.hold("h", b"robots.txt", ORIGIN), Wait)
    time.sleep(0.4)
    assert isinstance(survivor.hold("h", b"robots.txt", ORIGIN), Claim)
    # The dead worker's answer, had it come late after all, is still stored.
    assert share(dead) is False
    assert isinstance(survivor.hold("h", b"robots.txt", ORIGIN), SharedRobots)


def test_every_kind_of_robots_answer_goes_through(frontier: Frontiers) -> None:
    fetcher, other = frontier(), frontier()
    share(fetcher, body=b"", status=None, gave_up=True)
    answer = shared(other).known(ORIGIN)
    assert answer is not None
    assert (answer.status, answer.body, answer.gave_up) == (None, b"", True)
    share(fetcher, body=b"", status=404)
    answer = shared(other).known(ORIGIN)
    assert answer is not None and (answer.status, answer.gave_up) == (404, False)
    # Only what is parsed is stored: the first 500 KiB, compressed.
    big = b"Disallow: /p\n" * (MAX_BYTES // 10)
    share(fetcher, body=big, truncated=True)
    answer = shared(other).known(ORIGIN)
    assert answer is not None and answer.truncated
    assert answer.body == big[:MAX_BYTES]


def test_a_corrupt_robots_answer_is_an_error_that_names_its_key(
    frontier: Frontiers, raw: redis.Redis, prefix: str
) -> None:
    worker = frontier()
    key = f"{prefix}:r:{ORIGIN}"
    raw.hset(key, mapping={"s": "200", "b": "not zlib", "t": "1"})
    with pytest.raises(FleetStoreError, match=f"Redis key {key} holds a robots.txt answer"):
        shared(worker).known(ORIGIN)
    raw.delete(key)
    raw.set(key, "a string")
    with pytest.raises(FleetStoreError, match=key):
        worker.hold("h", b"robots.txt", ORIGIN)


def test_a_fleet_is_reset_whatever_rules_made_it(
    server: RedisServer, prefix: str, raw: redis.Redis
) -> None:
    """The documented reset: it needs no rules of its own (a ``Fleet`` made to
    clear checked the meta key and refused the crawl's rules), and it leaves
    other prefixes alone."""
    crawl = Fleet(server.url, prefix, rules_id="fingerprint-v1;rules of the crawl")
    worker = FleetFrontier(
        crawl, encode=bytes, decode=bytes, config=lambda host: FAST, lease_time=30.0
    )
    worker.push([Item("a.example", b"one", priority=0, depth=0)])
    crawl.close()
    raw.set(f"{prefix}x:other", b"kept")
    assert raw.keys(f"{prefix}:*")
    with pytest.raises(FleetStoreError, match="other fingerprint rules"):
        Fleet(server.url, prefix)
    assert clear_fleet(server.url, prefix) > 0
    assert not raw.keys(f"{prefix}:*")
    assert raw.get(f"{prefix}x:other") == b"kept"
    assert clear_fleet(server.url, prefix) == 0  # nothing left: nothing to do


def one_request_fleet(url: str, prefix: str) -> None:
    """A fleet under ``prefix`` with one request queued."""
    fleet = Fleet(url, prefix)
    FleetFrontier(
        fleet, encode=bytes, decode=bytes, config=lambda host: FAST, lease_time=30.0
    ).push([Item("a.example", b"one")])
    fleet.close()


def test_a_reset_leaves_a_fleet_whose_key_continues_its_own(
    server: RedisServer, prefix: str, raw: redis.Redis
) -> None:
    """``aimd:books`` (a spider's default key) and ``aimd:books:2026-12`` (the
    docs' example of a key per run) are two fleets, and the keys of the second
    all start with the first's followed by ``:``: a reset of the first takes its
    own keys only. So does a key with glob characters in it (``SCAN``'s pattern
    would read them)."""
    for name in (prefix, f"{prefix}:2026-12"):
        one_request_fleet(server.url, name)
    raw.set(f"{prefix}:notes", b"not a fleet key")
    later = {key for key in raw.keys(f"{prefix}:2026-12:*")}
    assert len(later) >= 5
    assert clear_fleet(server.url, prefix) > 0
    assert {key for key in raw.keys(f"{prefix}:*")} == later | {f"{prefix}:notes".encode()}
    fleet = Fleet(server.url, f"{prefix}:2026-12")  # still a fleet: its meta is there
    fleet.close()
    # A fleet whose key continues this one's with one of its key kinds (``q``,
    # ``h``...): its keys read as this fleet's queues and states but for its meta.
    for kind in ("q", "h"):
        one_request_fleet(server.url, f"{prefix}:2026-12:{kind}")
    nested = set(raw.keys(f"{prefix}:2026-12:*"))
    clear_fleet(server.url, f"{prefix}:2026-12")
    assert set(raw.keys(f"{prefix}:2026-12:*")) == nested - later
    # Glob characters in a fleet's key: its own keys go, not those they would match.
    glob = f"{prefix}[x]*?"
    one_request_fleet(server.url, glob)
    raw.set(f"{prefix}xAB:n", b"3")
    assert clear_fleet(server.url, glob) >= 5
    assert raw.keys(f"{prefix}\\[x]*") == []
    assert raw.get(f"{prefix}xAB:n") == b"3"


def test_a_dead_workers_robots_retry_lock_goes_with_its_heartbeat(
    frontier: Frontiers, raw: redis.Redis, prefix: str
) -> None:
    """After a failed robots.txt fetch the fetching worker keeps the origin's lock
    through its backoff, with no lease naming it. Once its heartbeat is gone the
    lock goes too: another worker fetches at once, not after the backoff."""
    dead = frontier(ROOMY, lease_time=30.0, heartbeat=0.3)
    held = dead.hold("h", b"robots.txt", ORIGIN)
    assert isinstance(held, Claim)
    assert dead.done([held.lease]) == 1  # the fetch failed: its lease is gone
    assert shared(dead).retrying(ORIGIN, 20.0) is True
    survivor = frontier(ROOMY, lease_time=30.0, heartbeat=0.3)
    assert isinstance(survivor.hold("h", b"robots.txt", ORIGIN), Wait)
    time.sleep(0.4)  # the dead worker's heartbeat expires; its lock would hold 50 s
    assert isinstance(survivor.hold("h", b"robots.txt", ORIGIN), Claim)
    assert raw.get(f"{prefix}:rl:{ORIGIN}") == survivor.fleet.token.encode()


def test_a_worker_that_closes_gives_back_every_lease_it_holds(
    frontier: Frontiers, raw: redis.Redis, prefix: str
) -> None:
    """A worker that ends its heartbeat (it closes) gives back the leases it still
    holds (an answer not stored in time at close): their requests go back to the
    queue and their places are freed at once, not after the lease (30 s here)."""
    closing = frontier(SMALL, lease_time=30.0)
    closing.push([Item("h", b"held"), Item("h", b"next")])
    claims = closing.claim_many(1)
    assert isinstance(claims, list) and len(claims) == 1
    closing.fleet.beat(alive=False)
    assert raw.zcard(f"{prefix}:leases") == 0
    other = frontier(SMALL, lease_time=30.0)
    back = claim_now(other)
    assert back.item == b"held"


def test_a_worker_declared_dead_is_told_so_by_its_next_beat(frontier: Frontiers) -> None:
    """A worker whose reactor was blocked past its heartbeat lost its leases to
    another worker's claim: its next beat says so (once), so that it drops what
    it claimed and has not sent. A live worker's beats say nothing."""
    stalled = frontier(SMALL, lease_time=30.0, heartbeat=0.3)
    assert stalled.fleet.beat() is False  # its first beat: a worker joins
    stalled.push([Item("h", b"held"), Item("h", b"next")])
    assert isinstance(stalled.claim_many(1), list)
    assert stalled.fleet.beat() is False
    other = frontier(SMALL, lease_time=30.0, heartbeat=0.3)
    time.sleep(0.4)
    assert claim_now(other).item == b"held"  # reaped, and claimed again
    assert stalled.fleet.beat() is True
    assert stalled.fleet.beat() is False


def _calls(raw: redis.Redis, command: str) -> int:
    stats: dict[str, Any] = raw.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def test_reaping_a_dead_worker_touches_only_its_own_leases(
    frontier: Frontiers, raw: redis.Redis, prefix: str
) -> None:
    """Each worker's leases are listed under it (``P:wl:<worker>``): the claim that
    reaps a dead worker reads its leases, not every lease of the fleet (here 150
    of a live worker), and the list follows each lease out (done, answered,
    given back, expired, reaped)."""
    roomy = ControllerConfig(min_delay=0.0, max_concurrency=200, adaptive=False)
    live = frontier(roomy, lease_time=30.0, heartbeat=0.3)
    live.push([Item(f"h{n}", b"page") for n in range(150)])
    held = live.claim_many(150)
    assert isinstance(held, list) and len(held) == 150
    assert raw.scard(f"{prefix}:wl:{live.fleet.token}") == 150
    dead = frontier(roomy, lease_time=30.0, heartbeat=0.3)
    dead.push([Item("d", b"held"), Item("d", b"next")])
    assert [c.item for c in claim_many_now(dead, 1)] == [b"held"]
    time.sleep(0.4)
    live.fleet.beat()
    before = _calls(raw, "hmget")
    back = live.claim_many(1)
    assert isinstance(back, list) and [c.item for c in back] == [b"held"]
    assert live.counters.reaped == 1
    assert _calls(raw, "hmget") - before < 30
    assert raw.exists(f"{prefix}:wl:{dead.fleet.token}") == 0
    # Out of the list with each way a lease goes.
    live.done([held[0].lease])
    live.finish(held[1], status=200, latency=0.001, done=True)
    assert live.give_back([held[2].lease]) == 1
    assert raw.scard(f"{prefix}:wl:{live.fleet.token}") == 148
    live.fleet.beat(alive=False)
    assert raw.exists(f"{prefix}:wl:{live.fleet.token}") == 0


def claim_many_now(worker: FleetFrontier[bytes], count: int) -> list[Claim[bytes]]:
    claims = worker.claim_many(count)
    assert isinstance(claims, list), claims
    return claims


def test_the_reset_clears_the_keys_of_workers_and_their_leases(
    frontier: Frontiers, server: RedisServer, prefix: str, raw: redis.Redis
) -> None:
    """A worker's lease list (``P:wl:<worker>``), the mark of a worker taken for
    dead (``P:dead:<worker>``) and a host's log of starts (``P:e:<host>``) are the
    fleet's keys: the reset deletes them."""
    dead = frontier(SMALL, lease_time=30.0, heartbeat=0.3)
    dead.push([Item("h", b"held"), Item("g", b"other")])
    assert len(claim_many_now(dead, 1)) == 1
    live = frontier(SMALL, lease_time=30.0, heartbeat=0.3)
    time.sleep(0.4)
    assert len(claim_many_now(live, 1)) == 1  # reaps the dead worker, and claims
    assert raw.exists(f"{prefix}:dead:{dead.fleet.token}", f"{prefix}:wl:{live.fleet.token}") == 2
    assert raw.keys(f"{prefix}:e:*")  # a host's log of starts not folded yet: reset too
    assert clear_fleet(server.url, prefix) > 0
    assert not raw.keys(f"{prefix}:*")
