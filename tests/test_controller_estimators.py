"""Each of the controller's estimators on its own, on plain numbers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrapy_aimd.core.controller.estimators import (
    AcceptedRate,
    Capacity,
    Latency,
    Outage,
    median,
)


def test_the_baseline_is_a_low_percentile_never_one_fast_outlier() -> None:
    latency = Latency()
    assert latency.baseline is None
    latency.add(0.5)
    assert latency.baseline == 0.5
    latency.add(0.001)  # a cached page
    assert latency.baseline == 0.5
    for _ in range(30):
        latency.add(0.2)
    assert latency.baseline == 0.2
    assert len(latency.values) == 20


def test_the_accepted_rate_is_over_the_whole_cycle() -> None:
    """A fixed window of 60 per 10 s: 60 taken in 3 s, then refused until 10 s."""
    rate = AcceptedRate()
    for i in range(60):
        assert rate.accept(i * 0.05) is None
    rate.refuse(3.0)
    rate.refuse(5.0)  # the episode began at the first refusal
    assert rate.accept(2.9) is None  # started before the refusal: part of the run
    assert rate.accept(10.0) == pytest.approx(61 / 10.0)
    assert rate.waited == pytest.approx(7.0)
    assert rate.counted == 61
    assert (rate.run_start, rate.accepted, rate.refused_since) == (10.0, 1, None)


def test_a_cycle_of_nothing_accepted_has_no_rate() -> None:
    rate = AcceptedRate()
    rate.refuse(1.0)
    assert rate.accept(2.0) is None
    assert rate.rate is None


@given(
    rate=st.floats(min_value=0.5, max_value=50.0),
    burst=st.integers(min_value=1, max_value=50),
    pause=st.floats(min_value=0.1, max_value=30.0),
)
def test_a_token_buckets_cycles_never_read_above_its_rate_and_burst(
    rate: float, burst: int, pause: float
) -> None:
    """A bucket drained at twice its rate, then refused for ``pause``: the cycle's
    rate is at most the rate plus the burst spread over the cycle."""
    estimator = AcceptedRate()
    spacing = 1 / (2 * rate)
    run = int((burst + 1) / (1 - 0.5))  # accepted until the bucket is empty
    for i in range(run):
        estimator.accept(i * spacing)
    end = run * spacing
    estimator.refuse(end)
    got = estimator.accept(end + pause)
    assert got is not None
    assert got <= (rate * (end + pause) + burst + 1) / (end + pause) * 1.5


def test_the_pace_is_the_runs_spacing() -> None:
    rate = AcceptedRate()
    assert rate.pace(1.0) is None
    for i in range(5):
        rate.accept(i * 0.2)
    assert rate.pace(1.0) == pytest.approx(0.2)


def test_the_capacity_reads_waiting_requests_by_littles_law() -> None:
    capacity = Capacity()
    for _ in range(4):
        capacity.add(0.2)
    assert capacity.waiting(4) == 0.0
    capacity.new_level()
    for _ in range(8):
        capacity.add(0.4)  # 8 in flight, 4 workers: each page waits as long again
    assert capacity.waiting(8) == pytest.approx(4.0)
    assert capacity.unloaded == 0.2


def test_the_capacity_needs_as_many_pages_as_the_limit() -> None:
    capacity = Capacity()
    capacity.add(0.2)
    assert capacity.waiting(1) is None  # one page is no median
    capacity.add(0.2)
    assert capacity.waiting(4) is None
    assert capacity.waiting(2) == 0.0


def test_the_median_is_a_true_median() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([1.0, 2.0]) == 1.5


def test_an_outage_is_proven_by_a_gap_four_times_the_spacing_before() -> None:
    outage = Outage()
    assert not outage.proven(100.0, 4.0)
    outage.begin(10.0, gap=0.0, limit=4, phase="steady", spacing=0.1)
    outage.begin(11.0, gap=9.0, limit=1, phase="backing_off", spacing=None)  # kept
    assert (outage.since, outage.limit, outage.spacing) == (10.0, 4, 0.1)
    assert not outage.proven(0.3, 4.0)
    assert outage.proven(0.4, 4.0)
    outage.end()
    assert outage.since is None
