"""robots.txt answers shared in Redis (``scrapy_aimd.fleet.robots_store``) against
a real redis-server: one worker takes an origin's fetch with its hold, the others
wait for it, then read the answer it stored; a dead worker's lock expires.

Every test has its own key prefix on one server for the module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis
from redis_server import REDIS_SERVER, SKIP_REASON, RedisServer, fleet_prefix, serve

from scrapy_aimd.core.controller import ControllerConfig
from scrapy_aimd.core.robots import MAX_BYTES
from scrapy_aimd.fleet import (
    Claim,
    Fleet,
    FleetFrontier,
    FleetRobots,
    FleetStoreError,
    SharedRobots,
    Wait,
)

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

server = pytest.fixture(scope="module")(serve)
prefix = pytest.fixture(fleet_prefix)

ORIGIN = "http://h"
#: A host with room for several at once: only the lock can make a hold wait.
ROOMY = ControllerConfig(min_delay=0.0, max_concurrency=4, adaptive=False)


class Worker:
    """One worker's frontier and shared answers, on one connection."""

    def __init__(self, url: str, prefix: str, lease_time: float) -> None:
        self.fleet = Fleet(url, prefix)
        self.frontier: FleetFrontier[str] = FleetFrontier(
            self.fleet, encode=str.encode, decode=bytes.decode, config=lambda host: ROOMY,
            lease_time=lease_time,
        )  # fmt: skip
        self.robots = FleetRobots(self.fleet, lease_time=lease_time)


Workers = Callable[..., Worker]


@pytest.fixture
def workers(server: RedisServer, prefix: str) -> Iterator[Workers]:
    made: list[Worker] = []

    def make(lease_time: float = 30.0) -> Worker:
        made.append(Worker(server.url, prefix, lease_time))
        return made[-1]

    yield make
    for worker in made:
        worker.fleet.close()


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(server.url)
    yield client
    client.close()


def share(worker: Worker, body: bytes = b"User-agent: *\nDisallow: /x\n", **kw: object) -> bool:
    args: dict[str, object] = {
        "status": 200, "body": body, "truncated": False, "gave_up": False, "max_age": 3600.0,
    }  # fmt: skip
    args.update(kw)
    return worker.robots.share(ORIGIN, **args)  # type: ignore[arg-type]


def test_one_worker_takes_the_fetch_and_the_others_wait_for_its_answer(
    workers: Workers, raw: redis.Redis, prefix: str
) -> None:
    fetcher, other = workers(), workers()
    assert fetcher.robots.known(ORIGIN) is None
    held = fetcher.frontier.hold("h", "robots.txt", ORIGIN)
    assert isinstance(held, Claim)
    assert 29_000 < raw.pttl(f"{prefix}:rl:{ORIGIN}") <= 30_000  # the lock lasts the lease
    # The host has room, but the origin's fetch is taken: wait for the lock.
    waiting = other.frontier.hold("h", "robots.txt", ORIGIN)
    assert isinstance(waiting, Wait)
    assert waiting.ready_at == pytest.approx(waiting.now + 30.0, abs=1.0)
    assert other.robots.known(ORIGIN) is None
    # Another origin of the host is not held up by it.
    assert isinstance(other.frontier.hold("h", "robots.txt", "https://h"), Claim)
    assert share(fetcher) is True
    assert raw.exists(f"{prefix}:rl:{ORIGIN}") == 0
    assert 3_500_000 < raw.pttl(f"{prefix}:r:{ORIGIN}") <= 3_600_000
    answer = other.frontier.hold("h", "robots.txt", ORIGIN)
    assert isinstance(answer, SharedRobots)
    assert (answer.status, answer.body) == (200, b"User-agent: *\nDisallow: /x\n")
    assert not answer.truncated and not answer.gave_up
    assert 0 <= answer.age < 5
    known = other.robots.known(ORIGIN)
    assert known is not None and (known.status, known.body) == (answer.status, answer.body)
    # A hold that found the answer took no place.
    view = other.frontier.host("h")
    assert view is not None and view.in_flight == 2


def test_the_lock_holder_takes_its_own_fetch_again(workers: Workers) -> None:
    """A redirect hop or a retry of the worker that holds the lock is not held up."""
    fetcher = workers()
    assert isinstance(fetcher.frontier.hold("h", "robots.txt", ORIGIN), Claim)
    assert isinstance(fetcher.frontier.hold("h", "robots/real.txt", ORIGIN), Claim)


def test_a_retry_keeps_the_lock_through_its_backoff(
    workers: Workers, raw: redis.Redis, prefix: str
) -> None:
    fetcher, other = workers(lease_time=5.0), workers(lease_time=5.0)
    assert isinstance(fetcher.frontier.hold("h", "robots.txt", ORIGIN), Claim)
    assert fetcher.robots.retrying(ORIGIN, 20.0) is True
    assert 24_000 < raw.pttl(f"{prefix}:rl:{ORIGIN}") <= 25_000
    waiting = other.frontier.hold("h", "robots.txt", ORIGIN)
    assert isinstance(waiting, Wait) and waiting.ready_at > waiting.now + 20
    # A worker whose lock expired takes it again for its retry if no one has it.
    raw.delete(f"{prefix}:rl:{ORIGIN}")
    assert other.robots.retrying(ORIGIN, 1.0) is False
    assert raw.get(f"{prefix}:rl:{ORIGIN}") == other.fleet.token.encode()
    assert fetcher.robots.retrying(ORIGIN, 1.0) is False
    assert raw.get(f"{prefix}:rl:{ORIGIN}") == other.fleet.token.encode()


def test_a_dead_workers_lock_expires_with_its_hold(workers: Workers) -> None:
    dead, survivor = workers(lease_time=0.3), workers(lease_time=0.3)
    assert isinstance(dead.frontier.hold("h", "robots.txt", ORIGIN), Claim)
    assert isinstance(survivor.frontier.hold("h", "robots.txt", ORIGIN), Wait)
    time.sleep(0.4)
    survivor.frontier.reap()
    held = survivor.frontier.hold("h", "robots.txt", ORIGIN)
    assert isinstance(held, Claim)
    # The dead worker's answer, had it come late, would still be stored.
    assert share(dead) is False
    assert isinstance(survivor.frontier.hold("h", "robots.txt", ORIGIN), SharedRobots)


def test_every_kind_of_answer_goes_through(workers: Workers) -> None:
    fetcher, other = workers(), workers()
    share(fetcher, body=b"", status=None, gave_up=True)
    answer = other.robots.known(ORIGIN)
    assert answer is not None
    assert (answer.status, answer.body, answer.gave_up) == (None, b"", True)
    share(fetcher, body=b"", status=404)
    answer = other.robots.known(ORIGIN)
    assert answer is not None and (answer.status, answer.gave_up) == (404, False)
    # Only what is parsed is stored: the first 500 KiB, compressed.
    big = b"Disallow: /p\n" * (MAX_BYTES // 10)
    share(fetcher, body=big, truncated=True)
    answer = other.robots.known(ORIGIN)
    assert answer is not None and answer.truncated
    assert answer.body == big[:MAX_BYTES]


def test_a_corrupt_answer_is_an_error_that_names_its_key(
    workers: Workers, raw: redis.Redis, prefix: str
) -> None:
    worker = workers()
    raw.hset(f"{prefix}:r:{ORIGIN}", mapping={"s": "200", "b": "not zlib", "t": "1"})
    with pytest.raises(FleetStoreError, match=f"Redis key {prefix}:r:{ORIGIN} holds a robots"):
        worker.robots.known(ORIGIN)
    raw.delete(f"{prefix}:r:{ORIGIN}")
    raw.set(f"{prefix}:r:{ORIGIN}", "a string")
    with pytest.raises(FleetStoreError, match=f"{prefix}:r:{ORIGIN}"):
        worker.frontier.hold("h", "robots.txt", ORIGIN)
