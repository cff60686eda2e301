"""Any sequence of pushes, claims, answers, dones and give-backs by two workers keeps
the fleet's books: no request lost or doubled, counts and in-flight places true.

An answer that lost its race (another worker claimed from its host unseen, or
stored first) is stored with its worker's next call, by design: until then Redis
holds its lease as it was, and the books count it so; once every worker has
flushed, none is left. A host that no other worker claimed from has no race to
lose: none of its answers waits."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
from fleet_probe import claim_one, hosts_waiting, leases_dropped_later
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_server import REDIS_SERVER, SKIP_REASON, RedisServer, serve

from scrapy_aimd.core.controller import ControllerConfig
from scrapy_aimd.fleet import Claim, Fleet, FleetFrontier, Item

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

server = pytest.fixture(scope="module")(serve)
_runs = itertools.count()
HOSTS = ("a", "b", "c")
CFG = ControllerConfig(min_delay=0.0, max_concurrency=3)

op = st.one_of(
    st.tuples(st.just("push"), st.integers(0, 1), st.sampled_from(HOSTS), st.integers(0, 5)),
    st.tuples(st.just("claim"), st.integers(0, 1)),
    st.tuples(
        st.just("answer"), st.integers(0, 20), st.sampled_from([200, 429, 503]), st.booleans()
    ),
    st.tuples(st.just("done"), st.integers(0, 20)),
    st.tuples(st.just("give_back"), st.integers(0, 20)),
)


@pytest.fixture(scope="module")
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(server.url, decode_responses=True)
    yield client
    client.close()


def check_books(client: redis.Redis, prefix: str, expected: Counter[bytes]) -> None:
    queued: Counter[bytes] = Counter()
    queues = 0
    for host in HOSTS:
        members = client.zrange(f"{prefix}:q:{host}", 0, -1)
        queues += len(members)
        queued.update(member[16:].encode() for member in members)
        assert (client.zscore(f"{prefix}:hosts", host) is not None) == bool(members), host
    leased: Counter[bytes] = Counter()
    unreleased: Counter[str] = Counter()
    ids = client.zrange(f"{prefix}:leases", 0, -1)
    for lease in ids:
        fields = client.hgetall(f"{prefix}:l:{lease}")
        leased[fields["m"][16:].encode()] += 1
        if "r" not in fields:
            unreleased[fields["h"]] += 1
    assert queued + leased == expected
    assert int(client.get(f"{prefix}:n") or 0) == queues
    for host in HOSTS:
        in_flight = int(client.hget(f"{prefix}:h:{host}", "fl") or 0)
        assert in_flight == unreleased[host], host


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(op, min_size=4, max_size=40))
def test_the_books_balance(server: RedisServer, raw: redis.Redis, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    prefix = f"aimd:prop{next(_runs)}"
    fleets = [Fleet(server.url, prefix) for _ in range(2)]
    workers = [
        FleetFrontier(fleet, encode=bytes, decode=bytes, config=lambda h: CFG, lease_time=600)
        for fleet in fleets
    ]
    claims: list[tuple[FleetFrontier[bytes], Claim[bytes]]] = []
    expected: Counter[bytes] = Counter()
    items: dict[str, bytes] = {}  # each lease's request
    claimers: dict[str, set[int]] = {}  # the workers that claimed from each host
    serial = itertools.count()
    for kind, *args in ops:
        if kind == "push":
            worker, host, key = workers[args[0]], args[1], args[2]
            item = f"{host}/{next(serial)}".encode()
            if worker.push([Item(host, item, key=key)]) == [True]:
                expected[item] += 1
        elif kind == "claim":
            worker = workers[args[0]]
            got = claim_one(worker)
            if isinstance(got, Claim):
                claims.append((worker, got))
                items[got.lease] = got.item
                claimers.setdefault(got.host, set()).add(args[0])
        elif claims:
            worker, claim = claims[args[0] % len(claims)]
            if kind == "answer":
                worker.finish(claim, status=args[1], latency=0.01, done=args[2])
                if args[2]:
                    claims.remove((worker, claim))
                    expected[claim.item] -= 1
            elif kind == "done":
                worker.done([claim.lease])
                claims.remove((worker, claim))
                expected[claim.item] -= 1
            else:
                worker.give_back([claim.lease])
                claims.remove((worker, claim))
        for number, each in enumerate(workers):
            for host in hosts_waiting(each):
                assert claimers[host] - {number}, f"worker {number} lost a race on {host} alone"
        later = Counter(items[lease] for w in workers for lease in leases_dropped_later(w))
        check_books(raw, prefix, +expected + later)
    for worker in workers:
        assert worker.flush_all(timeout=10.0)
    check_books(raw, prefix, +expected)
    for fleet in fleets:
        fleet.close()
