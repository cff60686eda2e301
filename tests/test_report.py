"""The crawl report: events to per-host series, and series to one offline HTML page."""

from __future__ import annotations

import heapq
import json
import math
import random
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scrapy_aimd.report import (
    ReportOptions,
    read_crawl,
    read_events,
    read_events_files,
    render_html,
)
from scrapy_aimd.report.__main__ import main
from scrapy_aimd.report.draw import (
    bin_seconds,
    bounded_by,
    coarsen,
    downsample_steps,
    format_clock,
    format_seconds,
    group_marks,
    merge_pauses,
    nice_ticks,
    raise_to_floor,
    reason_group,
    rebin,
    share_at_limit,
    step_lookup,
    time_at_floor,
    time_ticks,
)
from scrapy_aimd.report.html import HOVER_PIXELS, PLOT, duplicates, robots_origins
from scrapy_aimd.report.png import figure
from scrapy_aimd.report.series import Crawl, HostSeries, Pause, Throttle, iter_steps, order_hosts

# -- a synthetic crawl ------------------------------------------------------------------


@dataclass
class SimHost:
    """A host's behaviour for the synthetic crawl: how fast it answers and how it pushes back."""

    name: str
    latency: float = 0.05
    #: Requests per second above which the host answers 429 with a Retry-After.
    rate_limit: float | None = None
    retry_after: float = 5.0
    #: From this time on, answers take ``slow_latency``.
    slow_from: float | None = None
    slow_latency: float = 1.5
    #: Chance of a 503, and of a timeout, per request.
    p503: float = 0.0
    ptimeout: float = 0.0
    crawl_delay: float = 0.0
    #: The narrowest gap the toy controller closes to.
    min_delay: float = 0.05


DEMO_HOSTS = (
    SimHost("fast.example", latency=0.04),
    SimHost("ratelimited.example:8443", latency=0.08, rate_limit=4.0, retry_after=6.0),
    SimHost("slowing.example", latency=0.15, slow_from=60.0),
    SimHost("flaky.example", latency=0.3, p503=0.06, ptimeout=0.03),
    SimHost("polite.example", latency=0.1, crawl_delay=2.0),
)


def synthetic_events(
    hosts: tuple[SimHost, ...] = DEMO_HOSTS, duration: float = 180.0, seed: int = 6
) -> list[dict[str, Any]]:
    """An events list as the scheduler writes it, from a toy AIMD controller per host.

    The controller is simpler than the real one; what matters is that every kind of
    event appears, in the order and with the fields the events file has.
    """
    rng = random.Random(seed)
    events: list[dict[str, Any]] = [
        {"event": "open", "t": 0.0, "wall": 1_717_000_000.0, "spider": "demo"}
    ]
    state = {
        h.name: {
            "gap": h.crawl_delay,
            "limit": 1,
            "in_flight": 0,
            "next": rng.uniform(0, 0.5),
            "paused_until": 0.0,
            "was_paused": False,
            "last_decrease": -10.0,
            "good": 0,
            "recent": [],
            "wake": math.inf,
        }
        for h in hosts
    }
    summary = {
        h.name: {
            "requests": 0,
            "responses": Counter[str](),
            "failures": 0,
            "throttles": 0,
            "pauses": 0,
            "paused_seconds": 0.0,
            "best_latency": None,
        }
        for h in hosts
    }
    by_name = {h.name: h for h in hosts}
    queue: list[tuple[float, int, str, str, float]] = []
    order = 0

    def push(t: float, kind: str, name: str, started: float = 0.0) -> None:
        nonlocal order
        order += 1
        heapq.heappush(queue, (t, order, kind, name, started))

    def arm(now: float, at: float, name: str) -> None:
        """One pending "try" per host: the earliest wins."""
        s = state[name]
        if now <= s["wake"] <= at:
            return
        s["wake"] = at
        push(at, "try", name)

    for h in hosts:
        arm(0.0, float(state[h.name]["next"]), h.name)
        if h.crawl_delay:  # robots.txt's Crawl-delay arrives before the first page
            events.append(
                {
                    "t": round(float(state[h.name]["next"]) / 2, 4),
                    "event": "change",
                    "host": h.name,
                    "delay": h.crawl_delay,
                    "limit": 1,
                    "crawl_delay": h.crawl_delay,
                }
            )

    def emit(t: float, event: str, host: str, **fields: Any) -> None:
        events.append({"t": round(t, 4), "event": event, "host": host, **fields})

    def change(t: float, name: str, before: tuple[float, int]) -> None:
        s = state[name]
        if (s["gap"], s["limit"]) != before:
            emit(t, "change", name, delay=round(s["gap"], 4), limit=s["limit"])

    def throttle(t: float, name: str, reason: str) -> None:
        s, h = state[name], by_name[name]
        decreased = t - s["last_decrease"] > 1.0
        if decreased:
            s["last_decrease"] = t
            s["gap"] = min(60.0, max(s["gap"] * 2, 0.25, h.crawl_delay))
            s["limit"] = max(1, s["limit"] // 2)
        s["good"] = 0
        summary[name]["throttles"] += 1
        emit(
            t,
            "throttle",
            name,
            reason=reason,
            delay=round(s["gap"], 4),
            limit=s["limit"],
            decreased=decreased,
        )

    while queue:
        t, _, kind, name, started = heapq.heappop(queue)
        if t > duration:
            break
        s, h = state[name], by_name[name]
        if kind == "try":
            if s["wake"] == t:
                s["wake"] = math.inf
            ready = max(s["next"], s["paused_until"])
            if s["in_flight"] >= s["limit"] or ready > t + 1e-9:
                if ready > t + 1e-9:
                    arm(t, ready, name)
                continue
            if s["was_paused"]:
                s["was_paused"] = False
                emit(t, "resume", name)
            s["in_flight"] += 1
            s["next"] = t + s["gap"]
            s["recent"] = [r for r in s["recent"] if r > t - 1.0] + [t]
            summary[name]["requests"] += 1
            emit(t, "start", name, in_flight=s["in_flight"])
            latency = h.latency * rng.uniform(0.8, 1.4)
            if h.slow_from is not None and t >= h.slow_from:
                latency = h.slow_latency * rng.uniform(0.8, 1.3)
            outcome = "ok"
            roll = rng.random()
            if h.rate_limit is not None and len(s["recent"]) > h.rate_limit:
                outcome = "429"
            elif roll < h.ptimeout:
                outcome, latency = "timeout", 3.0
            elif roll < h.ptimeout + h.p503:
                outcome = "503"
            push(t + latency, outcome, name, started=t)
            arm(t, max(t + s["gap"], t + 0.001), name)
            continue
        # a response or a failure
        s["in_flight"] -= 1
        before = (s["gap"], s["limit"])
        if kind == "timeout":
            summary[name]["failures"] += 1
            emit(t, "fail", name, error="timeout", timeout=True)
            throttle(t, name, "timeout")
        else:
            status = {"ok": 200, "429": 429, "503": 503}[kind]
            latency = round(t - started, 4)
            summary[name]["responses"][f"{status // 100}xx"] += 1
            emit(t, "response", name, status=status, latency=latency)
            best = summary[name]["best_latency"]
            summary[name]["best_latency"] = latency if best is None else min(best, latency)
            if status == 429:
                throttle(t, name, "429")
                until = t + h.retry_after
                if until > s["paused_until"]:
                    summary[name]["paused_seconds"] += until - max(t, s["paused_until"])
                    s["paused_until"] = until
                    s["was_paused"] = True
                    summary[name]["pauses"] += 1
                    emit(t, "pause", name, seconds=h.retry_after, until=round(until, 3))
            elif status == 503:
                throttle(t, name, "503")
            elif h.slow_from is not None and t >= h.slow_from + 1 and rng.random() < 0.3:
                throttle(t, name, "latency")
            else:
                s["good"] += 1
                if s["good"] >= s["limit"] and s["limit"] < 8:
                    s["limit"] += 1
                    s["good"] = 0
                s["gap"] = max(h.crawl_delay, h.min_delay, round(s["gap"] - 0.05, 4))
        change(t, name, before)
        arm(t, t, name)
    hosts_summary = {
        name: {
            **row,
            "responses": dict(row["responses"]),
            "paused_seconds": round(row["paused_seconds"], 3),
            "delay": state[name]["gap"],
            "limit": state[name]["limit"],
        }
        for name, row in summary.items()
    }
    events.append({"t": duration, "event": "close", "reason": "finished", "hosts": hosts_summary})
    return events


def many_hosts(count: int) -> tuple[SimHost, ...]:
    """``count`` hosts cycling through the demo behaviours, each with its own name."""
    return tuple(
        SimHost(**{**vars(DEMO_HOSTS[i % len(DEMO_HOSTS)]), "name": f"h{i:02d}.example"})
        for i in range(count)
    )


def lines(events: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(e, separators=(",", ":")) + "\n" for e in events]


def write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(lines(events)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def demo_events() -> list[dict[str, Any]]:
    return synthetic_events()


# -- series -----------------------------------------------------------------------------


def test_limit_and_gap_are_step_series_that_record_only_changes() -> None:
    crawl = read_crawl(
        lines(
            [
                {"event": "open", "t": 0, "wall": 1.0, "spider": "s"},
                {"t": 0.1, "event": "start", "host": "a", "in_flight": 1},
                {"t": 0.2, "event": "change", "host": "a", "delay": 0.5, "limit": 1},
                {"t": 0.3, "event": "change", "host": "a", "delay": 0.5, "limit": 2},
                {"t": 0.4, "event": "change", "host": "a", "delay": 0.25, "limit": 2},
                {
                    "t": 0.9,
                    "event": "throttle",
                    "host": "a",
                    "reason": "503",
                    "delay": 0.5,
                    "limit": 1,
                    "decreased": True,
                },
            ]
        )
    )
    host = crawl.hosts["a"]
    assert host.limit == [(0.2, 1), (0.3, 2), (0.9, 1)]
    assert host.gap == [(0.2, 0.5), (0.4, 0.25), (0.9, 0.5)]
    assert host.throttles == [Throttle(0.9, "503", 0.5, 1, True)]
    assert list(iter_steps(host.gap, 2.0)) == [(0.2, 0.4, 0.5), (0.4, 0.9, 0.25), (0.9, 2.0, 0.5)]
    assert crawl.spider == "s"
    assert crawl.wall == 1.0
    assert crawl.end == 0.9


def test_pauses_become_spans_and_count_their_union() -> None:
    crawl = read_crawl(
        lines(
            [
                {"t": 1.0, "event": "pause", "host": "a", "seconds": 5, "until": 6.0},
                {"t": 3.0, "event": "pause", "host": "a", "seconds": 5, "until": 8.0},
                {"t": 8.5, "event": "resume", "host": "a"},
                {"t": 20.0, "event": "pause", "host": "a", "seconds": 30},  # no until
            ]
        )
    )
    host = crawl.hosts["a"]
    assert host.pauses == [Pause(1.0, 6.0, 8.5), Pause(3.0, 8.0, 8.5), Pause(20.0, 50.0)]
    assert host.counted.pauses == 3
    assert host.counted.paused_seconds == pytest.approx(7.0 + 30.0)
    spans = merge_pauses(host.pauses, end=crawl.end)
    assert [(s.start, s.end, s.pauses, s.cut) for s in spans] == [
        (1.0, 8.0, 2, False),
        (20.0, 20.0, 1, True),  # the crawl ended while paused
    ]
    assert spans[0].requested == pytest.approx(10.0)


def test_counts_become_per_second_after_ten_minutes() -> None:
    """Memory grows with the crawl's length, not its events: fine counts are coarsened."""
    events = [
        {"t": 0.05, "event": "start", "host": "a", "in_flight": 3},
        {"t": 0.95, "event": "start", "host": "a", "in_flight": 1},
        {"t": 0.5, "event": "response", "host": "a", "status": 200, "latency": 0.2},
        {"t": 0.7, "event": "response", "host": "a", "status": 200, "latency": 0.4},
        {"t": 599.9, "event": "start", "host": "a", "in_flight": 1},
        {"t": 600.5, "event": "start", "host": "a", "in_flight": 2},
        {"t": 601.2, "event": "response", "host": "a", "status": 200, "latency": 0.1},
    ]
    host = read_crawl(lines(events)).hosts["a"]
    assert host.tick == 1.0
    assert host.started == {0: 2, 599: 1, 600: 1}
    assert host.peak_in_flight == {0: 3, 599: 1, 600: 2}
    assert host.responses == {0: 2, 601: 1}
    assert host.latency_sum == {0: pytest.approx(0.6), 601: 0.1}
    assert host.latency_count == {0: 2, 601: 1}
    assert read_crawl(lines(events[:4])).hosts["a"].tick == pytest.approx(0.1)


def test_rates_and_latency_are_kept_per_tenth_of_a_second() -> None:
    crawl = read_crawl(
        lines(
            [
                {"t": 0.1, "event": "start", "host": "a", "in_flight": 1},
                {"t": 0.2, "event": "start", "host": "a", "in_flight": 2},
                {"t": 0.5, "event": "response", "host": "a", "status": 200, "latency": 0.3},
                {"t": 1.5, "event": "response", "host": "a", "status": 404, "latency": 0.1},
                {"t": 1.6, "event": "fail", "host": "a", "error": "timeout", "timeout": True},
                {"t": 1.7, "event": "response", "host": "a", "status": 200, "latency": None},
            ]
        )
    )
    host = crawl.hosts["a"]
    assert host.tick == pytest.approx(0.1)
    assert host.started == {1: 1, 2: 1}
    assert host.responses == {5: 1, 15: 1, 17: 1}
    assert host.failures == {16: 1}
    assert host.peak_in_flight == {1: 1, 2: 2}
    assert host.latency_sum == {5: 0.3, 15: 0.1}
    assert host.latency_count == {5: 1, 15: 1}
    counted = host.counted
    assert (counted.requests, counted.failures, counted.best_latency) == (2, 1, 0.1)
    assert counted.responses == {"2xx": 2, "4xx": 1}
    assert host.active == (0.1, 1.7)


def test_the_close_line_gives_the_summary() -> None:
    events = [
        {"t": 0.1, "event": "start", "host": "a", "in_flight": 1},
        {
            "t": 2.0,
            "event": "close",
            "reason": "finished",
            "hosts": {
                "a": {
                    "requests": 10,
                    "responses": {"2xx": 9},
                    "failures": 1,
                    "throttles": 2,
                    "pauses": 1,
                    "paused_seconds": 4.5,
                    "delay": 0.3,
                    "limit": 3,
                    "best_latency": None,
                },
                "robots-only.example": {"requests": 1, "responses": {"2xx": 1}},
            },
        },
    ]
    crawl = read_crawl(lines(events))
    assert crawl.closed
    assert crawl.close_reason == "finished"
    assert crawl.summary_source == "close"
    a = crawl.summary["a"]
    assert (a.requests, a.failures, a.throttles, a.pauses, a.paused_seconds) == (10, 1, 2, 1, 4.5)
    assert (a.delay, a.limit, a.best_latency) == (0.3, 3, None)
    assert crawl.summary["robots-only.example"].requests == 1
    assert "robots-only.example" in order_hosts(crawl)


def test_a_malformed_close_field_falls_back_to_the_counted_value() -> None:
    events = [
        {"t": 0.1, "event": "start", "host": "a", "in_flight": 1},
        {"t": 0.2, "event": "response", "host": "a", "status": 200, "latency": 0.2},
        {"t": 2.0, "event": "close", "hosts": {"a": {"requests": "many", "limit": 2.5}}},
    ]
    a = read_crawl(lines(events)).summary["a"]
    assert (a.requests, a.limit, a.best_latency) == (1, None, 0.2)
    assert a.responses == {"2xx": 1}


def test_without_a_close_line_the_summary_is_counted(demo_events: list[dict[str, Any]]) -> None:
    killed = lines(demo_events[: len(demo_events) // 2])
    killed[-1] = killed[-1][:17]  # killed mid-line
    crawl = read_crawl(killed)
    assert not crawl.closed
    assert crawl.summary_source == "events"
    assert crawl.bad_lines == 1
    assert crawl.last_line_partial
    assert crawl.bad_line_numbers == [len(killed)]
    full = read_crawl(lines(demo_events))
    for name, totals in crawl.summary.items():
        assert totals is crawl.hosts[name].counted
        assert 0 < totals.requests <= full.summary[name].requests
    # Counting the whole file gives what the close line says.
    for name, host in full.hosts.items():
        closed = full.summary[name]
        assert host.counted.requests == closed.requests
        assert host.counted.responses == closed.responses
        assert host.counted.throttles == closed.throttles
        assert host.counted.pauses == closed.pauses
        assert host.counted.paused_seconds == pytest.approx(closed.paused_seconds, abs=0.01)


GARBAGE = [
    "not json at all\n",
    "[1, 2, 3]\n",
    '{"event": "start", "host": "a"}\n',  # no time
    '{"t": "soon", "event": "start", "host": "a"}\n',
    '{"t": -1, "event": "start", "host": "a"}\n',
    '{"t": NaN, "event": "start", "host": "a"}\n',
    '{"t": 1, "event": 5}\n',
    '{"t": 1, "event": "start"}\n',  # a host event without a host
    '{"t": 1, "event": "start", "host": ""}\n',
    '{"t": 1, "event": "pause", "host": "a"}\n',  # a pause without its length
    "\x00\xff\ufffd garbage\n",
]


def test_unreadable_lines_are_counted_and_the_rest_is_kept() -> None:
    good = '{"t": 2, "event": "start", "host": "a", "in_flight": true}\n'
    crawl = read_crawl(["\n", *GARBAGE, good, "   \n"])
    assert crawl.bad_lines == len(GARBAGE)
    assert crawl.bad_line_numbers == [2, 3, 4, 5, 12]  # the first ones and the last
    assert not crawl.last_line_partial
    assert crawl.hosts["a"].counted.requests == 1
    assert crawl.hosts["a"].peak_in_flight == {}  # a bool is not a number


def test_unknown_events_and_odd_fields_do_not_break_reading() -> None:
    crawl = read_crawl(
        lines(
            [
                {"t": 1, "event": "sitemap", "host": "a", "status": 200},
                {"t": 2, "event": "sitemap", "host": "a"},
                {"t": 3, "event": "throttle", "host": "a", "reason": None, "delay": "x"},
                {"t": 3.5, "event": "throttle", "host": "a", "reason": 429, "limit": True},
                {"t": 4, "event": "change", "host": "a", "delay": -1, "limit": 1.5},
                {"t": 5, "event": "response", "host": "a", "status": "200"},
                {"t": 6, "event": "resume", "host": "b"},
                {"t": 7, "event": "open", "wall": "yesterday", "spider": 3},
                {"t": 8, "event": "close", "hosts": "not a dict"},
            ]
        )
    )
    assert crawl.bad_lines == 0
    assert crawl.unknown_events == {"sitemap": 2}
    a = crawl.hosts["a"]
    assert [(th.reason, th.delay, th.limit) for th in a.throttles] == [
        ("unknown", None, None),
        ("429", None, None),
    ]
    assert a.limit == []
    assert a.gap == []
    assert a.counted.responses == {"?": 1}
    assert crawl.closed
    assert crawl.summary_source == "events"
    assert crawl.end == 8
    assert crawl.spider is None
    assert crawl.wall is None


def test_an_empty_file_reads_as_an_empty_crawl(tmp_path: Path) -> None:
    crawl = read_events(write(tmp_path / "empty.jsonl", []))
    assert (crawl.lines, crawl.hosts, crawl.closed, crawl.end) == (0, {}, False, 0.0)


def test_hosts_are_ordered_by_trouble_requests_or_name(demo_events: list[dict[str, Any]]) -> None:
    crawl = read_crawl(lines(demo_events))
    trouble = order_hosts(crawl)
    assert trouble[0] == "ratelimited.example:8443"  # the only one paused
    assert trouble[-1] in ("fast.example", "polite.example")  # never throttled
    by_requests = order_hosts(crawl, "requests")
    requests = [crawl.summary[n].requests for n in by_requests]
    assert requests == sorted(requests, reverse=True)
    assert order_hosts(crawl, "name") == sorted(crawl.hosts)


# -- geometry ---------------------------------------------------------------------------


def test_downsampling_keeps_every_spike_and_bounds_the_points() -> None:
    points = [(i / 100, float(i % 7)) for i in range(100_000)]
    points[54_321] = (543.21, 99.0)
    down = downsample_steps(points, end=1000.0, bins=400)
    assert len(down) <= 4 * 400
    assert (543.21, 99.0) in down
    assert down[0] == points[0]
    assert down[-1] == points[-1]
    assert [t for t, _ in down] == sorted(t for t, _ in down)
    short = points[:10]
    assert downsample_steps(short, end=1000.0, bins=400) == short


def test_ticks_bins_and_labels() -> None:
    assert nice_ticks(7) == [0, 2.5, 5, 7.5]
    assert nice_ticks(0) == [0, 0.5, 1.0]
    assert nice_ticks(0.3) == [0, 0.1, 0.2, 0.3]
    assert time_ticks(180) == [0, 30, 60, 90, 120, 150, 180]
    assert time_ticks(7200)[:3] == [0, 900, 1800]
    assert len(time_ticks(10 * 86400)) <= 9
    assert bin_seconds(180, 290) == 1
    assert bin_seconds(3600, 290) == 15
    assert rebin({0: 1, 1: 2, 5: 4}, 2, 6) == [3, 0, 4]
    assert rebin({0: 1, 1: 3}, 2, 1, combine=max) == [3]
    assert [format_clock(t) for t in (0, 45, 125, 3725)] == ["0s", "45s", "2:05", "1:02:05"]
    assert format_clock(12.34, precise=True) == "12.3s"
    assert format_clock(61.25, precise=True) == "1:01.3"
    assert [format_seconds(v) for v in (None, 0, 0.25, 1.5, 42)] == [
        "-",
        "0",
        "250ms",
        "1.5s",
        "42s",
    ]


def test_reasons_fall_into_groups_with_their_own_shape() -> None:
    groups = {
        r: reason_group(r).key
        for r in ("429", "503", "502", "timeout", "latency", "404", "ConnectionRefusedError", "")
    }
    assert groups == {
        "429": "429",
        "503": "5xx",
        "502": "5xx",
        "timeout": "timeout",
        "latency": "latency",
        "404": "other",
        "ConnectionRefusedError": "other",
        "": "other",
    }


def test_nearby_throttles_share_a_mark() -> None:
    throttles = [
        Throttle(t, r, 1.0, 1, t < 1)
        for t, r in ((0.1, "429"), (0.2, "429"), (0.3, "503"), (0.4, "502"), (5.0, "429"))
    ]
    marks = group_marks(throttles, width=1.0)
    assert [(m.group.key, m.count, m.decreased) for m in marks] == [
        ("429", 2, True),
        ("5xx", 2, True),
        ("429", 1, False),
    ]
    assert marks[1].reasons == {"503": 1, "502": 1}
    assert [m.at for m in marks] == [0.5, 0.5, 5.5]


# -- the page ---------------------------------------------------------------------------


def test_the_page_shows_every_host_its_marks_and_the_table(
    demo_events: list[dict[str, Any]],
) -> None:
    crawl = read_crawl(lines(demo_events))
    page = render_html(crawl, ReportOptions(source="events.jsonl"))
    assert page.startswith("<!DOCTYPE html>")
    sections = re.findall(r'<section class="host" id="(host-\d+)" data-host="([^"]+)"', page)
    assert [host for _, host in sections] == order_hosts(crawl)
    for anchor, host in sections:
        assert f'<a href="#{anchor}">{host}</a>' in page  # the table links to the chart
    for reason in ("429", "5xx", "timeout", "latency"):
        assert f'class="mark mark-{reason}"' in page
    assert page.count('<g class="pause">') >= 2  # in the overview and in the host chart
    assert 'class="limit"' in page
    assert 'class="gap"' in page
    table = page[page.index('<section id="summary">') :]
    table = table[: table.index("</section>")]
    for name, totals in crawl.summary.items():
        assert f"{name}</a></th><td>{totals.requests:,}</td>" in table
    assert "from the crawl&#x27;s close line" in table or "from the crawl's close line" in table
    assert "Crawl of demo" in page
    assert "opened 2024-05-29" in page
    assert '<aside class="notes"' not in page  # a clean file has nothing to warn about


def test_the_page_fetches_nothing(demo_events: list[dict[str, Any]]) -> None:
    page = render_html(read_crawl(lines(demo_events)))
    assert "<script" not in page
    assert "<link" not in page
    assert "@import" not in page
    assert "url(" not in page
    # The only URL is the SVG namespace, which is a name and never fetched.
    assert set(re.findall(r"(?:https?:)?//[^\s\"'<>)]+", page)) == {"http://www.w3.org/2000/svg"}
    assert "default-src 'none'" in page


def test_host_names_are_escaped() -> None:
    name = '<img src=x onerror="alert(1)">&.example'
    events = [
        {"t": 0.1, "event": "start", "host": name, "in_flight": 1},
        {"t": 0.2, "event": "throttle", "host": name, "reason": "<b>", "delay": 1, "limit": 1},
    ]
    page = render_html(read_crawl(lines(events)), ReportOptions(title="<i>x</i>"))
    assert "<img" not in page
    assert "<b>" not in page
    assert "<i>x</i>" not in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;.example" in page


def test_a_killed_crawl_with_garbage_still_renders_and_says_so(
    demo_events: list[dict[str, Any]],
) -> None:
    killed = lines(demo_events[:-1])[:3000]
    killed[1500:1500] = [*GARBAGE, '{"t": 9, "event": "robots_txt", "host": "a"}\n']
    killed[-1] = killed[-1][:10]
    page = render_html(read_crawl(killed))
    notes = page[page.index('<aside class="notes"') :]
    notes = notes[: notes.index("</aside>")]
    assert "no <code>close</code> line" in notes
    assert f"{len(GARBAGE) + 1} lines were not readable" in notes
    assert "(lines 1501, 1502, 1503, 1504, ..., 3012)." in notes
    assert "The last line is incomplete." in notes
    assert "<code>robots_txt</code> \N{MULTIPLICATION SIGN}1" in notes
    assert "counted from the events" in page
    assert "<strong>not closed</strong>" in page


def test_a_file_without_one_event_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An items feed given by mistake is not drawn as a crawl of 0 hosts."""
    feed = write(tmp_path / "items.jsonl", [{"url": f"http://a.example/{i}"} for i in range(3)])
    out = tmp_path / "items.html"
    assert main([str(feed), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "error: items.jsonl has no event of scrapy-aimd in its 3 lines" in err
    assert not out.exists()


def test_an_empty_crawl_renders_a_page_that_says_so() -> None:
    page = render_html(read_crawl([]))
    assert "The events file is empty" in page
    assert page.rstrip().endswith("</html>")
    page = render_html(read_crawl(['{"event": "open", "t": 0, "spider": "s"}\n']))
    assert "Crawl of s" in page
    assert '<section class="host"' not in page


def test_a_state_that_never_changed_is_drawn_from_the_close_line() -> None:
    events = [
        {"t": 1.0, "event": "start", "host": "steady", "in_flight": 1},
        {"t": 1.0, "event": "start", "host": "unknown", "in_flight": 1},
        {"t": 9.0, "event": "close", "hosts": {"steady": {"delay": 0.5, "limit": 4}}},
    ]
    page = render_html(read_crawl(lines(events)), ReportOptions(order="name"))
    steady = page[page.index('<section class="host" id="host-0" data-host="steady"') :]
    steady = steady[: steady.index("</section>")]
    assert 'class="limit from-close" d="M' in steady
    assert 'class="gap from-close" d="M' in steady
    assert "no change recorded; the value at the end of the crawl" in steady
    unknown = page[page.index('<section class="host" id="host-1" data-host="unknown"') :]
    assert "no limit recorded" in unknown
    assert "no gap recorded" in unknown


def test_hosts_beyond_the_limit_are_in_the_table_only() -> None:
    events = synthetic_events(many_hosts(12), duration=20.0)
    crawl = read_crawl(lines(events))
    page = render_html(crawl, ReportOptions(max_hosts=5, order="name"))
    assert page.count('<section class="host"') == 5
    assert "Only the first 5 hosts are drawn; 7 more are in the table" in page
    assert all(f">{name}</a></th>" in page for name in crawl.hosts)


def test_a_dozen_hosts_and_many_events_make_a_small_page() -> None:
    events = synthetic_events(many_hosts(12), duration=90.0, seed=1)
    assert len(events) > 10_000
    crawl = read_crawl(lines(events))
    page = render_html(crawl)
    assert page.count('<section class="host"') == 12
    assert len(page) < 1_000_000


def busy_host(name: str, events: int, end: float) -> HostSeries:
    """A host with a change, a throttle and a pause every few milliseconds, built directly."""
    rng = random.Random(events)
    host = HostSeries(name)
    step = end / events
    for i in range(events):
        t = i * step
        host.set_gap(t, rng.random() * 10)
        host.set_limit(t, rng.randint(1, 32))
        reason = rng.choice(("429", "503", "timeout", "latency", "ConnectError"))
        host.throttles.append(Throttle(t, reason, 1.0, 1, rng.random() < 0.5))
        if i % 3 == 0:
            host.add_pause(t, t + rng.random() * step * 2)
        second = int(t)
        host.started[second] += 1
        host.responses[second] += 1
        host.failures[second] += i % 2
        host.peak_in_flight[second] = 8
        host.latency_sum[second] = host.latency_sum.get(second, 0.0) + 0.2
        host.latency_count[second] += 1
    host.first_t, host.last_t = 0.0, end
    return host


@pytest.mark.parametrize("end", [60.0, 36_000.0])
def test_the_page_grows_with_pixels_not_events(end: float) -> None:
    """However many events a host has, its drawing has a bounded size."""
    sizes = []
    for events in (20_000, 80_000):
        crawl = Crawl(end=end, closed=True)
        crawl.hosts["busy.example"] = busy_host("busy.example", events, end)
        crawl.summary = {"busy.example": crawl.hosts["busy.example"].counted}
        sizes.append(len(render_html(crawl)))
    assert sizes[1] < 600_000
    assert sizes[1] < 1.15 * sizes[0]


# -- every limit --------------------------------------------------------------------------


def older(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same crawl as a file from before Crawl-delay, robots and duplicates events."""
    out = []
    for event in events:
        if event["event"] == "robots":
            continue
        out.append({k: v for k, v in event.items() if k not in ("crawl_delay", "duplicates")})
    return out


def with_fine_counts(crawl: Crawl, events: list[dict[str, Any]], tick: float = 0.1) -> Crawl:
    """Per-host counts kept per ``tick`` seconds (``HostSeries.tick``), as series.py is to
    keep them for a short crawl, instead of per second."""
    for host in crawl.hosts.values():
        for counts in (host.started, host.responses, host.failures, host.latency_count):
            counts.clear()
        host.peak_in_flight.clear()
        host.latency_sum.clear()
        host.tick = tick
    for event in events:
        host = crawl.hosts.get(event.get("host", ""))
        if host is None:
            continue
        key = int(event["t"] / tick)
        if event["event"] == "start":
            host.started[key] += 1
            peak = host.peak_in_flight.get(key, 0)
            host.peak_in_flight[key] = max(peak, event["in_flight"])
        elif event["event"] == "response":
            host.responses[key] += 1
            host.latency_sum[key] = host.latency_sum.get(key, 0.0) + event["latency"]
            host.latency_count[key] += 1
        elif event["event"] == "fail":
            host.failures[key] += 1
    return crawl


def section(page: str, host: str) -> str:
    start = page.index(f'data-host="{host}"', page.index('<section class="host"'))
    return page[start : page.index("</section>", start)]


def test_what_bounded_a_host_is_one_of_five_kinds() -> None:
    assert bounded_by({}).kind == "none"
    assert bounded_by({"429": 3}, pauses=3, paused_seconds=4.0).kind == "rate_limit"
    assert bounded_by({}, pauses=1).kind == "rate_limit"  # a Retry-After is a rate limit
    assert bounded_by({"503": 2, "timeout": 1, "latency": 2}).kind == "capacity"
    assert bounded_by({"latency": 5, "503": 1}).kind == "latency"
    assert bounded_by({"429": 2, "503": 2}).kind == "rate_limit"  # a tie: the costlier
    assert bounded_by({"404": 9}).kind == "none"  # not a pushback
    held = bounded_by({"429": 1}, crawl_delay=0.5, share_at_floor=0.8)
    assert held.kind == "crawl_delay"
    assert "Crawl-delay of 500ms" in held.sentence
    assert "80%" in held.sentence
    assert "at most 2 requests a second" in held.sentence
    assert "1 \N{MULTIPLICATION SIGN} 429" in held.sentence
    assert bounded_by({"429": 1}, crawl_delay=0.5, share_at_floor=0.3).kind == "rate_limit"
    assert bounded_by({}, crawl_delay=0.5, share_at_floor=0.1).kind == "crawl_delay"
    limited = bounded_by({"429": 7}, pauses=7, paused_seconds=5.0)
    assert limited.sentence == (
        "Bounded by its rate limit: 7 \N{MULTIPLICATION SIGN} 429, 7 Retry-After pauses (5.0s)."
    )
    assert limited.label == "rate limit"
    ceiling = bounded_by({}, limit=2, share_at_limit=0.9)
    assert "reached its limit of 2 requests in flight in 90% of its 1s intervals" in (
        ceiling.sentence
    )
    # Said as measured: a peak per interval, not the time spent at the limit (a
    # host alive for 0.8 s that reached its limit once per 100 ms is not "at it 100%").
    short = bounded_by({}, limit=8, share_at_limit=1.0, limit_tick=0.1)
    assert "limit of 8 requests in flight in 100% of its 100ms intervals" in short.sentence
    assert "seldom filled" in bounded_by({}, limit=8, share_at_limit=0.1).sentence


def test_time_at_the_floor_and_the_gap_raised_to_it() -> None:
    floor = [(2.0, 0.5)]
    gap = [(0.0, 0.0), (4.0, 1.0), (6.0, 0.5)]
    assert raise_to_floor(gap, []) == gap
    assert raise_to_floor(gap, floor) == [(0.0, 0.0), (2.0, 0.5), (4.0, 1.0), (6.0, 0.5)]
    raised = raise_to_floor(gap, floor)
    assert time_at_floor(raised, floor, 0.0, 10.0) == pytest.approx(0.6)  # 2-4 s and 6-10 s
    assert time_at_floor(raised, [], 0.0, 10.0) == 0.0
    assert time_at_floor(raised, floor, 5.0, 5.0) == 0.0
    assert time_at_floor([(0.0, 0.505)], [(0.0, 0.5)], 0.0, 1.0) == 1.0  # rounding
    at = step_lookup(gap)
    assert [at(t) for t in (-1.0, 0.0, 4.5, 99.0)] == [None, 0.0, 1.0, 0.5]


def test_share_of_time_at_the_limit() -> None:
    limit = [(0.0, 1.0), (2.0, 2.0)]
    peaks = {0: 1, 1: 1, 2: 1, 3: 2}
    assert share_at_limit(peaks, limit, 0.0, 3.5) == pytest.approx(0.75)
    # A limit that grew within the one second the host was busy was reached in it.
    assert share_at_limit({0: 4}, [(0.1, 1.0), (0.5, 4.0)], 0.0, 0.9) == 1.0
    assert share_at_limit({0: 2}, [(0.1, 4.0)], 0.0, 0.9) == 0.0
    assert share_at_limit(peaks, [], 0.0, 3.5) == 0.0
    tenths = {k: 2 for k in range(10)}
    assert share_at_limit(tenths, [(0.0, 2.0)], 0.0, 1.95, tick=0.1) == pytest.approx(0.5)


def test_a_short_crawl_gets_bins_short_enough_to_show_something() -> None:
    assert bin_seconds(17.2, 290) == 1  # counts kept per second: bins of a second
    assert bin_seconds(17.2, 290, tick=0.1) == pytest.approx(0.1)
    assert bin_seconds(40, 290, tick=0.1) == pytest.approx(0.2)
    assert bin_seconds(3600, 290, tick=0.1) == 15
    assert bin_seconds(10, 290, tick=0.2) == pytest.approx(0.2)  # whole ticks only
    assert bin_seconds(10, 290, tick=0.3) == pytest.approx(0.3)  # not 15 s
    assert bin_seconds(100, 290, tick=0.8) == pytest.approx(0.8)
    assert rebin({0: 1, 9: 2, 10: 4}, 1.0, 2.0, tick=0.1) == [3, 4]
    assert rebin({0: 1, 9: 2, 10: 4}, 0.5, 1.1, tick=0.1) == [1, 2, 4]
    assert coarsen({0: 1, 1: 2, 5: 4}, 2) == {0: 3, 2: 4}
    assert coarsen({0: 1, 1: 3}, 2, max) == {0: 3}
    # A host whose counts were kept per tenth: its one busy second is ten bars, not one.
    host = busy_host("short.example", 200, 1.0)
    fine = HostSeries("fine.example")
    for key in range(10):
        fine.responses[key] = 9
        fine.peak_in_flight[key] = 4
    fine.first_t, fine.last_t = 0.0, 1.0
    fine.tick = 0.1
    for series in (host, fine):
        crawl = Crawl(end=17.2, closed=True)
        crawl.hosts[series.host] = series
        crawl.summary = {series.host: series.counted}
        page = render_html(crawl)
        drawn = section(page, series.host)
        band = re.search(r'class="responses" d="([^"]+)"', drawn)
        assert band is not None
        risers = band[1].count("V") // 2
        assert risers >= (10 if series is fine else 1)
        if series is fine:
            assert "<title>0.0s\N{EN DASH}0.2s: 90 responses/s; peak 4 in flight" in drawn


def test_the_crawl_delay_is_drawn_as_the_gaps_floor(demo_events: list[dict[str, Any]]) -> None:
    crawl = read_crawl(lines(demo_events))
    page = render_html(crawl)
    polite = section(page, "polite.example")
    assert '<g class="floor"><title>robots.txt Crawl-delay: the gap never goes below 2s' in polite
    assert ">Crawl-delay 2s</text>" in polite
    assert "Crawl-delay floor 2s" in polite  # in the hover values
    assert "gap floor: robots.txt Crawl-delay" in page[: page.index("</section>")]  # legend
    assert '<g class="floor">' not in section(page, "fast.example")
    without = render_html(read_crawl(lines(older(demo_events))))
    assert '<g class="floor">' not in without
    assert "gap floor" not in without


def test_a_gap_no_event_explains_is_the_floor_from_the_close_line() -> None:
    """Files from before Crawl-delay events: the gap is 0 in the events, 0.55 s at the end."""
    events = [
        {"t": 0.0, "event": "open", "spider": "demo"},
        {"t": 0.1, "event": "start", "host": "polite", "in_flight": 1},
        {"t": 0.12, "event": "change", "host": "polite", "delay": 0.0, "limit": 2},
        *(
            {"t": 0.2 + i * 0.55, "event": "start", "host": "polite", "in_flight": 1}
            for i in range(10)
        ),
        {"t": 6.0, "event": "close", "hosts": {"polite": {"requests": 11, "delay": 0.55}}},
    ]
    page = render_html(read_crawl(lines(events)))
    polite = section(page, "polite")
    assert "gap floor 550ms, from the close line" in polite
    gap = re.search(r'class="gap" d="M[\d.]+ ([\d.]+)(H[\d.]+)+"', polite)
    floor = re.search(r'<g class="floor">.*?<path d="M[\d.]+ ([\d.]+)H', polite)
    assert gap is not None and floor is not None
    assert gap[1] == floor[1]  # drawn at the floor, never at 0, and flat
    assert "Bounded by its robots.txt Crawl-delay of 550ms" in polite
    throttled = [*events[:-1], {"t": 1.0, "event": "throttle", "host": "polite", "reason": "429"}]
    assert "gap floor" not in render_html(read_crawl(lines(throttled)))


def test_every_chart_has_hover_values(demo_events: list[dict[str, Any]]) -> None:
    crawl = read_crawl(lines(demo_events))
    page = render_html(crawl)
    overview = page[page.index('<figure class="overview">') : page.index("</figure>")]
    assert re.search(
        r"<title>0.0s\N{EN DASH}[\d.]+s: [\d.]+ responses/s, all hosts</title>", overview
    )
    lanes = re.findall(r'<g class="lane" data-host="([^"]+)"><title>([^<]+)</title>', overview)
    assert [name for name, _ in lanes] == order_hosts(crawl)
    assert all("requests" in t and ("Bounded by" in t or "Nothing" in t) for _, t in lanes)
    for name in crawl.hosts:
        drawn = section(page, name)
        tips = re.findall(r'<g class="hover"[^>]*>(.*?)</g>', drawn)
        assert len(tips) == 1, name
        titles = re.findall(r"<title>([^<]+)</title>", tips[0])
        assert 20 <= len(titles) <= PLOT / HOVER_PIXELS + 1, name
        assert all("responses/s" in t and "limit " in t and "gap " in t for t in titles), name
    flaky = section(page, "flaky.example")
    assert "failures/s" in flaky
    assert "mean latency" in flaky
    assert "paused (Retry-After)" in section(page, "ratelimited.example:8443")
    # The hover columns come before the throttle marks, so that a mark's own tooltip wins.
    ratelimited = section(page, "ratelimited.example:8443")
    assert ratelimited.index('<g class="hover"') < ratelimited.index('<g class="mark')


def test_the_legend_shows_only_what_the_charts_hold(demo_events: list[dict[str, Any]]) -> None:
    def legend(page: str) -> str:
        return page[page.index('<section class="legend"') : page.index("</section>")]

    full = legend(render_html(read_crawl(lines(demo_events))))
    for what in ("429 Too Many", "503 or another", "timed out", "became slow", "paused"):
        assert what in full
    assert "any other reason" not in full  # no such throttle in the demo
    assert "filled: slowed down; hollow: already slowing" in full
    quiet = [e for e in demo_events if e.get("host") in (None, "fast.example")]
    calm = legend(render_html(read_crawl(lines(quiet))))
    assert "throttle" not in calm
    assert "paused" not in calm
    assert "failures" not in calm
    assert "concurrency limit, gap between starts" in calm
    assert "responses per second" in calm
    assert '<section class="legend"' not in render_html(read_crawl([]))


def test_robots_outcomes_and_duplicates_are_listed_when_known() -> None:
    events = [
        {"t": 0.0, "event": "open", "spider": "demo"},
        {"t": 0.1, "event": "start", "host": "a.example", "in_flight": 1},
        {"t": 0.2, "event": "robots", "host": "a.example", "origin": "https://a.example",
         "status": 200, "outcome": "rules", "crawl_delay": 0.5},
        {"t": 0.3, "event": "robots", "host": "b.example", "origin": "http://b.example",
         "status": 503, "outcome": "unreachable"},
        {"t": 9.3, "event": "robots", "host": "b.example", "origin": "http://b.example",
         "status": None, "outcome": "unreachable"},
        {"t": 0.4, "event": "robots", "host": "c.example", "origin": "http://c.example",
         "status": 404, "outcome": "allow_all"},
        {"t": 10.0, "event": "close", "hosts": {},
         "duplicates": {"total": 40, "query_filter": 25, "fragment": 10, "exact": 5, "path": 10},
         "duplicate_hosts": {"b.example": 30, "a.example": 10}},
    ]  # fmt: skip
    plain = render_html(read_crawl(lines(older(events))))
    assert 'id="limits"' not in plain
    page = render_html(read_crawl(lines(events)))
    limits = page[page.index('<section id="limits">') :]
    limits = limits[: limits.index("</section>")]
    robots = limits[limits.index('<table class="robots">') :]
    robots = robots[: robots.index("</table>")]
    rows = re.findall(r'<tr><th scope="row">([^<]+)</th>(.*?)</tr>', robots)
    assert [origin for origin, _ in rows] == [
        "http://b.example",
        "http://c.example",
        "https://a.example",
    ]
    assert '<td>-</td><td class="bound-col">unreachable' in rows[0][1]
    assert "<td>2</td>" in rows[0][1]  # two fetches
    assert "everything allowed" in rows[1][1]
    assert "<td>200</td>" in rows[2][1] and "<td>500ms</td>" in rows[2][1]
    assert (
        "40 requests dropped as duplicates of a page already seen, by what the "
        "canonicalizer changed in their URL" in limits
    )
    kinds = re.findall(
        r'<tr><th scope="row" title="([^"]*)">([^<]+)</th><td>([\d,]+)</td><td>(\d+)%</td></tr>',
        limits,
    )
    assert [(label, n, share) for _, label, n, share in kinds] == [
        ("tracking parameters or empty pairs", "25", "62"),
        ("dot segments, an empty path or a trailing slash", "10", "25"),
        ("a fragment", "10", "25"),
        ("nothing: the same URL again", "5", "12"),
    ]
    assert [stage for stage, *_ in kinds] == ["query_filter", "path", "fragment", "exact"]
    assert "counts under each" in limits  # 50 kinds for 40 requests
    hosts = re.findall(
        r'<tr><th scope="row">([^<]+)</th><td>([\d,]+)</td><td>(\d+)%</td></tr>', limits
    )
    assert hosts == [("b.example", "30", "75"), ("a.example", "10", "25")]


def test_each_host_says_what_bounded_it(demo_events: list[dict[str, Any]]) -> None:
    crawl = read_crawl(lines(demo_events))
    page = render_html(crawl)
    expected = {
        "ratelimited.example:8443": "rate limit",
        "flaky.example": "capacity",
        "slowing.example": "latency",
        "polite.example": "Crawl-delay",
        "fast.example": "none",
    }
    table = page[page.index('<section id="summary">') :]
    for name, label in expected.items():
        assert re.search(
            rf'>{re.escape(name)}</a></th>.*?<td class="bound-col bound-\w+" title="[^"]+">'
            rf"{label}</td></tr>",
            table,
        ), name
        assert f"<strong>{label}.</strong> " in section(page, name), name


def test_the_reader_keeps_the_crawl_delay_robots_and_duplicates(
    demo_events: list[dict[str, Any]],
) -> None:
    events = [
        *demo_events[:-1],
        {"t": 1.0, "event": "robots", "host": "polite.example", "origin": "http://polite.example",
         "status": 200, "outcome": "rules", "crawl_delay": 2.0},
        {**demo_events[-1], "duplicates": {"total": 3}},
    ]  # fmt: skip
    crawl = read_crawl(lines(events))
    assert crawl.hosts["polite.example"].floor
    assert [r.origin for r in robots_origins(crawl)] == ["http://polite.example"]
    assert duplicates(crawl) == {"total": 3}
    assert crawl.duplicate_hosts == {}


def test_the_hosts_with_the_most_duplicates_are_the_first_ten() -> None:
    hosts = {f"h{i:02}.example": 100 - i for i in range(15)}
    events = [
        {"t": 0.0, "event": "open", "spider": "demo"},
        {"t": 1.0, "event": "close", "hosts": {}, "duplicates": {"total": 2000, "exact": 2000},
         "duplicate_hosts": {**hosts, "bad": "x", "worse": -1}},
    ]  # fmt: skip
    crawl = read_crawl(lines(events))
    assert crawl.duplicate_hosts == hosts
    page = render_html(crawl)
    listed = re.findall(r'<tr><th scope="row">(h\d\d\.example)</th>', page)
    assert listed == [f"h{i:02}.example" for i in range(10)]
    assert "and 5 more hosts" in page


# -- the command ------------------------------------------------------------------------


def test_the_command_writes_the_page(
    tmp_path: Path, demo_events: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    events = write(tmp_path / "crawl.jsonl", demo_events)
    out = tmp_path / "out" / "report.html"
    out.parent.mkdir()
    assert main([str(events), "-o", str(out), "--order", "name", "--title", "Demo"]) == 0
    page = out.read_text(encoding="utf-8")
    assert "<title>Demo</title>" in page
    assert "Drawn from crawl.jsonl" in page
    assert f"wrote {out}" in capsys.readouterr().err
    assert main([str(events)]) == 0  # next to the events file by default
    assert (tmp_path / "crawl.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_the_command_explains_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "x.html")]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()


def test_the_command_never_overwrites_the_events_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = write(tmp_path / "crawl.html", synthetic_events(DEMO_HOSTS[:1], duration=5.0))
    before = events.read_bytes()
    assert main([str(events)]) == 1
    assert "is the events file" in capsys.readouterr().err
    assert events.read_bytes() == before


def test_the_command_writes_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = write(tmp_path / "e.jsonl", synthetic_events(DEMO_HOSTS[:1], duration=5.0))
    assert main([str(events), "-o", "-"]) == 0
    assert capsys.readouterr().out.startswith("<!DOCTYPE html>")
    assert not (tmp_path / "e.html").exists()


def test_png_without_matplotlib_is_skipped_with_a_message(
    tmp_path: Path,
    demo_events: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("scrapy_aimd.report.png.have_matplotlib", lambda: False)
    events = write(tmp_path / "crawl.jsonl", demo_events)
    png = tmp_path / "crawl.png"
    assert main([str(events), "-o", str(tmp_path / "crawl.html"), "--png", str(png)]) == 0
    assert "no PNG written: --png needs matplotlib" in capsys.readouterr().err
    assert not png.exists()
    assert (tmp_path / "crawl.html").exists()


def test_png_with_matplotlib(tmp_path: Path, demo_events: list[dict[str, Any]]) -> None:
    pytest.importorskip("matplotlib")
    events = write(tmp_path / "crawl.jsonl", demo_events)
    png = tmp_path / "crawl.png"
    assert main([str(events), "-o", str(tmp_path / "crawl.html"), "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_module_runs_without_scrapy(tmp_path: Path) -> None:
    events = write(tmp_path / "e.jsonl", synthetic_events(DEMO_HOSTS[:2], duration=10.0))
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['x', {str(events)!r}, '-o', {str(tmp_path / 'e.html')!r}]\n"
        "try:\n"
        "    runpy.run_module('scrapy_aimd.report', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "assert 'scrapy' not in sys.modules\n"
        "assert 'twisted' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)
    assert (tmp_path / "e.html").stat().st_size > 10_000


# -- a fleet: several workers' files as one crawl -----------------------------------------

FLEET_HOSTS = (DEMO_HOSTS[0], DEMO_HOSTS[1], DEMO_HOSTS[3])
#: Each worker opens this much later than the one before.
FLEET_STAGGER = 2.5


def fleet_worker(k: int, duration: float = 40.0) -> tuple[str, list[dict[str, Any]]]:
    """Worker ``k``'s events file, as a fleet worker writes it: every line names it."""
    worker = f"box{k}:{4000 + k}"
    events = synthetic_events(FLEET_HOSTS, duration=duration - k, seed=20 + k)
    events[0] = {**events[0], "wall": 1_717_000_000.0 + FLEET_STAGGER * k}
    events[-1]["duplicates"] = {"total": 3 + k, "exact": 3 + k}
    events[-1]["duplicate_hosts"] = {FLEET_HOSTS[0].name: 2 + k, FLEET_HOSTS[1].name: k}
    return worker, [{**e, "worker": worker} for e in events]


@pytest.fixture(scope="module")
def fleet() -> dict[str, list[dict[str, Any]]]:
    return dict(fleet_worker(k) for k in range(3))


def fleet_files(directory: Path, fleet: dict[str, list[dict[str, Any]]]) -> list[Path]:
    """The files, the latest worker's first: the reader orders workers by their open."""
    return [
        write(directory / f"events-{i}.jsonl", events)
        for i, events in reversed(list(enumerate(fleet.values())))
    ]


def test_a_fleets_files_are_shifted_by_their_open_and_merged_by_time(
    tmp_path: Path, fleet: dict[str, list[dict[str, Any]]]
) -> None:
    crawl = read_events_files(fleet_files(tmp_path, fleet))
    names = list(fleet)
    assert crawl.workers == names
    assert crawl.worker_opened == {name: FLEET_STAGGER * k for k, name in enumerate(names)}
    assert crawl.wall == 1_717_000_000.0
    assert crawl.spider == "demo"
    assert crawl.lines == sum(len(events) for events in fleet.values())
    assert crawl.bad_lines == 0 and not crawl.unaligned
    # The last worker's events sit FLEET_STAGGER * 2 later than in its own file.
    last, shift = names[2], FLEET_STAGGER * 2
    own = fleet[last]
    assert crawl.end == pytest.approx(max(e["t"] for e in own) + shift)
    for host in FLEET_HOSTS:
        series = crawl.hosts[host.name]
        starts = [e["t"] for e in own if e["event"] == "start" and e["host"] == host.name]
        first = min(series.worker_starts[last])
        assert first == series.bucket(starts[0] + shift)
        assert sum(series.worker_starts[last].values()) == len(starts)
        assert sum(sum(c.values()) for c in series.worker_starts.values()) == sum(
            series.started.values()
        )
    pauses = [
        (e["t"] + shift, e["until"] + shift)
        for e in own
        if e["event"] == "pause" and e["host"] == "ratelimited.example:8443"
    ]
    assert pauses
    drawn = {(p.start, p.until) for p in crawl.hosts["ratelimited.example:8443"].pauses}
    for start, until in pauses:
        assert any(abs(start - s) < 1e-6 and abs(until - u) < 1e-6 for s, u in drawn)
    # Merged by time: the throttles of all workers are in order.
    for merged in crawl.hosts.values():
        times = [t.t for t in merged.throttles]
        assert times == sorted(times)


def test_a_fleets_close_rows_add_up(tmp_path: Path, fleet: dict[str, list[dict[str, Any]]]) -> None:
    crawl = read_events_files(fleet_files(tmp_path, fleet))
    rows = {name: events[-1]["hosts"] for name, events in fleet.items()}
    # The last worker to close (on the shifted time) gives the gap and the limit.
    latest = max(fleet, key=lambda n: fleet[n][-1]["t"] + crawl.worker_opened[n])
    assert latest == list(fleet)[2]
    assert crawl.closed and crawl.summary_source == "close"
    for host in FLEET_HOSTS:
        totals = crawl.summary[host.name]
        each = [rows[name][host.name] for name in fleet]
        for field in ("requests", "failures", "throttles", "pauses"):
            assert getattr(totals, field) == sum(row[field] for row in each), field
        assert totals.responses == sum((Counter(row["responses"]) for row in each), Counter())
        assert totals.delay == rows[latest][host.name]["delay"]
        assert totals.limit == rows[latest][host.name]["limit"]
        assert totals.requests == crawl.hosts[host.name].counted.requests
    paused = crawl.summary["ratelimited.example:8443"].paused_seconds
    assert 0 < paused <= sum(rows[n]["ratelimited.example:8443"]["paused_seconds"] for n in fleet)
    assert crawl.duplicates == {"total": 3 + 4 + 5, "exact": 12}
    assert crawl.duplicate_hosts == {FLEET_HOSTS[0].name: 2 + 3 + 4, FLEET_HOSTS[1].name: 3}


def test_one_lane_per_worker_under_each_host_and_in_the_overview(
    tmp_path: Path, fleet: dict[str, list[dict[str, Any]]]
) -> None:
    crawl = read_events_files(fleet_files(tmp_path, fleet))
    page = render_html(crawl)
    lanes = re.findall(r'<g class="worker-lane" data-worker="([^"]+)"', page)
    assert lanes == list(fleet) * (1 + len(FLEET_HOSTS))
    overview = page[page.index('<figure class="overview">') : page.index("</figure>")]
    assert re.findall(r'data-worker="([^"]+)"', overview) == list(fleet)
    assert "by worker, all hosts" in overview
    for host in FLEET_HOSTS:
        part = section(page, host.name)
        assert re.findall(r'data-worker="([^"]+)"', part) == list(fleet)
        assert part.count('<path d="M') >= 3  # each lane has its band of starts
    assert "3 workers" in page
    assert "moment the first worker opened" in page


def test_one_workers_file_draws_as_before(
    tmp_path: Path, fleet: dict[str, list[dict[str, Any]]]
) -> None:
    path = write(tmp_path / "one.jsonl", next(iter(fleet.values())))
    crawl = read_events_files([path])
    assert crawl.workers == []
    page = render_html(crawl)
    assert page == render_html(read_events(path))
    assert "worker-lane" not in page
    assert "workers" not in page.split("</header>")[0]


def test_the_png_draws_one_line_per_worker_under_the_hosts(
    tmp_path: Path, fleet: dict[str, list[dict[str, Any]]]
) -> None:
    pytest.importorskip("matplotlib")
    crawl = read_events_files(fleet_files(tmp_path, fleet))
    hosts = [h.name for h in FLEET_HOSTS]
    fig = figure(crawl, hosts, "fleet")
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert titles[-1] == "starts per second, by worker, all hosts"
    assert len(fig.axes) == 2 * len(hosts) + 1
    lanes = fig.axes[-1]
    assert [line.get_label() for line in lanes.get_lines()] == list(fleet)
    for line, name in zip(lanes.get_lines(), fleet, strict=True):
        starts = sum(sum(h.worker_starts.get(name, {}).values()) for h in crawl.hosts.values())
        ys, xs = list(line.get_ydata()), list(line.get_xdata())
        # Each bin's rate is drawn over its two ends: the area is the worker's starts.
        area = sum(ys[i] * (xs[i + 1] - xs[i]) for i in range(0, len(ys), 2))
        assert starts > 0 and area == pytest.approx(starts, rel=1e-6)
    png = tmp_path / "fleet.png"
    files = [str(p) for p in fleet_files(tmp_path, fleet)]
    assert main([*files, "-o", str(tmp_path / "fleet.html"), "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_workers_png_has_no_worker_lines(
    tmp_path: Path, fleet: dict[str, list[dict[str, Any]]]
) -> None:
    pytest.importorskip("matplotlib")
    crawl = read_events_files([write(tmp_path / "one.jsonl", next(iter(fleet.values())))])
    fig = figure(crawl, [h.name for h in FLEET_HOSTS], "one")
    assert len(fig.axes) == 2 * len(FLEET_HOSTS)
    assert all("by worker" not in ax.get_title(loc="left") for ax in fig.axes)


def test_a_fleet_file_without_an_open_time_or_a_close_is_said(
    tmp_path: Path, fleet: dict[str, list[dict[str, Any]]]
) -> None:
    first, second = list(fleet.values())[:2]
    no_wall = [{k: v for k, v in first[0].items() if k != "wall"}, *first[1:]]
    paths = [write(tmp_path / "a.jsonl", no_wall), write(tmp_path / "b.jsonl", second[:-1])]
    crawl = read_events_files(paths)
    assert crawl.unaligned == ["a.jsonl"]
    assert crawl.worker_opened == {name: 0.0 for name in list(fleet)[:2]}
    assert not crawl.closed  # one worker never closed
    page = render_html(crawl)
    assert "No open time (<code>wall</code>) in <code>a.jsonl</code>" in page
    assert "no <code>close</code> line" in page


def test_the_command_draws_a_fleet(
    tmp_path: Path, fleet: dict[str, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    paths = fleet_files(tmp_path, fleet)
    out = tmp_path / "fleet.html"
    assert main([*map(str, paths), "-o", str(out)]) == 0
    assert "3 workers" in capsys.readouterr().err
    page = out.read_text(encoding="utf-8")
    assert page.count('class="worker-lane"') == 3 * (1 + len(FLEET_HOSTS))
    assert "Drawn from events-2.jsonl, events-1.jsonl, events-0.jsonl" in page
    assert main([*map(str, paths)]) == 0
    assert (tmp_path / "events-2.html").exists()
    assert main([str(paths[0]), str(tmp_path / "nope.jsonl")]) == 1
    assert "nope.jsonl" in capsys.readouterr().err
    # Each worker's events.jsonl in its own directory: the page names their paths.
    alike = []
    for i, path in enumerate(paths):
        (tmp_path / f"w{i}").mkdir()
        alike.append(path.rename(tmp_path / f"w{i}" / "events.jsonl"))
    assert main([*map(str, alike), "-o", str(out)]) == 0
    named = ", ".join(str(path) for path in alike)
    assert f"Drawn from {named}" in out.read_text(encoding="utf-8")


def test_a_workers_malformed_close_field_falls_back_to_that_workers_count(
    tmp_path: Path, fleet: dict[str, list[dict[str, Any]]]
) -> None:
    names = list(fleet)
    events = [dict(e) for e in fleet[names[1]]]
    close = events[-1]
    close["hosts"] = {h: dict(row) for h, row in close["hosts"].items()}
    close["hosts"]["fast.example"]["requests"] = "many"
    paths = [
        write(tmp_path / "a.jsonl", fleet[names[0]]),
        write(tmp_path / "b.jsonl", events),
    ]
    crawl = read_events_files(paths)
    own = sum(1 for e in events if e["event"] == "start" and e["host"] == "fast.example")
    first = fleet[names[0]][-1]["hosts"]["fast.example"]["requests"]
    assert crawl.summary["fast.example"].requests == first + own


def test_the_hosts_past_the_bound_are_bounds_and_the_rest_counted() -> None:
    """A close line with the counts' margins and the number of hosts: only the
    hosts provably among the most are listed, inexact counts as bounds, and
    "more" from the real number."""
    events = [
        {"t": 0.0, "event": "open", "spider": "demo"},
        {"t": 1.0, "event": "close", "hosts": {}, "duplicates": {"total": 9000, "exact": 9000},
         "duplicate_hosts": {"big.example": 500, "old.example": 300, "new.example": 299,
                             "late.example": 298},
         "duplicate_hosts_error": {"old.example": 40, "new.example": 290, "late.example": 297},
         "duplicate_hosts_others": 296, "duplicate_hosts_count": 3000},
    ]  # fmt: skip
    crawl = read_crawl(lines(events))
    assert crawl.duplicate_hosts == {
        "big.example": 500,
        "old.example": 300,
        "new.example": 299,
        "late.example": 298,
    }
    page = render_html(crawl)
    listed = re.findall(r'<tr><th scope="row">([a-z]+\.example)</th>', page)
    assert listed == ["big.example"]  # 260 or more for old.example is not more than 296
    assert '<th scope="row">big.example</th><td>500</td>' in page
    assert "and 2,999 more hosts, none with more than 300" in page


def test_a_listed_count_with_a_margin_is_shown_as_a_bound() -> None:
    events = [
        {"t": 0.0, "event": "open", "spider": "demo"},
        {"t": 1.0, "event": "close", "hosts": {}, "duplicates": {"total": 900, "exact": 900},
         "duplicate_hosts": {"big.example": 500, "old.example": 300},
         "duplicate_hosts_error": {"old.example": 40},
         "duplicate_hosts_others": 20, "duplicate_hosts_count": 2},
    ]  # fmt: skip
    page = render_html(read_crawl(lines(events)))
    assert '<th scope="row">old.example</th><td>at most 300, at least 260</td>' in page
    assert "more host" not in page


def test_an_old_close_line_of_twenty_hosts_says_at_least() -> None:
    hosts = {f"h{i:02}.example": 100 - i for i in range(20)}
    events = [
        {"t": 0.0, "event": "open", "spider": "demo"},
        {"t": 1.0, "event": "close", "hosts": {}, "duplicates": {"total": 2000, "exact": 2000},
         "duplicate_hosts": hosts},
    ]  # fmt: skip
    page = render_html(read_crawl(lines(events)))
    assert "and at least 10 more hosts" in page


def test_files_of_different_spiders_are_drawn_with_a_note(
    tmp_path: Path,
    fleet: dict[str, list[dict[str, Any]]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two crawls' files given together are drawn as one: said, not silent."""
    files = fleet_files(tmp_path, fleet)
    assert main([*map(str, files), "-o", str(tmp_path / "fleet.html")]) == 0
    assert "different spiders" not in capsys.readouterr().err
    other = [{**e, "spider": "shop"} if e["event"] == "open" else e for e in fleet_worker(1)[1]]
    files[0] = write(tmp_path / "shop.jsonl", other)
    assert main([*map(str, files), "-o", str(tmp_path / "mixed.html")]) == 0
    assert "note: the files are of different spiders (demo, shop)" in capsys.readouterr().err


def test_files_of_crawls_apart_in_time_are_drawn_with_a_note(
    tmp_path: Path,
    fleet: dict[str, list[dict[str, Any]]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two runs of one spider given together are drawn as one crawl with a gap
    between them: said, not silent. A fleet's files, which overlap, give no note."""
    files = fleet_files(tmp_path, fleet)
    assert main([*map(str, files), "-o", str(tmp_path / "fleet.html")]) == 0
    assert "apart in time" not in capsys.readouterr().err
    first, second = fleet_worker(0), fleet_worker(1)
    later = 1_717_000_000.0 + 3600.0  # an hour after the first run opened
    moved = [{**e, "wall": later} if e["event"] == "open" else e for e in second[1]]
    runs = [write(tmp_path / "run1.jsonl", first[1]), write(tmp_path / "run2.jsonl", moved)]
    assert main([*map(str, runs), "-o", str(tmp_path / "runs.html")]) == 0
    err = capsys.readouterr().err
    last_t = max(e["t"] for e in first[1])
    gap = 3600.0 - last_t
    said = f"note: the files are of crawls apart in time (run2.jsonl began {gap:,.0f} s after"
    assert said in err
