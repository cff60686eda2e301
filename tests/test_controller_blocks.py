"""Blocks and told quotas on a fake clock: a lone 403 is a forbidden page, a run
of them after pages is a block (paused, probed one at a time, the wait doubling),
and a told quota paces the host so that it lasts until its reset."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scrapy_aimd.core.controller import ControllerConfig, HostController, Reaction
from scrapy_aimd.core.controller.policy import AGAIN_RUN, BLOCK_RUN, BLOCK_WAIT, GROWTH
from scrapy_aimd.core.rate_limit_headers import RESOLUTION, Quota

FAST = 0.05


def make(**overrides: object) -> HostController:
    return HostController(ControllerConfig(**overrides))  # type: ignore[arg-type]


def serve(host: HostController, now: float, pages: int, status: int = 200) -> float:
    """``pages`` requests one after another, each answered ``status`` FAST later."""
    for _ in range(pages):
        now = max(now, host.ready_at(now))
        ticket = host.start(now)
        now += FAST
        host.finish(ticket, now, status=status, latency=FAST)
    return now


def block(host: HostController, now: float) -> float:
    """Pages, then a run of 403s until it is a block; returns the time."""
    now = serve(host, now, 20)
    for _ in range(BLOCK_RUN):
        if host.phase(now) == "blocked":
            break  # a host that blocked before: a shorter run
        now = max(now, host.ready_at(now))
        ticket = host.start(now)
        now += FAST
        host.finish(ticket, now, status=403, latency=FAST)
    return now


def quota(remaining: int, resets_in: float, limit: int | None = 60) -> Quota:
    return Quota(limit, remaining, resets_in, None, "x-ratelimit")


# -- the detector -----------------------------------------------------------------------


def test_a_lone_403_among_pages_never_slows_the_host() -> None:
    host = make()
    now = serve(host, 0.0, 30)
    before = (host.delay, host.concurrency, host.paused_until)
    for _ in range(10):
        now = max(now, host.ready_at(now))
        ticket = host.start(now)
        reaction = host.finish(ticket, now + FAST, status=403, latency=FAST)
        assert reaction.kind == "forbidden" and not reaction.decreased
        assert reaction.refused  # once more on its first try: a block may follow
        now = serve(host, now + FAST, 3)
    assert host.phase(now) in ("startup", "steady")
    assert host.delay <= before[0] and host.concurrency >= before[1]
    assert host.paused_until == before[2]


def test_runs_shorter_than_a_block_are_forbidden_pages() -> None:
    host = make()
    now = serve(host, 0.0, 10)
    for _ in range(5):
        now = serve(host, now, BLOCK_RUN - 1, status=403)
        now = serve(host, now, 1)
    assert host.phase(now) != "blocked" and host.paused_until == float("-inf")


def test_a_host_that_blocked_before_is_believed_after_a_shorter_run() -> None:
    """Each block status of a run may renew a block: once a host has blocked, a run
    of ``AGAIN_RUN`` is its next block, not ``BLOCK_RUN`` (fewer hits that renew it)."""
    host = make()
    now = block(host, 0.0)
    now = serve(host, host.ready_at(now), 30)  # the probe and pages: the block is over
    assert host.phase(now) != "blocked"
    now = serve(host, now, AGAIN_RUN - 1, status=403)
    assert host.phase(now) != "blocked"  # a lone 403 is still a forbidden page
    now = serve(host, now, 1)
    now = serve(host, now, AGAIN_RUN, status=403)
    assert host.phase(now) == "blocked" and AGAIN_RUN < BLOCK_RUN


def test_403_from_a_host_that_never_served_a_page_is_forbidden_and_kept() -> None:
    host = make()
    for i in range(3 * BLOCK_RUN):
        ticket = host.start(host.ready_at(float(i)) if host.ready_at(float(i)) > i else float(i))
        reaction = host.finish(ticket, i + FAST, status=403, latency=FAST)
        assert reaction.kind == "forbidden" and not reaction.refused
    assert host.phase(100.0) != "blocked"


def test_a_run_of_403s_after_pages_is_a_block() -> None:
    host = make()
    now = block(host, 0.0)
    assert host.phase(now) == "blocked"
    assert host.concurrency == 1
    assert host.paused_until == pytest.approx(now + BLOCK_WAIT)  # no request for a wait
    assert host.ready_at(now) > now


def test_an_open_run_of_block_statuses_keeps_its_slots_until_a_page_answers() -> None:
    """A 403 may be a block's first: what is sent in its place would only renew
    the block. Each block status of an open run keeps its slot; a page sent after
    the run began frees them all."""
    host = make(adaptive=False, max_concurrency=8)
    now = serve(host, 0.0, 5)
    early = [host.start(now) for _ in range(8)]
    assert host.ready_at(now) == float("inf")
    now += FAST
    for answered, ticket in enumerate(early[: BLOCK_RUN - 1], 1):
        host.finish(ticket, now, status=403, latency=FAST)
        assert host.concurrency == 8 - answered
        assert host.ready_at(now) == float("inf")  # nothing sent in its place
    host.finish(early[BLOCK_RUN - 1], now, status=200, latency=FAST)  # sent before the run
    assert host.concurrency == 8 - (BLOCK_RUN - 1) and host.ready_at(now) <= now
    later = host.start(now)
    host.finish(later, now + FAST, status=200, latency=FAST)  # sent after: no block
    assert host.concurrency == 8 and host.ready_at(now + FAST) <= now + FAST
    assert host.phase(now + FAST) != "blocked"


def test_the_probe_still_blocked_doubles_the_wait_up_to_max_delay() -> None:
    host = make(max_delay=20.0)
    now = block(host, 0.0)
    waits = [host.paused_until - now]
    for _ in range(8):
        now = host.ready_at(now)
        probe = host.start(now)
        assert host.ready_at(now) > now  # one probe at a time
        now += FAST
        reaction = host.finish(probe, now, status=403, latency=FAST)
        assert reaction.kind == "block" and reaction.refused and reaction.decreased
        waits.append(round(host.paused_until - now, 9))
    assert waits[1] == pytest.approx(GROWTH * waits[0])
    assert waits == sorted(waits) and max(waits) == pytest.approx(20.0)


def test_requests_in_flight_when_blocked_are_refused_without_another_doubling() -> None:
    host = make()
    now = serve(host, 0.0, 20)
    for _ in range(6):
        now = serve(host, now, 1)
    host._s.limit = 8  # several in flight as the block begins
    tickets = [host.start(now) for _ in range(8)]
    now += FAST
    reactions = [host.finish(t, now, status=403, latency=FAST) for t in tickets]
    assert [r.kind for r in reactions[:BLOCK_RUN]].count("block") == 1
    assert all(r.refused for r in reactions)  # every one is queued again
    assert sum(r.decreased for r in reactions) == 1
    assert host.paused_until == pytest.approx(now + BLOCK_WAIT)


def test_after_the_block_the_host_is_paced_below_the_rate_that_brought_it_on() -> None:
    host = make()
    now = serve(host, 0.0, 40)  # 20 requests a second
    run_rate = 40 / now
    now = block(host, now)
    now = host.ready_at(now)
    ticket = host.start(now)
    reaction = host.finish(ticket, now + FAST, status=200, latency=FAST)
    assert reaction.kind == "good"
    assert host.phase(now + FAST) == "steady"
    assert 1.0 / host.delay < run_rate
    now = serve(host, now + FAST, 30)
    assert 1.0 / host.delay < run_rate  # and stays below for a while


def test_a_later_block_starts_from_the_wait_that_ended_the_last() -> None:
    """A block lasts as the host's last did: its first probe comes when the last
    block's did end, not a doubling short of it (each probe may renew a block)."""
    host = make()
    now = block(host, 0.0)
    for _ in range(3):  # BLOCK_WAIT, then twice, four and eight times it
        now = host.ready_at(now)
        host.finish(host.start(now), now + FAST, status=403, latency=FAST)
        now += FAST
    last = host.paused_until - now
    now = serve(host, host.ready_at(now), 60)
    now = block(host, now)
    assert host.paused_until - now == pytest.approx(last, abs=FAST)


def test_block_codes_are_a_setting_and_apart_from_throttle_codes() -> None:
    host = make(block_codes=frozenset({403, 451}))
    now = serve(host, 0.0, 10)
    now = serve(host, now, BLOCK_RUN, status=451)
    assert host.phase(now) == "blocked"
    assert make(block_codes=frozenset()).finish  # none: never a block
    with pytest.raises(ValueError, match="block_codes"):
        ControllerConfig(block_codes=frozenset({429}))
    with pytest.raises(ValueError, match="block_codes"):
        ControllerConfig(block_codes=frozenset({99}))


def test_without_block_codes_a_run_of_403_is_neutral() -> None:
    host = make(block_codes=frozenset())
    now = serve(host, 0.0, 10)
    now = serve(host, now, 3 * BLOCK_RUN, status=403)
    assert host.phase(now) != "blocked" and host.paused_until == float("-inf")


def test_a_block_survives_the_state_record() -> None:
    host = make()
    now = block(host, 0.0)
    again = HostController.from_state(ControllerConfig(), host.state())
    assert again.phase(now) == "blocked" and again.paused_until == host.paused_until


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([200, 404, 403]), min_size=1, max_size=60))
def test_no_block_without_a_run_and_never_a_wait_past_max_delay(statuses: list[int]) -> None:
    """Invariants: a host is blocked only after BLOCK_RUN 403s in a row that
    followed a page (AGAIN_RUN once it has blocked), and no pause is longer than
    max_delay."""
    host = make(max_delay=30.0)
    now, run, served, blocked_before = 0.0, 0, False, False
    for status in statuses:
        now = max(now, host.ready_at(now))
        ticket = host.start(now)
        now += FAST
        was_blocked = host.phase(now) == "blocked"
        host.finish(ticket, now, status=status, latency=FAST)
        served = served or status == 200
        run = run + 1 if status == 403 else 0
        if host.phase(now) == "blocked" and not was_blocked:
            assert served and run >= (AGAIN_RUN if blocked_before else BLOCK_RUN)
            blocked_before = True
        assert host.paused_until - now <= 30.0 + 1e-9


# -- told quotas ------------------------------------------------------------------------


def test_a_told_quota_paces_the_host_until_the_earliest_reset() -> None:
    """A reset told in whole seconds may come up to one sooner: what remains is
    spent by then, so that none of the window's quota goes unused."""
    host = make()
    ticket = host.start(0.0)
    host.finish(ticket, FAST, status=200, latency=FAST, quota=quota(50, 10.0))
    assert host.delay == pytest.approx((10.0 - RESOLUTION) / 50)
    assert host.told_gap == pytest.approx(0.18)
    ticket = host.start(1.0)
    host.finish(ticket, 1.0 + FAST, status=200, latency=FAST, quota=quota(3, 0.9))
    assert host.told_gap == 0.0  # its last second: the reset may come now


def test_no_more_in_flight_than_the_told_quota_remains() -> None:
    """With a told gap of 0 (a reset's last second), what remains could start at once:
    no more than that may be in flight, or a start comes before the reading that
    says the quota is spent."""
    host = make(adaptive=False, max_concurrency=8)
    ticket = host.start(0.0)
    host.finish(ticket, FAST, status=200, latency=FAST, quota=quota(3, 0.9))
    assert host.delay == 0.0 and host.concurrency == 3
    tickets = [host.start(FAST) for _ in range(3)]
    assert host.ready_at(FAST) == float("inf")
    host.finish(tickets[0], 2 * FAST, status=200, latency=FAST, quota=quota(100, 30.0))
    assert host.concurrency == 8


def test_requests_in_flight_count_against_what_remains() -> None:
    host = make(adaptive=False, max_concurrency=4)
    tickets = [host.start(0.0) for _ in range(4)]
    host.finish(tickets[0], FAST, status=200, latency=FAST, quota=quota(13, 10.0))
    assert host.delay == pytest.approx(9.0 / 10)  # 3 still in flight


def test_zero_remaining_pauses_until_the_reset() -> None:
    host = make()
    ticket = host.start(0.0)
    reaction = host.finish(ticket, 1.0, status=200, latency=FAST, quota=quota(0, 7.5))
    assert reaction.paused_until == pytest.approx(8.5)
    assert host.ready_at(1.0) == pytest.approx(8.5)
    ticket = host.start(0.0 + 100)
    reaction = host.finish(ticket, 101.0, status=200, latency=FAST, quota=quota(0, 0.0))
    assert reaction.paused_until == pytest.approx(101.0 + RESOLUTION)


def test_the_stricter_of_told_and_estimated_wins() -> None:
    host = make(min_delay=0.5)
    ticket = host.start(0.0)
    host.finish(ticket, FAST, status=200, latency=FAST, quota=quota(1000, 10.0))
    assert host.delay == pytest.approx(0.5)  # the estimate (the floor here) is stricter
    ticket = host.start(host.ready_at(1.0))
    host.finish(ticket, 1.2, status=200, latency=FAST, quota=quota(5, 10.0))
    assert host.delay == pytest.approx(9.0 / 5)  # the told quota is


def test_a_told_quota_is_never_probed_for() -> None:
    host = make()
    now = 0.0
    for _ in range(300):
        now = max(now, host.ready_at(now))
        ticket = host.start(now)
        now += FAST
        host.finish(ticket, now, status=200, latency=FAST, quota=quota(100, 50.0))
        assert host.delay >= 49.0 / 100 - 1e-9


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 200), st.floats(0, 3600, allow_nan=False, allow_subnormal=False)),
        min_size=1,
        max_size=30,
    )
)
def test_a_told_quota_lasts_until_its_earliest_reset(told: list[tuple[int, float]]) -> None:
    """Invariant: after any told quota, the gap times what remains (less what is in
    flight) is at least the time to the earliest reset (``RESOLUTION`` before the
    told one), or the host is paused to it; no more start than what remains."""
    host = make()
    now = 0.0
    for remaining, resets_in in told:
        now = max(now, host.ready_at(now))
        ticket = host.start(now)
        now += FAST
        host.finish(ticket, now, status=200, latency=FAST, quota=quota(remaining, resets_in, None))
        left = remaining - host.in_flight
        if resets_in > 0 and left > 0:
            assert host.delay * left >= (resets_in - RESOLUTION) * (1 - 1e-9)
            assert host.concurrency <= remaining
        elif remaining <= 0 or left <= 0 < resets_in:
            assert host.paused_until >= now + min(resets_in, RESOLUTION) - 1e-9


def test_pages_sent_before_the_run_do_not_break_it_pages_sent_after_do() -> None:
    """With many in flight, the pages of requests sent before the first blocked one
    come back among the 403s: they say nothing of the block. A page sent after the
    first 403's request proves the host was not blocking."""
    host = make(adaptive=False, max_concurrency=16)
    now = serve(host, 0.0, 5)
    early = [host.start(now) for _ in range(4)]
    now += FAST
    blocked = [host.start(now) for _ in range(BLOCK_RUN)]
    for first, second in zip(blocked, early, strict=True):
        host.finish(first, now + 0.01, status=403, latency=0.01)
        host.finish(second, now + 0.01, status=200, latency=FAST)
    assert host.phase(now + 0.01) == "blocked"

    host = make(adaptive=False, max_concurrency=16)
    now = serve(host, 0.0, 5)
    blocked = [host.start(now) for _ in range(BLOCK_RUN)]
    later = host.start(now + FAST)
    for ticket in blocked[:-1]:
        host.finish(ticket, now + 2 * FAST, status=403, latency=FAST)
    host.finish(later, now + 2 * FAST, status=200, latency=FAST)
    host.finish(blocked[-1], now + 3 * FAST, status=403, latency=FAST)
    assert host.phase(now + 3 * FAST) != "blocked"


def forbidden_again(host: HostController, now: float, again: bool = True) -> tuple[float, Reaction]:
    """One request answered 403 FAST later; ``again``: its page was marked forbidden."""
    now = max(now, host.ready_at(now))
    ticket = host.start(now)
    now += FAST
    return now, host.finish(ticket, now, status=403, latency=FAST, again=again)


def test_a_run_of_block_statuses_opens_with_a_page_never_refused() -> None:
    """A block refuses pages it never refused. Pages that answered a block status
    already, with no block proven, answering it again open no run: a host left with
    its forbidden pages only is never read as blocked by them, in however long a
    row they come, nor do they keep slots. Once a fresh page opened a run, they
    count in it (a paginated site's few pages, refused again, are the block's)."""
    host = make(adaptive=False, max_concurrency=4)
    now = serve(host, 0.0, 10)
    for _ in range(3 * BLOCK_RUN):
        now, reaction = forbidden_again(host, now)
        assert reaction.kind == "forbidden" and reaction.refused and not reaction.decreased
    assert host.phase(now) != "blocked" and host.paused_until == float("-inf")
    assert host.concurrency == 4

    fresh = make(adaptive=False, max_concurrency=4)
    now = serve(fresh, 0.0, 10)
    for again in [False] + [True] * (BLOCK_RUN - 1):
        now, _ = forbidden_again(fresh, now, again)
    assert fresh.phase(now) == "blocked"


def test_at_a_host_that_blocked_before_pages_refused_again_open_a_run() -> None:
    """Pages refused as a block began are marked, then fetched after the others:
    at a small site they are what is left when the next block comes, and each hit
    may renew it. Once a host has blocked, their run is its next block."""
    host = make()
    now = block(host, 0.0)
    now = serve(host, host.paused_until, 30)  # the block ended
    assert host.phase(now) != "blocked"
    for _ in range(AGAIN_RUN):
        now, _ = forbidden_again(host, now)
    assert host.phase(now) == "blocked"


def test_a_probe_answering_its_block_status_again_still_doubles_the_wait() -> None:
    """In a block, a page's 403 tells nothing apart from a block still on: the wait doubles."""
    host = make()
    now = block(host, 0.0)
    now = host.paused_until
    ticket = host.start(now)
    host.finish(ticket, now + FAST, status=403, latency=FAST, again=True)
    assert host.phase(now + FAST) == "blocked"
    assert host.paused_until == pytest.approx(now + FAST + GROWTH * BLOCK_WAIT)
