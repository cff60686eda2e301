"""The fleet's shared seen set and the fleet-wide closing rule, on a real redis-server."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict

import pytest
import redis
from fleet_probe import claim_one
from redis_server import REDIS_SERVER, SKIP_REASON, RedisServer, fleet_prefix, serve

from scrapy_aimd.core.controller import ControllerConfig
from scrapy_aimd.fleet import Claim, Fleet, FleetFrontier, FleetSeenSet, Item

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

server = pytest.fixture(scope="module")(serve)
prefix = pytest.fixture(fleet_prefix)


def worker_of(fleet: Fleet) -> FleetFrontier[bytes]:
    return FleetFrontier(
        fleet, encode=bytes, decode=bytes, config=lambda h: ControllerConfig(), lease_time=30.0
    )


def test_a_push_says_which_keys_were_new_in_one_round_trip(
    server: RedisServer, prefix: str
) -> None:
    fleet = Fleet(server.url, prefix)
    worker = worker_of(fleet)
    keys = [0, 1, 2**64 - 1, 2**63, 12345678901234567890, 1]
    before = fleet.counters.round_trips
    assert worker.push([Item("h", b"%d" % n, key=k) for n, k in enumerate(keys)]) == [
        True,
        True,
        True,
        True,
        True,
        False,
    ]
    assert fleet.counters.round_trips == before + 1
    assert worker.push([Item("h", b"x", key=2**64 - 1), Item("h", b"y", key=7)]) == [False, True]
    assert len(FleetSeenSet(fleet)) == 6
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        FleetSeenSet(fleet).bucket_and_member(2**64)


def test_two_workers_share_the_set(server: RedisServer, prefix: str) -> None:
    a, b = worker_of(Fleet(server.url, prefix)), worker_of(Fleet(server.url, prefix))
    assert a.push([Item("h", b"10", key=10), Item("h", b"20", key=20)]) == [True, True]
    assert b.push([Item("h", b"20", key=20), Item("h", b"30", key=30)]) == [False, True]


def test_buckets_stay_intsets_at_8_bytes_a_key(server: RedisServer, prefix: str) -> None:
    fleet = Fleet(server.url, prefix, buckets=256)
    seen = FleetSeenSet(fleet)
    assert seen.capacity == 256 * 512  # Redis's default set-max-intset-entries
    rng = random.Random(5)
    worker = worker_of(fleet)
    worker.push([Item("h", b"", key=rng.getrandbits(64)) for _ in range(50_000)])
    client = redis.Redis.from_url(server.url)
    buckets = [f"{prefix}:s:{b:x}" for b in range(256)]
    assert {client.object("encoding", key) for key in buckets} == {b"intset"}
    # An intset: 8 bytes a member, plus the key's own and the allocator's rounding.
    sizes = [client.memory_usage(key, samples=0) or 0 for key in buckets]
    members = [client.scard(key) for key in buckets]
    assert sum(members) == len(seen) == 50_000
    assert 8 < sum(sizes) / sum(members) < 10


def test_push_checks_keys_against_the_seen_set(server: RedisServer, prefix: str) -> None:
    """Start requests carry dont_filter: in a fleet they are checked all the same,
    or N workers fetch every start URL N times."""
    workers = [
        FleetFrontier(
            Fleet(server.url, prefix),
            encode=bytes,
            decode=bytes,
            config=lambda h: ControllerConfig(),
            lease_time=30.0,
        )
        for _ in range(3)
    ]
    starts = [Item("h", b"/%d" % i, key=1000 + i) for i in range(5)]
    flags = [w.push(starts) for w in workers]
    assert flags[0] == [True] * 5
    assert flags[1] == flags[2] == [False] * 5
    assert workers[2].status().queued == 5
    assert workers[1].counters.duplicates == 5


def test_nothing_queued_or_leased_fleet_wide_is_one_round_trip(
    server: RedisServer, prefix: str
) -> None:
    fleet = Fleet(server.url, prefix)
    worker = FleetFrontier(
        fleet, encode=bytes, decode=bytes, config=lambda h: ControllerConfig(), lease_time=30.0
    )
    time.sleep(0.1)
    before = fleet.counters.round_trips
    status = worker.status()
    assert fleet.counters.round_trips == before + 1
    assert (status.queued, status.leased) == (0, 0)
    assert status.idle_for >= 0.09  # a new fleet is idle from its creation
    worker.push([Item("h", b"1")])
    assert worker.status().idle_for == 0.0
    claim = claim_one(worker)
    assert isinstance(claim, Claim)
    assert worker.status().idle_for == 0.0
    worker.finish(claim, status=200, latency=0.01, done=True)
    time.sleep(0.1)
    idle = worker.status()
    assert (idle.queued, idle.leased) == (0, 0)
    assert 0.09 <= idle.idle_for < 5


def test_three_workers_claim_each_request_once_and_keep_every_host_limit(
    server: RedisServer, prefix: str
) -> None:
    """Threads as workers, each with its own connection, against one fleet."""
    limit = 2
    cfg = ControllerConfig(adaptive=False, max_concurrency=limit)
    hosts = [f"h{i}" for i in range(6)]
    requests = [Item(host, f"{host}/{n}".encode()) for host in hosts for n in range(40)]
    FleetFrontier(
        Fleet(server.url, prefix), encode=bytes, decode=bytes, config=lambda h: cfg, lease_time=30
    ).push(requests)
    got: list[bytes] = []
    in_flight: Counter[str] = Counter()
    most: defaultdict[str, int] = defaultdict(int)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            frontier = FleetFrontier(
                Fleet(server.url, prefix),
                encode=bytes,
                decode=bytes,
                config=lambda h: cfg,
                lease_time=30,
            )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                claim = claim_one(frontier)
                if not isinstance(claim, Claim):
                    if claim.queued == 0 and claim.leased == 0:
                        return
                    time.sleep(0.001)
                    continue
                with lock:
                    got.append(claim.item)
                    in_flight[claim.host] += 1
                    most[claim.host] = max(most[claim.host], in_flight[claim.host])
                time.sleep(0.002)  # the download
                with lock:
                    in_flight[claim.host] -= 1
                frontier.finish(claim, status=200, latency=0.002, done=True)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert sorted(got) == sorted(r.item for r in requests)
    assert max(most.values()) <= limit
