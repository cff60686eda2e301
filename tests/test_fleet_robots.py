"""robots.txt in a fleet: one worker fetches an origin's robots.txt, the others
take its answer from Redis. Real crawl processes, a real redis-server, the farm.

The farm's request log is the judge: how many times each robots.txt was asked
for, whether a disallowed page was ever fetched, the Crawl-delay between
arrivals. Timing bounds are generous: the machine is shared.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from crawling import arrival_gaps
from fleetcrawl import FLEET, Worker, assert_finished, start_worker, urls_of, wait_for
from redis_server import REDIS_SERVER, SKIP_REASON, RedisServer, serve

from scrapy_aimd.fleet.connection import HEARTBEAT, fleet_key
from sitefarm import FarmProcess, HostSpec, start_farm, summarize

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

#: The lease of a 3 s download timeout (``redis_store.lease_time``): the robots
#: lock lasts as long.
LOCK_SECONDS = 8.0
RULES = "User-agent: *\nDisallow: /p/3\n"
#: The spider's name in tests/crawlrunner.py: the fleet's default prefix.
PREFIX = "aimd:farm"


server = pytest.fixture(serve)


def start(farm: FarmProcess, out: Path, url: str, settings: dict[str, Any] | None = None) -> Worker:
    """A fleet worker that obeys robots.txt."""
    return start_worker(
        urls_of(farm), out, url, {**FLEET, "ROBOTSTXT_OBEY": True, **(settings or {})}
    )


def robots_of(log: list[dict[str, Any]], host: str) -> list[dict[str, Any]]:
    return [r for r in log if r["host"] == host and r["path"] == "/robots.txt"]


def pages_of(log: list[dict[str, Any]], host: str) -> list[dict[str, Any]]:
    return [r for r in log if r["host"] == host and r["reason"] != "robots"]


def total(fleet: list[Worker], stat: str) -> int:
    return sum(int(w.stats().get(stat, 0)) for w in fleet)


SPECS = [
    HostSpec(name="rules", pages=10, robots=RULES, crawl_delay=0.3),
    HostSpec(name="notfound", pages=10, robots_mode="404", robots=RULES),
    HostSpec(name="flaky", pages=10, robots_mode="503_then_200", robots_fail_first=1, robots=RULES),
    HostSpec(name="down", pages=10, robots_mode="503"),
]


def test_three_workers_fetch_each_robots_txt_once(tmp_path: Path, server: RedisServer) -> None:
    settings = {"AIMD_ROBOTS_RETRIES": 1}
    with start_farm(SPECS, max_seconds=120) as farm:
        fleet = [start(farm, tmp_path / f"w{n}", server.url, settings) for n in range(3)]
        wait_for(fleet, 100)
        log = farm.read_log()
    assert_finished(fleet)
    # Once per fleet: the rules, the 404; the 503 then 200 as one worker's one
    # retry; the origin that is down as one worker's fetch and its one retry.
    assert [r["status"] for r in robots_of(log, "rules")] == [200]
    assert [r["status"] for r in robots_of(log, "notfound")] == [404]
    assert [r["status"] for r in robots_of(log, "flaky")] == [503, 200]
    assert [r["status"] for r in robots_of(log, "down")] == [503, 503]
    assert total(fleet, "aimd/fleet/robots/fetched") == 6
    # Every other worker took each of the four answers from Redis, and its events
    # file says so; the fetching worker's says it fetched them.
    assert total(fleet, "aimd/fleet/robots/shared") == 2 * 4
    robots = [e for w in fleet for e in w.events() if e["event"] == "robots"]
    assert sum(e["shared"] for e in robots) == 2 * 4, robots
    assert sum(not e["shared"] for e in robots if e["outcome"] != "unreachable") == 3, robots
    summary = summarize(log, SPECS)
    # What robots.txt disallows stays unfetched in every worker; the rest once.
    for name in ("rules", "flaky"):
        paths = {r["path"] for r in pages_of(log, name)}
        assert "/p/3" not in paths, name
        assert summary[name].pages_fetched == summary[name].pages_total - 1, summary[name]
        assert summary[name].duplicate_fetches == 0, summary[name]
    assert summary["notfound"].pages_fetched == summary["notfound"].pages_total
    assert total(fleet, "aimd/robots/disallowed") >= 2
    # The origin whose robots.txt stayed unreachable is skipped by every worker
    # (its start page, queued once fleet-wide, skipped by the one that took it).
    assert pages_of(log, "down") == []
    for worker in fleet:
        assert worker.stats().get("aimd/robots/origins_skipped") == 1, worker.log()[-3000:]
    assert total(fleet, "aimd/robots/unreachable") >= 1
    # The Crawl-delay holds at the server, robots.txt included.
    gaps = arrival_gaps([r for r in log if r["host"] == "rules"])
    assert gaps and min(gaps) >= 0.3 - 0.05, gaps
    # Every key the crawl made is one that a reset of the fleet takes. (A host's
    # log of starts, ``e``, is empty by the end when every claim was answered:
    # the reset of one left over is in test_fleet_store.py.)
    client = redis.Redis.from_url(server.url)
    keys = client.keys("*")
    client.close()
    assert {key.split(b":")[2] for key in keys} >= {b"h", b"r", b"s", b"meta"}
    assert [key for key in keys if not fleet_key(PREFIX, key)] == []


def test_a_worker_killed_holding_the_robots_lock_does_not_stall_the_fleet(
    tmp_path: Path, server: RedisServer
) -> None:
    # A slow robots.txt: the first worker is surely still fetching it when killed.
    specs = [HostSpec(name="slow", pages=6, robots=RULES, robots_delay=2.0)]
    client = redis.Redis.from_url(server.url)
    try:
        with start_farm(specs, max_seconds=120) as farm:
            first = start(farm, tmp_path / "w0", server.url)
            lock_expires = held_lock(client, timeout=60)
            killed_at = time.time()
            first.process.send_signal(signal.SIGKILL)
            fleet = [start(farm, tmp_path / f"w{n}", server.url) for n in (1, 2)]
            wait_for([first, *fleet], 100)
            log = farm.read_log()
    finally:
        client.close()
    assert first.code == -signal.SIGKILL
    assert_finished(fleet)
    # One survivor fetched robots.txt once the dead worker's heartbeat expired
    # (its lock went with its leases, before the lock's own expiry); the other
    # took its answer.
    after = [r for r in robots_of(log, "slow") if r["arrived"] > killed_at]
    assert len(after) == 1, after
    assert after[0]["arrived"] - killed_at <= HEARTBEAT + 3.0, (after[0]["arrived"], killed_at)
    assert after[0]["arrived"] <= lock_expires + 0.5, (after[0]["arrived"], lock_expires)
    assert total(fleet, "aimd/fleet/robots/fetched") == 1
    assert total(fleet, "aimd/fleet/robots/shared") == 1
    summary = summarize(log, specs)["slow"]
    assert summary.pages_fetched == summary.pages_total - 1, summary
    assert "/p/3" not in {r["path"] for r in pages_of(log, "slow")}


def held_lock(client: redis.Redis, timeout: float) -> float:
    """When the robots lock that a worker took expires (wall clock), once it is
    taken (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for key in client.scan_iter(match=f"{PREFIX}:rl:*"):
            ttl = int(client.pttl(key))
            if ttl > 0:
                assert ttl <= LOCK_SECONDS * 1000, ttl
                return time.time() + ttl / 1000
        time.sleep(0.02)
    raise AssertionError("no worker took a robots lock")
