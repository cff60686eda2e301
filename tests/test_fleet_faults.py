"""The fleet's faults against a real redis-server: unreachable, lost mid-call, keys
that are not ours. Each gives a FleetStoreError that names what to look at."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from fleet_probe import claim_one
from redis_server import (
    REDIS_SERVER,
    SKIP_REASON,
    RedisServer,
    connect,
    fleet_prefix,
    free_port,
    redis_server,
    serve,
)

from scrapy_aimd.core.controller import ControllerConfig
from scrapy_aimd.fleet import Claim, Fleet, FleetConnectionLost, FleetFrontier, FleetStoreError
from scrapy_aimd.fleet import Item as Entry
from scrapy_aimd.fleet.connection import FORMAT

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

server = pytest.fixture(scope="module")(serve)
prefix = pytest.fixture(fleet_prefix)
raw = pytest.fixture(connect)


def worker(url: str, prefix: str, **kwargs: str) -> FleetFrontier[bytes]:
    return FleetFrontier(
        Fleet(url, prefix, **kwargs),
        encode=bytes,
        decode=bytes,
        config=lambda host: ControllerConfig(),
        lease_time=30.0,
    )


def test_redis_unreachable_at_connect_names_the_setting() -> None:
    url = f"redis://:secret@127.0.0.1:{free_port()}/0"
    with pytest.raises(FleetStoreError, match=r"AIMD_REDIS_URL='redis://:\*\*\*@127\.0\.0\.1:"):
        Fleet(url, "aimd:x")
    with pytest.raises(FleetStoreError) as info:
        Fleet(url, "aimd:x")
    assert "secret" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "settings", "shown"),
    [
        ("redis://user:s3cr:et@10.0.0.5:6379/0", {"JOBDIR": "job"}, "redis://user:***@10.0.0.5"),
        ("redis://user:s3/cr@10.0.0.5:6379/0", {"JOBDIR": "job"}, "redis://user:***@10.0.0.5"),
        ("unix:///run/r.sock?password=s3cr", {"JOBDIR": "job"}, "r.sock?password=***"),
        ("rediss://u:s3%40cr@[::1]:6380/0", {"JOBDIR": "job"}, "rediss://u:***@[::1]:6380/0"),
        ("user:s3cr:et@10.0.0.5:6379", {}, "user:***@10.0.0.5:6379"),
        ("user:s3@cr@10.0.0.5:6379", {}, "user:***@10.0.0.5:6379"),
        (b"redis://:s3cr@h", {}, "***@h"),
    ],
)
def test_a_refused_redis_url_is_shown_without_its_password(
    tmp_path: Path, url: str | bytes, settings: dict[str, str], shown: str
) -> None:
    """AIMD_REDIS_URL refused at startup (with a JOBDIR, or not a URL) is named
    with its password masked, as every log line shows it."""
    from scrapy.utils.test import get_crawler

    from scrapy_aimd.settings import AimdSettingsError, read_fleet_settings

    given = {k: str(tmp_path / v) for k, v in settings.items()}
    crawler = get_crawler(settings_dict={"AIMD_REDIS_URL": url, **given})
    with pytest.raises(AimdSettingsError) as refused:
        read_fleet_settings(crawler.settings, None)
    assert "s3cr" not in str(refused.value) and shown in str(refused.value)


def test_an_invalid_url_names_the_setting() -> None:
    with pytest.raises(
        FleetStoreError, match=re.escape("AIMD_REDIS_URL='http://127.0.0.1:1' is not valid")
    ):
        Fleet("http://127.0.0.1:1", "aimd:x")


def test_a_connection_lost_mid_crawl_is_a_fleet_error() -> None:
    with redis_server() as own:
        fleet = worker(own.url, "aimd:lost")
        fleet.push([Entry("h", b"1"), Entry("h", b"2")])
        claim = claim_one(fleet)
        assert isinstance(claim, Claim)
        own.kill()
        with pytest.raises(FleetConnectionLost, match=r"AIMD_REDIS_URL=.*claim"):
            claim_one(fleet)
        with pytest.raises(FleetConnectionLost, match="feedback"):
            fleet.finish(claim, status=200, latency=0.01)
        # An answer waiting for the next claim: the claim that carries it says so.
        fleet.finish_later(claim, status=200, latency=0.01, then=lambda reaction: None)
        with pytest.raises(FleetConnectionLost, match="claim with feedback"):
            claim_one(fleet)
        with pytest.raises(FleetStoreError):  # the parent class is enough to stop on
            fleet.status()


def test_a_foreign_meta_key_is_refused_by_name(
    server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    raw.set(f"{prefix}:meta", "something else's")
    with pytest.raises(
        FleetStoreError, match=f"Redis key {prefix}:meta is a string, not a scrapy-aimd"
    ):
        Fleet(server.url, prefix)


def test_a_prefix_in_use_by_something_else_is_refused(
    server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    raw.lpush(f"{prefix}:hosts", "x")
    with pytest.raises(FleetStoreError, match=f"{prefix}:hosts exists .*list"):
        Fleet(server.url, prefix)


def test_other_rules_are_named_by_what_differs_with_the_way_out(
    server: RedisServer, prefix: str
) -> None:
    """A URL-rules setting changed between two crawls on one prefix: the error
    names the part that differs (not both ids whole, nor the script's line)."""
    common = "fingerprint-v1;blake2b-64;canonical-v1;slash=strip;strip=" + "x_*," * 200
    Fleet(server.url, prefix, rules_id=common + ";keep=").close()
    with pytest.raises(FleetStoreError) as error:
        Fleet(server.url, prefix, rules_id=common + ";keep=utm_source")
    message = str(error.value)
    assert "other fingerprint rules (keep= there; keep=utm_source here)" in message
    assert "clear_fleet" in message and "AIMD_FLEET_KEY" in message
    assert "user_script" not in message and len(message) < 600, message


def test_a_fleet_of_other_rules_or_format_is_refused(
    server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    Fleet(server.url, prefix, rules_id="rules-a").close()
    with pytest.raises(FleetStoreError, match=r"other fingerprint rules .rules-a"):
        Fleet(server.url, prefix, rules_id="rules-b")
    raw.hset(f"{prefix}:meta", "format", "99")
    format_error = f"format 99; this version reads format {FORMAT}"
    with pytest.raises(FleetStoreError, match=format_error) as refused:
        Fleet(server.url, prefix, rules_id="rules-a")
    assert "user_script" not in str(refused.value)  # the script's place: no help


def test_the_first_worker_sets_the_seen_buckets(server: RedisServer, prefix: str) -> None:
    assert Fleet(server.url, prefix, buckets=64).buckets == 64
    assert Fleet(server.url, prefix, buckets=1024).buckets == 64


@pytest.mark.parametrize(
    ("key", "damage", "message"),
    [
        ("hosts", lambda r, k: r.set(k, "x"), "WRONGTYPE"),
        ("q:h", lambda r, k: r.set(k, "x"), "WRONGTYPE"),
        ("h:h", lambda r, k: r.hset(k, "fl", "many"), "field fl is not a number"),
        ("h:h", lambda r, k: r.hset(k, "lim", "1e"), "field lim is not a number"),
        ("n", lambda r, k: r.delete(k) and r.lpush(k, "x"), "WRONGTYPE"),
        ("leases", lambda r, k: r.set(k, "x"), "WRONGTYPE"),
        ("meta", lambda r, k: r.delete(k), "is missing or not a scrapy-aimd fleet"),
    ],
)
def test_a_corrupt_key_gives_an_error_naming_it(
    server: RedisServer, raw: redis.Redis, prefix: str, key: str, damage: object, message: str
) -> None:
    fleet = worker(server.url, prefix)
    fleet.push([Entry("h", b"1")])
    damage(raw, f"{prefix}:{key}")  # type: ignore[operator]
    with pytest.raises(FleetStoreError, match=f"Redis key {prefix}:{key} .*{message}"):
        claim_one(fleet)


def test_a_lease_of_a_corrupt_score_gives_an_error_naming_it(
    server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    """An expired lease whose request's score is not a number is not put back under
    another key's name: the error names the lease."""
    fleet = worker(server.url, prefix)
    fleet.push([Entry("h", b"1")])
    claim = claim_one(fleet)
    assert isinstance(claim, Claim)
    lease = f"{prefix}:l:{claim.lease}"
    raw.hset(lease, "s", "soon")
    with pytest.raises(FleetStoreError, match=f"Redis key {lease} .*field s is not a number"):
        fleet.give_back([claim.lease])
    assert raw.hget(lease, "s") == b"soon"


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda r, p: r.zrem(f"{p}:hosts", "h"), id="host-unfiled"),
        pytest.param(lambda r, p: r.delete(f"{p}:q:h"), id="queue-deleted"),
    ],
)
def test_a_count_of_queued_requests_that_no_queue_holds_is_an_error_not_a_hang(
    server: RedisServer, raw: redis.Redis, prefix: str, damage: object
) -> None:
    """Requests counted as queued that no filed host holds could never be claimed,
    and the fleet would never be idle: every worker would wait for ever. The claim
    says so, naming the count's key."""
    fleet = worker(server.url, prefix)
    fleet.push([Entry("h", b"1"), Entry("h", b"2")])
    damage(raw, prefix)  # type: ignore[operator]
    with pytest.raises(FleetStoreError, match=f"Redis key {prefix}:n counts 2 queued requests"):
        claim_one(fleet)


@pytest.mark.parametrize("value", ["many", "inf", "nan"])
@pytest.mark.parametrize(
    ("key", "queued"),
    [("n", False), ("n", True), ("idle_since", False), ("reaped", True), ("seen_n", True)],
)
def test_a_corrupt_fleet_count_gives_an_error_naming_it(
    server: RedisServer, raw: redis.Redis, prefix: str, key: str, queued: bool, value: str
) -> None:
    """The fleet's counts (queued, idle since, reaped, seen), read by every
    worker's ``has_pending_requests`` and at its start, that are not numbers stop
    the status with an error that names the key (not a Lua error or a ValueError
    that names none)."""
    fleet = worker(server.url, prefix)
    if queued:
        fleet.push([Entry("h", b"1")])
    raw.set(f"{prefix}:{key}", value)
    with pytest.raises(FleetStoreError, match=f"Redis key {prefix}:{key} .*not a number: {value}"):
        fleet.status()
    assert raw.get(f"{prefix}:{key}") == value.encode()


def test_a_corrupt_turn_gives_an_error_naming_the_key(
    server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    """A host's turn (its holder and end, read by every feedback) that is not a
    number stops the feedback with an error that names the key, untouched."""
    fleet = worker(server.url, prefix)
    fleet.push([Entry("h", b"1")])
    claim = claim_one(fleet)
    assert isinstance(claim, Claim)
    raw.hset(f"{prefix}:h:h", mapping={"tw": "someone", "tu": "soon"})
    with pytest.raises(FleetStoreError, match=f"Redis key {prefix}:h:h .*field tu is not a number"):
        fleet.finish(claim, status=200, latency=0.01)
    assert raw.hget(f"{prefix}:h:h", "tu") == b"soon"


def test_a_corrupt_host_state_gives_an_error_naming_the_key(
    server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    fleet = worker(server.url, prefix)
    fleet.push([Entry("h", b"1")])
    claim = claim_one(fleet)
    assert isinstance(claim, Claim)
    fleet.finish(claim, status=200, latency=0.01)
    raw.hset(f"{prefix}:h:h", "st", "{not json")
    raw.hincrby(f"{prefix}:h:h", "v", 1)
    fleet.push([Entry("h", b"2")])
    again = claim_one(fleet)
    assert isinstance(again, Claim)
    with pytest.raises(FleetStoreError, match=f"Redis key {prefix}:h:h holds a state that cannot"):
        fleet.finish(again, status=200, latency=0.01)
    raw.hset(f"{prefix}:h:h", "st", '{"concurrency": -3}')
    raw.hincrby(f"{prefix}:h:h", "v", 1)
    raw.hset(f"{prefix}:h:h", "fl", 0)
    fleet = worker(server.url, prefix)  # the first one's answer waits still, failing
    fleet.push([Entry("h", b"3")])
    third = claim_one(fleet)  # reads the state again
    assert isinstance(third, Claim)
    with pytest.raises(FleetStoreError, match=f"{prefix}:h:h .*concurrency=-3"):
        fleet.finish(third, status=200, latency=0.01)


def _corrupt_state_seen(fleet: FleetFrontier[bytes], raw: redis.Redis, prefix: str) -> Claim[bytes]:
    """A claim of host b whose reply carried a state that cannot be read."""
    fleet.push([Entry("b", b"1")])
    first = claim_one(fleet)
    assert isinstance(first, Claim)
    fleet.finish(first, status=200, latency=0.01, done=True)
    raw.hset(f"{prefix}:h:b", "st", "{not json")
    raw.hincrby(f"{prefix}:h:b", "v", 1)
    fleet.push([Entry("b", b"2")])
    again = claim_one(fleet)  # reads the state again
    assert isinstance(again, Claim)
    return again


def test_a_call_that_fails_before_its_script_keeps_what_it_carried(
    server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    """Another host's corrupt state stops the call before it is sent: the
    child waits still, and its parent's lease done never goes without it."""
    fleet = worker(server.url, prefix)
    fleet.push([Entry("a", b"parent")])
    parent = claim_one(fleet)
    assert isinstance(parent, Claim)
    broken = _corrupt_state_seen(fleet, raw, prefix)
    fleet.push_later([Entry("a", b"child")], lambda results: None)
    fleet.finish_later(broken, status=200, latency=0.01, then=lambda reaction: None)
    fleet.done_later([parent.lease])
    with pytest.raises(FleetStoreError, match=f"Redis key {prefix}:h:b holds a state"):
        fleet.flush()
    assert fleet.waiting
    fleet.done_later([parent.lease])  # as a closing worker does
    with pytest.raises(FleetStoreError, match=f"Redis key {prefix}:h:b holds a state"):
        fleet.flush()
    status = fleet.status()
    assert (status.queued, status.leased) == (0, 2)  # the parent is fetched again


@pytest.mark.parametrize("later", [True, False], ids=["with-the-next-call", "at-once"])
def test_no_lease_done_goes_after_a_call_that_lost_its_pushes(
    server: RedisServer, raw: redis.Redis, prefix: str, later: bool
) -> None:
    """A call that carried children failed in Redis: their parent stays leased,
    to be queued again when the lease expires, children and all."""
    fleet = worker(server.url, prefix)
    fleet.push([Entry("a", b"parent")])
    parent = claim_one(fleet)
    assert isinstance(parent, Claim)
    queued = raw.get(f"{prefix}:n")
    raw.delete(f"{prefix}:n")
    raw.lpush(f"{prefix}:n", "x")
    child = [Entry("a", b"child")]
    if later:
        fleet.push_later(child, lambda results: None)
    with pytest.raises(FleetStoreError, match="WRONGTYPE"):
        fleet.flush() if later else fleet.push(child)
    raw.delete(f"{prefix}:n")
    raw.set(f"{prefix}:n", queued or 0)
    fleet.done([parent.lease])
    assert fleet.status().leased == 1


_DEEP = 100_000


@pytest.mark.parametrize(
    "state",
    [
        b'{"delay": 1' + b"0" * 400 + b"}",  # too large for a float
        # A pickled list nested too deep under "memory" (plain values only).
        b"\x80\x05}\x8c\x06memory" + b"]" * _DEEP + b"a" * (_DEEP - 1) + b"s.",
    ],
    ids=["overflow", "recursion"],
)
def test_a_state_the_controller_cannot_restore_gives_an_error_naming_the_key(
    server: RedisServer, raw: redis.Redis, prefix: str, state: bytes
) -> None:
    fleet = worker(server.url, prefix)
    fleet.push([Entry("h", b"1")])
    claim = claim_one(fleet)
    assert isinstance(claim, Claim)
    fleet.finish(claim, status=200, latency=0.01, done=True)
    raw.hset(f"{prefix}:h:h", "st", state)
    raw.hincrby(f"{prefix}:h:h", "v", 1)
    fleet.push([Entry("h", b"2")])
    again = claim_one(fleet)  # reads the state again
    assert isinstance(again, Claim)
    assert fleet.controller("h") is None  # for stats and events: nothing to show
    with pytest.raises(FleetStoreError, match=f"Redis key {prefix}:h:h holds a state that cannot"):
        fleet.finish(again, status=200, latency=0.01)


def test_a_closing_worker_leaves_the_shared_state(server: RedisServer, prefix: str) -> None:
    first = worker(server.url, prefix)
    first.push([Entry("h", b"1"), Entry("h", b"2")])
    first.fleet.close()
    second = worker(server.url, prefix)
    assert second.status().queued == 2


def test_scripts_lost_by_redis_are_loaded_again(
    server: RedisServer, raw: redis.Redis, prefix: str
) -> None:
    """A Redis restarted (or SCRIPT FLUSH) forgets the scripts: the next call loads
    its script again, at two more round trips, once."""
    fleet = worker(server.url, prefix)
    fleet.push([Entry("h", b"1")])
    raw.script_flush()
    before = fleet.counters.round_trips
    claim = claim_one(fleet)
    assert isinstance(claim, Claim)
    assert fleet.counters.round_trips == before + 3
    fleet.finish(claim, status=200, latency=0.01, done=True)
    # The answer goes through the claim script, loaded again already: one round trip.
    assert fleet.counters.round_trips == before + 4
    fleet.push([Entry("h", b"2")])
    assert fleet.counters.round_trips == before + 7  # the push script too, once
    assert fleet.status().queued == 1
    assert fleet.counters.round_trips == before + 10
    again = claim_one(fleet)
    assert isinstance(again, Claim)
    assert fleet.counters.round_trips == before + 11


_WORKER = """
import sys, time
from scrapy_aimd.core.controller import ControllerConfig
from scrapy_aimd.fleet import Fleet, FleetFrontier
url, prefix = sys.argv[1], sys.argv[2]
cfg = ControllerConfig(adaptive=False, max_concurrency=4)
worker = FleetFrontier(Fleet(url, prefix), encode=bytes, decode=bytes,
                       config=lambda host: cfg, lease_time=1.0)
held = worker.claim_many(3)
assert isinstance(held, list) and len(held) == 3, held
print(" ".join(claim.item.decode() for claim in held), flush=True)
time.sleep(60)
"""


def test_kill_9_of_a_worker_loses_none_of_its_requests(server: RedisServer, prefix: str) -> None:
    cfg = ControllerConfig(adaptive=False, max_concurrency=4)
    survivor = FleetFrontier(
        Fleet(server.url, prefix), encode=bytes, decode=bytes, config=lambda h: cfg, lease_time=30
    )
    pages = [f"h{n % 2}/{n}".encode() for n in range(10)]
    survivor.push([Entry(page.decode().split("/")[0], page) for page in pages])
    child = subprocess.Popen(
        [sys.executable, "-c", _WORKER, server.url, prefix],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    try:
        assert child.stdout is not None
        held = child.stdout.readline().split()
        assert len(held) == 3
    finally:
        child.kill()
        child.wait(10)
    fetched: list[bytes] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        claim = claim_one(survivor)
        if isinstance(claim, Claim):
            fetched.append(claim.item)
            survivor.finish(claim, status=200, latency=0.001, done=True)
        elif claim.queued == 0 and claim.leased == 0:
            break
        else:
            time.sleep(0.02)
    assert sorted(fetched) == sorted(pages)  # the killed worker's 3 among them, once each
    assert survivor.counters.reaped == 3


def test_a_start_that_fails_after_connecting_closes_its_connection(
    server: RedisServer, prefix: str, raw: redis.Redis
) -> None:
    """A DUPEFILTER_CLASS that cannot be loaded stops the worker after it connected
    to Redis: the connection goes with it, not when the process exits."""
    from scrapy.utils.test import get_crawler

    from scrapy_aimd.scheduler import AimdScheduler

    # By id: a connection of an earlier test that the collector closes meanwhile
    # changes the count, not what is new.
    before = {client["id"] for client in raw.client_list()}
    crawler = get_crawler(
        settings_dict={
            "AIMD_REDIS_URL": server.url,
            "AIMD_FLEET_KEY": prefix,
            "DUPEFILTER_CLASS": "scrapy_aimd.no_such_module.Filter",
        }
    )
    with pytest.raises(ModuleNotFoundError) as failed:
        AimdScheduler.from_crawler(crawler)
    assert failed.traceback  # the failure, and with it the worker, still held here
    assert {client["id"] for client in raw.client_list()} <= before
