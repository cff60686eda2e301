"""A worker's claims leave out the host states it stored itself (it holds them),
and a worker whose controller is stale reloads the newer state: against a real
redis-server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from fleet_probe import claim_one, host_view
from redis_server import REDIS_SERVER, SKIP_REASON, RedisServer, connect, fleet_prefix, serve

from scrapy_aimd.core.controller import ControllerConfig, HostController, Ticket
from scrapy_aimd.fleet import Claim, Fleet, FleetFrontier, Item
from scrapy_aimd.fleet.host_state import decode_state, decode_tickets
from scrapy_aimd.fleet.redis_store import read_claim_reply

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)

server = pytest.fixture(scope="module")(serve)
prefix = pytest.fixture(fleet_prefix)
raw = pytest.fixture(connect)

CFG = ControllerConfig(min_delay=0.0, max_delay=0.3, max_concurrency=4)
Frontiers = Callable[..., FleetFrontier[bytes]]


@pytest.fixture
def frontier(server: RedisServer, prefix: str) -> Iterator[Frontiers]:
    made: list[Fleet] = []

    def make() -> FleetFrontier[bytes]:
        fleet = Fleet(server.url, prefix)
        made.append(fleet)
        return FleetFrontier(
            fleet, encode=bytes, decode=bytes, config=lambda host: CFG, lease_time=30.0
        )

    yield make
    for fleet in made:
        fleet.close()


def claim(worker: FleetFrontier[bytes]) -> Claim[bytes]:
    """The next claim, waiting (at most 5 s) for the host's gap."""
    deadline = time.monotonic() + 5.0
    while True:
        got = claim_one(worker)
        if isinstance(got, Claim):
            return got
        assert time.monotonic() < deadline, got
        time.sleep(max(0.001, min(0.05, got.ready_at - got.now)))


def states_in_claims(worker: FleetFrontier[bytes]) -> list[bytes]:
    """Spy on the worker's claim replies (its own code, Redis untouched): the state
    field of every claim record they carry."""
    seen: list[bytes] = []
    call = worker.fleet.call

    def spying(script: str, *args: Any, what: str = "") -> Any:
        reply = call(script, *args, what=what)
        if script == "claim":
            for fields in read_claim_reply(reply).records:
                if fields[0] == b"1":
                    seen.append(fields[7])
        return reply

    worker.fleet.call = spying  # type: ignore[method-assign]
    return seen


def fresh_load(
    raw: redis.Redis, prefix: str, host: str, starts: list[float]
) -> tuple[HostController, list[Ticket]]:
    """The host's controller as a worker that never saw it would restore it: from
    the stored state, with the given starts replayed (and their tickets)."""
    stored = raw.hmget(f"{prefix}:h:{host}", "st", "tk")
    controller = HostController.from_state(
        CFG, decode_state(stored[0] or b"") or {}, in_flight=True
    )
    assert decode_tickets(stored[1] or b"") == {}  # nothing else in flight
    return controller, [controller.start(at) for at in starts]


def same_memory(controller: HostController) -> dict[str, Any]:
    """The controller's state without its tickets' serial numbers (drawn from one
    counter per process, so a second controller of the same host gets others)."""
    state = dict(controller.state())
    del state["last_serial"]
    state["in_flight"] = sorted(at for _, at in state["in_flight"])
    return state


def test_a_claim_leaves_out_the_state_its_worker_stored(
    frontier: Frontiers, raw: redis.Redis, prefix: str
) -> None:
    worker = frontier()
    worker.push([Item("h", b"%d" % n) for n in range(6)])
    states = states_in_claims(worker)
    first = claim(worker)
    assert states == [b""]  # a new host: no state yet
    worker.finish(first, status=200, latency=0.004, done=True)
    assert raw.hget(f"{prefix}:h:h", "w") == worker.fleet.token.encode()
    held = worker.controller("h")
    for n in range(4):
        got = claim(worker)
        assert states[-1] == b"=", n  # left out: the worker holds it
        assert worker.controller("h") is held  # the same controller, not restored
        worker.finish(got, status=503 if n == 1 else 200, latency=0.004, done=True)
    assert worker.state_reads == 0
    last = claim(worker)
    mine = worker.controller("h")
    assert mine is not None
    expected, _ = fresh_load(raw, prefix, "h", [last.started])
    assert same_memory(mine) == same_memory(expected)
    assert (mine.delay, mine.concurrency) == (expected.delay, expected.concurrency)


def test_a_stale_controller_is_reloaded_as_a_fresh_load_would_be(
    frontier: Frontiers, raw: redis.Redis, prefix: str
) -> None:
    """Another worker stored a newer version: the claim's reply carries it, and the
    worker's controller is the one a worker that never saw the host would load,
    the same gap and limit, then goes on from it."""
    a, b = frontier(), frontier()
    a.push([Item("h", b"%d" % n) for n in range(8)])
    for status in (200, 200, 200):
        a.finish(claim(a), status=status, latency=0.004, done=True)
    stale = a.controller("h")
    assert stale is not None
    b.finish(claim(b), status=429, latency=0.004, done=True)  # a newer version, by b
    assert raw.hget(f"{prefix}:h:h", "w") == b.fleet.token.encode()
    states = states_in_claims(a)
    got = claim(a)
    assert states and states[0] not in (b"", b"=")  # the newer state, in full
    reloaded = a.controller("h")
    assert reloaded is not None and reloaded is not stale
    expected, [ticket] = fresh_load(raw, prefix, "h", [got.started])
    assert same_memory(reloaded) == same_memory(expected)
    assert (reloaded.delay, reloaded.concurrency) == (expected.delay, expected.concurrency)
    assert reloaded.delay > 0  # the 429's backoff, which the stale one did not have
    assert stale.delay == 0
    # Its answer goes on from the newer state, as the fresh load's does.
    at = got.started + 0.004
    reaction = a.finish(got, status=200, latency=0.004, now=at, done=True)
    assert reaction == expected.finish(ticket, at, 200, latency=0.004)
    view = host_view(a, "h")
    assert view is not None
    assert (view.delay, view.concurrency) == (expected.delay, expected.concurrency)
    assert a.counters.conflicts == 0 and a.state_reads == 0


def test_a_state_it_stored_but_no_longer_holds_is_read_again(
    frontier: Frontiers, raw: redis.Redis, prefix: str
) -> None:
    worker = frontier()
    worker.push([Item("h", b"%d" % n) for n in range(3)])
    worker.finish(claim(worker), status=503, latency=0.004, done=True)
    worker._replicas.clear()  # as if it had dropped what it held of the host
    worker._hosts.clear()
    states = states_in_claims(worker)
    got = claim(worker)
    assert states == [b"="] and worker.state_reads == 1
    controller = worker.controller("h")
    assert controller is not None
    expected, _ = fresh_load(raw, prefix, "h", [got.started])
    assert same_memory(controller) == same_memory(expected)
