"""The host simulator of ``benchmarks/hostsim``: each model behaves as its limiter
does, the driver speaks the pinned controller API, the yardstick finds the best
fixed setting."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.hostsim import models as m
from benchmarks.hostsim.bench import score, short_score, today
from benchmarks.hostsim.driver import crawl
from benchmarks.hostsim.reference import FixedCrawler, best_fixed, fastest_fixed
from benchmarks.hostsim.sets import HELD_OUT, TUNING


def statuses(model: m.Model, times: list[float]) -> list[int]:
    return [model.answer(t).status for t in times]


def every(start: float, step: float, count: int) -> list[float]:
    return [start + i * step for i in range(count)]


# -- windows ---------------------------------------------------------------------------


def test_a_fixed_window_refuses_the_61st_request_and_accepts_again_at_its_edge() -> None:
    window = m.FixedWindow(60, 10.0)
    assert statuses(window, every(0.0, 0.01, 60)) == [200] * 60
    refused = window.answer(3.0)
    assert refused.status == 429
    assert refused.retry_after == 7  # to the window's end
    assert window.answer(9.999).status == 429
    assert window.answer(10.0).status == 200


def test_a_fixed_window_without_retry_after_says_nothing_of_when() -> None:
    window = m.FixedWindow(60, 10.0, retry_after=False)
    statuses(window, every(0.0, 0.01, 60))
    assert window.answer(1.0) == m.Answer(429, m.REFUSED_LATENCY, None)


def test_a_told_quota_counts_down_in_its_headers() -> None:
    window = m.FixedWindow(3, 20.0, told=True)
    seen = [window.answer(t).headers for t in (0.5, 1.0, 1.5, 2.0)]
    assert [h["X-RateLimit-Remaining"] for h in seen] == ["2", "1", "0", "0"]
    assert {h["X-RateLimit-Limit"] for h in seen} == {"3"}
    assert seen[0]["X-RateLimit-Reset"] == "20"  # seconds to the window's end, rounded up
    assert seen[3]["X-RateLimit-Reset"] == "18"


@pytest.mark.parametrize(
    "model",
    [lambda: m.HaproxyRate(50, 10.0), lambda: m.SlidingLog(50, 10.0)],
    ids=["haproxy", "log"],
)
def test_a_sliding_window_counts_denied_requests(model: Any) -> None:
    # 50 at once, then a client that knocks every 0.1 s stays denied; one that
    # waits two windows is served again.
    knocking = model()
    assert statuses(knocking, every(0.0, 0.001, 50)) == [200] * 50
    assert set(statuses(knocking, every(1.0, 0.1, 300))) == {429}
    waiting = model()
    statuses(waiting, every(0.0, 0.001, 51))
    assert waiting.answer(20.5).status == 200


def test_a_sliding_log_that_ignores_denied_requests_lets_a_knocking_client_back() -> None:
    log = m.SlidingLog(50, 10.0, count_denied=False)
    statuses(log, every(0.0, 0.001, 50))
    assert set(statuses(log, every(1.0, 0.1, 80))) == {429}  # up to 8.9 s
    assert log.answer(10.1).status == 200


def test_haproxys_rate_weighs_the_previous_period_by_what_is_left_of_it() -> None:
    rate = m.HaproxyRate(50, 10.0)
    statuses(rate, every(0.0, 0.01, 40))
    assert rate.rate(12.5) == 30  # 40 x 7.5 / 10
    assert rate.rate(25.0) == 0  # two periods on: nothing left


# -- buckets ---------------------------------------------------------------------------


def test_gcra_allows_its_burst_then_its_rate() -> None:
    gcra = m.Gcra(10.0, 20, retry_after=True)
    assert statuses(gcra, [0.0] * 20) == [200] * 20
    refused = gcra.answer(0.0)
    assert refused.status == 429
    assert refused.retry_after == pytest.approx(0.1)
    assert gcra.answer(0.1).status == 200
    assert gcra.answer(0.15).status == 429
    assert m.Gcra(10.0, 20).answer(0.0).retry_after is None


def test_nginx_limit_req_serves_its_burst_and_a_rejected_request_leaves_no_trace() -> None:
    limit = m.NginxLimitReq(5.0, 10)
    assert statuses(limit, [0.0] * 11) == [200] * 11  # the first, then a burst of 10
    assert limit.answer(0.0) == m.Answer(503, m.REFUSED_LATENCY)
    assert set(statuses(limit, every(0.01, 0.01, 10))) == {503}
    assert limit.answer(0.2).status == 200  # drained 1 in 0.2 s, whatever was knocking


# -- servers ---------------------------------------------------------------------------


def test_a_queueing_origin_never_refuses_and_its_latency_grows_with_the_queue() -> None:
    queue = m.QueueHost(4, 0.2, spread=0.0)
    answers = [queue.answer(0.0) for _ in range(12)]
    assert {a.status for a in answers} == {200}
    assert [round(a.latency, 6) for a in answers] == [0.2] * 4 + [0.4] * 4 + [0.6] * 4
    # 4 waited 0.2 s and 4 waited 0.4 s: 2.4 request-seconds over 1 s
    assert queue.mean_waiting(1.0) == pytest.approx(2.4)
    assert queue.mean_waiting(0.3) == pytest.approx((4 * 0.2 + 4 * 0.3) / 0.3)


def test_a_changing_capacity_refuses_above_its_workers_of_the_moment() -> None:
    host = m.ChangingCapacity(((0.0, 8), (100.0, 2), (200.0, 6)), 10.0)
    assert statuses(host, [0.0] * 9) == [200] * 8 + [503]
    assert statuses(host, [150.0] * 3) == [200, 200, 503]
    assert statuses(host, [250.0] * 7) == [200] * 6 + [503]


def test_a_cache_serves_most_pages_fast_and_the_origin_refuses_above_two() -> None:
    host = m.CachedOrigin(0.8, 0.005, m.CapacityHost(2, 0.3))
    answers = [host.answer(0.0) for _ in range(1000)]
    fast = sum(a.status == 200 and a.latency < 0.01 for a in answers)
    assert 750 < fast < 850
    assert sum(a.status == 200 and a.latency > 0.2 for a in answers) == 2
    assert sum(a.status == 503 for a in answers) == 1000 - fast - 2


def test_a_missing_link_is_answered_by_the_front_or_counted_by_the_limiter() -> None:
    cheap = m.MissingLinks(3, m.CapacityHost(1, 0.5))
    answers = [cheap.answer(0.0) for _ in range(3)]  # the third takes no worker
    assert [a.status for a in answers] == [200, 503, 404] and answers[2].latency < 0.01
    counted = m.MissingLinks(3, m.TokenBucket(1, 1, 0.01), cheap=False)
    assert statuses(counted, [0.0, 1.0, 2.0, 2.1]) == [200, 200, 404, 429]
    queue = m.MissingLinks(3, m.QueueHost(1, 0.2, spread=0.0))
    assert statuses(queue, [0.0, 0.0]) == [200, 200] and queue.mean_waiting(1.0) > 0


def test_random_timeouts_come_whatever_the_load() -> None:
    host = m.RandomTimeouts(0.02, 10.0, m.HealthyHost(0.1))
    answers = [host.answer(t) for t in every(0.0, 1.0, 5000)]
    timeouts = [a for a in answers if a.status == m.TIMEOUT]
    assert 60 < len(timeouts) < 140
    assert {a.latency for a in timeouts} == {10.0}


def test_a_contended_host_slows_with_its_load_and_never_refuses() -> None:
    host = m.ContendedHost(0.1, 0.5)
    for n in range(1, 9):
        answer = host.answer(0.0)
        assert answer.status == 200
        assert 0.08 <= answer.latency / (1 + 0.5 * (n - 1)) <= 0.12


# -- blocks ----------------------------------------------------------------------------


def test_an_abuse_filter_blocks_for_5_s_renewed_by_every_hit() -> None:
    block = m.EvasiveBlock(20, 2.0, 5.0)
    assert statuses(block, every(0.0, 0.05, 20)) == [200] * 20
    assert block.answer(1.0).status == 403  # the 21st within 2 s
    assert block.answer(5.5).status == 403  # renews the block to 10.5 s
    assert block.answer(10.0).status == 403
    assert block.answer(15.1).status == 200


def test_mod_evasive_counts_until_a_quiet_interval_so_a_slow_crawl_is_blocked_too() -> None:
    evasive = m.ModEvasive(20, 2, 5)
    # one request a second: never 20 in 2 s, but the count restarts only after a
    # quiet 2 s; the first hit is not counted
    assert statuses(evasive, every(0.0, 1.0, 22)) == [200] * 21 + [403]
    assert evasive.answer(25.0).status == 403  # within 5 s of the last 403
    assert evasive.answer(31.0).status == 200
    quiet = m.ModEvasive(20, 2, 5)
    assert set(statuses(quiet, every(0.0, 2.0, 100))) == {200}


# -- the driver and the yardstick ------------------------------------------------------


class Recorder(FixedCrawler):
    """A fixed crawler that records what the driver told it."""

    def __init__(self, concurrency: int, gap: float) -> None:
        super().__init__(concurrency, gap)
        self.finished: list[tuple[int, dict[str, Any]]] = []
        self.failed: list[bool] = []

    def finish(self, ticket: Any, now: float, status: int, *args: Any, **kwargs: Any) -> None:
        kwargs_seen = dict(kwargs)
        kwargs.pop("headers", None)
        super().finish(ticket, now, status, *args, **kwargs)
        self.finished.append((status, kwargs_seen))

    def fail(self, ticket: Any, now: float, timeout: bool = False) -> None:
        super().fail(ticket, now, timeout)
        self.failed.append(timeout)


def test_the_driver_fetches_robots_txt_first_as_no_page_and_passes_headers() -> None:
    crawler = Recorder(4, 0.0)
    run = crawl(crawler, m.FixedWindow(3, 10.0, told=True), 5.0, robots=True)
    first, *pages = crawler.finished
    assert first[1]["page"] is False
    assert all("page" not in kwargs for _, kwargs in pages)
    assert "X-RateLimit-Remaining" in first[1]["headers"]
    assert run.pages == 2  # robots.txt took one of the three
    assert run.refused == run.requests - 3
    assert run.retried == run.refused


def test_the_driver_drops_headers_for_a_controller_that_does_not_take_them() -> None:
    class Plain(Recorder):
        def finish(  # type: ignore[override]
            self,
            ticket: Any,
            now: float,
            status: int,
            latency: float | None = None,
            retry_after: float | None = None,
        ) -> None:
            super().finish(ticket, now, status, latency=latency, retry_after=retry_after)

    crawler = Plain(1, 0.0)
    crawl(crawler, m.FixedWindow(3, 10.0, told=True), 1.0)
    assert crawler.finished
    assert all("headers" not in kwargs for _, kwargs in crawler.finished)


def test_a_timeout_is_a_failure_and_a_refusal() -> None:
    crawler = Recorder(2, 0.0)
    run = crawl(crawler, m.RandomTimeouts(1.0, 3.0, m.HealthyHost(0.1)), 10.0)
    assert crawler.failed == [True] * 6
    assert run.pages == 0
    assert run.refused == 6


def test_a_finite_queue_ends_when_its_pages_are_done() -> None:
    run = crawl(FixedCrawler(4, 0.0), m.CapacityHost(2, 0.1), math.inf, pages=50)
    assert run.pages == 50
    assert run.ended == pytest.approx(50 / 2 * 0.1, rel=0.2)
    assert run.refused > 0  # 4 at once where 2 are served
    assert 0 < run.mean_in_flight <= 4


def test_the_fixed_crawler_waits_out_a_retry_after() -> None:
    run = crawl(FixedCrawler(1, 0.0), m.FixedWindow(60, 10.0), 25.0)
    assert run.pages == 180
    assert run.refused == 3  # one knock at the end of each spent window


def test_todays_controller_runs_a_short_scenario() -> None:
    model = m.CapacityHost(4, 0.2)
    run = crawl(today(max_concurrency=8), model, 30.0)
    assert run.pages > 0.8 * 4 / 0.2 * 30
    assert run.refused_share < 0.05
    assert not run.stopped
    assert 0 < run.mean_in_flight <= 8


def test_the_best_fixed_setting_of_a_capacity_host_is_its_capacity() -> None:
    best = best_fixed(lambda: m.CapacityHost(3, 0.2), 20.0, 8)
    assert (best.concurrency, best.gap) == (3, 0.0)
    assert best.capped
    assert best.pages == pytest.approx(3 / 0.2 * 20, rel=0.05)


def test_the_fastest_fixed_short_crawl_of_a_bucket_spends_its_burst_then_keeps_its_rate() -> None:
    # 30 pages from a bucket of 2/s with a burst of 10: the burst at once, then 20
    # pages at the rate, about 10 s; nothing faster keeps within 5 % refused.
    best = fastest_fixed(lambda: m.TokenBucket(2, 10, 0.01), 30, 8)
    assert best.pages == 30
    assert best.refused_share <= 0.05
    assert 9.0 <= best.seconds <= 11.0
    assert best.capped


def test_the_fastest_fixed_short_crawl_of_a_capacity_host_fills_its_capacity() -> None:
    best = fastest_fixed(lambda: m.CapacityHost(3, 0.2), 30, 8)
    assert (best.concurrency, best.gap) == (3, 0.0)
    assert best.seconds == pytest.approx(30 / 3 * 0.2, rel=0.25)


def test_a_short_score_is_the_fastest_fixed_time_over_the_controllers() -> None:
    spec = next(s for s in TUNING if s.name.startswith("capacity 4, 0.2 s"))
    result = short_score(spec, 40)
    assert result.pages == 40
    assert result.ratio == pytest.approx(result.best_seconds / result.seconds)
    assert 0 < result.ratio <= 1.2  # a fixed crawler told the limit is hard to beat


def test_a_score_is_pages_over_the_best_fixed_pages() -> None:
    spec = next(s for s in HELD_OUT if s.name.startswith("queueing origin: 4 workers of 0.2"))
    result = score(spec, 20.0)
    assert result.ratio == result.pages / result.best_pages
    assert result.waiting is not None and result.waiting >= 0
    assert math.isfinite(result.in_flight)


def test_the_sets_have_unique_names_and_the_held_out_set_its_limiters() -> None:
    for hosts in (TUNING, HELD_OUT):
        assert len({s.name for s in hosts}) == len(hosts)
    assert len(HELD_OUT) >= 12
    for spec in HELD_OUT:
        spec.model().answer(0.0)


@settings(max_examples=30, deadline=None)
@given(
    index=st.integers(0, len(TUNING) + len(HELD_OUT) - 1),
    steps=st.lists(st.floats(0.0, 3.0, allow_nan=False), min_size=1, max_size=200),
)
def test_every_model_answers_any_arrivals_sensibly(index: int, steps: list[float]) -> None:
    model = (TUNING + HELD_OUT)[index].model()
    now = 0.0
    for step in steps:
        now += step
        answer = model.answer(now)
        assert answer.status in {m.TIMEOUT, 200, 403, 404, 429, 503}
        assert 0 < answer.latency < math.inf
        assert answer.retry_after is None or answer.retry_after >= 0
        assert answer.first_byte is None or 0 <= answer.first_byte <= answer.latency
