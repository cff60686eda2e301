"""AIMD_HOST_GIVE_UP in a fleet, against a real redis-server: the first worker
whose budget for a host runs out gives the host up fleet-wide (``P:gaveup``),
its queue is drained in one script and failed with ``HostGaveUp``, and the
host's requests that come later, from any worker, fail too."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fleet_probe import claim_one, host_view
from fleet_schedulers import Workers, fleet_schedulers, in_a_loop
from fleetcrawl import FLEET, assert_finished, start_worker, wait_for
from redis_server import (
    REDIS_SERVER,
    SKIP_REASON,
    RedisServer,
    connect,
    fleet_prefix,
    serve,
    serve_url,
)
from scrapy import Request

from scrapy_aimd import give_up
from scrapy_aimd.core.controller import ControllerConfig
from scrapy_aimd.crawl import THROTTLE_RETRIES_META
from scrapy_aimd.fleet import Claim, Fleet, FleetFrontier, Item, clear_fleet
from scrapy_aimd.scheduler import AimdScheduler
from sitefarm import HostSpec, start_farm, summarize

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

server = pytest.fixture(scope="module")(serve)
prefix = pytest.fixture(fleet_prefix)
raw = pytest.fixture(connect)
redis_url = pytest.fixture(serve_url)

FAST = ControllerConfig(min_delay=0.0, max_concurrency=4)


@pytest.fixture
def frontier(server: RedisServer, prefix: str) -> Iterator[Callable[[], FleetFrontier[bytes]]]:
    """Workers of one fleet: each call connects another."""
    made: list[Fleet] = []

    def make() -> FleetFrontier[bytes]:
        fleet = Fleet(server.url, prefix)
        made.append(fleet)
        return FleetFrontier(
            fleet, encode=bytes, decode=bytes, config=lambda host: FAST, lease_time=30.0
        )

    yield make
    for fleet in made:
        fleet.close()


# -- the store: the drain script and the push's check ------------------------------------


def test_giving_up_drains_the_hosts_queue_and_keeps_the_fleets_counts(
    frontier: Callable[[], FleetFrontier[bytes]], raw: redis.Redis, prefix: str
) -> None:
    a, b = frontier(), frontier()
    a.push([Item("bad", b"b%d" % n) for n in range(4)] + [Item("good", b"g0")])
    leased = claim_one(a)  # "bad" sorts first among hosts ready at once
    assert isinstance(leased, Claim) and leased.host == "bad"

    assert a.give_up("bad") == (True, 3)
    assert a.take_gave_up() == [("bad", b"b1"), ("bad", b"b2"), ("bad", b"b3")]
    status = a.status()
    assert (status.queued, status.leased) == (1, 1)  # good's one, bad's lease stays
    bad, good = host_view(a, "bad"), host_view(a, "good")
    assert bad is not None and bad.queued == 0 and bad.in_flight == 1
    assert good is not None and good.queued == 1
    assert raw.zrange(f"{prefix}:hosts", 0, -1) == [b"good"]
    assert raw.smembers(f"{prefix}:gaveup") == {b"bad"}
    # Once per fleet: another worker's budget that runs out later finds it done.
    assert b.give_up("bad") == (False, 0)
    assert "bad" in a.given_up and "bad" in b.given_up

    # Pushed later, by any worker: not queued, handed back to fail.
    assert b.push([Item("bad", b"late", key=7), Item("good", b"g1")]) == [True, True]
    assert b.take_gave_up() == [("bad", b"late")]
    assert b.push([Item("bad", b"late again", key=7)]) == [False]  # in the seen set
    assert b.status().queued == 2

    # Back from a lease (given back here; an expired one goes the same way): the
    # next claim, by any worker, hands it back to fail, and claims the rest.
    assert a.give_back([leased.lease]) == 1
    claims = b.claim_many(8)
    assert isinstance(claims, list) and {c.host for c in claims} == {"good"}
    assert b.take_gave_up() == [("bad", b"b0")]
    status = b.status()
    assert (status.queued, status.leased) == (2 - len(claims), len(claims))
    bad = host_view(b, "bad")
    assert bad is not None and bad.queued == 0 and bad.in_flight == 0
    assert raw.zscore(f"{prefix}:hosts", "bad") is None


def test_the_fleets_given_up_hosts_are_cleared_with_it(
    frontier: Callable[[], FleetFrontier[bytes]], server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    worker = frontier()
    worker.push([Item("bad", b"1")])
    worker.give_up("bad")
    assert raw.exists(f"{prefix}:gaveup")
    clear_fleet(server.url, prefix)
    assert not raw.exists(f"{prefix}:gaveup")


# -- the scheduler: the budget and the requests failed ----------------------------------


@pytest.fixture
def worker(server: RedisServer, prefix: str) -> Iterator[Workers]:
    """Fleet schedulers of one fleet, opened: each call makes another."""
    yield from fleet_schedulers(
        server.url, prefix, AIMD_ADAPTIVE_CONCURRENCY=False, AIMD_MAX_CONCURRENCY=4
    )


def hand_out_all(scheduler: AimdScheduler) -> list[Request]:
    out = []
    while (request := scheduler.next_request()) is not None:
        out.append(request)
    return out


def refuse_twice(scheduler: AimdScheduler, requests: list[Request]) -> None:
    """Two 429s of the host, further apart than a budget of 0.01 s."""
    first, second = requests[:2]
    scheduler._on_feedback(first, status=429, latency=0.01)
    time.sleep(0.05)
    scheduler._on_feedback(second, status=429, latency=0.01)


def queue(scheduler: AimdScheduler, host: str, count: int) -> None:
    for n in range(count):
        scheduler.enqueue_request(Request(f"http://{host}/{n}", dont_filter=True))


@in_a_loop
def test_the_first_worker_whose_budget_runs_out_gives_the_host_up_fleet_wide(
    worker: Workers, caplog: pytest.LogCaptureFixture
) -> None:
    a = worker(AIMD_HOST_GIVE_UP=0.01)
    b = worker(AIMD_HOST_GIVE_UP=0.01)
    queue(a, "bad.test", 6)
    queue(a, "good.test", 2)
    sent = hand_out_all(a)
    bad = [r for r in sent if "bad.test" in r.url]
    assert len(bad) == 4 and not any(give_up.META in r.meta for r in sent)
    with caplog.at_level(logging.WARNING):
        refuse_twice(a, bad)
    # Its two queued requests come out first, for the feedback middleware to fail.
    failed = hand_out_all(a)
    assert sorted(r.url for r in failed) == ["http://bad.test/4", "http://bad.test/5"]
    assert all(r.meta[give_up.META] == "bad.test" for r in failed)
    assert a.stats.get_value("aimd/host_gave_up/hosts") == 1
    assert a.stats.get_value("aimd/host_gave_up/requests") == 2
    assert caplog.text.count("Giving up on bad.test") == 1
    assert a.store.frontier is not None
    host = host_view(a.store.frontier, "bad.test")
    assert host is not None and host.queued == 0

    # A refused request queued again here, and a new one from another worker: both
    # fail, and the other worker never counts the host.
    again = bad[2].replace(dont_filter=True)
    again.meta[THROTTLE_RETRIES_META] = 1
    a.enqueue_request(again)
    assert [r.url for r in hand_out_all(a)] == [again.url]
    assert again.meta[give_up.META] == "bad.test"
    b.enqueue_request(Request("http://bad.test/new"))
    late = hand_out_all(b)
    assert [r.url for r in late] == ["http://bad.test/new"]
    assert late[0].meta[give_up.META] == "bad.test"
    assert b.stats.get_value("aimd/host_gave_up/requests") == 1
    assert not b.stats.get_value("aimd/host_gave_up/hosts")
    assert a.stats.get_value("aimd/host_gave_up/requests") == 3
    assert not a.has_pending_requests() or a.store.claims  # the refused leases are still held


@in_a_loop
def test_a_budget_of_zero_never_gives_up_in_a_fleet(
    worker: Workers, raw: redis.Redis, prefix: str
) -> None:
    a = worker(AIMD_HOST_GIVE_UP=0)
    queue(a, "bad.test", 6)
    bad = hand_out_all(a)
    assert len(bad) == 4
    refuse_twice(a, bad)
    time.sleep(0.05)
    a._on_feedback(bad[2], status=503, latency=0.01)
    assert a.next_request() is None  # paused, not given up on
    assert not a.stats.get_value("aimd/host_gave_up/requests")
    assert not raw.exists(f"{prefix}:gaveup")
    assert a.store.frontier is not None
    host = host_view(a.store.frontier, "bad.test")
    assert host is not None and host.queued == 2


# -- a real crawl ------------------------------------------------------------------------


def test_two_workers_give_up_on_a_host_that_only_refuses_and_crawl_the_rest(
    tmp_path: Path, redis_url: str
) -> None:
    """The refusing host answers every page 429 (no Retry-After) for 120 s; without
    give-up the fleet would try each of its pages for minutes. With 2 s of budget,
    the first worker whose refusals of it span 2 s gives it up fleet-wide.

    What is exactly true: none of the host's requests is ever fetched well, so
    each of them ends in one errback with HostGaveUp (whichever worker fails it:
    the drained queue goes to the worker that gave up, a refused request sent
    again goes to the worker that pushes it), and ``aimd/host_gave_up/requests``
    summed over the workers is their number. ``aimd/host_gave_up/hosts`` and the
    WARNING come from the one worker that gave the host up: 1 summed. After the
    first HostGaveUp, no request of the host reaches it (a request claimed just
    before may still go: a margin of 1 s)."""
    specs = [
        HostSpec(
            name="refuse", pages=12, links_per_page=0, pause_first=120, pause_retry_after=None
        ),
        HostSpec(name="fine", pages=20, latency=0.05),
    ]
    settings = {
        **FLEET,
        "AIMD_HOST_GIVE_UP": 2.0,
        "RETRY_TIMES": 0,
        "CONCURRENT_REQUESTS": 4,
    }
    with start_farm(specs, max_seconds=150) as farm:
        refusing = [f"{farm.urls['refuse']}/p/{n}" for n in range(12)]
        urls = [*refusing, farm.urls["fine"] + "/"]
        began = time.monotonic()
        fleet = [
            start_worker(
                urls,
                tmp_path / f"w{n}",
                redis_url,
                settings,
                spider="components.TimedErrbackSpider",
            )
            for n in range(2)
        ]
        wait_for(fleet, 60)
        took = time.monotonic() - began
        log = farm.read_log()
    assert_finished(fleet)
    assert took < 45, took
    summary = summarize(log, specs)
    assert summary["fine"].pages_fetched == summary["fine"].pages_total, summary["fine"]

    items = [item for w in fleet for item in _items(w.out)]
    errors = [item for item in items if "error" in item]
    assert {item["error"] for item in errors} == {"HostGaveUp"}, errors
    assert sorted(item["url"] for item in errors) == sorted(refusing)
    stats = [w.stats() for w in fleet]
    assert sum(s.get("aimd/host_gave_up/requests", 0) for s in stats) == len(refusing)
    assert sum(s.get("aimd/host_gave_up/hosts", 0) for s in stats) == 1
    assert sum(w.log().count("Giving up on") for w in fleet) == 1

    refused = [r for r in log if r["host"] == "refuse" and r["path"] != "/robots.txt"]
    assert refused and all(r["status"] == 429 for r in refused)
    gave_up_at = min(item["t"] for item in errors)
    assert max(r["arrived"] for r in refused) <= gave_up_at + 1.0
    # The budget: the host had refused for 2 s before it was given up on.
    assert gave_up_at - min(r["arrived"] for r in refused) >= 2.0 - 0.1


def _items(out: Path) -> list[dict[str, Any]]:
    path = out / "items.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]
