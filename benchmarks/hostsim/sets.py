"""The two named sets of hosts.

``TUNING``: the scenarios the controller was tuned on, as its tests had them.
``HELD_OUT``: written from how real limiters and servers work before anyone tuned on
them; no constant of the controller may be fitted to these. Keep it that way: a
host that the controller does badly on stays, and a new held-out host is added here
before it is looked at through the controller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from benchmarks.hostsim import models as m


@dataclasses.dataclass(frozen=True)
class HostSpec:
    name: str
    model: Callable[[], m.Model]
    """Builds the host afresh (its state and seeded generator) for each run."""
    concurrency: int = 8
    """The most in flight: the controller's ``max_concurrency`` and the top of the
    fixed crawler's grid."""
    seconds: float | None = None
    """This host's duration where it changes late (else the command's ``--seconds``)."""
    robots: bool = False
    """robots.txt is fetched first (through the model: limiters count it too)."""
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Other controller settings."""


def _tuning(name: str, model: Callable[[], m.Model], **kwargs: Any) -> HostSpec:
    return HostSpec(name, model, **kwargs)


def _mixed(slow_run: int, fast_run: int, capacity: int | None = None) -> Callable[[], m.Model]:
    return lambda: m.PathHost(
        0.5, 0.005 if capacity is None else 0.003, slow_run, fast_run, capacity
    )


# Latencies are the host's normal fetch time (jittered by +-20 %).
TUNING: list[HostSpec] = [
    # Rate limiters answering 429 with Retry-After: 1 when their bucket is empty.
    _tuning("bucket 1/s burst 1, 0.2 s", lambda: m.TokenBucket(1, 1, 0.2)),
    _tuning("bucket 2/s burst 10, 0.5 s", lambda: m.TokenBucket(2, 10, 0.5)),
    _tuning("bucket 5/s burst 5, 0.05 s", lambda: m.TokenBucket(5, 5, 0.05)),
    _tuning("bucket 5/s burst 1, 0.05 s", lambda: m.TokenBucket(5, 1, 0.05)),
    _tuning("bucket 20/s burst 20, 0.2 s", lambda: m.TokenBucket(20, 20, 0.2)),
    _tuning("bucket 50/s burst 50, 0.1 s", lambda: m.TokenBucket(50, 50, 0.1)),
    _tuning("bucket 50/s burst 1, 0.1 s", lambda: m.TokenBucket(50, 1, 0.1)),
    # ... whose owner changes the limit at 300 s.
    _tuning(
        "bucket 2/s then 10/s, 0.05 s", lambda: m.TokenBucket(2, 2, 0.05, new_rate=10), seconds=600
    ),
    _tuning(
        "bucket 10/s then 2/s, 0.05 s", lambda: m.TokenBucket(10, 10, 0.05, new_rate=2), seconds=600
    ),
    # nginx limit_req: a strict limiter answering 503 without Retry-After.
    _tuning("limit_req 2/s 503, 0.1 s", lambda: m.TokenBucket(2, 1, 0.1, 503, None)),
    _tuning("limit_req 10/s 503, 0.05 s", lambda: m.TokenBucket(10, 1, 0.05, 503, None)),
    # Servers with C workers that answer 503 above C requests at once.
    _tuning("capacity 4, 0.2 s", lambda: m.CapacityHost(4, 0.2)),
    _tuning("capacity 2, 1 s", lambda: m.CapacityHost(2, 1.0)),
    _tuning("capacity 2 Retry-After, 0.1 s", lambda: m.CapacityHost(2, 0.1, retry_after=1.0)),
    # A server that queues: more than 2 in flight only adds latency.
    _tuning("queue 2 workers, 0.2 s", lambda: m.QueueHost(2, 0.2)),
    # Pages that become slower at 300 s: a new normal, not an overload.
    _tuning("latency 0.05 s then 0.5 s", lambda: m.ShiftHost(0.05, 0.5, 300.0), seconds=600),
    _tuning("healthy, 0.1 s", lambda: m.HealthyHost(0.1)),
    # Pages whose latency depends on the path: runs of dynamic pages of 0.5 s and
    # static ones of 5 ms; then with nginx's limit_conn 2.
    _tuning("mixed 0.5 s / 5 ms pages", _mixed(20, 10)),
    _tuning("mixed 2:1 in turns", _mixed(2, 1)),
    _tuning("limit_conn 2, mixed pages", _mixed(20, 10, capacity=2)),
    _tuning("capacity 1, 0.5 s", lambda: m.CapacityHost(1, 0.5)),
    _tuning("capacity 10, 1 s, max 16", lambda: m.CapacityHost(10, 1.0), concurrency=16),
    _tuning("room for 10, slower above, 1 s, max 16", lambda: m.SoftHost(10, 1.0), concurrency=16),
    # Bursty buckets that ask for 2 s pauses.
    _tuning("bucket 20/s b20, RA 2, 0.2 s", lambda: m.TokenBucket(20, 20, 0.2, retry_after=2.0)),
    _tuning("bucket 20/s b20, RA 2, 20 ms", lambda: m.TokenBucket(20, 20, 0.02, retry_after=2.0)),
    _tuning(
        "hybrid: 3 at once, bucket 10/s b20",
        lambda: m.HybridHost(m.CapacityHost(3, 0.2), m.TokenBucket(10, 20, 0.2, retry_after=1.6)),
    ),
    _tuning("limit_req 3/s 429 RA 1, 1 ms", lambda: m.TokenBucket(3, 1, 0.001)),
    _tuning("limit_rate bodies 1-7 s", m.BodyHost),
    _tuning(
        "closed 3 s, then capacity 6, 50 ms", lambda: m.PausedHost(3.0, m.CapacityHost(6, 0.05))
    ),
    _tuning(
        "closed 5 s, RA 1, then capacity 6",
        lambda: m.PausedHost(5.0, m.CapacityHost(6, 0.05), retry_after=1.0),
    ),
    _tuning("outage 60 s, 0.1 s", lambda: m.OutageHost(0.1, 60.0, 60.0)),
    _tuning("HAProxy http_req_rate 40/10 s, deny 403", lambda: m.HaproxyRate(40, 10.0, status=403)),
]


def _held_out(name: str, model: Callable[[], m.Model]) -> HostSpec:
    return HostSpec(name, model, concurrency=16, robots=True)


HELD_OUT: list[HostSpec] = [
    # API quotas: a fixed window aligned on the clock.
    _held_out("fixed window 60/10 s, 429 + Retry-After", lambda: m.FixedWindow(60, 10.0)),
    _held_out(
        "fixed window 60/10 s, 429, no Retry-After",
        lambda: m.FixedWindow(60, 10.0, retry_after=False),
    ),
    _held_out(
        "fixed window 60/10 s, 429 + Retry-After: 1",
        lambda: m.FixedWindowHost(10.0, 60, retry_after=1.0),
    ),
    _held_out(
        "told quota 100/20 s, X-RateLimit-*, 429 + RA",
        lambda: m.FixedWindow(100, 20.0, told=True),
    ),
    _held_out("hourly-style quota 150/60 s, 429 + RA", lambda: m.FixedWindow(150, 60.0)),
    # Sliding windows that count denied requests too.
    _held_out("HAProxy http_req_rate 50/10 s, 429", lambda: m.HaproxyRate(50, 10.0)),
    _held_out("sliding log 50/10 s, denied counted, 429", lambda: m.SlidingLog(50, 10.0)),
    # Buckets.
    _held_out("GCRA 10/s burst 20, 429, no Retry-After", lambda: m.Gcra(10.0, 20)),
    _held_out("GCRA 10/s burst 20, 429 + Retry-After", lambda: m.Gcra(10.0, 20, retry_after=True)),
    _held_out("nginx limit_req 5r/s burst=10 nodelay, 503", lambda: m.NginxLimitReq(5.0, 10)),
    # Servers.
    _held_out("queueing origin: 4 workers of 0.2 s", lambda: m.QueueHost(4, 0.2)),
    _held_out(
        "queueing origin: 4 workers of exactly 0.2 s", lambda: m.QueueHost(4, 0.2, spread=0.0)
    ),
    _held_out(
        "capacity 8, 2 from 100 s, 6 from 200 s, 503",
        lambda: m.ChangingCapacity(((0.0, 8), (100.0, 2), (200.0, 6)), 0.2),
    ),
    _held_out(
        "80 % cached (5 ms), origin 2 workers of 0.3 s",
        lambda: m.CachedOrigin(0.8, 0.005, m.CapacityHost(2, 0.3)),
    ),
    _held_out(
        "2 % time out (10 s), capacity 8 of 0.1 s",
        lambda: m.RandomTimeouts(0.02, 10.0, m.CapacityHost(8, 0.1)),
    ),
    _held_out("contended: 0.1 s x (1 + (n-1)/2), no refusal", lambda: m.ContendedHost(0.1, 0.5)),
    _held_out("exactly 3 workers of 0.2 s, 503", lambda: m.CapacityHost(3, 0.2)),
    _held_out("16 workers of 1 s pages, 503", lambda: m.CapacityHost(16, 1.0)),
    _held_out(
        "bimodal: 70 % of 50 ms, 30 % of 1 s", lambda: m.CachedOrigin(0.7, 0.05, m.HealthyHost(1.0))
    ),
    # Sites with missing links: a third answer 404, at once from the front, or
    # counted by the limiter in front and answered by the origin.
    _held_out(
        "queueing origin 4 x 0.2 s, a third 404 at once",
        lambda: m.MissingLinks(3, m.QueueHost(4, 0.2)),
    ),
    _held_out(
        "capacity 4 of 0.5 s, 503, a third 404 at once",
        lambda: m.MissingLinks(3, m.CapacityHost(4, 0.5)),
    ),
    _held_out(
        "bucket 4/s burst 1, 429 + RA 1, a third 404 counted",
        lambda: m.MissingLinks(3, m.TokenBucket(4, 1, 0.02), cheap=False),
    ),
    _held_out(
        "fixed window 30/5 s, 429 + RA, a third 404 counted",
        lambda: m.MissingLinks(3, m.FixedWindow(30, 5.0), cheap=False),
    ),
    # Abuse filters.
    _held_out("evasive: > 20 in 2 s, 403 for 5 s, renewed", lambda: m.EvasiveBlock(20, 2.0, 5.0)),
    _held_out("mod_evasive site count 20/2 s, block 5 s, 403", lambda: m.ModEvasive(20, 2, 5)),
]

SETS: dict[str, list[HostSpec]] = {"tuning": TUNING, "held-out": HELD_OUT}
