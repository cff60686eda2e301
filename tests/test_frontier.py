"""The frontier with real controllers and a fake clock."""

from __future__ import annotations

import math

from scrapy_aimd.core.controller import ControllerConfig, HostController
from scrapy_aimd.core.frontier import Frontier, MemoryQueueStore


def make_frontier(
    min_delay: float = 1.0, max_concurrency: int = 1, adaptive: bool = False
) -> Frontier[str]:
    cfg = ControllerConfig(
        min_delay=min_delay, max_delay=60.0, max_concurrency=max_concurrency, adaptive=adaptive
    )
    return Frontier(lambda host: HostController(cfg))


def drain(frontier: Frontier[str], now: float) -> list[str]:
    out = []
    while (popped := frontier.pop(now)) is not None:
        out.append(popped.item)
    return out


def test_a_host_waits_for_its_gap_and_its_limit() -> None:
    f = make_frontier(min_delay=1.0)
    for i in range(3):
        f.push("a", f"a{i}", now=0.0)
    first = f.pop(0.0)
    assert first is not None and first.item == "a0"
    assert f.pop(0.0) is None  # at its limit of one
    assert math.isinf(f.next_ready_at(0.0))
    f.finish("a", first.ticket, 0.1, status=200, latency=0.1)
    assert f.pop(0.1) is None  # the gap is start to start
    assert f.next_ready_at(0.1) == 1.0
    second = f.pop(1.0)
    assert second is not None and second.item == "a1"
    assert len(f) == 1


def test_a_request_started_outside_the_queues_takes_its_hosts_place_and_gap() -> None:
    f = make_frontier(min_delay=1.0)
    f.push("a", "a0", now=0.0)
    ticket = f.start("a", 0.0)  # downloaded around the scheduler
    assert f.controller("a").in_flight == 1
    assert f.pop(0.0) is None  # its place is taken
    f.finish("a", ticket, 0.2, status=200, latency=0.2)
    assert f.pop(0.2) is None  # and the gap counts from it
    assert f.next_ready_at(0.2) == 1.0
    popped = f.pop(1.0)
    assert popped is not None and popped.item == "a0"


def test_a_paused_host_does_not_hold_up_another() -> None:
    f = make_frontier(min_delay=0.0)
    for i in range(5):
        f.push("slow", f"s{i}", now=0.0)
        f.push("fast", f"f{i}", now=0.0)
    s = f.pop(0.0)
    t = f.pop(0.0)
    assert s is not None and t is not None
    slow = s if s.host == "slow" else t
    fast = t if slow is s else s
    f.finish("slow", slow.ticket, 0.1, status=429, latency=0.01, retry_after=5.0)
    f.finish("fast", fast.ticket, 0.1, status=200, latency=0.01)
    now, fast_items = 0.1, []
    while now < 5.0:
        popped = f.pop(now)
        if popped is not None:
            assert popped.host == "fast", f"slow started at {now} during its pause"
            fast_items.append(popped.item)
            f.finish("fast", popped.ticket, now + 0.01, status=200, latency=0.01)
        now += 0.05
    assert fast_items == ["f1", "f2", "f3", "f4"]
    assert f.next_ready_at(4.9) >= 5.1 - 1e-9  # the pause ends at 0.1 + 5
    after = f.pop(5.2)
    assert after is not None and after.host == "slow"


def test_order_is_priority_then_depth_then_arrival_across_hosts() -> None:
    f = make_frontier(min_delay=0.0, max_concurrency=10)
    f.push("a", "a-deep", depth=3, now=0.0)
    f.push("b", "b-shallow", depth=1, now=0.0)
    f.push("c", "c-urgent", depth=5, priority=10, now=0.0)
    f.push("a", "a-shallow-late", depth=1, now=0.0)
    f.push("b", "b-root", depth=0, now=0.0)
    assert drain(f, 0.0) == ["c-urgent", "b-root", "b-shallow", "a-shallow-late", "a-deep"]


def test_cancel_and_double_release_keep_in_flight_exact() -> None:
    f = make_frontier(min_delay=0.0, max_concurrency=2)
    for i in range(4):
        f.push("a", f"a{i}", now=0.0)
    p1, p2 = f.pop(0.0), f.pop(0.0)
    assert p1 is not None and p2 is not None
    assert f.pop(0.0) is None
    f.cancel("a", p1.ticket, 0.0)
    f.cancel("a", p1.ticket, 0.0)
    assert f.controller("a").in_flight == 1
    p3 = f.pop(0.0)
    assert p3 is not None
    f.finish("a", p2.ticket, 0.1, status=200, latency=0.01)
    f.fail("a", p3.ticket, 0.1, timeout=False)
    assert f.controller("a").in_flight == 0


def test_heaps_stay_proportional_to_hosts() -> None:
    f = make_frontier(min_delay=0.0, max_concurrency=1)
    now = 0.0
    for i in range(20_000):
        f.push(f"h{i % 50}", str(i), now=now)
    while len(f):
        popped = f.pop(now)
        if popped is None:
            now += 0.01
            continue
        f.finish(popped.host, popped.ticket, now, status=200, latency=0.01)
    assert len(f._ready) + len(f._timers) <= 4 * 50 + 1024


def test_memory_store_drops_empty_hosts() -> None:
    store: MemoryQueueStore[str] = MemoryQueueStore()
    store.push("a", (0, 0, 0), "x")
    assert store.head("a") == (0, 0, 0)
    assert store.pop("a") == "x"
    assert store.pop("a") is None
    assert store.head("a") is None
    assert len(store) == 0


def test_drain_takes_a_hosts_whole_queue_best_first_and_leaves_the_others() -> None:
    frontier = make_frontier()
    for i, priority in enumerate((0, 5, 1)):
        frontier.push("a.test", f"a{i}", priority=priority, now=0.0)
    frontier.push("b.test", "b0", now=0.0)
    assert frontier.drain("a.test") == ["a1", "a2", "a0"]
    assert frontier.queued("a.test") == 0
    assert len(frontier) == 1
    popped = frontier.pop(0.0)
    assert popped is not None and popped.item == "b0"
    assert frontier.pop(10.0) is None
