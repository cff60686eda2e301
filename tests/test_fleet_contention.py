"""Contention for a host's state against a real redis-server: workers answering
for the same few hosts as fast as they can never stop, never lose or reorder a
host's answers, and never take more than one round trip a call.

Each host's controller state is stored under optimistic concurrency: an answer
computed on a state that another worker's answer moved since loses its race
and is applied again to the host as it is now. On so few, so fast hosts, with
several claims a round trip, an answer can keep losing; the fleet must still
store every answer once, in order, without a call that spins on Redis.
"""

from __future__ import annotations

import multiprocessing
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis
from fleetcrawl import FLEET, assert_finished, start_worker, urls_of, wait_for
from redis_server import REDIS_SERVER, SKIP_REASON, RedisServer, connect, fleet_prefix, serve

from scrapy_aimd.core.controller import ControllerConfig, Reaction
from scrapy_aimd.fleet import Claim, Fleet, FleetFrontier, FleetStoreError, Item, redis_store
from sitefarm import HostSpec, start_farm, summarize

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

server = pytest.fixture(scope="module")(serve)
prefix = pytest.fixture(fleet_prefix)
raw = pytest.fixture(connect)

#: Fast hosts that take 8 at a time: every claim a round trip can take 8 of one.
FIXED = ControllerConfig(min_delay=0.0, adaptive=False, max_concurrency=8)
#: Seconds a worker of the load test may run at most (it ends when the fleet has
#: nothing left, within a few seconds on an idle machine).
WORKER_DEADLINE = 90.0


def _frontier(url: str, prefix: str, cfg: ControllerConfig = FIXED) -> FleetFrontier[bytes]:
    return FleetFrontier(
        Fleet(url, prefix), encode=bytes, decode=bytes, config=lambda host: cfg, lease_time=60.0
    )


def _note(told: list[int], number: int, reaction: Reaction | None) -> None:
    told.append(number)


def _worker(url: str, prefix: str, batch: int) -> dict[str, Any]:
    """One worker process, driven as a crawl drives its frontier, as fast as it
    can: each round trip claims up to ``batch`` and carries the answers (200s,
    waiting for the next claim) and leases done of the claims before. Returns
    what it saw: the answers stored per host in the order they were told, the
    most round trips one call took, and the error that stopped it, if any."""
    frontier = _frontier(url, prefix)
    given: dict[str, list[int]] = {}
    told: dict[str, list[int]] = {}
    reactions_none = 0
    most_trips = 0
    error = ""
    serial = 0

    def then(host: str, number: int, reaction: Reaction | None) -> None:
        nonlocal reactions_none
        told.setdefault(host, []).append(number)
        reactions_none += reaction is None

    deadline = time.monotonic() + WORKER_DEADLINE
    try:
        while time.monotonic() < deadline:
            before = frontier.counters.round_trips + frontier.state_reads
            got = frontier.claim_many(batch)
            most_trips = max(
                most_trips, frontier.counters.round_trips + frontier.state_reads - before
            )
            if isinstance(got, list):
                for claim in got:
                    serial += 1
                    given.setdefault(claim.host, []).append(serial)
                    frontier.finish_later(
                        claim,
                        status=200,
                        latency=0.001,
                        then=partial(then, claim.host, serial),
                    )
                frontier.done_later([claim.lease for claim in got])
                continue
            if not frontier.waiting and got.queued == 0 and got.leased == 0:
                break
            time.sleep(0.001)  # others hold every place, or answers wait for a turn
        while frontier.waiting and time.monotonic() < deadline:
            before = frontier.counters.round_trips + frontier.state_reads
            frontier.flush()
            most_trips = max(
                most_trips, frontier.counters.round_trips + frontier.state_reads - before
            )
            if frontier.waiting:
                time.sleep(0.001)
    except FleetStoreError as exc:
        error = str(exc)
    counters = frontier.counters
    frontier.fleet.close()
    return {
        "error": error,
        "claims": counters.claims,
        "feedbacks": counters.feedbacks,
        "conflicts": counters.conflicts,
        "given": given,
        "told": told,
        "reactions_none": reactions_none,
        "most_trips": most_trips,
        "stats": {**counters.as_stats(), **frontier.contention.as_stats()},
    }


def run_workers(
    url: str, prefix: str, *, requests: int, hosts: int, workers: int, batch: int
) -> tuple[list[dict[str, Any]], float]:
    """``workers`` processes on ``requests`` over ``hosts``; their results and the
    wall time."""
    _frontier(url, prefix).push([Item(f"h{n % hosts}", b"%d" % n) for n in range(requests)])
    started = time.monotonic()
    context = multiprocessing.get_context("fork")
    with context.Pool(workers) as pool:
        results = pool.starmap_async(_worker, [(url, prefix, batch)] * workers).get(
            WORKER_DEADLINE + 30
        )
    return results, time.monotonic() - started


@pytest.mark.parametrize(("hosts", "workers"), [(2, 3), (4, 4)])
def test_workers_contending_for_a_few_hosts_store_every_answer_once_in_order(
    server: RedisServer, raw: redis.Redis, prefix: str, hosts: int, workers: int
) -> None:
    """Three or four workers, 8 claims a round trip, 3,000 requests over 2 or 4
    hosts of no latency: every host's state moves many times a round trip. No
    worker stops, every answer is stored once (each store is one version: the
    versions add up to the requests), in the order its worker was given it, and
    no call takes more than one round trip (a state read again excepted)."""
    requests = 3000
    results, elapsed = run_workers(
        server.url, prefix, requests=requests, hosts=hosts, workers=workers, batch=8
    )
    errors = [r["error"] for r in results if r["error"]]
    assert not errors, errors
    assert sum(r["claims"] for r in results) == requests
    versions = [int(raw.hget(f"{prefix}:h:h{n}", "v") or 0) for n in range(hosts)]
    assert sum(versions) == requests, versions
    assert [int(raw.hget(f"{prefix}:h:h{n}", "fl") or 0) for n in range(hosts)] == [0] * hosts
    assert raw.zcard(f"{prefix}:leases") == 0
    assert int(raw.get(f"{prefix}:n") or 0) == 0
    for result in results:
        assert result["reactions_none"] == 0
        assert result["told"] == result["given"]  # each once, in order, per host
        assert result["most_trips"] <= 1, result["most_trips"]
    conflicts = sum(r["conflicts"] for r in results)
    feedbacks = sum(r["feedbacks"] for r in results)
    print(
        f"\n{workers} workers, {requests} requests over {hosts} hosts, 8 claims a round trip: "
        f"{elapsed:.2f} s, {requests / elapsed:.0f} requests/s, {conflicts} of "
        f"{feedbacks} feedbacks lost a race; stats: "
        + str([{k: v for k, v in r["stats"].items() if v} for r in results])
    )


def test_a_writer_that_keeps_moving_a_hosts_state_stops_no_worker(
    server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    """One worker answers as fast as it can for one host while another's answers
    for it lose their race every time they go on their own: the losing worker's
    answers are still stored, in order, without a call of more than one round
    trip."""
    fast, slow = _frontier(server.url, prefix), _frontier(server.url, prefix)
    fast.push([Item("h", b"%d" % n) for n in range(4000)])
    mine = [c for c in slow.claim_many(8) if isinstance(c, Claim)]  # type: ignore[union-attr]
    assert mine
    told: list[int] = []
    for number, claim in enumerate(mine):
        slow.finish_later(claim, status=200, latency=0.001, then=partial(_note, told, number))
    slow.done_later([c.lease for c in mine])
    deadline = time.monotonic() + 60
    most_trips = 0
    while slow.waiting and time.monotonic() < deadline:
        # The writer: a round trip of 8 answers on the host before each of slow's.
        got = fast.claim_many(8)
        if isinstance(got, list):
            for claim in got:
                fast.finish_later(claim, status=200, latency=0.001, then=lambda r: None)
            fast.done_later([c.lease for c in got])
        fast.flush()
        before = slow.counters.round_trips + slow.state_reads
        slow.flush()
        most_trips = max(most_trips, slow.counters.round_trips + slow.state_reads - before)
    assert not slow.waiting, "the losing worker's answers were never stored"
    assert told == list(range(len(mine)))
    assert most_trips <= 1


def _turn_taken(
    url: str, prefix: str
) -> tuple[FleetFrontier[bytes], FleetFrontier[bytes], Claim[bytes], Claim[bytes]]:
    """Worker A's throttle answer loses its race to B's answer and is granted the
    host's turn with its loss (an answer told at once asks at its first). Returns
    A, B, and a claim of each not answered yet."""
    a, b = _frontier(url, prefix), _frontier(url, prefix)
    a.push([Item("h", b"%d" % n) for n in range(4)])
    first, second = _claims(a, 2)
    mine, other = _claims(b, 2)
    b.finish(mine, status=200, latency=0.001, done=True)  # moves the host's version
    before = a.counters.round_trips
    told = a.finish(first, status=503, latency=0.001, done=True)
    assert a.counters.round_trips == before + 1
    assert told is not None and told.decreased  # told now, on the state its loss showed
    assert (a.counters.conflicts, a.contention.turns, a.contention.told_early) == (1, 1, 1)
    assert a.waiting and a.retry_in() == 0.0
    return a, b, second, other


def _claims(worker: FleetFrontier[bytes], count: int) -> list[Claim[bytes]]:
    got = worker.claim_many(count)
    assert isinstance(got, list) and len(got) == count, got
    return got


def test_a_turn_holds_other_workers_answers_until_its_holder_stores(
    server: RedisServer, raw: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While A holds the host's turn, B's answer, though computed on the latest
    state, is told to wait (no store, no round trip while it waits); A's next call
    stores its answer on the state its loss showed, with the reaction it was told;
    then B's is stored on A's. Every answer once: one version each. (A turn of 2 s:
    a busy machine can stall longer than the 50 ms of the default.)"""
    monkeypatch.setattr(redis_store, "TURN_TIME", 2.0)
    a, b, _, other = _turn_taken(server.url, prefix)
    told: list[Reaction | None] = []
    b.finish_later(other, status=200, latency=0.001, then=told.append, done=True)
    b.flush()
    assert told == [] and b.waiting and b.contention.turn_waits == 1
    assert b.counters.conflicts == 0  # not a lost race: it never tried
    wait = b.retry_in()
    assert wait is not None and 0 < wait <= redis_store.TURN_TIME + 0.01
    trips = b.counters.round_trips
    b.flush()  # nothing that may go: no round trip
    assert b.counters.round_trips == trips and told == []
    a.flush()
    assert not a.waiting and a.contention.told_changed == 0
    assert raw.hget(f"{prefix}:h:h", "tw") is None  # the turn ended with the store
    # B was told to wait for the whole turn, and only then goes: give it the turn
    # and then some (a deadline equal to the turn left it only the milliseconds since
    # it was told, and a loaded machine used them up).
    assert b.flush_all(redis_store.TURN_TIME + 2.0)
    assert len(told) == 1 and told[0] is not None
    assert int(raw.hget(f"{prefix}:h:h", "v") or 0) == 3  # B's two answers and A's
    assert int(raw.hget(f"{prefix}:h:h", "fl") or 0) == 1  # A's second claim, unanswered


def test_a_killed_turn_holder_never_wedges_its_host(
    server: RedisServer, raw: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A is killed holding the host's turn: B's answer waits for the turn's end on
    Redis's clock, not longer, and is then stored. (A turn of 0.3 s, not the
    default 50 ms, so that a stalled test still finds it held.)"""
    monkeypatch.setattr(redis_store, "TURN_TIME", 0.3)
    a, b, _, other = _turn_taken(server.url, prefix)
    a.fleet.close()  # killed: its answer never goes again
    told: list[Reaction | None] = []
    b.finish_later(other, status=200, latency=0.001, then=told.append, done=True)
    started = time.monotonic()
    b.flush()
    assert b.waiting and b.contention.turn_waits == 1
    assert b.flush_all(2.0)
    assert time.monotonic() - started < 1.0
    assert len(told) == 1 and told[0] is not None
    assert int(raw.hget(f"{prefix}:h:h", "v") or 0) == 2  # B's two; A's never came


def test_three_crawling_workers_on_two_fast_hosts_fetch_every_page_once(
    tmp_path: Path, server: RedisServer, prefix: str
) -> None:
    """End to end: three crawl processes on two hosts that answer at once, each
    with room for 16: they contend for both hosts' states all crawl long. Every
    worker finishes, every page is fetched once, and each feedback was stored
    (the answers of the fleet add up to its pages)."""
    specs = [HostSpec(name=f"f{n}", pages=300, links_per_page=6) for n in range(2)]
    settings = {
        **FLEET,
        "AIMD_FLEET_KEY": prefix,
        "CONCURRENT_REQUESTS": 16,
        "AIMD_MAX_CONCURRENCY": 8,
        "AIMD_MIN_DELAY": 0.0,
    }
    with start_farm(specs, max_seconds=120) as farm:
        started = time.monotonic()
        fleet = [
            start_worker(urls_of(farm), tmp_path / f"w{n}", server.url, settings) for n in range(3)
        ]
        wait_for(fleet, 100)
        elapsed = time.monotonic() - started
        log = farm.read_log()
    assert_finished(fleet)
    for name, summary in summarize(log, specs).items():
        assert summary.pages_fetched == summary.pages_total, (name, summary)
        assert summary.duplicate_fetches == 0, (name, summary)
    stats = [w.stats() for w in fleet]
    pages = len([r for r in log if r["reason"] != "robots"])
    assert sum(s.get("aimd/fleet/claims", 0) for s in stats) == pages
    assert sum(s.get("aimd/fleet/feedbacks", 0) for s in stats) >= pages
    keys = ("feedbacks", "conflicts", "turns", "turn_waits", "most_losses", "told_early")
    keys += ("round_trips", "claims")
    print(
        f"\n{elapsed:.1f} s: "
        + "; ".join(str({k: s.get(f"aimd/fleet/{k}", 0) for k in keys}) for s in stats)
    )


@pytest.mark.parametrize("cancel", ["done", "give_back"])
def test_a_lone_worker_never_loses_a_race_to_its_own_cancel(
    server: RedisServer, raw: redis.Redis, prefix: str, cancel: str
) -> None:
    """A worker that frees a claim's place without an answer (done before its
    download, or given back) logs a cancel on the host; its next answer of the
    host, with no other worker about, is stored at once, not taken for a lost
    race: its lease goes with it, its place is freed, and no turn is taken (a
    turn would keep other workers' answers of the host waiting)."""
    worker = _frontier(server.url, prefix)
    worker.push([Item("h", b"%d" % n) for n in range(2)])
    dropped, answered = _claims(worker, 2)
    if cancel == "done":
        assert worker.done([dropped.lease]) == 1
    else:
        assert worker.give_back([dropped.lease]) == 1
    told = worker.finish(answered, status=200, latency=0.001, done=True)
    assert told is not None and told.kind == "good"
    assert (worker.counters.conflicts, worker.contention.turns) == (0, 0)
    assert worker.contention.told_early == 0 and not worker.waiting
    assert raw.hget(f"{prefix}:h:h", "tw") is None
    assert raw.exists(f"{prefix}:l:{answered.lease}") == 0
    leases = {lease.decode() for lease in raw.zrange(f"{prefix}:leases", 0, -1)}
    assert answered.lease not in leases
    assert int(raw.hget(f"{prefix}:h:h", "fl") or 0) == 0
    assert int(raw.hget(f"{prefix}:h:h", "v") or 0) == 1
