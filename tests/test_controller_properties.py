"""Invariants of the controller under random sequences of events, on a fake clock."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from test_controller import start_round

from scrapy_aimd.core.controller import (
    LONE_AFTER,
    ControllerConfig,
    HostController,
    HostNotReady,
    Reaction,
    Ticket,
)

BOOKKEEPING = ("in_flight", "last_start", "previous_start", "last_serial", "level_full")


def learnt(state: dict[str, Any]) -> dict[str, Any]:
    """What the controller learnt of the host, without the bookkeeping of starts."""
    return {key: value for key, value in state.items() if key not in BOOKKEEPING}


configs = st.builds(
    lambda min_delay, spread, max_concurrency, adaptive, codes: ControllerConfig(
        min_delay=min_delay,
        max_delay=min_delay + spread,
        max_concurrency=max_concurrency,
        adaptive=adaptive,
        throttle_codes=codes,
        max_retry_after=120.0,
    ),
    min_delay=st.sampled_from([0.0, 0.0, 0.1, 1.0, 5.0]),
    spread=st.sampled_from([0.0, 1.0, 10.0, 60.0]),
    max_concurrency=st.integers(min_value=1, max_value=8),
    adaptive=st.booleans(),
    codes=st.sampled_from([frozenset({429, 503}), frozenset({429}), frozenset()]),
)
statuses = st.sampled_from([200, 200, 200, 204, 301, 304, 404, 500, 429, 503])
latencies = st.one_of(st.none(), st.floats(min_value=0.0, max_value=30.0))
retry_afters = st.one_of(
    st.none(), st.floats(min_value=0.0, max_value=1e6), st.sampled_from([-1.0, math.nan])
)


class ClockRules(RuleBasedStateMachine):
    """Time passes: by any amount, or to when ``self.host`` is ready."""

    now: float
    host: HostController

    @rule(dt=st.floats(min_value=0.0, max_value=120.0))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule()
    def advance_to_ready(self) -> None:
        ready = self.host.ready_at(self.now)
        if math.isfinite(ready):
            self.now = max(self.now, ready)


class ControllerMachine(ClockRules):
    """Drives one controller the way a scheduler may, including its mistakes."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0
        self.live: list[Ticket] = []
        self.released: list[Ticket] = []
        self.started = 0
        self.released_count = 0
        self.robots_delay = 0.0

    @initialize(cfg=configs)
    def make(self, cfg: ControllerConfig) -> None:
        self.cfg = cfg
        self.host = HostController(cfg)

    @rule()
    def start(self) -> None:
        ready = self.host.ready_at(self.now)
        if ready > self.now:
            with pytest.raises(HostNotReady):
                self.host.start(self.now)
            return
        ticket = self.host.start(self.now)
        assert ticket.started >= self.host.paused_until
        self.live.append(ticket)
        self.started += 1
        # Starts never exceed the limit.
        assert self.host.in_flight <= self.host.concurrency

    @precondition(lambda self: self.live)
    @rule(
        which=st.integers(min_value=0),
        status=statuses,
        latency=latencies,
        retry_after=retry_afters,
        dt=st.floats(min_value=0.0, max_value=30.0),
        page=st.sampled_from([True, True, True, False]),
    )
    def finish(
        self,
        which: int,
        status: int,
        latency: float | None,
        retry_after: float | None,
        dt: float,
        page: bool,
    ) -> None:
        self.now += dt
        ticket = self.live.pop(which % len(self.live))
        limit, gap = self.host.concurrency, self.host.delay
        before = learnt(self.host.state())
        reaction = self.host.finish(
            ticket, self.now, status=status, latency=latency, retry_after=retry_after, page=page
        )
        if not page and status not in self.cfg.throttle_codes:
            # Not a page (robots.txt): it says nothing about the host's pages.
            assert learnt(self.host.state()) == before
        self._released(ticket)
        if reaction.paused_until is not None:
            assert reaction.paused_until <= self.now + self.cfg.max_retry_after
            assert self.host.paused_until >= reaction.paused_until
        if reaction.kind in ("good", "neutral"):
            assert reaction.decreased is False
        if status in self.cfg.throttle_codes:
            self._throttled(status, retry_after, reaction, limit, gap)

    def _throttled(
        self, status: int, retry_after: float | None, reaction: Reaction, limit: int, gap: float
    ) -> None:
        """A throttle code is refused and pauses when it asks to; a 429, or one with a
        Retry-After and no limit to halve, is a rate limit; one read as an overload
        halves the limit and leaves the gap."""
        usable = retry_after is not None and math.isfinite(retry_after) and retry_after >= 0
        assert reaction.refused is (status == 429 or usable or self.host.answered_well)
        assert (reaction.paused_until is not None) == usable
        if status == 429:
            assert reaction.kind == "rate_limit"
        elif not usable:
            assert reaction.kind == "overload"
        if reaction.decreased and usable and (limit == 1 or not self.cfg.adaptive):
            assert reaction.kind == "rate_limit"
        if reaction.decreased and reaction.kind == "overload" and limit > 1 and self.cfg.adaptive:
            assert self.host.concurrency == (limit + 1) // 2
            assert self.host.delay == gap

    @precondition(lambda self: self.live)
    @rule(which=st.integers(min_value=0), timeout=st.booleans())
    def fail(self, which: int, timeout: bool) -> None:
        ticket = self.live.pop(which % len(self.live))
        reaction = self.host.fail(ticket, self.now, timeout=timeout)
        self._released(ticket)
        assert reaction.refused is (timeout and self.host.answered_well)

    @precondition(lambda self: self.live)
    @rule(which=st.integers(min_value=0))
    def cancel(self, which: int) -> None:
        ticket = self.live.pop(which % len(self.live))
        before = learnt(self.host.state())
        self.host.cancel(ticket)
        self._released(ticket)
        assert learnt(self.host.state()) == before  # no feedback at all

    @precondition(lambda self: self.released)
    @rule(which=st.integers(min_value=0), how=st.sampled_from(["finish", "fail", "cancel"]))
    def release_again(self, which: int, how: str) -> None:
        ticket = self.released[which % len(self.released)]
        before = self.host.state()
        in_flight = self.host.in_flight
        if how == "finish":
            reaction = self.host.finish(ticket, self.now, status=429, retry_after=60.0)
            assert reaction.kind == "neutral"
        elif how == "fail":
            assert self.host.fail(ticket, self.now, timeout=True).kind == "neutral"
        else:
            self.host.cancel(ticket)
        assert self.host.in_flight == in_flight
        assert self.host.state() == before

    @rule(seconds=st.one_of(st.none(), st.sampled_from([0.0, 0.5, 2.0, 30.0, 600.0])))
    def crawl_delay(self, seconds: float | None) -> None:
        self.host.set_crawl_delay(seconds)
        self.robots_delay = seconds or 0.0

    @rule()
    def resume(self) -> None:
        """A crawl resumed from disk: requests in flight are lost with the process."""
        state = self.host.state()
        self.host = HostController.from_state(self.cfg, state)
        assert self.host.delay == state["delay"]
        assert self.host.concurrency == state["concurrency"]
        self.released.extend(self.live)
        self.released_count += len(self.live)
        self.live = []

    def _released(self, ticket: Ticket) -> None:
        self.released.append(ticket)
        self.released_count += 1

    @invariant()
    def gap_within_floor_and_max(self) -> None:
        if not hasattr(self, "host"):
            return
        floor = max(self.cfg.min_delay, self.robots_delay)
        assert self.host.floor == floor
        assert floor <= self.host.delay <= max(floor, self.cfg.max_delay)

    @invariant()
    def concurrency_within_one_and_max(self) -> None:
        if not hasattr(self, "host"):
            return
        assert 1 <= self.host.concurrency <= self.cfg.max_concurrency
        if not self.cfg.adaptive:
            assert self.host.concurrency == self.cfg.max_concurrency

    @invariant()
    def in_flight_is_started_minus_released(self) -> None:
        if not hasattr(self, "host"):
            return
        assert self.host.in_flight >= 0
        assert self.host.in_flight == self.started - self.released_count

    @invariant()
    def never_ready_before_a_pause_ends(self) -> None:
        if not hasattr(self, "host"):
            return
        ready = self.host.ready_at(self.now)
        paused = self.host.paused_until
        if paused > self.now:
            assert ready >= paused
        if self.host.in_flight >= self.host.concurrency:
            assert ready == math.inf


TestControllerMachine = ControllerMachine.TestCase
TestControllerMachine.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@settings(max_examples=100, deadline=None)
@given(
    cfg=configs,
    gaps=st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=1, max_size=60),
    status=statuses,
)
def test_a_steady_backlog_never_starts_early(
    cfg: ControllerConfig, gaps: list[float], status: int
) -> None:
    """Whatever the answers, two starts are never closer than the gap in force."""
    host = HostController(cfg)
    now = 0.0
    last_start: float | None = None
    tickets: list[Ticket] = []
    for extra in gaps:
        ready = host.ready_at(now)
        if ready == math.inf:
            ticket = tickets.pop(0)
            now += extra
            host.finish(ticket, now, status=status, latency=extra, retry_after=1.0)
            continue
        now = max(now, ready)
        if last_start is not None:
            assert now - last_start >= host.delay - 1e-9
        tickets.append(host.start(now))
        last_start = now


@settings(max_examples=200, deadline=None)
@given(
    cfg=st.one_of(
        configs,
        configs.map(lambda c: replace(c, adaptive=True, throttle_codes=frozenset({429, 503}))),
    ),
    rounds=st.integers(min_value=0, max_value=12),
    rate_limited_first=st.booleans(),
    status=st.sampled_from([429, 503, 503]),
    retry_after=st.one_of(st.floats(min_value=0.0, max_value=1e6), retry_afters),
)
def test_a_refusal_is_read_by_what_set_the_pace(
    cfg: ControllerConfig,
    rounds: int,
    rate_limited_first: bool,
    status: int,
    retry_after: float | None,
) -> None:
    """A 429 is a rate limit; a 503 with Retry-After is one where the gap set the pace or
    no limit can be halved, else an overload that halves the limit and keeps the gap;
    every answer of the round is read as the first, and each pauses when it asks to."""
    host = HostController(cfg)
    now = 0.0
    if rate_limited_first:
        host.finish(host.start(now), now + 0.05, status=429, latency=0.05)
        now += 0.05
    for _ in range(rounds):
        now = max(now, host.ready_at(now))
        tickets = []
        while host.ready_at(now) <= now:
            tickets.append(host.start(now))
        now += 0.05
        for ticket in tickets:
            host.finish(ticket, now, status=200, latency=0.05)
    now = max(now, host.ready_at(now))
    limit, gap, floor = host.concurrency, host.delay, host.floor
    steady_for = host.state()["since_refusal"]
    tickets = []
    while host.ready_at(now) <= now:
        tickets.append(host.start(now))
    now += 0.05
    reactions = [
        host.finish(t, now, status=status, latency=0.05, retry_after=retry_after) for t in tickets
    ]
    usable = retry_after is not None and math.isfinite(retry_after) and retry_after >= 0
    refused = status in cfg.throttle_codes
    asked_again = refused and (status == 429 or usable or rounds > 0)  # rounds: answered well
    # A 503 without a usable Retry-After after LONE_AFTER answers at a steady limit and
    # gap is a lone one: read as an overload and not acted on; the round's next refusal
    # is one too many, and acts (as the first would have).
    lone = refused and status == 503 and not usable and steady_for >= LONE_AFTER
    acting = None if not refused else (1 if lone else 0)
    if lone and len(reactions) == 1:
        assert (host.concurrency, host.delay) == (limit, gap)
    first = reactions[0]
    for index, reaction in enumerate(reactions):
        assert reaction.kind == first.kind
        assert reaction.decreased is (index == acting)
        assert reaction.refused is asked_again
        assert (reaction.paused_until is not None) == (refused and usable)
    if not refused:
        return
    if status == 429:
        assert first.kind == "rate_limit"
    elif not usable:
        assert first.kind == "overload"
    elif limit == 1 or not cfg.adaptive or gap > floor:
        assert first.kind == "rate_limit"
    if first.kind == "overload" and cfg.adaptive and limit > 1 and (not lone or len(reactions) > 1):
        assert host.concurrency == (limit + 1) // 2
        assert host.delay == gap


@settings(max_examples=200, deadline=None)
@given(
    limit=st.sampled_from([2, 4, 8]),
    fetches=st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=0.3), st.floats(min_value=0.01, max_value=0.3)
        ),
        min_size=8,
        max_size=8,
    ),
    refused=st.integers(min_value=0, max_value=7),
    late=st.floats(min_value=0.0, max_value=0.5),
)
# Answers read too late to place: each fetch counts alone, not all at one point.
@example(limit=8, fetches=[(0.0, 0.25)] * 7 + [(0.25, 0.25)], refused=0, late=0.5)
def test_survivors_raise_the_limit_no_higher_than_were_fetched_together(
    limit: int, fetches: list[tuple[float, float]], refused: int, late: float
) -> None:
    """The overload that ends slow start halves the limit; the answers of its round
    read after it bring the limit back up at most to how many of them overlapped
    (each from its start for its latency), and never above the limit that failed."""
    host = HostController(ControllerConfig(max_concurrency=8))
    now = 0.0
    while host.concurrency < limit:
        tickets = start_round(host, now)
        now += 0.05
        for ticket in tickets:
            host.finish(ticket, now, status=200, latency=0.05)
    tickets = []
    for offset in sorted(offset for offset, _ in fetches[:limit]):
        start = now + offset  # as soon after as the doubled limit opens
        tickets.append(host.start(max(start, host.ready_at(start))))
    latencies = [latency for _, latency in fetches[:limit]]
    refused %= limit
    read = tickets[-1].started + late
    host.finish(tickets[refused], read, status=503, latency=0.001, retry_after=1.0)
    pairs = enumerate(zip(tickets, latencies, strict=True))
    good = [(t, latency) for i, (t, latency) in pairs if i != refused]
    for ticket, latency in sorted(good, key=lambda g: g[0].started + g[1]):
        host.finish(ticket, max(read, ticket.started + latency), status=200, latency=latency)
    spans = [(t.started, t.started + latency) for t, latency in good]
    together = max(sum(1 for b, e in spans if b <= begin < e) for begin, _ in spans)
    assert host.concurrency <= max((limit + 1) // 2, together)
    assert host.concurrency < limit


fast_latencies = st.floats(min_value=0.01, max_value=0.2)


@settings(max_examples=150, deadline=None)
@given(
    cfg=configs,
    before=st.lists(fast_latencies, min_size=0, max_size=40),
    slow=st.floats(min_value=0.0, max_value=60.0),
    after=st.lists(fast_latencies, min_size=0, max_size=10),
)
def test_one_slow_response_among_fast_ones_never_widens_the_gap(
    cfg: ControllerConfig, before: list[float], slow: float, after: list[float]
) -> None:
    """Good answers only: the gap never widens and the limit never falls, whatever one
    slow page among them took."""
    host = HostController(cfg)
    now = 0.0
    for latency in [*before, slow, *after]:
        now = max(now, host.ready_at(now))
        gap, limit = host.delay, host.concurrency
        reaction = host.finish(host.start(now), now + latency, status=200, latency=latency)
        now += latency
        assert reaction.decreased is False
        assert host.delay <= gap
        assert host.concurrency >= limit


pushbacks = st.lists(
    st.tuples(
        st.sampled_from(["429", "503", "timeout", "slow"]),
        st.one_of(st.none(), st.floats(min_value=0.0, max_value=5.0)),
        st.floats(min_value=0.0, max_value=2.0),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(cfg=configs, events=pushbacks, latency=st.floats(min_value=0.05, max_value=0.2))
@example(  # refusals for 374 s: a wait that long is an outage's, not a window's to hold for
    cfg=ControllerConfig(max_concurrency=1, adaptive=False, max_retry_after=120.0),
    events=[
        ("429", None, 0.0),
        ("slow", None, 0.0),
        ("429", None, 2.0),
        ("429", 5.0, 2.0),
        ("429", None, 0.0),
        ("slow", None, 0.0),
        ("429", None, 0.0),
        ("429", None, 0.0),
        ("slow", None, 0.0),
        *[("429", None, 0.0)] * 7,
    ],
    latency=0.125,
)
def test_after_pushbacks_healthy_answers_bring_the_gap_to_its_floor(
    cfg: ControllerConfig, events: list[tuple[str, float | None, float]], latency: float
) -> None:
    """However the host pushed back, healthy answers bring the gap to its floor in a
    bounded time: the gap holds a margin above a spacing the host refused for 50 of
    its waits or 100 answers at most, then narrows a step more each probe."""
    host = HostController(cfg)
    now = 0.0
    for kind, retry_after, dt in events:
        now = max(now, host.ready_at(now))
        if not math.isfinite(now):
            break
        ticket = host.start(now)
        now += dt
        if kind == "timeout":
            host.fail(ticket, now, timeout=True)
        elif kind == "slow":
            host.finish(ticket, now, status=200, latency=30.0)
        else:
            host.finish(ticket, now, status=int(kind), latency=dt, retry_after=retry_after)
    start, answers = now, 0
    bound = 100 * (cfg.max_retry_after + 2 * cfg.max_delay) + 1000
    while host.delay > host.floor:
        now = max(now, host.ready_at(now))
        assert now - start <= bound, host
        host.finish(host.start(now), now + latency, status=200, latency=latency)
        now += latency
        answers += 1
    assert host.delay == host.floor


@settings(max_examples=80, deadline=None)
@given(
    cfg=configs,
    healthy=st.lists(st.floats(min_value=0.005, max_value=0.5), min_size=0, max_size=40),
    refusals=st.lists(
        st.tuples(st.sampled_from(["503", "timeout"]), st.floats(min_value=0.0, max_value=5.0)),
        min_size=1,
        max_size=40,
    ),
)
def test_in_an_outage_the_gap_grows_by_a_quarter_or_to_a_quarter_of_its_age(
    cfg: ControllerConfig, healthy: list[float], refusals: list[tuple[str, float]]
) -> None:
    """A run of refusals with no good answer between: the gap never narrows, and from
    the third refusal at a limit of 1 on (the first two set a gap and then a spacing
    refused), each grows it by at most a quarter, or to at most a quarter of the time
    since the run's first refusal: the first request after an outage comes at most a
    quarter of its length late. The first good answer after it leaves the gap and
    limit in bounds."""
    host = HostController(cfg)
    now = 0.0
    for latency in healthy:
        now = max(now, host.ready_at(now))
        host.finish(host.start(now), now + latency, status=200, latency=latency)
        now += latency
    first: float | None = None
    at_one = 0
    for kind, dt in refusals:
        now = max(now, host.ready_at(now))
        gap, limit = host.delay, host.concurrency
        ticket = host.start(now)
        now += dt
        if kind == "timeout" or 503 not in cfg.throttle_codes:  # else an answer, not a refusal
            reaction = host.fail(ticket, now, timeout=True)
        else:
            reaction = host.finish(ticket, now, status=503, latency=dt)
        first = now if first is None else first
        assert host.delay >= gap
        if reaction.decreased and (limit == 1 or not cfg.adaptive):
            at_one += 1
            if at_one >= 3:
                grown = max(host.floor, 1.25 * gap, 0.25 * (now - first))
                assert host.delay <= grown * (1 + 1e-9), (gap, now - first)
    now = max(now, host.ready_at(now))
    host.finish(host.start(now), now + 0.01, status=200, latency=0.01)
    assert host.floor <= host.delay <= max(cfg.max_delay, host.floor)
    assert 1 <= host.concurrency <= cfg.max_concurrency


@settings(max_examples=200, deadline=None)
@given(
    latency=st.floats(min_value=0.3, max_value=5.0),
    max_concurrency=st.integers(min_value=2, max_value=64),
    jitter=st.lists(st.floats(min_value=0.9, max_value=1.1), min_size=1, max_size=200),
)
def test_pages_that_do_not_slow_with_the_load_never_end_slow_start(
    latency: float, max_concurrency: int, jitter: list[float]
) -> None:
    """Pages within 10 % of one latency, whatever the load: no limit's pages are
    a quarter slower than another's (``policy.JITTER``), so slow start doubles up
    to the limit in log2(max_concurrency) + 1 full rounds."""
    host = HostController(ControllerConfig(max_concurrency=max_concurrency))
    now, answered = 0.0, 0
    for _ in range(math.ceil(math.log2(max_concurrency)) + 1):
        tickets = start_round(host, now)
        times = [latency * jitter[(answered + i) % len(jitter)] for i in range(len(tickets))]
        answered += len(tickets)
        pairs = zip(tickets, times, strict=True)
        answers = sorted((t.started + took, t, took) for t, took in pairs)
        for at, ticket, took in answers:
            host.finish(ticket, at, status=200, latency=took)
        now = answers[-1][0]
    assert host.concurrency == max_concurrency
