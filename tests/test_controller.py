"""The per-host controller: each rule of the policy on a fake clock, and a few
scenario bounds. The estimators alone: tests/test_controller_estimators.py;
invariants under random events: tests/test_controller_properties.py; the
benchmark of held-out hosts: ``python -m benchmarks.hostsim``."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from scrapy_aimd.core.controller import (
    LONE_AFTER,
    ControllerConfig,
    HostController,
    HostNotReady,
    Ticket,
)
from scrapy_aimd.core.controller import answer as answers
from scrapy_aimd.core.controller.policy import DEFAULT_SPACING, GROWTH, MARGIN, OUTAGE_SHARE

FAST = 0.05  # a fetch latency well under the 0.25 s of fast_latency


def make(**overrides: object) -> HostController:
    return HostController(ControllerConfig(**overrides))  # type: ignore[arg-type]


def start_round(host: HostController, now: float, most: int | None = None) -> list[Ticket]:
    """Start as many requests as the host allows now (``most`` at most)."""
    tickets: list[Ticket] = []
    while (most is None or len(tickets) < most) and host.ready_at(now) <= now:
        tickets.append(host.start(now))
    return tickets


def good_round(host: HostController, now: float, latency: float = FAST) -> float:
    """Fill the limit, answer every request well ``latency`` later."""
    now = max(now, host.ready_at(now))
    tickets = start_round(host, now)
    now += latency
    for ticket in tickets:
        host.finish(ticket, now, status=200, latency=latency)
    return now


def grow_to(host: HostController, limit: int, now: float = 0.0, latency: float = FAST) -> float:
    for _ in range(50):
        if host.concurrency >= limit:
            return now
        now = good_round(host, now, latency)
    raise AssertionError(f"never grew to {limit}: {host!r}")


def fetch_robots(host: HostController, latency: float) -> float:
    ticket = host.start(0.0)
    host.finish(ticket, latency, status=200, latency=latency, page=False)
    return latency


def mixed_host_at(limit: int) -> tuple[HostController, float]:
    """A host with robots.txt in 2 ms and pages of 0.4 s, grown to ``limit``."""
    host = make(max_concurrency=16)
    return host, grow_to(host, limit, fetch_robots(host, 0.002), latency=0.4)


# -- configuration ------------------------------------------------------------------


def test_config_defaults() -> None:
    cfg = ControllerConfig()
    assert (cfg.min_delay, cfg.max_delay, cfg.max_concurrency) == (0.0, 60.0, 8)
    assert cfg.adaptive and cfg.throttle_codes == frozenset({429, 503})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("min_delay", -1.0),
        ("max_delay", math.inf),
        ("max_concurrency", 0),
        ("max_concurrency", 2.5),
        ("latency_factor", 0.5),
        ("fast_latency", math.nan),
        ("adaptive", 1),
        ("throttle_codes", {42}),
    ],
)
def test_config_rejects_invalid_values(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        ControllerConfig(**{field: value})  # type: ignore[arg-type]


def test_config_rejects_min_above_max() -> None:
    with pytest.raises(ValueError, match="min_delay"):
        ControllerConfig(min_delay=2.0, max_delay=1.0)


# -- reading an answer ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "retry_after", "kind"),
    [
        (200, None, "good"),
        (301, None, "good"),
        (404, None, "neutral"),
        (500, None, "neutral"),
        (429, None, "rate_limit"),
        (503, None, "overload"),
        (503, 5.0, "rate_limit"),
        (404, 5.0, "neutral"),
        (403, None, "block"),
    ],
)
def test_one_reading_of_an_answer(status: int, retry_after: float | None, kind: str) -> None:
    cfg = ControllerConfig(max_retry_after=60.0)
    read = answers.read(status, retry_after, page=True, cfg=cfg)
    assert read.kind == kind
    assert read.refusal == answers.is_refusal(status, False, {429, 503})


def test_a_retry_after_is_capped_and_an_unusable_one_is_none() -> None:
    cfg = ControllerConfig(throttle_codes=frozenset({429}), max_retry_after=60.0)
    read = answers.read(429, 1e9, page=True, cfg=cfg)
    assert read.pause == 60.0
    for bad in (-1.0, math.nan, math.inf):
        read = answers.read(429, bad, page=True, cfg=cfg)
        assert read.pause is None


def test_only_a_timeout_is_a_failure_that_speaks_of_load() -> None:
    assert answers.read_failure(timeout=True).kind == "overload"
    assert answers.read_failure(timeout=False).kind == "neutral"


# -- the gate ----------------------------------------------------------------------------


def test_a_fresh_host_is_ready_at_once_with_one_place() -> None:
    host = make()
    assert host.ready_at(5.0) == 5.0
    host.start(5.0)
    assert host.ready_at(5.0) == math.inf
    with pytest.raises(HostNotReady):
        host.start(5.0)


def test_the_gap_spaces_starts_and_counts_from_the_send() -> None:
    host = make(min_delay=1.0, adaptive=False, max_concurrency=4)
    ticket = host.start(0.0)
    assert host.ready_at(0.0) == 1.0
    host.sent(ticket, 0.3)
    assert host.ready_at(0.3) == 1.3


def test_a_cancelled_start_does_not_spend_the_gap() -> None:
    host = make(min_delay=1.0, adaptive=False, max_concurrency=4)
    host.finish(host.start(0.0), 0.1, status=200)
    ticket = host.start(1.0)
    host.cancel(ticket)
    assert host.ready_at(1.0) == 1.0
    assert host.in_flight == 0


def test_a_second_release_and_a_stray_ticket_are_ignored() -> None:
    host = make()
    ticket = host.start(0.0)
    host.finish(ticket, 0.1, status=200)
    before = host.state()
    assert host.finish(ticket, 0.2, status=429, retry_after=60.0).kind == "neutral"
    assert host.fail(Ticket(10**9, 0.0, 0), 0.2, timeout=True).kind == "neutral"
    assert host.state() == before


# -- startup ---------------------------------------------------------------------------


def test_startup_doubles_the_limit_per_full_round() -> None:
    host = make(max_concurrency=16)
    limits = []
    now = 0.0
    for _ in range(5):
        now = good_round(host, now)
        limits.append(host.concurrency)
    assert limits == [2, 4, 8, 16, 16]
    assert host.phase(now) == "startup"


def test_the_limit_grows_only_if_the_host_used_it() -> None:
    host = make()
    grow_to(host, 2)
    for i in range(10):  # one request at a time, never two
        host.finish(host.start(10.0 + i), 10.0 + i + FAST, status=200, latency=FAST)
    assert host.concurrency == 2


def test_fixed_concurrency_stays_at_max() -> None:
    host = make(adaptive=False, max_concurrency=5)
    assert host.concurrency == 5
    tickets = start_round(host, 0.0)
    for t in tickets:
        host.finish(t, 0.1, status=503)
    assert host.concurrency == 5


# -- a refusal where the limit set the pace ----------------------------------------------


def test_503s_at_a_limit_halve_it_once_per_round_and_leave_the_gap() -> None:
    host = make()
    now = grow_to(host, 8)
    tickets = start_round(host, now)
    reactions = [host.finish(t, now + 0.01, status=503) for t in tickets]
    assert [r.decreased for r in reactions].count(True) == 1
    assert host.concurrency == 4
    assert host.delay == 0.0
    assert host.phase(now) == "steady"


def test_a_limit_the_host_refused_is_tried_again_only_now_and_then() -> None:
    host = make()
    now = grow_to(host, 8)
    tickets = start_round(host, now)
    host.finish(tickets[0], now + 0.01, status=503)
    for t in tickets[1:]:
        host.finish(t, now + 0.01, status=200, latency=0.01)
    now += 0.01
    for _ in range(10):
        now = good_round(host, now)
    assert host.concurrency == 7  # one below the refused 8: the 2 % budget
    for _ in range(2 * LONE_AFTER):
        now = good_round(host, now)
    assert host.concurrency == 8


def test_a_lone_503_after_many_good_answers_changes_nothing() -> None:
    host = make()
    now = grow_to(host, 4)
    for _ in range(LONE_AFTER):
        now = good_round(host, now)
    limit = host.concurrency
    reaction = host.finish(host.start(now), now + 0.01, status=503)
    assert reaction.kind == "overload" and not reaction.decreased
    assert host.concurrency == limit


# -- backing off: a refusal where the gap set the pace -------------------------------------


def refused_run(host: HostController, now: float, accepted: int, spacing: float) -> float:
    """``accepted`` requests taken one at a time, ``spacing`` apart, then a 429."""
    for _ in range(accepted):
        now = max(now, host.ready_at(now))
        host.finish(host.start(now), now + 0.01, status=200, latency=0.01)
        now += spacing
    now = max(now, host.ready_at(now))
    host.finish(host.start(now), now + 0.01, status=429)
    return now + 0.01


def test_a_429_in_startup_backs_off_from_a_second() -> None:
    """Nothing but the answers paced startup: a limit is stated per second or per
    minute, and doubling from a burst's spacing spends a refusal per step."""
    host = make(adaptive=False, max_concurrency=1)
    now = refused_run(host, 0.0, 10, 0.1)
    assert host.phase(now) == "backing_off"
    assert host.delay == pytest.approx(DEFAULT_SPACING)


def test_startup_halves_the_gap_per_answer_served_a_missing_page_too() -> None:
    """A limiter counts every request it serves, a 404 as a page: each answer served
    in startup halves the gap, the one that ends a cycle back into startup too."""
    host = make(adaptive=False, max_concurrency=1)
    now = refused_run(host, 0.0, 0, 0.0)  # the first page refused: nothing measured
    assert host.delay == pytest.approx(DEFAULT_SPACING)
    now = host.ready_at(now)
    host.finish(host.start(now), now + 0.01, status=200, latency=0.01)
    assert host.phase(now + 0.01) == "startup"
    assert host.delay == pytest.approx(DEFAULT_SPACING / 2)
    now = host.ready_at(now + 0.01)
    host.finish(host.start(now), now + 0.01, status=404, latency=0.01)
    assert host.delay == pytest.approx(DEFAULT_SPACING / 4)


def test_a_429_in_steady_backs_off_from_the_pace_the_host_took() -> None:
    host = make(adaptive=False, max_concurrency=1)
    now = refused_run(host, 0.0, 10, 0.1)
    for _ in range(40):  # the cycle ends: steady at a pace
        now = max(now, host.ready_at(now))
        host.finish(host.start(now), now + 0.01, status=200, latency=0.01)
        now += 0.01
    assert host.phase(now) == "steady"
    pace = host.delay
    now = refused_run(host, now, 10, 0.0)
    assert host.phase(now) == "backing_off"
    assert host.delay == pytest.approx(pace, rel=0.2)


def test_429s_in_a_row_double_the_gap() -> None:
    """A host that counts requests may count the refused ones too (HAProxy's
    ``http_req_rate``): each refusal doubles the gap, so that few are sent."""
    host = make(adaptive=False, max_concurrency=1)
    now = refused_run(host, 0.0, 10, 0.1)
    for _ in range(12):
        before = host.delay
        now = host.ready_at(now)
        host.finish(host.start(now), now + 0.01, status=429)
        now += 0.01
        assert host.delay == pytest.approx(min(GROWTH * before, 60.0))


def test_503s_in_a_row_double_the_gap_within_a_quarter_of_their_age() -> None:
    """An overloaded or down host is probed within a quarter of its refusals' age:
    its return is found soon."""
    host = make(adaptive=False, max_concurrency=1)
    now = 0.0
    for _ in range(10):
        now = max(now, host.ready_at(now))
        host.finish(host.start(now), now + 0.01, status=200, latency=0.01)
        now += 0.1
    now = max(now, host.ready_at(now))
    host.finish(host.start(now), now + 0.01, status=503)
    now += 0.01
    first, grew = now, False
    for _ in range(12):
        before = host.delay
        now = host.ready_at(now)
        host.finish(host.start(now), now + 0.01, status=503)
        now += 0.01
        assert host.delay <= max(before, GROWTH * before)
        assert host.delay <= max(before, OUTAGE_SHARE * (now - first)) + 1e-9
        grew = grew or host.delay < GROWTH * before * (1 - 1e-9)
    assert grew  # the quarter bound held the gap below a doubling


def window_cycle(host: HostController, now: float, edge: float) -> float:
    """60 taken 50 ms apart, then refused until ``edge``; the first accepted after."""
    now = refused_run(host, now, 60, 0.05)
    while (now := max(now, host.ready_at(now))) < edge:
        host.finish(host.start(now), now + 0.01, status=429)
        now += 0.01
    host.finish(host.start(now), now + 0.01, status=200, latency=0.01)
    return now


def test_a_cycle_sets_the_gap_from_its_rate() -> None:
    """A fixed window of 60 per 10 s: the cycle's rate bounds the host's from
    below, whatever the spacing at which it refused. The gap then closes on that
    spacing; the window refuses a step, and the gap goes back to one it took."""
    host = make(adaptive=False, max_concurrency=1)
    first = window_cycle(host, 0.0, 10.0)
    assert host.phase(first) == "steady"
    assert host.delay == pytest.approx((1 + MARGIN) * first / 60, rel=0.05)
    cycle_gap = host.delay
    second = window_cycle(host, first, 20.0)
    assert host.phase(second) == "steady"
    assert (1 + MARGIN) * 0.05 < host.delay < cycle_gap


def good_until_the_gap_changes(host: HostController, now: float) -> float:
    """Good answers one at a time until the gap changes; the time after."""
    gap = host.delay
    for _ in range(1000):
        now = max(now, host.ready_at(now))
        host.finish(host.start(now), now + 0.01, status=200, latency=0.01)
        now += 0.01
        if host.delay != gap:
            return now
    raise AssertionError("the gap never changed")


def test_the_gap_closes_on_the_refused_spacing_by_halves_and_a_refused_step_goes_back() -> None:
    """Between the cycle's rate and the spacing refused, each stretch the host
    takes halves the distance (logarithmic time, as a bisection); a step the
    host refuses goes back to the last gap it took."""
    host = make(adaptive=False, max_concurrency=1)
    now = refused_run(host, 0.0, 5, 0.2)  # refused 0.2 s after the last taken
    while (now := max(now, host.ready_at(now))) < 3.0:
        host.finish(host.start(now), now + 0.01, status=429)
        now += 0.01
    host.finish(host.start(now), now + 0.01, status=200, latency=0.01)
    gaps = [host.delay]
    for _ in range(3):
        now = good_until_the_gap_changes(host, now)
        gaps.append(host.delay)
    low = (1 + MARGIN) * 0.2
    assert gaps[0] > gaps[1] > gaps[2] > gaps[3] >= low
    assert gaps[2] - low == pytest.approx((gaps[1] - low) / 2, rel=0.01)
    taken = gaps[2]
    now = max(now, host.ready_at(now))
    host.finish(host.start(now), now + 0.01, status=429)
    assert host.phase(now + 0.01) == "backing_off"
    now = host.ready_at(now + 0.01)
    host.finish(host.start(now), now + 0.01, status=200, latency=0.01)
    assert host.phase(now + 0.01) == "steady"
    assert host.delay == pytest.approx(taken)


def test_a_pause_holds_every_start_until_it_ends() -> None:
    host = make()
    now = grow_to(host, 4)
    tickets = start_round(host, now)
    reaction = host.finish(tickets[0], now + 0.01, status=429, retry_after=30.0)
    assert reaction.paused_until == pytest.approx(now + 30.01)
    for t in tickets[1:]:
        host.finish(t, now + 0.02, status=200)
    assert host.ready_at(now + 1.0) >= reaction.paused_until
    assert host.phase(now + 1.0) == "paused"
    assert reaction.refused


def test_a_host_that_never_answered_well_is_refused_only_by_a_429_or_a_pause() -> None:
    host = make()
    assert not host.finish(host.start(0.0), 0.1, status=503).refused
    host = make()
    assert host.finish(host.start(0.0), 0.1, status=429).refused
    host = make()
    host.finish(host.start(0.0), 0.1, status=200)
    assert host.finish(host.start(host.ready_at(0.1)), 0.2, status=503).refused


# -- steady ------------------------------------------------------------------------------


def test_steady_narrows_the_gap_a_step_at_a_time() -> None:
    host = make(adaptive=False, max_concurrency=1)
    now = refused_run(host, 0.0, 60, 0.05)
    now = refused_run(host, max(now, host.ready_at(now)), 60, 0.05)
    start = max(now, host.ready_at(now))
    host.finish(host.start(start), start + 0.01, status=200, latency=0.01)
    gaps = [host.delay]
    now = start
    for _ in range(600):
        now = max(now + 0.01, host.ready_at(now))
        host.finish(host.start(now), now + 0.01, status=200, latency=0.01)
        gaps.append(host.delay)
    assert gaps == sorted(gaps, reverse=True)
    steps = [b / a for a, b in zip(gaps[1:], gaps[:-1], strict=True) if a and b != a]
    assert all(1 < step <= (1 + MARGIN) ** (i + 1) + 1e-9 for i, step in enumerate(steps))
    assert gaps[-1] == 0.0


# -- the queue: pages slower with the load ------------------------------------------------


def test_a_limit_whose_pages_wait_in_the_host_is_cut_to_its_workers() -> None:
    """Four workers of 0.4 s: at 8 in flight the pages take 0.8 s."""
    host = make(max_concurrency=16)
    now = grow_to(host, 8, latency=0.4)
    now = good_round(host, now, latency=0.8)
    assert host.concurrency == 4


def test_pages_that_are_slower_at_any_load_are_a_new_normal() -> None:
    host = make(max_concurrency=16)
    now = grow_to(host, 8, latency=0.4)
    now = good_round(host, now, latency=0.8)
    assert host.concurrency == 4
    now = good_round(host, now, latency=0.8)  # as slow at half the load
    assert host.concurrency >= 8


def queue_round(host: HostController, now: float, workers: int = 4, work: float = 0.4) -> float:
    """A round on ``workers`` of ``work`` s that queue the rest: pages slow with the load."""
    return good_round(host, now, latency=work * max(1.0, host.concurrency / workers))


def cut_for_a_queue() -> tuple[HostController, float]:
    """Four workers of 0.4 s: 8 in flight cut to 4, and a round at 4 as fast as unloaded."""
    host = make(max_concurrency=16)
    now = queue_round(host, grow_to(host, 8, latency=0.4))
    assert host.concurrency == 4
    return host, queue_round(host, now)


def test_a_cut_that_kept_the_throughput_holds_the_workers_for_a_probe_period() -> None:
    """Half the load, pages twice as fast: a queue's; no round above its workers before
    ``LONE_AFTER`` answers (not one more a round, back into the queue)."""
    host, now = cut_for_a_queue()
    answers_at_4 = 4
    while answers_at_4 < LONE_AFTER - 4:
        now = queue_round(host, now)
        answers_at_4 += 4
        assert host.concurrency == 4
    probed = []
    for _ in range(4):
        now = queue_round(host, now)
        probed.append(host.concurrency)
    assert 5 in probed  # the probe


def test_a_cut_that_cost_throughput_is_no_queues_and_not_held() -> None:
    """Half the load, pages only 0.6 times as slow: the extra requests did work."""
    host = make(max_concurrency=16)
    now = queue_round(host, grow_to(host, 8, latency=0.4))
    now = good_round(host, now, latency=0.48)
    assert host.concurrency == 5


def test_a_refusal_ends_a_queues_hold() -> None:
    host, now = cut_for_a_queue()
    assert host.state()["queue_probe"] > 0
    tickets = start_round(host, now)
    host.finish(tickets[0], now + 0.1, status=503)
    assert host.state()["queue_probe"] == 0


def test_fast_pages_never_read_as_a_queue() -> None:
    host = make(max_concurrency=16)
    now = grow_to(host, 8, latency=0.01)
    good_round(host, now, latency=0.1)
    assert host.concurrency == 16


# -- outage -------------------------------------------------------------------------------


def test_after_an_outage_the_host_goes_back_to_its_limits_from_before() -> None:
    host = make()
    now = grow_to(host, 4, latency=0.1)
    for _ in range(5):
        now = good_round(host, now, latency=0.1)
    limit, gap = host.concurrency, host.delay
    end = now + 20.0
    while (now := max(now, host.ready_at(now))) < end:
        for t in start_round(host, now):
            host.finish(t, now + 0.005, status=503)
        now += 0.005
    assert host.phase(now) == "outage"
    now = max(now, host.ready_at(now))
    assert now - end < OUTAGE_SHARE * 20.0 + 1.0
    host.finish(host.start(now), now + 0.1, status=200, latency=0.1)
    assert (host.concurrency, host.delay) == (limit, gap)


# -- Crawl-delay and state ---------------------------------------------------------------


def test_crawl_delay_is_a_floor_even_above_max_delay() -> None:
    host = make(max_delay=1.0)
    host.set_crawl_delay(5.0)
    assert host.delay == host.floor == 5.0
    host.set_crawl_delay(None)
    assert host.floor == 0.0
    with pytest.raises(ValueError, match="crawl delay"):
        host.set_crawl_delay(-1.0)


def test_a_state_of_a_newer_version_is_refused_and_an_older_one_read() -> None:
    host = make()
    state = host.state()
    with pytest.raises(ValueError, match="version 99"):
        HostController.from_state(ControllerConfig(), {**state, "version": 99})
    older = {"version": 2, "delay": 0.5, "concurrency": 3, "paused_until": None}
    resumed = HostController.from_state(ControllerConfig(), older)
    assert (resumed.delay, resumed.concurrency) == (0.5, 3)


def test_controller_imports_no_scrapy() -> None:
    code = (
        "import sys, scrapy_aimd.core.controller\n"
        "assert not any(m == 'scrapy' or m.startswith('scrapy.') for m in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
