"""The fleet's clock is the Redis server's, as a worker reckons it between
replies: never behind it, however slow the link, since a send timed by it
starts the host's gap for every worker (tests against a real redis-server
behind a real, slowed TCP link: tests/slow_link.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis_server import REDIS_SERVER, SKIP_REASON, RedisServer, fleet_prefix, serve
from slow_link import SlowLink

from scrapy_aimd.fleet import Fleet

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

server = pytest.fixture(scope="module")(serve)
prefix = pytest.fixture(fleet_prefix)

#: Seconds each reply spends on the slowed link.
BACK = 0.08


@pytest.fixture
def slow_fleet(server: RedisServer, prefix: str) -> Iterator[Fleet]:
    """A worker's connection whose replies come ``BACK`` after the server sent them."""
    with SlowLink(("127.0.0.1", server.port), back=BACK) as link:
        fleet = Fleet(f"redis://127.0.0.1:{link.port}/0", prefix)
        try:
            yield fleet
        finally:
            fleet.close()


def server_time(server: RedisServer) -> float:
    """The server's clock, read over a fast link."""
    with redis.Redis(port=server.port) as direct:
        seconds, micros = direct.time()
    return seconds + micros / 1e6


def test_the_fleet_clock_is_never_behind_the_server_after_a_slow_reply(
    server: RedisServer, slow_fleet: Fleet
) -> None:
    """A reply's server time is anchored where its call was sent, not where the
    reply came: by then the server's clock has moved on by the way back."""
    for _ in range(3):
        slow_fleet.saw_time(slow_fleet.call("status")[3])  # as each reply's reader does
        read = server_time(server)
        assert slow_fleet.now() >= read - 1e-6, "the worker's clock is behind the server's"
        # ... and ahead by no more than the round trip it cannot see into.
        assert slow_fleet.now() - read < 2 * BACK + 0.5
