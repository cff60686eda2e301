"""``HostController.state()`` carries the controller's whole memory: a controller
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
from test_controller import mixed_host_at, start_round
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
    memory = dict(state["memory"])
    memory.pop("last_serial")
    memory["survivors_until"] = memory["survivors_until"] is not None
    memory["in_flight"] = [at for _, at in memory["in_flight"]]
    return {**state, "memory": memory}


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
    back, original = shift_state(moved.state(), -500.0)["memory"], host.state()["memory"]
    times = ("last_start", "previous_start", "pause_start", "pause_until", "latency_since")
    for key in (*times, "round_since"):
        assert back[key] == pytest.approx(original[key]), key
    assert moved.state()["memory"]["round_since"] == pytest.approx(original["round_since"] + 500.0)
    assert back["accepted"] == pytest.approx(original["accepted"])
    assert back["paused_before"] == original["paused_before"]  # a length, not a time


def test_a_state_with_only_its_pause_moved_moves_the_rest_with_it() -> None:
    """A JOBDIR that converts ``paused_until`` alone (to POSIX time and back)
    still gets every other time on the new clock."""
    cfg = ControllerConfig(max_concurrency=8)
    host = HostController(cfg)
    host.finish(host.start(10.0), 10.5, status=429, retry_after=2.0)
    state = through_json(host)
    state["paused_until"] += 1000.0
    moved = HostController.from_state(cfg, state)
    assert moved.state()["memory"]["last_start"] == pytest.approx(1010.0)
    assert moved.ready_at(1011.0) == pytest.approx(host.ready_at(11.0) + 1000.0)


def test_a_state_of_version_2_resumes() -> None:
    """A state saved before ``memory`` existed resumes with fresh bookkeeping."""
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
    }
    host = HostController.from_state(ControllerConfig(), old)
    assert (host.delay, host.concurrency, host.best_latency) == (0.5, 3, 0.3)
    assert host.state()["memory"]["round"] == 0
    assert host.answered_well is True  # it has page latencies


def test_whether_a_host_answered_well_round_trips() -> None:
    cfg = ControllerConfig()
    host = HostController(cfg)
    assert HostController.from_state(cfg, host.state()).answered_well is False
    host.finish(host.start(0.0), 0.1, status=301, latency=0.1)
    assert host.answered_well is True
    assert HostController.from_state(cfg, host.state()).answered_well is True
    older = host.state()
    del older["memory"]["answered_well"]
    assert HostController.from_state(cfg, older).answered_well is False  # no page latency


def test_a_doubled_limit_opening_round_trips() -> None:
    # A fleet's next worker, or a resumed crawl, opens the rest of the ramp at its
    # pace: the host's fastest answer and the round's pace are in the state.
    host, now = mixed_host_at(8)
    cfg = host.cfg
    started = start_round(host, now, 5)
    assert host.ramp_pace > 0.0
    twin = HostController.from_state(cfg, host.state(), in_flight=True)
    assert twin.ramp_pace == host.ramp_pace
    assert twin.ready_at(now) == host.ready_at(now) == started[-1].started + host.ramp_pace
    older = host.state()
    for key in ("round_pace", "round_paced_from", "round_pace_for", "fastest"):
        del older["memory"][key]
    last = started[-1].started
    assert HostController.from_state(cfg, older, in_flight=True).ready_at(last) <= last


@pytest.mark.parametrize(
    "memory",
    [
        "not a mapping",
        {"round": -1},
        {"round": 1.5},
        {"reached_limit": "yes"},
        {"accepted": "soon"},
        {"last_start": math.inf},
        {"overloaded_at": [3]},
        {"rise": [1.0, 2]},
        {"last_decrease": "boredom"},
        {"in_flight": [[0, 1.0]]},
        {"in_flight": [[1]]},
        {"latency_floor": ["a", 1.0]},
        {"cycle": [1.0, 2]},
        {"cycle": [1.0, -1, 0.0]},
        {"burst": [20]},
        {"outage": "soon"},
        {"outage": {"since": 1.0, "gap": -1.0}},
        {"restored_at": "never"},
        {"answered_well": "yes"},
        {"survivor_fetches": "soon"},
        {"survivor_fetches": [[1.0]]},
        {"survivor_fetches": [None]},
        {"survivor_fetches": [[1.0, math.nan]]},
        {"survivors_until": -1},
        {"survivors_until": "12"},
        {"round_pages": "slow"},
        {"round_pages": [-1.0]},
        {"round_own": "slow"},
        {"round_own": [-1.0]},
        {"round_since": "then"},
        {"unloaded": [1.0]},
        {"unloaded": "light"},
        {"round_pace": -0.004},
        {"round_pace": "slow"},
        {"fastest": -0.002},
        {"fastest": [0.002]},
        {"round_paced_from": -1},
        {"round_paced_from": 1.5},
        {"round_pace_for": -0.4},
    ],
)
def test_from_state_rejects_a_damaged_memory(memory: object) -> None:
    state = HostController(ControllerConfig()).state()
    if isinstance(memory, dict):
        state["memory"].update(memory)
    else:
        state["memory"] = memory
    with pytest.raises(ValueError, match="state"):
        HostController.from_state(ControllerConfig(), state, in_flight=True)


def test_every_step_of_a_rate_limited_host_round_trips() -> None:
    """A host refused again soon after a rate limit (the gap doubled, then
    quadrupled): restored at every step, the copy says the same from then on."""
    cfg = ControllerConfig(max_concurrency=4, initial_backoff=0.05)
    host = HostController(cfg)
    now, doubled = 0.0, False
    for n in range(60):
        now = max(now, host.ready_at(now))
        twin = HostController.from_state(cfg, through_json(host), in_flight=True)
        status = 429 if n % 5 == 4 else 200
        got = host.finish(host.start(now), now + 0.01, status=status, latency=0.01)
        assert twin.finish(twin.start(now), now + 0.01, status=status, latency=0.01) == got
        assert comparable(twin.state()) == comparable(host.state())
        doubled = doubled or host.state()["memory"]["doubled"]
        now += 0.01
    assert doubled


def survivors_half_counted(cfg: ControllerConfig, now: float) -> tuple[HostController, Ticket]:
    """A host at a limit of 4 in slow start whose round was spread out (the farm's
    ``narrow`` host, as in test_controller.py): the 503 and two good answers read,
    the one started after another was done at the server still in flight."""
    host = HostController(cfg)
    while host.concurrency < 4:
        tickets = start_round(host, now)
        now += 0.1
        for ticket in tickets:
            host.finish(ticket, now, status=200, latency=0.1)
    a, b, c = host.start(now), host.start(now + 0.02), host.start(now + 0.05)
    d = host.start(now + 0.105)
    host.finish(c, now + 0.115, status=503, latency=0.001, retry_after=1.0)
    host.finish(b, now + 0.121, status=200, latency=0.1)
    host.finish(a, now + 0.122, status=200, latency=0.1)
    return host, d


def test_survivors_fetched_together_round_trip_and_move_with_the_clock() -> None:
    cfg = ControllerConfig()
    host, late = survivors_half_counted(cfg, 10.0)
    fetches = through_json(host)["memory"]["survivor_fetches"]
    assert len(fetches) == 2
    moved = HostController.from_state(cfg, shift_state(through_json(host), 500.0), in_flight=True)
    back = moved.state()["memory"]["survivor_fetches"]
    flat = [t for pair in fetches for t in pair]
    assert [t - 500.0 for pair in back for t in pair] == pytest.approx(flat)
    moved_late = late._replace(started=late.started + 500.0)
    moved.finish(moved_late, late.started + 500.1, status=200, latency=0.1)
    host.finish(late, late.started + 0.1, status=200, latency=0.1)
    assert host.concurrency == moved.concurrency == 2


def test_a_state_from_before_survivor_fetches_counts_the_survivors_as_before() -> None:
    """A state of an earlier release has no fetches: the survivors still counted
    raise the limit to their number, as that release did."""
    cfg = ControllerConfig()
    host, late = survivors_half_counted(cfg, 10.0)
    older = through_json(host)
    del older["memory"]["survivor_fetches"]
    resumed = HostController.from_state(cfg, older, in_flight=True)
    assert resumed.state()["memory"]["survivor_fetches"] == []
    resumed.finish(late, late.started + 0.1, status=200, latency=0.1)
    assert resumed.concurrency == 3
