"""Model hosts on a fake clock, each built from how its limiter or server works.

A model answers a request that starts at ``now`` with an :class:`Answer`: the status
(or :data:`TIMEOUT`), how long the request stays in flight, the Retry-After in
seconds if the answer has one, and its other headers. Each keeps its own state and
its own seeded random generator, so a run is the same every time. A model decides
an answer when the request arrives; requests arrive in time order.

The first group are the hosts the controller was tuned on (the scenarios of its
tests); the second group are written from real limiters (nginx, HAProxy,
mod_evasive, API quotas) for the held-out set.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple, Protocol

TIMEOUT = 0
"""The status of a request that got no answer: the crawler gave up after ``latency``."""

NO_HEADERS: Mapping[str, str] = MappingProxyType({})


class Answer(NamedTuple):
    status: int
    """The HTTP status, or :data:`TIMEOUT`."""
    latency: float
    """Seconds from the start until the request is done (the body included)."""
    retry_after: float | None = None
    headers: Mapping[str, str] = NO_HEADERS
    first_byte: float | None = None
    """Seconds to the headers, when the body takes longer (nginx's ``limit_rate``):
    what the crawler reports as the fetch latency. None: the whole ``latency``."""


class Model(Protocol):
    def answer(self, now: float) -> Answer: ...


ModelHost = Model
"""The name the controller's tests used."""


def _rng(seed: int) -> Callable[[], random.Random]:
    return lambda: random.Random(seed)


def _jittered(rng: random.Random, latency: float) -> float:
    """A page's latency: the host's normal time, +-20 %."""
    return latency * rng.uniform(0.8, 1.2)


def _busy(busy_until: list[float], now: float) -> list[float]:
    """The ends of the requests still being served at ``now``."""
    return [t for t in busy_until if t > now]


# -- the tuning set's hosts ------------------------------------------------------------


@dataclasses.dataclass
class TokenBucket:
    """A rate limiter: ``rate`` requests/s, bursts up to ``burst``; when empty, 429
    with Retry-After: 1 (or what ``status`` and ``retry_after`` say: nginx's
    limit_req answers 503 without one). From 300 s on, ``new_rate`` if given (a
    limit changed by its owner)."""

    rate: float
    burst: float
    latency: float
    status: int = 429
    retry_after: float | None = 1.0
    new_rate: float | None = None
    rng: random.Random = dataclasses.field(default_factory=_rng(1))
    tokens: float = -1.0
    last: float = 0.0

    def answer(self, now: float) -> Answer:
        if self.tokens < 0:
            self.tokens = self.burst
        if self.new_rate is not None and now >= 300.0:
            self.rate = self.new_rate
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return Answer(200, _jittered(self.rng, self.latency))
        return Answer(self.status, self.latency * 0.2, self.retry_after)


@dataclasses.dataclass
class PausedHost:
    """Closed for the first ``closed`` seconds (429 with a Retry-After to their end,
    or of ``retry_after`` seconds every time), then ``then``."""

    closed: float
    then: Model
    retry_after: float | None = None

    def answer(self, now: float) -> Answer:
        if now < self.closed:
            wait = self.closed - now if self.retry_after is None else self.retry_after
            return Answer(429, 0.005, wait)
        return self.then.answer(now)


@dataclasses.dataclass
class FixedWindowHost:
    """A fixed-window limiter: ``limit`` requests per window of ``window`` seconds,
    then 429 with the same ``retry_after`` until the next window."""

    window: float
    limit: int
    retry_after: float
    latency: float = 0.05
    current: int = -1
    count: int = 0

    def answer(self, now: float) -> Answer:
        index = math.floor(now / self.window)
        if index != self.current:
            self.current, self.count = index, 0
        if self.count >= self.limit:
            return Answer(429, 0.005, self.retry_after)
        self.count += 1
        return Answer(200, self.latency)


@dataclasses.dataclass
class CapacityHost:
    """A server with ``capacity`` workers: 503 above that many at once, with
    ``retry_after`` as its Retry-After (none by default)."""

    capacity: int
    latency: float
    rng: random.Random = dataclasses.field(default_factory=_rng(2))
    busy_until: list[float] = dataclasses.field(default_factory=list)
    retry_after: float | None = None

    def answer(self, now: float) -> Answer:
        self.busy_until = _busy(self.busy_until, now)
        if len(self.busy_until) >= self.capacity:
            return Answer(503, self.latency * 0.1, self.retry_after)
        latency = _jittered(self.rng, self.latency)
        self.busy_until.append(now + latency)
        return Answer(200, latency)


@dataclasses.dataclass
class QueueHost:
    """A server with ``workers`` that never refuses: what it cannot serve at once
    waits in a FIFO, so more than ``workers`` in flight only lengthens the queue.

    It keeps its own account of the waiting: :meth:`mean_waiting` is the mean number
    of requests waiting inside the server (arrived, no worker yet)."""

    workers: int
    service: float
    spread: float = 0.2
    """Each service time is ``service`` +- this share."""
    rng: random.Random = dataclasses.field(default_factory=_rng(4))
    free_at: list[float] = dataclasses.field(default_factory=list)
    waits: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    """(arrival, start of service) of every request that had to wait."""

    def answer(self, now: float) -> Answer:
        if not self.free_at:
            self.free_at = [0.0] * self.workers
        begin = max(now, heapq.heappop(self.free_at))
        end = begin + self.service * self.rng.uniform(1 - self.spread, 1 + self.spread)
        heapq.heappush(self.free_at, end)
        if begin > now:
            self.waits.append((now, begin))
        return Answer(200, end - now)

    def mean_waiting(self, until: float) -> float:
        """The time-average of the number of requests waiting over ``[0, until]``."""
        waited = sum(max(0.0, min(begin, until) - arrival) for arrival, begin in self.waits)
        return waited / until if until > 0 else 0.0


@dataclasses.dataclass
class SoftHost:
    """A server with room for ``room`` requests at once: above that its pages take
    ``in_flight / room`` times as long, so its throughput stays at ``room / latency``
    however many are sent."""

    room: int
    latency: float
    rng: random.Random = dataclasses.field(default_factory=_rng(6))
    busy_until: list[float] = dataclasses.field(default_factory=list)

    def answer(self, now: float) -> Answer:
        self.busy_until = _busy(self.busy_until, now)
        in_flight = len(self.busy_until) + 1
        latency = _jittered(self.rng, self.latency) * max(1.0, in_flight / self.room)
        self.busy_until.append(now + latency)
        return Answer(200, latency)


@dataclasses.dataclass
class ShiftHost:
    """A healthy host whose normal latency changes once (cached pages, then dynamic ones)."""

    before: float
    after: float
    at: float
    rng: random.Random = dataclasses.field(default_factory=_rng(5))

    def answer(self, now: float) -> Answer:
        return Answer(200, _jittered(self.rng, self.before if now < self.at else self.after))


@dataclasses.dataclass
class HealthyHost:
    """Room for anything: every page takes ``latency``."""

    latency: float
    rng: random.Random = dataclasses.field(default_factory=_rng(3))

    def answer(self, now: float) -> Answer:
        return Answer(200, _jittered(self.rng, self.latency))


@dataclasses.dataclass
class PathHost:
    """Pages whose latency depends on the path, in the crawl's order: runs of
    ``slow_run`` dynamic pages, then ``fast_run`` cached or static ones. With
    ``capacity``, a 503 answers at once above that many in flight (nginx's limit_conn)."""

    slow: float
    fast: float
    slow_run: int
    fast_run: int
    capacity: int | None = None
    rng: random.Random = dataclasses.field(default_factory=_rng(6))
    served: int = 0
    busy_until: list[float] = dataclasses.field(default_factory=list)

    @property
    def mean_latency(self) -> float:
        runs = self.slow_run + self.fast_run
        return (self.slow * self.slow_run + self.fast * self.fast_run) / runs

    def answer(self, now: float) -> Answer:
        self.busy_until = _busy(self.busy_until, now)
        if self.capacity is not None and len(self.busy_until) >= self.capacity:
            return Answer(503, 0.002)
        index = self.served % (self.slow_run + self.fast_run)
        self.served += 1
        latency = _jittered(self.rng, self.slow if index < self.slow_run else self.fast)
        self.busy_until.append(now + latency)
        return Answer(200, latency)


@dataclasses.dataclass
class BodyHost:
    """nginx's limit_rate with no other limit: headers at once, bodies that take
    ``body_min`` to ``body_max`` seconds, and every ``missing``-th link a 404 answered
    at once. The crawler reports the time to headers (Scrapy's download_latency);
    the request stays in flight for its whole body."""

    body_min: float = 1.0
    body_max: float = 7.0
    missing: int = 3
    rng: random.Random = dataclasses.field(default_factory=_rng(8))
    served: int = 0

    def answer(self, now: float) -> Answer:
        self.served += 1
        if self.served % self.missing == 0:
            return Answer(404, 0.005)
        body = self.rng.uniform(self.body_min, self.body_max)
        return Answer(200, body, first_byte=min(body, 0.003))


@dataclasses.dataclass
class HybridHost:
    """A server with ``capacity`` workers (503 above) behind a token bucket (429 and a
    Retry-After)."""

    capacity: CapacityHost
    bucket: TokenBucket

    def answer(self, now: float) -> Answer:
        busy = self.capacity.busy_until = _busy(self.capacity.busy_until, now)
        if len(busy) >= self.capacity.capacity:
            return Answer(503, 0.02)
        answer = self.bucket.answer(now)
        if answer.status == 200:
            busy.append(now + answer.latency)
        return answer


@dataclasses.dataclass
class OutageHost:
    """A healthy host that answers every request with a fast 503, without Retry-After,
    for ``length`` seconds from ``begin`` (a deploy, a restart); with ``capacity``, also
    503 above that many at once."""

    latency: float
    begin: float
    length: float
    capacity: int | None = None
    rng: random.Random = dataclasses.field(default_factory=_rng(7))
    busy_until: list[float] = dataclasses.field(default_factory=list)

    def answer(self, now: float) -> Answer:
        if self.begin <= now < self.begin + self.length:
            return Answer(503, 0.01)
        self.busy_until = _busy(self.busy_until, now)
        if self.capacity is not None and len(self.busy_until) >= self.capacity:
            return Answer(503, 0.01)
        latency = _jittered(self.rng, self.latency)
        self.busy_until.append(now + latency)
        return Answer(200, latency)


@dataclasses.dataclass
class RandomRefusals:
    """``then``, but a share ``p`` of the requests, whatever the load, answer 503."""

    p: float
    then: Model
    rng: random.Random = dataclasses.field(default_factory=_rng(5))

    def answer(self, now: float) -> Answer:
        if self.rng.random() < self.p:
            return Answer(503, 0.01)
        return self.then.answer(now)


# -- the held-out set's hosts ----------------------------------------------------------

REFUSED_LATENCY = 0.005
"""How long a limiter takes to refuse: it answers before the application runs."""


@dataclasses.dataclass
class FixedWindow:
    """An API quota: ``limit`` requests per window of ``window`` seconds, windows
    aligned on the clock (``floor(now / window)``); once spent, ``status`` until the
    window ends. Denied requests are not counted (they never reach the counter's
    increment). With ``retry_after``, the answer says when the window ends; with
    ``told``, every answer carries ``X-RateLimit-Limit``, ``-Remaining`` and
    ``-Reset`` (seconds to the window's end), as GitHub's and many APIs do."""

    limit: int
    window: float
    latency: float = 0.05
    status: int = 429
    retry_after: bool = True
    told: bool = False
    rng: random.Random = dataclasses.field(default_factory=_rng(11))
    current: int = -1
    count: int = 0

    def answer(self, now: float) -> Answer:
        index = math.floor(now / self.window)
        if index != self.current:
            self.current, self.count = index, 0
        reset = (index + 1) * self.window - now
        accepted = self.count < self.limit
        if accepted:
            self.count += 1
        headers = NO_HEADERS
        if self.told:
            headers = {
                "X-RateLimit-Limit": str(self.limit),
                "X-RateLimit-Remaining": str(self.limit - self.count),
                "X-RateLimit-Reset": str(math.ceil(reset)),
            }
        if accepted:
            return Answer(200, _jittered(self.rng, self.latency), None, headers)
        wait = math.ceil(reset) if self.retry_after else None
        return Answer(self.status, REFUSED_LATENCY, wait, headers)


@dataclasses.dataclass
class HaproxyRate:
    """HAProxy's ``track-sc0 src`` + ``http-request deny deny_status 429 if
    { sc_http_req_rate(0) gt N }`` over a stick table with ``http_req_rate(period)``.

    Tracking counts every request, denied ones too, so a client that keeps knocking
    stays denied. The rate is HAProxy's ``freq_ctr`` over a period: the count of the
    current period plus the previous period's count weighted by the share of the
    period still to run (a sliding window estimated from two fixed ones). No
    Retry-After."""

    limit: int
    period: float
    latency: float = 0.05
    status: int = 429
    """``deny_status``: 429 as configured, or 403 (HAProxy's default ``deny``)."""
    rng: random.Random = dataclasses.field(default_factory=_rng(12))
    current: int = 0
    """The index of the current period."""
    curr: int = 0
    prev: int = 0

    def rate(self, now: float) -> int:
        """The request rate HAProxy reads at ``now`` (after rotating the periods),
        rounded down as ``read_freq_ctr_period`` does."""
        index = math.floor(now / self.period)
        if index != self.current:
            self.prev = self.curr if index == self.current + 1 else 0
            self.curr, self.current = 0, index
        elapsed = now - index * self.period
        return math.floor(self.curr + self.prev * (self.period - elapsed) / self.period)

    def answer(self, now: float) -> Answer:
        self.rate(now)
        self.curr += 1  # track-sc0 counts the request before the deny rule reads it
        if self.rate(now) > self.limit:
            return Answer(self.status, REFUSED_LATENCY)
        return Answer(200, _jittered(self.rng, self.latency))


@dataclasses.dataclass
class SlidingLog:
    """A sliding-log limiter: at most ``limit`` requests in any ``window`` seconds;
    with ``count_denied``, denied requests enter the log too (a client that keeps
    knocking stays denied)."""

    limit: int
    window: float
    latency: float = 0.05
    status: int = 429
    count_denied: bool = True
    rng: random.Random = dataclasses.field(default_factory=_rng(13))
    log: deque[float] = dataclasses.field(default_factory=deque)

    def answer(self, now: float) -> Answer:
        while self.log and self.log[0] <= now - self.window:
            self.log.popleft()
        accepted = len(self.log) < self.limit
        if accepted or self.count_denied:
            self.log.append(now)
        if accepted:
            return Answer(200, _jittered(self.rng, self.latency))
        return Answer(self.status, REFUSED_LATENCY)


@dataclasses.dataclass
class NginxLimitReq:
    """nginx's ``limit_req zone=... rate=R burst=B nodelay``: a leaky bucket of
    ``excess`` requests draining at ``rate``; a request that would take the excess
    above ``burst`` is rejected with ``status`` (503 by default, no Retry-After) and
    leaves the bucket as it was; an accepted one is served at once (``nodelay``)."""

    rate: float
    burst: int
    latency: float = 0.05
    status: int = 503
    rng: random.Random = dataclasses.field(default_factory=_rng(14))
    excess: float = 0.0
    last: float | None = None

    def answer(self, now: float) -> Answer:
        if self.last is not None:
            # nginx adds this request before it clamps at zero, then compares
            excess = max(0.0, self.excess - (now - self.last) * self.rate + 1.0)
            if excess > self.burst:
                return Answer(self.status, REFUSED_LATENCY)
            self.excess = excess
        self.last = now
        return Answer(200, _jittered(self.rng, self.latency))


@dataclasses.dataclass
class Gcra:
    """The generic cell rate algorithm (redis-cell, Rails' and Go's limiters): a
    theoretical arrival time ``tat`` that moves on by ``1 / rate`` per accepted
    request; a request is allowed while ``tat - now <= burst / rate``. Refused with
    ``status``, with a Retry-After of the time until it would be allowed when
    ``retry_after``."""

    rate: float
    burst: int
    latency: float = 0.05
    status: int = 429
    retry_after: bool = False
    rng: random.Random = dataclasses.field(default_factory=_rng(15))
    tat: float = 0.0

    def answer(self, now: float) -> Answer:
        interval = 1.0 / self.rate
        tat = max(self.tat, now)
        if tat - now > (self.burst - 1) * interval + 1e-9:  # not a rounding error
            wait = tat - now - (self.burst - 1) * interval
            return Answer(self.status, REFUSED_LATENCY, wait if self.retry_after else None)
        self.tat = tat + interval
        return Answer(200, _jittered(self.rng, self.latency))


@dataclasses.dataclass
class ChangingCapacity:
    """A server whose workers change over time (a scale-down, then up again):
    ``steps`` of (from time, workers); 503 without Retry-After above the current
    number. Requests already being served finish."""

    steps: tuple[tuple[float, int], ...]
    latency: float
    rng: random.Random = dataclasses.field(default_factory=_rng(16))
    busy_until: list[float] = dataclasses.field(default_factory=list)

    def workers(self, now: float) -> int:
        return next(n for since, n in reversed(self.steps) if now >= since)

    def answer(self, now: float) -> Answer:
        self.busy_until = _busy(self.busy_until, now)
        if len(self.busy_until) >= self.workers(now):
            return Answer(503, REFUSED_LATENCY)
        latency = _jittered(self.rng, self.latency)
        self.busy_until.append(now + latency)
        return Answer(200, latency)


@dataclasses.dataclass
class CachedOrigin:
    """A cache in front of a small origin: a share ``hit`` of the pages come from the
    cache in ``cache_latency`` whatever the load; the others go to ``origin``."""

    hit: float
    cache_latency: float
    origin: Model
    rng: random.Random = dataclasses.field(default_factory=_rng(17))

    def answer(self, now: float) -> Answer:
        if self.rng.random() < self.hit:
            return Answer(200, _jittered(self.rng, self.cache_latency))
        return self.origin.answer(now)


@dataclasses.dataclass
class MissingLinks:
    """``then``, where every ``every``-th link is missing (a 404), as on most sites.
    ``cheap``: the front answers it at once (a static 404: no worker, no limiter);
    else the limiter in front counts it and the origin answers it as a page."""

    every: int
    then: Model
    cheap: bool = True
    served: int = 0

    def answer(self, now: float) -> Answer:
        self.served += 1
        if self.served % self.every:
            return self.then.answer(now)
        if self.cheap:
            return Answer(404, 0.005)
        answer = self.then.answer(now)
        return answer._replace(status=404) if answer.status == 200 else answer

    def mean_waiting(self, until: float) -> float | None:
        waiting = getattr(self.then, "mean_waiting", None)
        return None if waiting is None else float(waiting(until))


@dataclasses.dataclass
class RandomTimeouts:
    """``then``, but a share ``p`` of the requests, whatever the load, get no answer:
    the crawler gives up after ``timeout`` seconds (a lost packet, a hung worker)."""

    p: float
    timeout: float
    then: Model
    rng: random.Random = dataclasses.field(default_factory=_rng(18))

    def answer(self, now: float) -> Answer:
        if self.rng.random() < self.p:
            return Answer(TIMEOUT, self.timeout)
        return self.then.answer(now)


@dataclasses.dataclass
class ContendedHost:
    """A server that never refuses but slows down with its load (a shared lock, a
    database): a page takes ``latency * (1 + slope * (n - 1))`` with ``n`` requests in
    flight counting this one."""

    latency: float
    slope: float
    rng: random.Random = dataclasses.field(default_factory=_rng(19))
    busy_until: list[float] = dataclasses.field(default_factory=list)

    def answer(self, now: float) -> Answer:
        self.busy_until = _busy(self.busy_until, now)
        n = len(self.busy_until) + 1
        latency = _jittered(self.rng, self.latency) * (1.0 + self.slope * (n - 1))
        self.busy_until.append(now + latency)
        return Answer(200, latency)


@dataclasses.dataclass
class EvasiveBlock:
    """An abuse filter in the manner of mod_evasive: more than ``count`` requests in
    ``interval`` seconds puts the client on a block list for ``block`` seconds; every
    request while blocked answers 403 and renews the block. Pages take ``latency``."""

    count: int
    interval: float
    block: float
    latency: float = 0.05
    rng: random.Random = dataclasses.field(default_factory=_rng(20))
    hits: deque[float] = dataclasses.field(default_factory=deque)
    blocked_until: float = -math.inf

    def answer(self, now: float) -> Answer:
        if now < self.blocked_until:
            self.blocked_until = now + self.block
            return Answer(403, REFUSED_LATENCY)
        while self.hits and self.hits[0] <= now - self.interval:
            self.hits.popleft()
        self.hits.append(now)
        if len(self.hits) > self.count:
            self.hits.clear()
            self.blocked_until = now + self.block
            return Answer(403, REFUSED_LATENCY)
        return Answer(200, _jittered(self.rng, self.latency))


@dataclasses.dataclass
class ModEvasive:
    """mod_evasive's site counter, as its code does it (``DOSSiteCount``,
    ``DOSSiteInterval``, ``DOSBlockingPeriod``; 403 by default), on whole seconds.

    The counter's timestamp is the last hit, not the first: the count only starts
    again after a quiet ``interval``, so a steady crawl at any pace faster than one
    request per ``interval`` is blocked after ``count`` hits. A hit while blocked
    renews the block. (The per-page counter never fires on a crawl of distinct
    pages; one table, as with one Apache child.)"""

    count: int
    interval: int
    block: int
    latency: float = 0.05
    status: int = 403
    rng: random.Random = dataclasses.field(default_factory=_rng(21))
    hits: int = 0
    last: int | None = None
    """The site node's timestamp: the second of the last hit."""
    held: int | None = None
    """The hold node's timestamp: the second of the block's start or last renewal."""

    def answer(self, now: float) -> Answer:
        t = math.floor(now)
        if self.held is not None and t - self.held < self.block:
            self.held = t
            return Answer(self.status, REFUSED_LATENCY)
        refused = False
        if self.last is None:
            self.hits = 0  # the node is created with a count of 0
        else:
            quiet = t - self.last >= self.interval
            if not quiet and self.hits >= self.count:
                refused, self.held = True, t
            elif quiet:
                self.hits = 0
            self.hits += 1
        self.last = t
        if refused:
            return Answer(self.status, REFUSED_LATENCY)
        return Answer(200, _jittered(self.rng, self.latency))
