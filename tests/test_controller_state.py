"""``HostController.state()`` carries the controller's whole record: a controller
restored from it, at any point of any sequence of events, goes on exactly as the
original (the fleet restores every host this way, between its workers)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
from test_controller_properties import ClockRules, configs, latencies, retry_afters, statuses

from scrapy_aimd.core.controller import (
    ControllerConfig,
    HostController,
    HostNotReady,
    Ticket,
    shift_state,
)

#: An answer: status, latency, Retry-After, seconds since the last event, page or not.
answers = st.tuples(
    statuses,
    latencies,
    retry_afters,
    st.floats(min_value=0.0, max_value=30.0),
    st.sampled_from([True, True, True, False]),
)


def comparable(state: dict[str, Any]) -> dict[str, Any]:
    """A state without ticket serials: the twin's tickets are its own."""
    record = dict(state)
    record.pop("last_serial")
    record["in_flight"] = [at for _, at in record["in_flight"]]
    return record


def through_json(host: HostController) -> dict[str, Any]:
    text = json.dumps(host.state(), allow_nan=False)
    loaded: dict[str, Any] = json.loads(text)
    return loaded


class TwinMachine(ClockRules):
    """One host, twice: the original, and a copy restored from the original's state
    (round-tripped through JSON) whenever the ``round_trip`` rule fires. Every event
    goes to both; their reactions, readiness and states must never differ."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0
        #: Requests in flight: the original's ticket and the twin's for each.
        self.live: list[tuple[Ticket, Ticket]] = []

    @initialize(cfg=configs)
    def make(self, cfg: ControllerConfig) -> None:
        self.cfg = cfg
        self.host = HostController(cfg)
        self.twin = HostController.from_state(cfg, through_json(self.host), in_flight=True)

    @rule()
    def round_trip(self) -> None:
        # The twin's tickets are the original's once restored from its state.
        self.twin = HostController.from_state(self.cfg, through_json(self.host), in_flight=True)
        self.live = [(mine, mine) for mine, _ in self.live]

    @rule()
    def start(self) -> None:
        if self.host.ready_at(self.now) > self.now:
            with pytest.raises(HostNotReady):
                self.twin.start(self.now)
            return
        self.live.append((self.host.start(self.now), self.twin.start(self.now)))

    @precondition(lambda self: self.live)
    @rule(which=st.integers(min_value=0), dt=st.floats(min_value=0.0, max_value=0.5))
    def sent(self, which: int, dt: float) -> None:
        mine, its = self.live[which % len(self.live)]
        self.host.sent(mine, self.now + dt)
        self.twin.sent(its, self.now + dt)

    @precondition(lambda self: self.live)
    @rule(which=st.integers(min_value=0), answer=answers)
    def finish(
        self, which: int, answer: tuple[int, float | None, float | None, float, bool]
    ) -> None:
        status, latency, retry_after, dt, page = answer
        self.now += dt
        mine, its = self.live.pop(which % len(self.live))
        told: dict[str, Any] = {
            "status": status,
            "latency": latency,
            "retry_after": retry_after,
            "page": page,
        }
        assert self.host.finish(mine, self.now, **told) == self.twin.finish(its, self.now, **told)

    @precondition(lambda self: self.live)
    @rule(which=st.integers(min_value=0), timeout=st.booleans())
    def fail(self, which: int, timeout: bool) -> None:
        mine, its = self.live.pop(which % len(self.live))
        assert self.host.fail(mine, self.now, timeout=timeout) == self.twin.fail(
            its, self.now, timeout=timeout
        )

    @precondition(lambda self: self.live)
    @rule(which=st.integers(min_value=0))
    def cancel(self, which: int) -> None:
        mine, its = self.live.pop(which % len(self.live))
        self.host.cancel(mine)
        self.twin.cancel(its)

    @rule(seconds=st.one_of(st.none(), st.sampled_from([0.0, 0.5, 2.0, 30.0])))
    def crawl_delay(self, seconds: float | None) -> None:
        self.host.set_crawl_delay(seconds)
        self.twin.set_crawl_delay(seconds)

    @invariant()
    def the_twin_is_the_original(self) -> None:
        if not hasattr(self, "host"):
            return
        host, twin = self.host, self.twin
        assert (twin.delay, twin.concurrency, twin.paused_until, twin.in_flight) == (
            host.delay,
            host.concurrency,
            host.paused_until,
            host.in_flight,
        )
        assert twin.best_latency == host.best_latency
        for ahead in (0.0, 0.3, 5.0):
            assert twin.ready_at(self.now + ahead) == host.ready_at(self.now + ahead)
        assert comparable(twin.state()) == comparable(host.state())


TestTwinMachine = TwinMachine.TestCase
TestTwinMachine.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_a_resumed_crawl_drops_what_was_in_flight_and_frees_its_places() -> None:
    """By default the requests in flight went with the process (a resumed crawl
    queues them again): their tickets are strangers, their places free."""
    cfg = ControllerConfig(max_concurrency=4)
    host = HostController(cfg)
    ticket = host.start(0.0)
    resumed = HostController.from_state(cfg, through_json(host))
    assert resumed.in_flight == 0
    assert resumed.finish(ticket, 0.1, status=200).kind == "neutral"
    kept = HostController.from_state(cfg, through_json(host), in_flight=True)
    assert kept.in_flight == 1
    assert kept.finish(ticket, 0.1, status=200).kind == "good"
    # A new ticket of this process never takes a restored one's serial.
    assert kept.start(kept.ready_at(0.1)).serial != ticket.serial


def test_a_state_moved_to_another_clock_behaves_the_same_there() -> None:
    """Every time in the state moves with the clock: restored on a clock 500 s
    ahead, the host is ready, paused and judged 500 s later, and nothing else."""
    cfg = ControllerConfig(max_concurrency=8, min_delay=0.2)
    host = HostController(cfg)
    now = 0.0
    for _ in range(6):
        now = max(now, host.ready_at(now))
        host.finish(host.start(now), now + 0.05, status=200, latency=0.05)
        now += 0.05
    host.finish(host.start(max(now, host.ready_at(now))), now + 1, status=429, retry_after=3.0)
    moved = HostController.from_state(cfg, shift_state(through_json(host), 500.0))
    assert moved.paused_until == host.paused_until + 500.0
    assert moved.ready_at(now + 500.0) == host.ready_at(now) + 500.0
    back, original = shift_state(moved.state(), -500.0), host.state()
    for key in ("last_start", "previous_start", "paused_until", "level_since", "probe_at"):
        assert back[key] == pytest.approx(original[key]), key
    assert back["rate"] == pytest.approx(original["rate"])
    assert moved.state()["level_since"] == pytest.approx(original["level_since"] + 500.0)
    assert back["rate"]["waited"] == original["rate"]["waited"]  # a length, not a time


def test_a_state_of_version_2_resumes_by_its_limits() -> None:
    """A state of the older rules resumes with what it learnt of the host."""
    old = {
        "version": 2,
        "delay": 0.5,
        "concurrency": 3,
        "crawl_delay": 0.0,
        "best_latency": 0.2,
        "latencies": [0.2, 0.3],
        "slow_start": False,
        "paused_until": None,
        "pushback": None,
        "rate_gap": None,
        "memory": {"round": 7},
    }
    host = HostController.from_state(ControllerConfig(), old)
    assert (host.delay, host.concurrency, host.best_latency) == (0.5, 3, 0.3)
    assert host.state()["round"] == 0
    assert host.phase(0.0) == "steady"
    assert host.answered_well is True  # it has page latencies


def test_a_state_of_a_newer_version_is_refused_saying_so() -> None:
    state = {**HostController(ControllerConfig()).state(), "version": 5}
    with pytest.raises(ValueError, match="version 5: this release reads versions up to 4"):
        HostController.from_state(ControllerConfig(), state)


def test_whether_a_host_answered_well_round_trips() -> None:
    cfg = ControllerConfig()
    host = HostController(cfg)
    assert HostController.from_state(cfg, host.state()).answered_well is False
    host.finish(host.start(0.0), 0.1, status=301, latency=0.1)
    assert host.answered_well is True
    assert HostController.from_state(cfg, host.state()).answered_well is True


@pytest.mark.parametrize(
    "damage",
    [
        "not a mapping",
        {"version": "4"},
        {"version": 0},
        {"delay": -1.0},
        {"concurrency": 0},
        {"concurrency": 1.5},
        {"phase": "boredom"},
        {"round": -1},
        {"round": 1.5},
        {"level_full": "yes"},
        {"last_start": math.inf},
        {"in_flight": [[0, 1.0]]},
        {"in_flight": [[1]]},
        {"in_flight": "many"},
        {"cut": [1.0]},
        {"latency": "slow"},
        {"latency": {"values": "slow"}},
        {"latency": {"values": [math.nan]}},
        {"rate": {"run_start": "then"}},
        {"rate": {"accepted": 1.5}},
        {"capacity": {"unloaded": [1.0]}},
        {"outage": {"phase": "boredom"}},
        {"outage": {"limit": "one"}},
        {"answered_well": "yes"},
        {"hold": -1.0},
    ],
)
def test_from_state_rejects_a_damaged_state(damage: object) -> None:
    state: Any = HostController(ControllerConfig()).state()
    if isinstance(damage, dict):
        state.update(damage)
    else:
        state = damage
    with pytest.raises(ValueError, match="state"):
        HostController.from_state(ControllerConfig(), state, in_flight=True)


def test_every_step_of_a_rate_limited_host_round_trips() -> None:
    """A host refused now and then: restored at every step, the copy says the same
    from then on."""
    cfg = ControllerConfig(max_concurrency=4)
    host = HostController(cfg)
    now = 0.0
    phases = set()
    for n in range(200):
        now = max(now, host.ready_at(now))
        twin = HostController.from_state(cfg, through_json(host), in_flight=True)
        status = 429 if n % 25 == 24 else 200
        got = host.finish(host.start(now), now + 0.01, status=status, latency=0.01)
        assert twin.finish(twin.start(now), now + 0.01, status=status, latency=0.01) == got
        assert comparable(twin.state()) == comparable(host.state())
        phases.add(host.phase(now))
        now += 0.01
    assert {"startup", "backing_off", "steady"} <= phases
