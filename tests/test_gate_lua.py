"""The fleet's claim script gates a host as the controller's gate does.

Random limits and random sequences of starts, releases, sends and waits are
driven through ``scrapy_aimd.core.controller.gate.ready_at`` and through the
``ready_at`` of ``fleet/lua/common.lua`` on a real ``redis-server`` (the host's
hash holds what a claim reads), and the two must agree at every step.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_server import REDIS_SERVER, SKIP_REASON, RedisServer, serve

import scrapy_aimd.fleet
from scrapy_aimd.core.controller.gate import Limits, ready_at

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

server = pytest.fixture(scope="module")(serve)
COMMON = (Path(scrapy_aimd.fleet.__file__).parent / "lua" / "common.lua").read_text()
HOST = "h"
KEY = f"t:h:{HOST}"
#: The host's hash as a claim reads it; returns both the pure gate and the host's.
SCRIPT = (
    COMMON
    + """
local g = gate_ready_at(tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]),
  tonumber(ARGV[5]), tonumber(ARGV[6]))
return {fmt(g), fmt(ready_at(ARGV[7]))}
"""
)

times = st.floats(min_value=0.0, max_value=30.0, allow_nan=False)
limits = st.builds(
    Limits,
    gap=st.sampled_from([0.0, 0.001, 0.25, 1.0, 7.5]) | times,
    limit=st.integers(min_value=1, max_value=8),
    pause=st.just(-math.inf) | st.floats(min_value=0.0, max_value=200.0),
)
event = st.one_of(
    st.tuples(st.just("start")),
    st.tuples(st.just("release")),
    st.tuples(st.just("sent"), times),
    st.tuples(st.just("wait"), times),
    st.tuples(st.just("limits"), limits),
)


@pytest.fixture(scope="module")
def client(server: RedisServer) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(server.url, decode_responses=True)
    yield connection
    connection.close()


def lua_number(text: str) -> float:
    return float(text)


class Host:
    """The gate's inputs, kept in Python and in the host's hash alike."""

    def __init__(self, client: redis.Redis, limits: Limits) -> None:  # type: ignore[type-arg]
        self.client, self.limits = client, limits
        self.in_flight, self.last, self.now = 0, -math.inf, 100.0
        client.delete(KEY)
        self.store()

    def store(self) -> None:
        gap, limit, pause = self.limits
        fields = {"fl": self.in_flight, "lim": limit, "gap": repr(gap), "pause": repr(pause)}
        if self.last > -math.inf:
            fields["last"] = repr(self.last)
        self.client.hset(KEY, mapping=fields)

    def both(self) -> tuple[float, float, float]:
        gap, limit, pause = self.limits
        args = ["t", self.in_flight, limit, repr(gap), repr(pause), repr(self.last), HOST]
        pure, stored = self.client.eval(SCRIPT, 0, *args)
        python = ready_at(self.limits, self.in_flight, self.last, self.now)
        return python, lua_number(pure), lua_number(stored)

    def apply(self, step: tuple[object, ...]) -> None:
        kind = step[0]
        if kind == "start":
            if ready_at(self.limits, self.in_flight, self.last, self.now) <= self.now:
                self.in_flight, self.last = self.in_flight + 1, self.now
        elif kind == "release":
            self.in_flight = max(0, self.in_flight - 1)
        elif kind == "sent":
            sent = self.now + float(step[1])  # type: ignore[arg-type]
            if self.in_flight and sent > self.last:
                self.last = sent
        elif kind == "wait":
            self.now += float(step[1])  # type: ignore[arg-type]
        else:
            self.limits = step[1]  # type: ignore[assignment]
        self.store()


def agree(python: float, lua: float, now: float) -> bool:
    """The same time, or both "now" (the script scores "now" as -inf)."""
    if python <= now:
        return lua <= now
    return lua == python or math.isclose(lua, python, rel_tol=1e-15, abs_tol=1e-12)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(first=limits, steps=st.lists(event, min_size=1, max_size=30))
def test_the_claim_script_gates_as_the_controller_does(
    client: redis.Redis,  # type: ignore[type-arg]
    first: Limits,
    steps: list[tuple[object, ...]],
) -> None:
    host = Host(client, first)
    for step in steps:
        host.apply(step)
        python, pure, stored = host.both()
        assert agree(python, pure, host.now), (step, python, pure)
        assert agree(python, stored, host.now), (step, python, stored)


def test_the_package_has_one_ready_at() -> None:
    """The gate is the only ``ready_at`` definition in the controller's package."""
    package = Path(scrapy_aimd.fleet.__file__).parent.parent / "core" / "controller"
    found = [
        path.name
        for path in package.glob("*.py")
        for line in path.read_text().splitlines()
        if line.lstrip().startswith("def ready_at(")
    ]
    assert sorted(found) == ["__init__.py", "gate.py"]
