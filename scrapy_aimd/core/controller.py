"""The per-host politeness controller: when may the next request to a host start?

One :class:`HostController` per host combines four things, the way TCP congestion
control does it:

- the *gap*, a start-to-start delay between two requests, within
  ``[floor, max_delay]`` where ``floor = max(min_delay, robots Crawl-delay)``;
- the *concurrency limit*, earned round by round from 1 up to ``max_concurrency``;
- a *pause* that a ``Retry-After`` header asks for;
- the host's *latency baseline*, a low percentile of its recent page latencies,
  against which a sustained rise is judged.

Input is "a request started", "a response came back" and "it failed"; output is
:meth:`HostController.ready_at`. The clock is an argument everywhere, so every rule
is tested with a fake clock, and nothing here imports Scrapy.
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final, Literal, NamedTuple

__all__ = [
    "ControllerConfig",
    "HostController",
    "HostNotReady",
    "Outcome",
    "Reaction",
    "Ticket",
]

Outcome = Literal["good", "neutral", "overload", "rate_limit"]
"""How the controller read a response or a failure.

``good``: 2xx or 3xx, fast enough (or not a page: robots.txt). ``overload``: the host
is struggling (a throttle code without Retry-After other than 429, a timeout, a
sustained latency rise; or such a code with Retry-After while the concurrency limit,
not the gap, set the pace). ``rate_limit``: the host is counting requests (429, or
any other throttle code with Retry-After). ``neutral``: anything else (an error
answer, one slow page among fast ones), which changes nothing.
"""

_STATE_VERSION = 3

# The constants below are not settings: each was chosen on the simulated hosts that its
# docstring names (``python tests/test_controller.py``); the shares are of the host's
# best rate over 600 s, with the other constants at their defaults.

LATENCY_SAMPLES = 20
"""Page latencies a host remembers, the latest: enough for a low percentile that one
fast outlier cannot set, little memory per host (10 and 40 did the same on every
simulated host)."""
BASELINE_QUANTILE = 0.1
"""The baseline is this low percentile of the remembered page latencies, and never the
fastest one of two or more: one cached page does not set it. The minimum, the old
rule, read every 0.5 s page of a host with runs of 5 ms ones as a spike (0.006 of its
rate); 0.25 let a server that queues be pushed into its queue (latency 0.69 s for
0.2 s pages, against 0.21 s)."""
SLOW_QUANTILE = 0.9
"""A host's slow-page latency, the time its answers take, is this high percentile
(held for a window or two): 31 s after an overload on an nginx limit_conn 2 host
whose pages take 0.5 s, a round of 3 ms answers does not count as a probe (it pushed
the limit from 2 to 7, and 5 to 8 refusals followed)."""
RISE_WINDOW = 5
"""A latency signal is a sustained rise: the median of this many latest pages above
the threshold, and even the fastest of them above ``sqrt(latency_factor)`` times the
baseline, never one slow page among fast ones. 3 cost a limit_conn 2 host with mixed
pages 3 % of its rate; 8 let a server that queues be pushed into its queue (latency
0.63 s for 0.2 s pages)."""
RISE_HELD = 0.75
"""After a decrease for a latency rise, if the slow pages started at the lower load
stay above this share of the median that made it, the rise was not the crawl's
doing: the decrease is undone and their latency is the host's new normal. A server
that queues halves its latency with its load; pages that become ten times slower do
not change with it (the old rule left that host at 0.83 of its rate, now 1.0). 0.9
cost hosts with mixed pages up to 10 % of their rate; 0.5 would take a load that only
cut the latency by 40 % for a new normal."""
PROBE_SHARE = 0.5
"""A round counts for growth only if the limit was full for this share of the host's
slow-page latency: jitter of +-20 % must not stall the ramp of a 1 s host (1.0: 4.8
rounds to a capacity of 10, against 4.4)."""
OUTAGE_GROWTH = 1.5
"""Refused again at a limit of 1 with no good answer since the last refusal (an outage),
the gap grows by at most this factor, not 2 (``OUTAGE_SHARE`` bounds it further where
the refusals began recently: in practice it is that bound). Simulated host: 503 for
60 s, back at full pace 123 s after the outage began by this factor alone (target
2T + 30 = 150 s; doubling: 181 s); with the bound and the return to the state from
before the outage, 68 s, whether this factor is 1.25, 1.5 or 2."""
OUTAGE_SHARE = 0.25
"""In an outage the gap grows no wider than this share of the time the refusals have
lasted (nor by more than ``OUTAGE_GROWTH`` per refusal): the first request after the
outage ends comes at most a quarter of its length late, and an outage of T seconds
costs about log(T / gap) / log(1.25) refusals. The farm's ``outage`` host (100 ms
pages, 503 for 5 s): the gap had grown to 1.8 s by the end, and the first probe came
0.5 s after it (up to 2.5 s at 1.5 per refusal alone). Simulated host, 503 for 5, 20
and 60 s: back at full pace 6.0, 22.4 and 68.1 s after the outage began, with 23, 29
and 34 refusals (0.33: 5.9, 24.2, 75.3 s and 20, 25, 29 refusals; 0.2: 5.1, 21.8,
64.8 s and 25, 33, 39; without the bound: 7.0, 23.2, 77.9 s and 17, 20, 23)."""
OUTAGE_PROOF = 4.0
"""Refusals with no good answer between prove an outage once the host refused, at a
limit of 1, a gap this many times the spacing it took before the first of them: at a
quarter of the pace and less, the refusals were not the crawl's doing. The first good
answer after that goes straight back to the gap and limit from before the first
refusal, instead of halving back from the probe's gap and growing the limit again
(the farm's ``outage`` host came back at a limit of 3 and a gap of 28 ms, 3.9 s for
its last 58 pages; 1.5 s at its limit of 4). A limiter that refuses a quarter of the
pace it refused is one whose limit went down: at worst it is restored once per
``probe_time``."""
OUTAGE_REFUSALS = 3
"""... and only after this many decreases in a row (at a limit of 4: 4 to 2, 2 to 1,
then the gap): a strict limiter refusing just below its rate is refused once, or twice
when its bucket is empty, before the widened gap is accepted."""
NEW_NORMAL_WINDOWS = 6
"""After a new normal the baseline stays at least the slower pages' for this many
latency windows (a minute): a host whose pages take 0.5 s between runs of 5 ms ones
is not judged by the 5 ms ones again meanwhile. Simulated hosts: 20 pages of 0.5 s,
then 10 of 5 ms, with room for 8 and with limit_conn 2 (1 window: 0.86 and 0.80 of
their rate; 4: 0.95 and 0.88; 6: 0.97 and 0.99)."""
RISE_PAGES = 2
"""Slow pages started after a decrease for a latency rise that judge it (their lower
median against ``RISE_HELD``); until then the limit does not grow. Fewer judge
sooner (the limit_conn 2 host with mixed pages: 1: 0.99 of its rate, 2: 0.99, 3:
0.96, 5: 0.90); one page alone is too easily an outlier."""
BISECT_HOLD = 2
"""Good answers at a probed spacing, narrower than the one the host last accepted,
before that spacing counts as accepted and the next probe halves the bracket. nginx's
limit_req 3 r/s with no burst and Retry-After: 1 (the real benchmark's "rate" host,
and the simulated one): the first answer after a pause comes a pause late and tests
nothing, one answer more is proof for a limiter without a burst, and a bucket with a
burst is caught by its next refusal at the spacing it had accepted."""
BRACKET = 1.0
"""Bisection stops once the refused and the accepted spacing are within this share
of ``margin`` of each other (20 % by default), and the gap holds at the accepted one.
nginx's limit_req 3 r/s (the real benchmark's "rate" host, on a loaded machine): at
0.5 the extra probes cost two more refusals, and the spacing found (0.333 s) was so
close that send jitter had the server refuse it (0.63 to 0.70 of the host's possible
time, against 0.74 twice). Simulated strict buckets gain from 0.5 over a long crawl
(a crawl of 100 pages from a bucket of 5/s with a burst of 1: 0.88 of its rate,
against 0.85), and lose at 0.25 (0.85, with more refusals)."""
SNAP = 0.001
"""A gap within this many seconds of its target is at it (below the send jitter of a
busy reactor); halving alone never arrives. 0.1 ms and 10 ms did the same on every
simulated host."""

LONE_AFTER = 50
"""Answers since the last refusal after which a ``503`` or a timeout without a
``Retry-After`` is a lone one: counted, not acted on, unless another follows within
as many answers. A host whose load balancer answers 1 % of requests ``503`` whatever
the load (a bad backend in a pool) ratcheted its limit down to 1 and its gap up:
2,000 pages of a host serving 8 at once took 412 s instead of 25 s in the controller
simulation (55.6 s now). A real overload refuses again within a round, so it costs
at most one round more per this many answers (2 %)."""

KNEE_RISE = 1.25
"""A round whose median page latency is more than this times the lowest median of
slow start's rounds found the host's room: its pages became slower with
the load, so more in flight only queues at the host (TCP's HyStart reads the same
sign from its round-trip times). The farm's ``slow`` host (room for 10, pages of
0.8-1.2 s, slower above 10) with a limit of 16: slow start doubled 8 to 16 and kept
six requests queued at the host for no more throughput, its pages taking 1.6 s. A
knee of 1.1 ended slow start on pages that stay within 10 % of one latency at any
load (tests/test_controller_properties.py); pages jittered by +-20 % need more."""

SURVIVOR_PAGE_TIME = 1.25
"""A survivor of an overload was at the host for its page time, at most this many
times the host's baseline (jitter), not for its whole latency: a busy crawler sends
late and reads late. The farm's ``outage`` host (room for 4, pages of 0.1 s) crawled
by three workers on two cores: four survivors read after 0.23 s and two sent after
they were done at the host, each taken for its whole latency, looked fetched six
together; the limit went from 4 to 6, and 503s followed."""

KNEE_PAGES = 4
"""... judged on rounds of at least this many pages slower than ``fast_latency``:
cached or static pages of milliseconds tell nothing of a queue, and on a host that
mixes them with dynamic pages a round's median follows its mix of pages."""

KNEE_OWN_PAGES = 8
"""... read from the pages started since the limit last changed once there are this
many of them (else from all the round's pages). Pages started at the limit before a
doubling and answered after it kept the median of the round at 16 of a host with
room for 10 below the knee, and slow start went on to 32. Simulated host with room
for 10 (pages 1 s +-20 %, slower above), ten seeds of 120 s with a ceiling of 32:
see ``python tests/test_controller.py``. A healthy host with jittered pages ended
slow start early in 2 of 60 seeds, as before; judged from 4 such pages, in 8."""

RAMP_PACE = 2.0
"""After a doubling in slow start, the new places open one start at a time, this many
times the host's fastest answer apart (robots.txt, a 404, a refusal: how soon it can
say no), until the limit first fills (for ``RAMP_PAGES`` at most): a host
with no room for them refuses the first before the next goes (a capacity limiter
answers 503 as fast as anything), instead of all of them at once. Only starts above
the most in flight yet are spaced (at first the limit before the doubling; a fast
page's place is taken back at once), and never wider than the slow-page latency
over the new limit (as fast as that many pages in flight would free places). The
farm's ``mixed`` host (room for 4, 503 in 2 ms, pages of 10 ms and 0.4 s) was
refused the four new starts of the doubling from 4 to 8; now one. No pace where the
fastest answer takes half the slow-page latency or more (this pace would not be
below it): the host's refusals come no sooner than its pages, and no pace gets one
back before the next start. The simulated hosts, whose every answer takes a page's
time, go as before; paced too, the one with room for 10 and 1 s pages was at its
capacity after 5.6 rounds, not 4.4, and slow start went on to 32 in 7 of 10 seeds,
its round at 16 judged by pages started while it opened."""
RAMP_PAGES = 4
"""The ramp lasts this many slow-page latencies at most: a fleet's claims space every
start while it lasts, and on a host whose pages vary, starts that far apart may
never fill the limit, which would stall slow start there. Ten paired fleet runs on
the farm (429+503 a crawl, three workers against one process): one latency -> +0.40
(se 1.19; ``bursty`` 48 against 41), four -> -1.10 (se 1.49; 35 against 41), no
bound -> -2.60 (se 1.33; 19 against 29): the busier the crawl, the later its
starts come after the doubling."""

NOT_FOUND = frozenset({404, 410})
"""Statuses that a rate limiter let through to a missing page: after a rate limit they
close the gap as a good page does. Not every client error: a 403 or 451 after a 429 is
more often a ban than a page, and a 408 a server that is struggling."""

#: Fields that must be above zero (a zero step or window would stall the rules).
POSITIVE_FIELDS = (
    "recovery",
    "margin",
    "probe_time",
    "approach_time",
    "initial_backoff",
    "latency_window",
    "pace_window",
)


@dataclass(frozen=True)
class ControllerConfig:
    """Everything a :class:`HostController` needs to know, for one host.

    The defaults of the tuning constants come from simulated hosts (token buckets
    from 1 to 50 requests/s, strict limiters answering 503, servers with 2 or 4
    workers, a host whose pages become slower): ``python tests/test_controller.py``
    prints the figures, ``--sweep`` how each default compares with its neighbours.
    """

    min_delay: float = 0.0
    """The least gap between two request starts, in seconds."""
    max_delay: float = 60.0
    """The widest gap the controller backs off to (a robots Crawl-delay may exceed it)."""
    max_concurrency: int = 8
    """The most requests in flight at once (the add-on's default is the crawl's
    ``CONCURRENT_REQUESTS_PER_DOMAIN``, Scrapy's 8). 16 was measured on the benchmark
    farm: its ``slow`` host (room for 10, 1 s pages) went from 0.70 to 0.76 of its
    possible time, but slow start doubled past 8 where hosts serve 8 to 12: ``fast``
    (503 above 8) and ``soft`` (503 above 12) answered 2 and 3 503s (none at 8),
    ``slow`` spent 4.2 s above its room for 10 and ``soft`` fell from 0.81 to 0.70;
    on nginx it changed nothing (no host there uses more than 8)."""
    adaptive: bool = True
    """Earn concurrency from 1 (True) or stay at ``max_concurrency`` (False)."""
    fast_latency: float = 0.25
    """A page latency at or below this is never slow, however fast the host was."""
    latency_factor: float = 2.0
    """A page latency above this times the host's baseline is slow; a sustained run of
    slow pages is a latency signal."""
    throttle_codes: frozenset[int] = frozenset({429, 503})
    """Statuses by which a host says "slow down"."""
    max_retry_after: float = 3600.0
    """The longest pause a Retry-After header may impose, in seconds."""
    recovery: float = 1.0
    """Away from a pushback, a good response divides the gap's excess over its target
    by ``1 + recovery`` (1: halving, as spire does): a widened gap comes back in
    O(log(gap / floor)) responses. The target is the floor, or the width ``margin``
    above the spacing at which the host last pushed back. Chosen on outages of 5, 20
    and 60 s (503 without Retry-After), before a proven outage went straight back to
    the host's state from before it: back at full pace 37, 50 and 123 s after they
    began (target 2T + 30 s; 0.5: 38, 58, 149 s; 3: 36, 47, 106 s, and the other hosts
    within 0.3 % of their rate either way; now 6.0, 22.4, 68.1 s for any of the
    three); the fixed step of 0.25 s per response it replaces (``delay_step``) took
    hours after the 60 s outage."""
    margin: float = 0.2
    """After a rate limit the gap is this fraction wider than the spacing the host refused.
    Closing, the gap comes back to that width, then closes gently.
    0.1 found a raised limit slowest; 0.3 and more gave up rate everywhere else."""
    probe_time: float = 30.0
    """Near the pushback spacing the gap shrinks by ``margin`` per this many seconds, and
    a limit at which the host was overloaded is tried again after as long. 10 s let
    hosts refuse up to 4.6 % of requests; 60 s found a raised limit slower."""
    probe_requests: int = 100
    """... or per this many responses, if that is slower: a slow host probes as often
    in requests as a fast one (refusals at worst 4.2 % with 25, 1.7 % with 100)."""
    approach_time: float = 2.0
    """After a doubling, the gap comes back towards the pushback spacing no faster than
    the excess shrinks e-fold in this many seconds (for a gap of a second and more,
    ``recovery`` sets the pace). 1 s let bursty limiters refuse more at the start; 5 s
    and 10 s gave up rate to limits that had changed."""
    initial_backoff: float = 1.0
    """The gap after a pushback when no pace was measured yet (the first answers); the
    gap then comes back towards the spacing the controller had allowed. The 1 s of
    the design: 0.5 s let more requests be refused (2.0 % at worst, against 1.7 %)."""
    latency_window: float = 10.0
    """The baseline is the lowest low percentile of page latencies over the last one to
    two windows of this many seconds (the slow-page latency the highest high one).
    5 s cost the hosts with runs of 5 ms pages among 0.5 s ones 6 % of their rate; 60 s
    gained 3 % on one of them but holds a baseline that long after a host's pages
    became faster. (With the old minimum, 30 s stalled a host whose pages became
    slower at 1 % of its rate: a rise that a lower load does not bring down is now a
    new normal.)"""
    pace_window: float = 1.0
    """Seconds of unpaused time over which the accepted pace is measured (at least over
    the last three requests). 0.5 to 1 s did best; longer windows mix in older paces."""
    pace_samples: int = 20
    """The most recent accepted requests the pace is measured over (10 to 40 did the
    same; 5 was worse), which bounds the memory a host takes."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "throttle_codes", _status_codes(self.throttle_codes))
        for name in (
            "min_delay",
            "max_delay",
            "fast_latency",
            "max_retry_after",
        ):
            _check(name, getattr(self, name), lambda v: v >= 0, "a finite number >= 0")
        for name in POSITIVE_FIELDS:
            _check(name, getattr(self, name), lambda v: v > 0, "a finite number > 0")
        _check("latency_factor", self.latency_factor, lambda v: v >= 1, "a finite number >= 1")
        if self.min_delay > self.max_delay:
            raise ValueError(f"min_delay={self.min_delay!r} is above max_delay={self.max_delay!r}")
        for name, minimum in INT_MINIMUMS.items():
            _check_int(name, getattr(self, name), minimum)
        if not isinstance(self.adaptive, bool):
            raise ValueError(f"adaptive={self.adaptive!r}: expected True or False")


#: The least value of each whole-number field (the settings state the same bound
#: whether a value is too small or not a whole number).
INT_MINIMUMS: Final[Mapping[str, int]] = {
    "max_concurrency": 1,
    "pace_samples": 3,
    "probe_requests": 1,
}


def _check(name: str, value: Any, ok: Any, expected: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not ok(value)
    ):
        raise ValueError(f"{name}={value!r}: expected {expected}")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r}: expected a whole number >= {minimum}")


def _status_codes(codes: Iterable[int]) -> frozenset[int]:
    result = frozenset(codes)
    for code in result:
        if isinstance(code, bool) or not isinstance(code, int) or not 100 <= code <= 599:
            raise ValueError(f"throttle_codes: {code!r} is not an HTTP status code")
    return result


class HostNotReady(RuntimeError):
    """:meth:`HostController.start` was called before :meth:`HostController.ready_at`."""


class Ticket(NamedTuple):
    """One started request; hand it back to exactly one of finish, fail or cancel."""

    serial: int
    """Unique across all controllers of the process, so a stray ticket is recognised."""
    started: float
    """When the request started, on the controller's clock."""
    round: int
    """How many decreases the host had made when the request started."""


@dataclass(frozen=True)
class Reaction:
    """What the controller made of a response or failure, for stats, signals and retries."""

    kind: Outcome
    decreased: bool
    """True if this outcome slowed the host down (once per round)."""
    paused_until: float | None = None
    """The end of the pause this outcome asked for, if it carried a Retry-After."""
    refused: bool = False
    """The host asked for later, so the request should be queued again, not dropped
    or left to ordinary retries: a 429, any throttle status with a Retry-After, and,
    from a host that has answered a page well (:attr:`HostController.answered_well`),
    a throttle status without one or a timeout. From a host that never answered
    well, those are plain failures. (A slow but good response is an overload signal
    with a page worth keeping.)"""

    @property
    def throttled(self) -> bool:
        """The host pushed back: a signal to slow down, whether acted on or not."""
        return self.kind in ("overload", "rate_limit")


_IGNORED = Reaction(kind="neutral", decreased=False, paused_until=None)
_serials = itertools.count(1)


@dataclass(slots=True)
class _Round:
    """Bookkeeping for the growth of the concurrency limit."""

    good: int = 0
    """Good responses, from requests of the current round, since the limit last changed."""
    served: int = 0
    """... of which client errors (404) that count in slow start: half the round at most."""
    reached_limit: bool = False
    """In-flight reached the limit since the limit last changed."""
    held_back: bool = False
    """A start waited on the limit alone (the gap had passed) since it last changed."""
    full_time: float = 0.0
    """Seconds the limit was full since it last changed: a probe must load the host
    for as long as its answers take."""
    full_since: float | None = None
    """Since when the limit has been full, if it is."""
    pages: list[float] = field(default_factory=list)
    """Latencies of the round's 2xx pages slower than ``fast_latency`` (see
    ``KNEE_RISE``)."""
    since: float = -math.inf
    """When the limit last changed."""
    own: list[float] = field(default_factory=list)
    """... of those, the pages started since: the load of this limit alone."""
    pace: float = 0.0
    """After a doubling: the spacing of the round's starts above the most in flight
    yet, until they first fill the new limit (see ``RAMP_PACE``); 0 for none."""
    paced_from: int = 0
    """... that most: the limit before the doubling, then each level a start reached
    (a start that only takes a place back is not spaced)."""
    pace_for: float = 0.0
    """... for this long at most: ``RAMP_PAGES`` of the host's slow-page latency when
    it doubled."""


@dataclass(slots=True)
class _Outage:
    """A run of overloads with no good answer between them, and the host as it was
    before the first: what to go back to if the run proves to be an outage."""

    since: float
    """When the first refusal of the run came."""
    spacing: float | None
    """The spacing the host took before it, steadily (``pace_samples`` answers within
    ``max_delay``); None if it took none: a strict limiter lets the first requests of a
    crawl through at any pace, and refuses a quarter of that pace too."""
    gap: float
    limit: int
    slow_start: bool
    overloaded_at: tuple[int, float] | None
    pushback: float | None
    rate_gap: float | None
    refusals: int = 1
    proven: bool = False
    """A gap ``OUTAGE_PROOF`` times that spacing was refused at a limit of 1."""


@dataclass(slots=True)
class _Pauses:
    """Time spent paused, so that the accepted pace is measured without it."""

    until: float = -math.inf
    start: float = -math.inf
    earlier: float = 0.0
    """Total length of the pauses that ended before ``start``."""

    def active(self, now: float) -> float:
        """``now`` on a clock that stands still while the host is paused."""
        if now <= self.start or not math.isfinite(self.start):
            return now - self.earlier
        return now - self.earlier - (min(now, self.until) - self.start)

    def extend(self, now: float, until: float) -> None:
        if until <= self.until:
            return
        if now >= self.until:  # the previous pause is over: a new one starts
            if math.isfinite(self.start):
                self.earlier += self.until - self.start
            self.start = now
        self.until = until


@dataclass(slots=True)
class _PageLatencies:
    """The latest page latencies (robots.txt, redirects and error answers are not
    pages): a baseline, a recent median and a slow-page latency, all from them.

    The baseline (a low percentile) and the slow-page latency (a high one) are each
    held as their extreme over the current window and the one before it, so that a
    load that builds up within a window or two does not raise the baseline with it,
    and a run of cached pages does not make the host look fast.
    """

    window: float
    values: array[float] = field(default_factory=lambda: array("d"))
    """The latest, oldest first (a compact array: one per host)."""
    since: float | None = None
    """When the current window began."""
    low: float = math.inf
    earlier_low: float = math.inf
    high: float = -math.inf
    earlier_high: float = -math.inf
    floor: tuple[float, float] | None = None
    """After a new normal: the least baseline, and until when. A host whose pages take
    0.5 s between runs of 5 ms ones is not judged by the 5 ms ones again until then."""

    def add(self, latency: float, now: float) -> None:
        values = self.values
        values.append(latency)
        if len(values) > LATENCY_SAMPLES:
            del values[0]
        if self.floor is not None and now >= self.floor[1]:
            self.floor = None
        ordered = sorted(values)
        low = _quantile(ordered, BASELINE_QUANTILE, low=True)
        high = _quantile(ordered, SLOW_QUANTILE, low=False)
        since = self.since
        if since is None or now - since >= 2 * self.window:
            self.since, self.earlier_low, self.earlier_high = now, math.inf, -math.inf
            self.low, self.high = low, high
        elif now - since >= self.window:
            self.since, self.earlier_low, self.earlier_high = now, self.low, self.high
            self.low, self.high = low, high
        else:
            self.low, self.high = min(self.low, low), max(self.high, high)

    def new_normal(self, latency: float, factor: float, now: float) -> None:
        """The host's pages now take about ``latency``: forget faster ones, and judge
        by the slower ones for ``NEW_NORMAL_WINDOWS`` windows."""
        self.values = array("d", (v for v in self.values if v * factor >= latency))
        self.since, self.low, self.earlier_low = None, math.inf, math.inf
        if self.values:
            least = _quantile(sorted(self.values), BASELINE_QUANTILE, low=True)
            self.floor = (least, now + NEW_NORMAL_WINDOWS * self.window)

    @property
    def baseline(self) -> float | None:
        held = min(self.low, self.earlier_low)
        if not math.isfinite(held):
            if not self.values:
                return None
            held = _quantile(sorted(self.values), BASELINE_QUANTILE, low=True)
        return held if self.floor is None else max(held, self.floor[0])

    @property
    def slow(self) -> float | None:
        held = max(self.high, self.earlier_high)
        if math.isfinite(held):
            return held
        return _quantile(sorted(self.values), SLOW_QUANTILE, low=False) if self.values else None

    def rise(self, threshold: float, factor: float) -> float | None:
        """The median of the latest ``RISE_WINDOW`` pages if they show a sustained rise:
        that median above ``threshold``, and even the fastest of them well above the
        baseline (``sqrt(factor)`` times), so that a host that mixes fast and slow pages
        does not read as one whose pages all became slower."""
        latest = sorted(self.values[-RISE_WINDOW:])
        if len(latest) < 3:
            return None
        median = latest[(len(latest) - 1) // 2]
        baseline = self.baseline or 0.0
        if median > threshold and latest[0] > math.sqrt(factor) * baseline:
            return median
        return None


def _quantile(ordered: list[float], q: float, *, low: bool) -> float:
    """A percentile of a sorted, non-empty list; with ``low``, never its first of two
    or more (one fast outlier)."""
    n = len(ordered)
    index = int(q * n)
    if low and n > 1:
        index = max(1, index)
    return ordered[min(n - 1, index)]


@dataclass(repr=False, eq=False, slots=True)
class HostController:
    """The politeness state of one host. Not thread-safe; one per host.

    Call :meth:`ready_at` to learn when a request may start, :meth:`start` when it
    does, and exactly one of :meth:`finish`, :meth:`fail` or :meth:`cancel` with the
    ticket when it is over.
    """

    cfg: ControllerConfig
    _gap: float = field(init=False)
    _concurrency: int = field(init=False)
    _crawl_delay: float = field(init=False, default=0.0)
    _live: dict[int, float] = field(init=False, default_factory=dict)
    """Tickets in flight: serial -> start time on the unpaused clock."""
    _last_start: float = field(init=False, default=-math.inf)
    _previous_start: float = field(init=False, default=-math.inf)
    _last_serial: int = field(init=False, default=0)
    _round_number: int = field(init=False, default=0)
    _round: _Round = field(init=False, default_factory=_Round)
    _pauses: _Pauses = field(init=False, default_factory=_Pauses)
    _latency: _PageLatencies = field(init=False)
    _accepted: array[float] = field(init=False, default_factory=lambda: array("d"))
    """Unpaused-clock start times of the latest requests the host accepted (a compact
    array: a crawl may hold a controller for each of 100,000 hosts)."""
    _pushback: float | None = field(init=False, default=None)
    """The spacing at which the host last pushed back, while it still matters."""
    _rate_gap: float | None = field(init=False, default=None)
    """The gap the last rate limit set, while that pushback still matters."""
    _doubled: bool = field(init=False, default=False)
    """The last rate limit came too soon after the one before it."""
    _held: float | None = field(init=False, default=None)
    """While a rate limit is bracketed: the narrowest spacing the host accepted, the
    bracket's upper end (``_pushback``, the spacing it refused, is the lower)."""
    _probe_good: int = field(init=False, default=0)
    """Good answers at the probed spacing since it was set (see ``BISECT_HOLD``), or
    since the bracket was found."""
    _held_since: float | None = field(init=False, default=None)
    """When the bracket was found, while the gap holds at the accepted spacing."""
    _accepted_start: float = field(init=False, default=-math.inf)
    """When the latest request the host accepted started (on the wall clock: a strict
    limiter counts from its last accepted arrival, pauses included)."""
    _accepted_spacing: float | None = field(init=False, default=None)
    """The spacing between the two latest accepted starts: the pace the host took."""
    _overloaded_at: tuple[int, float] | None = field(init=False, default=None)
    """The limit at which the host was last overloaded, and when."""
    _last_decrease: Outcome | None = field(init=False, default=None)
    """How the answer that made the last decrease was read."""
    _slow_start: bool = field(init=False, default=True)
    """The limit doubles per good round until the first pushback, as TCP's does."""
    _survivors: int | None = field(init=False, default=None)
    """After the pushback that ended slow start: good answers of the round before it,
    the number of requests the host did serve at once."""
    _survivor_cap: int = field(init=False, default=1)
    """... which can give back at most one less than the limit that was too many."""
    _survivor_fetches: list[tuple[float, float]] = field(init=False, default_factory=list)
    """... and no more than were fetched together: each one's start and its start plus
    its latency (see :meth:`_count_survivor`)."""
    _survivors_until: int | None = field(init=False, default=None)
    """... the serial of the last request of that round: until each is back, the limit
    does not grow (see :meth:`_survivors_out`)."""
    _good_since_decrease: bool = field(init=False, default=False)
    """A good answer came from a request started after the last decrease."""
    _rise: tuple[float, int, float, bool, tuple[int, float] | None] | None = field(
        init=False, default=None
    )
    """After a decrease for a latency rise: the median that made it, and the limit, gap,
    slow start and overloaded limit from before it, to undo it if the rise was not the
    crawl's doing."""
    _rise_pages: tuple[float, ...] = field(init=False, default=())
    """Latencies of the slow pages started after that decrease."""
    _rise_seen: int = field(init=False, default=0)
    """Pages started after that decrease, slow or not."""
    _cycle: tuple[float, int, float] = field(init=False, default=(-math.inf, 0, 0.0))
    """The requests since the host's first start or the end of its last pause: since
    when, how many started, and how long that pause was (0 for none)."""
    _burst: tuple[int, float] | None = field(init=False, default=None)
    """After the first pause of a host that ran free: how many requests it had
    accepted before that refusal, and in how many seconds (its bucket's burst and
    what its rate added meanwhile)."""
    _outage: _Outage | None = field(init=False, default=None)
    """The run of overloads since the last good answer, if there is one."""
    _restored_at: float = field(init=False, default=-math.inf)
    """When the host last went back to its state from before an outage."""
    _answered_well: bool = field(init=False, default=False)
    """A page of the host came back 2xx or 3xx (see :attr:`answered_well`)."""
    _served: tuple[int, float] | None = field(init=False, default=None)
    """The limit of the latest full round that went well, and when."""
    _since_refusal: int = field(init=False, default=0)
    """Answers since the host last refused (see ``LONE_AFTER``)."""
    _unloaded: float | None = field(init=False, default=None)
    """The lowest median page latency of slow start's rounds: the host's pages at a
    load it took without slowing (see ``KNEE_RISE``)."""
    _fastest: float = field(init=False, default=math.inf)
    """The host's fastest answer of any kind (robots.txt, a 404, a refusal): how soon
    it can say no (see ``RAMP_PACE``)."""
    _credit: int = field(init=False, default=0)
    """Starts that may go without waiting for the gap (its floor still holds): the
    tokens a bucket whose rate and burst are known refilled during its pause."""

    def __post_init__(self) -> None:
        self._gap = self.cfg.min_delay
        self._concurrency = 1 if self.cfg.adaptive else self.cfg.max_concurrency
        self._latency = _PageLatencies(self.cfg.latency_window)

    def __repr__(self) -> str:
        return (
            f"<HostController delay={self._gap:.3g} concurrency={self._concurrency}"
            f" in_flight={len(self._live)} paused_until={self._pauses.until!r}>"
        )

    # -- what the scheduler reads --------------------------------------------------

    @property
    def delay(self) -> float:
        """The current gap between two request starts, in seconds."""
        return self._gap

    @property
    def concurrency(self) -> int:
        """The current limit of requests in flight."""
        return self._concurrency

    @property
    def in_flight(self) -> int:
        return len(self._live)

    @property
    def paused_until(self) -> float:
        """The end of the latest Retry-After pause, or ``-inf`` if there was none."""
        return self._pauses.until

    @property
    def best_latency(self) -> float | None:
        """The host's latency baseline: a low percentile of its recent page latencies,
        or None if unknown."""
        return self._latency.baseline

    @property
    def answered_well(self) -> bool:
        """The host has answered a page 2xx or 3xx (robots.txt and cached answers do
        not count). Only then is a 503 without Retry-After or a timeout evidence of
        overload: from a host that never answered well, it is a plain failure, left
        to Scrapy's RetryMiddleware as in stock Scrapy (a site down from the start
        was otherwise waited for at growing gaps, once per page)."""
        return self._answered_well

    @property
    def spacing(self) -> float:
        """The least time between two starts: the gap, or a doubled limit's
        :attr:`ramp_pace` while it opens (for every start: what a fleet's claims
        read, which do not run the controller)."""
        return max(self._gap, self.ramp_pace)

    @property
    def ramp_pace(self) -> float:
        """While a doubled limit opens, until its requests first fill it and for
        ``RAMP_PAGES`` slow-page latencies at most: the spacing of the starts above
        the most in flight yet (see ``RAMP_PACE``); else 0."""
        round_ = self._round
        over = round_.reached_limit or self._last_start >= round_.since + round_.pace_for
        return 0.0 if over else round_.pace

    @property
    def floor(self) -> float:
        """The narrowest gap allowed: ``max(min_delay, Crawl-delay)``."""
        return max(self.cfg.min_delay, self._crawl_delay)

    def ready_at(self, now: float) -> float:
        """The earliest time a request may start; ``<= now`` means now.

        ``inf`` while the host is at its concurrency limit: it becomes ready when a
        request is released, not at a time. Never earlier than a pause's end.
        """
        if len(self._live) >= self._concurrency:
            return math.inf
        gap = self.floor if self._credit else self._gap
        if len(self._live) >= self._round.paced_from:
            gap = max(gap, self.ramp_pace)  # above what the host served at once
        earliest = max(self._last_start + gap, self._pauses.until)
        return earliest if earliest > -math.inf else now

    # -- events ----------------------------------------------------------------------

    def start(self, now: float) -> Ticket:
        """A request starts now. Raises :class:`HostNotReady` if it may not."""
        ready = self.ready_at(now)
        if ready > now:
            raise HostNotReady(f"host not ready before {ready!r} (now {now!r})")
        ticket = Ticket(serial=next(_serials), started=now, round=self._round_number)
        since, started, paused_before = self._cycle
        self._cycle = (now if since == -math.inf else since, started + 1, paused_before)
        self._live[ticket.serial] = self._pauses.active(now)
        round_ = self._round
        if round_.pace and len(self._live) > round_.paced_from:
            round_.paced_from = len(self._live)
        self._previous_start, self._last_start = self._last_start, now
        self._last_serial = ticket.serial
        if self._credit:
            self._credit -= 1
        if len(self._live) >= self._concurrency:
            self._round.reached_limit = True
            if self._round.full_since is None:
                self._round.full_since = now
        return ticket

    def finish(
        self,
        ticket: Ticket,
        now: float,
        status: int,
        latency: float | None = None,
        retry_after: float | None = None,
        *,
        page: bool = True,
    ) -> Reaction:
        """A response came back. ``latency`` is the fetch time (default: since start);
        ``retry_after`` is the parsed header in seconds, if the response had one.

        ``page`` is False for an answer that is not one of the host's pages (robots.txt):
        a throttle status still counts, but its latency and a good status say nothing
        about the pages, so they change nothing. Only 2xx pages set the latency
        baseline: redirects and error answers come back in milliseconds from hosts
        whose pages take hundreds."""
        active_start = self._release(ticket, now)
        if active_start is None:
            return _IGNORED
        if latency is None or not math.isfinite(latency) or latency < 0:
            latency = max(0.0, now - ticket.started)
        if latency < self._fastest:
            self._fastest = latency
        if status in self.cfg.throttle_codes:
            paused = None
            if retry_after is not None and math.isfinite(retry_after) and retry_after >= 0:
                paused = self._pause(now, retry_after)
            if status == 429 or (paused is not None and not self._limit_set_pace(ticket)):
                reaction = self._rate_limit(ticket, now, paused, counts=status == 429)
            else:
                reaction = self._overload(ticket, now, paused=paused)
            self._since_refusal = 0
            asked_later = status == 429 or paused is not None
            return replace(reaction, refused=asked_later or self._answered_well)
        self._accepted.append(active_start)
        if len(self._accepted) > self.cfg.pace_samples:
            del self._accepted[0]
        self._note_accepted(ticket.started)
        self._since_refusal += 1
        if not 200 <= status < 400:
            if page and ticket.round == self._round_number:
                self._count_served(ticket, status, now)
            return Reaction(kind="neutral", decreased=False)
        if not page:
            return Reaction(kind="good", decreased=False)
        self._answered_well = True
        if status < 300:
            self._latency.add(latency, now)
            if latency > self.cfg.fast_latency and ticket.round == self._round_number:
                self._note_round_page(latency, now, own=ticket.started >= self._round.since)
        threshold = self._latency_threshold()
        slow = latency > threshold
        if status < 300 and self._rise is not None and self._acted_on(ticket):
            verdict = self._not_our_rise(latency if slow else None, now)
            if verdict or (verdict is None and slow):
                return Reaction(kind="neutral", decreased=False)  # undone, or still judging
        if not slow:
            return self._good(ticket, now, latency)
        if status < 300 and ticket.round != self._round_number:
            # Served in the overload's round: slow or not, the host served it at once
            # with the others (the slow pages of a host that mixes them are its normal).
            self._count_survivor(ticket, now, latency)
        rise = self._latency.rise(threshold, self.cfg.latency_factor) if status < 300 else None
        if rise is not None:
            return self._latency_rise(ticket, now, rise)
        return Reaction(kind="neutral", decreased=False)  # a slow page, not a rise

    def _latency_rise(self, ticket: Ticket, now: float, median: float) -> Reaction:
        """A sustained rise: an overload that does not mark a pushback, remembered so
        that it can be undone if the lower load does not bring the latency down."""
        before = (median, self._concurrency, self._gap, self._slow_start, self._overloaded_at)
        reaction = self._overload(ticket, now, marks_pushback=False)
        if reaction.decreased:
            self._rise, self._rise_seen = before, 0
        return reaction

    def _not_our_rise(self, latency: float | None, now: float) -> bool | None:
        """Slow pages started after a decrease for a latency rise are as slow as before
        it: the host's pages became slower, not because of the crawl. Undo the decrease,
        and take their latency as the host's new normal (True). False: the lower load
        helped; None: too few such pages yet. ``latency`` is None for a page below the
        threshold: on a host that mixes fast and slow pages it is another kind of page,
        but when most pages of the lower load are fast, the lower load helped."""
        rise = self._rise
        assert rise is not None
        self._rise_seen += 1
        if latency is not None:
            self._rise_pages += (latency,)
        pages = self._rise_pages
        if len(pages) < RISE_PAGES:
            if self._rise_seen >= 2 * RISE_WINDOW:
                self._rise, self._rise_pages = None, ()
                return False
            return None
        median = sorted(pages)[(len(pages) - 1) // 2]
        self._rise, self._rise_pages = None, ()
        if median < RISE_HELD * rise[0]:
            return False  # the lower load helped: a real overload
        _, limit, gap, slow_start, self._overloaded_at = rise
        if self.cfg.adaptive:
            self._concurrency = max(self._concurrency, min(limit, self.cfg.max_concurrency))
        self._set_gap(min(self._gap, gap))
        self._slow_start = slow_start
        self._latency.new_normal(median, self.cfg.latency_factor, now)
        self._unloaded = None
        self._fresh_round(now)
        return True

    def _latency_threshold(self) -> float:
        """Above ``max(fast_latency, latency_factor x baseline)`` a page is slow."""
        return max(self.cfg.fast_latency, self.cfg.latency_factor * (self._latency.baseline or 0.0))

    def fail(self, ticket: Ticket, now: float, timeout: bool = False) -> Reaction:
        """The request failed without a response. Only a timeout is a throttle signal:
        DNS and connection errors say nothing about the host's load."""
        if self._release(ticket, now) is None:
            return _IGNORED
        if timeout:
            reaction = self._overload(ticket, now)
            self._since_refusal = 0
            return replace(reaction, refused=self._answered_well)
        return Reaction(kind="neutral", decreased=False)

    def cancel(self, ticket: Ticket) -> None:
        """The request never reached the host (dropped, cached, denied, spider closed):
        free its place and learn nothing. If it was the latest start, the next
        request need not wait a gap for it: a crawl replayed from Scrapy's HTTP
        cache would otherwise go at the host's pace with no request sent."""
        if self._live.pop(ticket.serial, None) is None:
            return
        if ticket.serial == self._last_serial:
            self._last_start = self._previous_start
        since, started, paused_before = self._cycle
        if ticket.started >= since and started > 0:
            self._cycle = (since, started - 1, paused_before)  # the host never saw it

    def sent(self, ticket: Ticket, now: float) -> None:
        """The request left for the host ``now``, later than it started: the gap
        counts from here. Between the scheduler handing a request out and the
        downloader sending it, a busy reactor can take tens of milliseconds, and a
        host that counts arrivals would see two requests closer than the gap."""
        if ticket.serial in self._live and now > self._last_start:
            self._last_start = now

    def set_crawl_delay(self, seconds: float | None) -> None:
        """The robots.txt Crawl-delay, or None when there is none. It is a floor,
        honoured even above ``max_delay``: the site owner asked for it."""
        if seconds is not None and (not math.isfinite(seconds) or seconds < 0):
            raise ValueError(f"crawl delay {seconds!r}: expected a finite number >= 0")
        self._crawl_delay = seconds or 0.0
        self._gap = self._clamp(self._gap)

    # -- the rules -------------------------------------------------------------------

    def _release(self, ticket: Ticket, now: float) -> float | None:
        """Free the ticket's place; None if it was already released (or is not ours)."""
        at_limit = len(self._live) >= self._concurrency
        active_start = self._live.pop(ticket.serial, None)
        if active_start is None:
            return None
        gap_passed = now >= self._last_start + self._gap and now >= self._pauses.until
        round_ = self._round
        if at_limit and gap_passed:
            round_.held_back = True
        if round_.full_since is not None and len(self._live) < self._concurrency:
            round_.full_time += max(0.0, now - round_.full_since)
            round_.full_since = None
        return active_start

    def _pause(self, now: float, retry_after: float) -> float:
        self._pauses.extend(now, now + min(retry_after, self.cfg.max_retry_after))
        return self._pauses.until

    def _acted_on(self, ticket: Ticket) -> bool:
        """At most one decrease per round, as TCP reacts once per window."""
        return ticket.round == self._round_number

    def _new_round(self, decrease: Outcome, now: float) -> None:
        self._last_decrease = decrease
        self._credit = 0
        self._round_number += 1
        self._slow_start = False
        self._good_since_decrease = False
        self._rise, self._rise_pages = None, ()
        self._fresh_round(now)

    def _fresh_round(self, now: float) -> None:
        """Round bookkeeping starts again: the limit changed."""
        self._round = _Round(since=now)
        if len(self._live) >= self._concurrency:
            self._round.full_since = now

    def _limit_set_pace(self, ticket: Ticket) -> bool:
        """The pace was set by the concurrency limit, not by the gap: the limit can be
        halved, and the gap is at its floor.

        A throttle code other than 429 that carries a Retry-After then reads as an
        overload with a pause. A server with a few workers answers 503 with Retry-After
        above them: its pace only followed the limit, and a gap set from that pace would
        hold the host below what the halved limit serves. A rate limiter answering that
        way is still found: once it refuses a limit below one it was overloaded at,
        halving did not help, and from a limit of 1 on it is a rate limit anyway. (A
        limiter with no burst that refuses two requests started together, but takes
        more than one at a time can give, stays at a limit of 1, as it does when it
        answers 503 without Retry-After.)

        An answer from before the last decrease is read as the one that made it.
        """
        if not self._acted_on(ticket):
            return self._last_decrease == "overload"
        overloaded = self._overloaded_at
        return (
            self.cfg.adaptive
            and self._concurrency > 1
            and self._gap <= self.floor
            and (overloaded is None or self._concurrency >= overloaded[0])
        )

    def _overload(
        self,
        ticket: Ticket,
        now: float,
        *,
        marks_pushback: bool = True,
        paused: float | None = None,
    ) -> Reaction:
        """The host struggles: halve the limit; at a limit of 1, double the gap.

        ``marks_pushback`` is False for a latency rise: the host answered, only slowly, and a
        slow answer does not mark the spacing at which it pushed back (a host whose
        pages just became slower would otherwise close its gap gently for good).
        ``paused`` is the end of the pause the answer asked for, if any.
        """
        if not self._acted_on(ticket):
            return Reaction(kind="overload", decreased=False, paused_until=paused)
        if marks_pushback and paused is None and self._since_refusal >= LONE_AFTER:
            return Reaction(kind="overload", decreased=False)  # a lone one: see LONE_AFTER
        self._survivors, self._survivor_fetches = None, []
        streak = self._note_refusal(now) if marks_pushback else None
        if not marks_pushback:
            self._outage = None  # the host answered, if slowly: not an outage
        if self.cfg.adaptive and self._concurrency > 1:
            if self._slow_start and marks_pushback:
                self._survivors, self._survivor_cap = 0, self._concurrency - 1
                self._survivors_until = self._last_serial
            limit, earlier = self._concurrency, self._overloaded_at
            if earlier is not None and not self._good_since_decrease:
                # Overloaded again with no good answer in between (an outage): the
                # limit to be wary of is still the first one.
                limit = max(limit, earlier[0])
            served = self._served
            if (
                not marks_pushback
                or served is None
                or served[0] < limit
                or now - served[1] >= self.cfg.probe_time
            ):
                self._overloaded_at = (limit, now)
            # else: a full round at this limit went well lately; refused at it, the host
            # is not known to be full there (a 503 whatever the load): no hold below it.
            self._concurrency = (self._concurrency + 1) // 2
        else:
            spacing, _ = self._pushback_spacing(now)
            if self._gap > self.floor and self._good_since_decrease:
                # Refused at the gap it had just taken answers at: that gap is the
                # spacing refused (an average over the pace window would mix in the
                # wider gaps of the way back).
                spacing = self._gap
            last = self._pushback
            outage = marks_pushback and last is not None and not self._good_since_decrease
            growth = OUTAGE_GROWTH if outage else 2.0
            gap = self.cfg.initial_backoff if spacing is None else growth * spacing
            if outage and streak is not None:
                # The first request after the outage ends must not come long after
                # it: the gap grows by OUTAGE_SHARE, or to that share of the time
                # refused, if more.
                lasted = now - streak.since
                gap = min(gap, max((1 + OUTAGE_SHARE) * self._gap, OUTAGE_SHARE * lasted))
            self._set_gap(gap)
            if streak is not None and streak.refusals >= OUTAGE_REFUSALS:
                before = streak.spacing
                streak.proven = streak.proven or (
                    before is not None and self._gap >= OUTAGE_PROOF * before
                )
            if marks_pushback:
                if outage and spacing is not None and last is not None:
                    # Refused again with no good answer in between (an outage): the
                    # pace the host last took is still the one to come back to.
                    spacing = min(spacing, last)
                self._remember_pushback(spacing, rate_gap=None)
        self._new_round("overload", now)
        return Reaction(kind="overload", decreased=True, paused_until=paused)

    def _note_refusal(self, now: float) -> _Outage:
        """Count a refusal into the run of them since the last good answer; the first
        of a run remembers the host as it was."""
        streak = self._outage
        if streak is not None and not self._good_since_decrease:
            streak.refusals += 1
            return streak
        spacing, _ = self._pushback_spacing(now)
        active_now = self._pauses.active(now)
        recent = sum(1 for t in self._accepted if t >= active_now - self.cfg.max_delay)
        if recent < self.cfg.pace_samples:
            spacing = None  # no steady pace to go back to: a burst, or a new host
        self._outage = streak = _Outage(
            since=now,
            spacing=spacing,
            gap=self._gap,
            limit=self._concurrency,
            slow_start=self._slow_start,
            overloaded_at=self._overloaded_at,
            pushback=self._pushback,
            rate_gap=self._rate_gap,
        )
        return streak

    def _outage_over(self, now: float) -> None:
        """A good answer ends a run of refusals; if the run proved an outage, the host
        goes straight back to how it was before it (at most once per ``probe_time``:
        a limit that went down is not taken for an outage over and over)."""
        streak, self._outage = self._outage, None
        if streak is None or not streak.proven or now - self._restored_at < self.cfg.probe_time:
            return
        self._restored_at = now
        if self.cfg.adaptive:
            self._concurrency = max(self._concurrency, min(streak.limit, self.cfg.max_concurrency))
        self._set_gap(min(self._gap, streak.gap))
        self._slow_start, self._overloaded_at = streak.slow_start, streak.overloaded_at
        self._remember_pushback(streak.pushback, rate_gap=streak.rate_gap)
        self._survivors, self._survivor_fetches = None, []
        self._fresh_round(now)

    def _rate_limit(
        self, ticket: Ticket, now: float, paused: float | None, *, counts: bool
    ) -> Reaction:
        """The host counts requests per unit of time: fewer in flight alone does not
        help a fast host, so the gap is set from the pace the host accepted.
        ``counts``: the host said so itself (429), so it may be a bucket with a burst."""
        if not self._acted_on(ticket):
            return Reaction(kind="rate_limit", decreased=False, paused_until=paused)
        accepted, lasted, paused_before = self._end_cycle(ticket, now, paused)
        if paused is not None and self._still_closed(
            now, paused, accepted, paused_before, ticket.serial
        ):
            return self._closed(now, paused)
        spacing, measured = self._pushback_spacing(now)
        again = spacing is not None and self._refused_again(spacing)
        self._survivors, self._survivor_fetches, self._outage = None, [], None
        if self.cfg.adaptive:
            self._concurrency = (self._concurrency + 1) // 2
        burst, self._burst = self._burst, None
        bucket = None
        if counts and paused is not None and burst is not None and paused_before > 0:
            rate = _bucket_rate(burst, accepted, lasted, paused_before)
            if rate is not None:
                bucket = rate, _bucket_credit(burst, rate, paused - now, self.cfg.margin)
        if bucket is not None:
            # The second pause of a bucket with a burst: its rate is known now. Hold
            # half the margin above its spacing, and probe below it only gently; what
            # the pause refilled of its burst goes at once when it ends.
            rate, credit = bucket
            self._set_gap((1 + self.cfg.margin / 2) / rate)
            self._doubled = False
            self._remember_pushback(1 / rate, rate_gap=self._gap)
            self._new_round("rate_limit", now)
            # A fixed limit says nothing of how many the host serves at once: the
            # burst would go as many at a time (a host with 3 workers behind the
            # bucket answered 5 of 8 credited starts 503).
            self._credit = credit if self.cfg.adaptive else 0
            return Reaction(kind="rate_limit", decreased=True, paused_until=paused)
        probe = self._bracket(ticket, now)
        if probe is not None:
            self._set_gap(probe)
            self._doubled = False
            self._new_round("rate_limit", now)
            return Reaction(kind="rate_limit", decreased=True, paused_until=paused)
        pushback = spacing
        if spacing is None:
            self._set_gap(self.cfg.initial_backoff)  # nothing is known of a pace
        elif again:
            # Refused again this soon: double; twice in a row, quadruple (far off).
            self._set_gap((4 if self._doubled else 2) * spacing)
        elif measured and counts and paused is not None and self._rate_gap is None:
            # The first pause of a host that ran free: a bucket accepted its burst at
            # our pace, so the measured pace overstates its rate. The pace the host
            # took through the pause (what it accepted over the run and the pause)
            # understates it where the pause could refill more than the burst, and
            # overstates it a little where it could not, the less so the longer the
            # run (the farm's "hybrid" host: 15 a second for 4 s from a bucket of 10
            # with a burst of 20, 10.7 a second through a pause of 1.6 s). The gap
            # goes geometrically half way between the pace halved and the pace through
            # the pause, never slower than the latter and never at the spacing just
            # refused (a short pause, Retry-After: 0), and closes only gently from
            # there until the next refusal tells the bucket's rate (``_bucket_rate``).
            halved = 2 * spacing
            through = (lasted + (paused - now)) / accepted if accepted else 0.0
            if through:
                towards = min(through, math.sqrt(halved * through))
                self._set_gap(max((1 + self.cfg.margin) * spacing, towards))
            else:
                self._set_gap(halved)
            pushback = halved / (1 + self.cfg.margin)
            if accepted and lasted > 0:
                self._burst = (accepted, lasted)
        elif measured:
            self._set_gap((1 + self.cfg.margin) * spacing)
        else:
            # No pace measured (the first answers): back off to initial_backoff, and
            # come back towards what the controller allowed as the approach goes.
            self._set_gap(max(2 * spacing, self.cfg.initial_backoff))
        self._doubled = again
        self._remember_pushback(pushback, rate_gap=self._gap if spacing is not None else None)
        self._new_round("rate_limit", now)
        return Reaction(kind="rate_limit", decreased=True, paused_until=paused)

    def _still_closed(
        self, now: float, paused: float, accepted: int, paused_before: float, serial: int
    ) -> bool:
        """Refused with a pause of ``initial_backoff`` or more, and the host took
        nothing since its last pause (or, before any pause, no page at all, and no
        earlier request is in flight): it is
        closed for now, whatever the pace. Its refusals were paced by its own pauses
        and say nothing of the pace it takes once it opens (a pause shorter than
        ``initial_backoff``, ``Retry-After: 0`` or a date in the past, is no brake:
        such a host backs off by the rate-limit rules)."""
        # (1e-9: now + 1.0 - now can be 0.9999999999999998)
        if paused - now + 1e-9 < self.cfg.initial_backoff:
            return False
        if paused_before > 0:
            return accepted == 0
        # Before any pause: no page answered well, and none started before this one
        # still in flight (a host takes requests in the order they arrive: a limiter
        # that took the first of a burst and refused the rest is not closed).
        return not self._answered_well and all(s > serial for s in self._live)

    def _closed(self, now: float, paused: float) -> Reaction:
        """A refusal while the host is closed: poll it no faster than its pauses, and
        from the second on ever more rarely (the gap grows as an outage's does, so
        that a host that never opens is asked less and less often, and the first
        request after it opens comes at most a quarter of the closed time late); once
        the closure is proven, the first good answer brings back the host as it was
        when the closure began (``_outage_over``).

        A host closed for 5 s, answering ``429`` with ``Retry-After: 1`` and then
        serving 6 at once, took 324 s for 150 pages in the controller simulation:
        its refusals, one a pause, were read as its pace, and the gap closed only
        gently towards 2.4 s. Now 8.2 s (6.25 s possible)."""
        streak = self._note_refusal(now)
        # Proven as an outage is: closed from the start, or polled at a gap far above
        # the pace the host took steadily before. A limiter slower than its own
        # Retry-After (one page a minute, Retry-After: 1) refuses the poll after each
        # page too; brought back at every page, it was refused 3.5 times as often.
        before = streak.spacing
        streak.proven = (
            streak.proven
            or not self._answered_well
            or (before is not None and self._gap >= OUTAGE_PROOF * before)
        )
        if self.cfg.adaptive:
            self._concurrency = (self._concurrency + 1) // 2
        self._burst = None
        if streak.refusals > 1:  # the first pause alone says when to come back
            lasted = now - streak.since
            grown = max((1 + OUTAGE_SHARE) * self._gap, OUTAGE_SHARE * lasted)
            self._set_gap(max(self.cfg.initial_backoff, min(2 * self._gap, grown)))
        self._new_round("rate_limit", now)
        return Reaction(kind="rate_limit", decreased=True, paused_until=paused)

    def _end_cycle(
        self, ticket: Ticket, now: float, paused: float | None
    ) -> tuple[int, float, float]:
        """The requests since the last pause (or the first start) end with this refusal:
        how many the host accepted, in how many seconds, after a pause of how long; a
        pause starts the next run. A bucket takes requests in the order they arrive:
        those started before the refused one were accepted (some are still in
        flight), those started after it were not."""
        since, started, paused_before = self._cycle
        later = sum(1 for serial in self._live if serial > ticket.serial)
        if paused is not None:
            self._cycle = (paused, 0, paused - now)
        return max(0, started - 1 - later), max(0.0, ticket.started - since), paused_before

    def _refused_again(self, spacing: float) -> bool:
        """The host refused again before the gap the last rate limit set had closed by
        half the margin: that decrease was not enough (a bursty limiter accepts our own
        pace until its bucket is empty, so the measured pace can be far above its
        rate; a strict one refuses the second request after each pause)."""
        last = self._rate_gap
        return last is not None and spacing * (1 + self.cfg.margin / 2) > last

    def _remember_pushback(self, spacing: float | None, *, rate_gap: float | None) -> None:
        self._pushback = spacing
        self._rate_gap = rate_gap
        self._held, self._probe_good, self._held_since = None, 0, None

    def _note_accepted(self, started: float) -> None:
        """The host accepted a request that started at ``started``: if it is the latest,
        its spacing from the previous accepted one is the pace the host took."""
        last = self._accepted_start
        if started > last:
            self._accepted_start = started
            self._accepted_spacing = started - last if math.isfinite(last) else None

    def _bracket(self, ticket: Ticket, now: float) -> float | None:
        """Refused at a spacing below one the host accepted: the two bracket its limit,
        so the next probe halves the bracket (in logarithmic terms) instead of the gap
        closing gently from the accepted spacing; a bracket within the margin is
        found, and the gap goes back to the accepted spacing. The gap to set, or None
        where the usual rules apply: the gap did not set the pace, nothing is known to
        be accepted below the refusal, or a bracket not yet found was refused at its
        accepted end (a bucket's burst, not its rate, had let it through)."""
        margin = self.cfg.margin
        refused = ticket.started - self._accepted_start
        held, last = self._held, self._accepted_spacing
        if self._gap <= self.floor or not (math.isfinite(refused) and refused > 0):
            return None
        if held is not None and refused >= held * (1 - 1e-9):
            if self._bisecting() or self._probe_good < BISECT_HOLD:
                return None  # not accepted there for long: the usual rules
            # Refused at the spacing found after it held: the send jitter of a busy
            # machine moved two requests closer at the server than here (or the limit
            # went down, and the next refusal comes soon). Hold half the margin wider.
            refused, held, found = held, held * (1 + margin / 2), True
        else:
            if last is not None and refused < last and (held is None or last < held):
                held = last  # the host took this spacing just before: a gentle probe
            if held is None or held <= refused:
                return None
            found = held <= refused * (1 + BRACKET * margin)
            if self._held is None and held <= refused * (1 + margin / 2):
                return None  # nothing bracketed, and too little to bisect
        probe = held if found else math.sqrt(refused * held)
        self._remember_pushback(refused, rate_gap=probe)
        self._held = held
        self._held_since = now if found else None
        return probe

    def _bisecting(self) -> bool:
        held, pushback = self._held, self._pushback
        return (
            held is not None
            and pushback is not None
            and held > pushback * (1 + BRACKET * self.cfg.margin)
        )

    def _probe_held(self, now: float) -> None:
        """A good answer while bisecting: after ``BISECT_HOLD`` of them the probed gap
        counts as accepted, and the next probe is the middle of the narrower bracket;
        once that is within the margin, the gap holds there (see
        :meth:`_holding`)."""
        held, pushback = self._held, self._pushback
        assert held is not None and pushback is not None
        self._probe_good += 1
        if self._probe_good < BISECT_HOLD:
            return
        # What the host accepted is the spacing it saw, which a busy machine widens
        # beyond the gap (nginx "rate": a probe of 0.326 s taken at 0.346 s, and the
        # next request at 0.335 s refused); a spacing as wide as the bracket's top
        # (after a pause, or where the answers set the pace) tested only the gap.
        spacing = self._accepted_spacing
        tested = spacing if spacing is not None and self._gap < spacing < held else self._gap
        self._held, self._probe_good = tested, 0
        if self._bisecting():
            self._set_gap(math.sqrt(pushback * tested))
        else:
            self._set_gap(tested)
            self._held_since = now

    def _holding(self, now: float) -> bool:
        """The limit is bracketed within the margin: probing inside the bracket
        only costs pauses. The gap holds at the accepted spacing for ``probe_time`` and
        ``probe_requests`` answers, then probes below it gently, for a raised limit: the
        host refuses about one in ``probe_requests`` requests, as elsewhere. Simulated
        hosts: a hold of half as many answers let a bucket of 1/s refuse 2.7 % (1.7 %);
        the hold delays finding a limit raised by its owner (2/s to 10/s: 0.64 of the
        new rate in the 300 s after, against 0.69 before bisection)."""
        since = self._held_since
        if since is None:
            return False
        self._probe_good += 1
        if now - since < self.cfg.probe_time or self._probe_good < self.cfg.probe_requests:
            return True
        self._held_since = None
        return False

    def _good(self, ticket: Ticket, now: float, latency: float) -> Reaction:
        """Close the gap first; grow the limit per full round that used it: doubling in
        slow start, by one after the first pushback."""
        good = Reaction(kind="good", decreased=False)
        if ticket.round != self._round_number:
            self._count_survivor(ticket, now, latency)
            return good
        self._good_since_decrease = True
        if self._outage is not None:
            self._outage_over(now)
        self._round.good += 1
        if self._gap > self.floor:
            self._close_gap(now)
        self._grow(now)
        return good

    def _count_served(self, ticket: Ticket, status: int, now: float) -> None:
        """An error answer that a rate limiter let through: a probed spacing counts it
        as accepted (nginx's "rate" host links to missing pages too), and after a rate
        limit a missing page (``NOT_FOUND``) closes the gap as a good page does: the
        limiter counted it (that host's 404s at the 1 s gap after two refusals left the
        gap at 1 s, 2 s of its 15 s crawl). After an overload it does not: a cheap 404
        says nothing of the capacity that a 503 said was short. A client error
        (404) also counts towards a round in slow start like a good page, since the
        host did serve it at that load, but for half the round at most: missing pages
        are cheap, and a round of them proves little about the pages. nginx with
        limit_rate (the real benchmark's "slow" host): bodies of 1 to 7 s and a third
        of the links missing; counting only the 200s, the round at a limit of 4 waited
        5 s for its fourth body (0.72 of its possible time; 0.96 with 404s). Without
        the half, nginx's limit_conn 2 host (bodies at 96 KB/s) doubled to 8 on 404s
        alone before its first bodies were done, and answered 13 to 15 503s, not 3."""
        if self._gap > self.floor and self._bisecting():
            self._probe_held(now)
        elif self._gap > self.floor and self._held is not None:
            self._holding(now)
        elif self._gap > self.floor and status in NOT_FOUND and self._last_decrease == "rate_limit":
            self._close_gap(now)
        round_ = self._round
        if self._slow_start and status < 500 and 2 * (round_.served + 1) <= self._concurrency:
            round_.served += 1
            round_.good += 1
            self._grow(now)

    def _grow(self, now: float) -> None:
        """Grow the limit if a full round at it used it and loaded the host."""
        round_, floor = self._round, self.floor
        if not self.cfg.adaptive or self._rise is not None:  # judging a rise: lower load
            return
        # Where the gap is still above its floor, the limit grows only if it held the
        # host back (the limit, not the gap, set the pace).
        used = round_.reached_limit if self._gap <= floor else round_.held_back
        if round_.good < self._concurrency or not used or not self._loaded(round_, now):
            return
        self._served = (self._concurrency, now)
        if self._concurrency >= self.cfg.max_concurrency or self._survivors_out():
            return
        overloaded_at = self._overloaded_at
        if overloaded_at is not None and self._concurrency + 1 >= overloaded_at[0]:
            if now - overloaded_at[1] < self.cfg.probe_time:
                # The host was overloaded at that limit: try it again only now and then.
                return
            if self._concurrency >= overloaded_at[0]:
                self._overloaded_at = None  # a full round there went well: it has changed
        if self._found_room(now):
            return
        grown = 2 * self._concurrency if self._slow_start else self._concurrency + 1
        served, self._concurrency = self._concurrency, min(self.cfg.max_concurrency, grown)
        self._since_refusal = 0  # a refusal at the new limit says it is too many
        self._fresh_round(now)
        if self._slow_start:
            self._round.pace, self._round.paced_from = self._doubling_pace(), served
            self._round.pace_for = RAMP_PAGES * (self._latency.slow or 0.0)

    def _doubling_pace(self) -> float:
        """The spacing of a doubled limit's starts (``RAMP_PACE``); 0 where it would
        not be below the host's slow-page latency: its refusals come back no sooner
        than its pages, and no pace gets one back before the next start."""
        pace, slow = RAMP_PACE * self._fastest, self._latency.slow
        if slow is None or not pace < slow:
            return 0.0
        return min(pace, slow / self._concurrency)

    def _survivors_out(self) -> bool:
        """Requests of the round whose overload ended slow start are still out: they
        tell how many the host served at once, so the limit waits for them. Grown
        before them, it went back above the halved limit on the doubled one's say (the
        farm's ``mixed`` host in a fleet: a round of fast pages at 4 came back before
        the slow survivors, and 5 met a 503)."""
        until = self._survivors_until
        if until is None:
            return False
        if self._survivors is not None and any(serial <= until for serial in self._live):
            return True
        self._survivors_until = None
        return False

    def _note_round_page(self, latency: float, now: float, *, own: bool) -> None:
        """A slow-enough page of the current round, for ``KNEE_RISE``: in slow start
        judged as soon as half the round's pages are in, not only once it is full
        (the doubling's queue builds meanwhile). ``own``: started since the limit
        last changed."""
        for pages in (self._round.pages, self._round.own) if own else (self._round.pages,):
            pages.append(latency)
            if len(pages) > LATENCY_SAMPLES:
                del pages[0]
        pages = self._round.pages
        if self.cfg.adaptive and self._slow_start and 2 * len(pages) >= self._concurrency:
            self._found_room(now)

    def _found_room(self, now: float) -> bool:
        """A round whose pages became ``KNEE_RISE`` times slower than in slow start's
        lightest round does not grow the limit: the host queues what is above its
        room. In slow start the limit goes back to that room, estimated as the limit
        over the slowdown (a server whose pages take n / room times as long with n
        in flight), never below half the limit (the limit before the doubling, or
        less where the ceiling cut the doubling short); after slow start it
        holds. A rise that a lower load does not bring down (a new normal, see
        :meth:`_not_our_rise`) forgets the reference."""
        pages = sorted(self._round.pages)
        if len(pages) < KNEE_PAGES:
            return False
        median = pages[(len(pages) - 1) // 2]
        own = sorted(self._round.own)
        # Read from the round's own pages once there are enough (KNEE_OWN_PAGES).
        loaded = own[(len(own) - 1) // 2] if len(own) >= KNEE_OWN_PAGES else median
        unloaded = self._unloaded
        if unloaded is not None and loaded > KNEE_RISE * unloaded:
            median = loaded
            if self._slow_start:
                self._slow_start = False
                room = round(self._concurrency * unloaded / median)
                self._concurrency = max((self._concurrency + 1) // 2, room)
                # The queue of the doubling is not read as a rise: its answers are
                # from before this decrease (at most one per round).
                self._round_number += 1
            self._fresh_round(now)
            return True
        if unloaded is None or (self._slow_start and median < unloaded):
            # Set in slow start, at the lightest loads; after it the rounds'
            # medians, many and jittered, would only drift it down.
            self._unloaded = median
        return False

    def _loaded(self, round_: _Round, now: float) -> bool:
        """The limit was full for as long as the host's answers take (its slow pages,
        not its fastest): a round of millisecond answers proves nothing."""
        full = round_.full_time
        if round_.full_since is not None:
            full += now - round_.full_since
        return full >= PROBE_SHARE * (self._latency.slow or 0.0)

    def _count_survivor(self, ticket: Ticket, now: float, latency: float) -> None:
        """A good answer from the round of the overload that ended slow start: the host
        served that many at once, so the halved limit goes back up to it (and the
        limit above it is the one it was overloaded at). A slow page counts too: it
        was served (the farm's ``mixed`` host, whose dynamic pages take 40 times its
        static ones, had its slow survivors left out, stayed marked overloaded at 8
        only, and tried 5 at the next full round of 4: one more 503). Until the last
        of them is back the limit does not grow (:meth:`_survivors_out`).

        At once means fetched together: no more of them count than overlapped, each
        for its time at the host. A round whose starts were spread out has answers
        that did not: the farm's ``narrow`` host (100 ms pages, 503 and
        Retry-After: 1 above 2 at once), crawled by a fleet, answered 3 of a round of 4
        well (on the fake clock: one started after another was done at the server
        while the 503 was still to be read); counting 3 put the limit back at 3,
        above what it serves,
        and its next 503 there read as a rate limit (the gap set from the pace). The
        in-flight count cannot tell: the 503 and every survivor were in flight together
        here. So each fetch counts for the time it was surely at the host: no earlier
        than its answer less its page time, no later than its start plus that page
        time. The page time is its latency (the time to the headers), or
        ``SURVIVOR_PAGE_TIME`` times the host's baseline if that is less: a busy
        crawler's latencies hold its own delays. Its start alone would take a send
        that came late for an early fetch (a fleet worker whose reactor was busy sent
        two requests 46 ms after their claim, after the one before them was done: the
        farm's ``narrow`` again), its answer alone would take answers read late
        together for fetches that met. A fetch read too late to be sure of counts
        alone, and then the limit merely stays halved."""
        if self._survivors is None or ticket.round != self._round_number - 1:
            return
        self._survivors += 1
        # At the host for ``page`` from some time between its start and its answer
        # less its latency: surely from ``now - page`` to ``ticket.started + page``
        # ((from, to): after ``to`` when it was read too late to be sure: it counts
        # alone).
        baseline = self._latency.baseline
        page = latency if baseline is None else min(latency, SURVIVOR_PAGE_TIME * baseline)
        self._survivor_fetches.append((now - page, ticket.started + page))
        overloaded = self._overloaded_at
        if overloaded is None or self._survivors < self._concurrency:
            return
        fetches = self._survivor_fetches
        # A state of an earlier release counted survivors without their fetches.
        together = _most_together(fetches) + self._survivors - len(fetches)
        served = max(self._concurrency, min(self._survivors, self._survivor_cap, together))
        self._overloaded_at = (served + 1, overloaded[1])
        if served > self._concurrency:
            self._concurrency = served
            self._round = _Round(since=now)

    def _close_gap(self, now: float) -> None:
        """Halve the excess over the target (the floor, or just above the spacing at
        which the host last pushed back), then close gently near that spacing: a
        rate-limited host pauses the crawl for every overshoot. While a rate limit is
        bracketed, probe by bisection instead, and hold once it is found."""
        if self._bisecting():
            self._probe_held(now)
            return
        if self._holding(now):
            return
        gap, pushback, cfg, floor = self._gap, self._pushback, self.cfg, self.floor
        share = cfg.recovery / (1 + cfg.recovery)
        if pushback is None:
            gap = floor + (gap - floor) * (1 - share)
            if gap - floor <= SNAP:
                gap = floor
        else:
            # Near the pushback the gap shrinks by the margin per probe_time (at the
            # pace the answers come, which may be slower than one per gap), or per
            # probe_requests responses if slower; below it the host takes more than it
            # did, so the probe speeds up as the gap shrinks.
            speed = max(1.0, pushback / gap) ** 2
            pace = max(gap, self._accepted_spacing or 0.0)
            step = cfg.margin * gap * min(pace / cfg.probe_time, 1 / cfg.probe_requests) * speed
            top = pushback * (1 + cfg.margin)
            if gap > top:
                # Back towards the pushback after a doubling: the excess halves per
                # response, but shrinks no faster than e-fold per approach_time: a
                # limiter accepts a few requests after each pause, and they must not
                # undo it.
                if self._rate_gap is not None:
                    share = min(share, gap / cfg.approach_time)
                step = max(step, (gap - top) * share)
            gap -= step
        self._set_gap(gap)
        self._since_refusal = 0  # a refusal at the narrower gap says it is too narrow
        if self._gap <= floor:
            self._remember_pushback(None, rate_gap=None)

    def _pushback_spacing(self, now: float) -> tuple[float | None, bool]:
        """The spacing at which the host pushed back, and whether it was measured.

        The measured spacing of accepted requests, never below the gap (samples from
        before an earlier decrease may linger); without a measurement, the spacing
        the controller allowed; None when nothing is known at all.

        A measured pace slower than the spacing allowed (the crawl had fewer requests
        to send than the limit let through) is still the spacing refused: a limiter
        that refuses it asks for at least that. Taking the allowed spacing instead, the
        smaller, cost the simulated buckets pauses (bucket 10/s then 2/s: 25 in 600 s
        against 23, and 0.78 % refused against 0.73 %; a crawl of 100 pages from a
        bucket of 5/s with a burst of 5: 0.918 of its rate against 0.975).
        """
        measured = self._spacing(now)
        if measured is not None:
            return max(self._gap, measured), True
        allowed = self._allowed_spacing()
        return (allowed if allowed > 0 else None), False

    def _allowed_spacing(self) -> float:
        """The spacing the controller allows: by its gap, or by its limit at the best
        latency. A host with a steady backlog is requested at this pace."""
        return max(self._gap, (self._latency.baseline or 0.0) / self._concurrency)

    def _spacing(self, now: float) -> float | None:
        """Seconds per request the host accepted just before now, not counting time
        spent paused; None when too little was measured.

        Measured over the last ``pace_window`` seconds, so that a pace the host
        accepted a while ago (before the last decrease, or while the gap was still
        closing) does not widen the gap; over the last three requests at least, so
        that a slow host is measured at all; never over requests older than
        ``max_delay``, a spacing the controller itself would never set.
        """
        active_now = self._pauses.active(now)
        known = sorted(t for t in self._accepted if t >= active_now - self.cfg.max_delay)
        recent = [t for t in known if t >= active_now - self.cfg.pace_window]
        if len(recent) < 3:
            recent = known[-3:]
        recent = recent[-self.cfg.pace_samples :]
        if len(recent) < 3 or recent[-1] <= recent[0]:
            return None
        return (recent[-1] - recent[0]) / (len(recent) - 1)

    def _clamp(self, gap: float) -> float:
        return max(self.floor, min(self.cfg.max_delay, gap))

    def _set_gap(self, gap: float) -> None:
        self._gap = self._clamp(gap)

    # -- a resumed crawl ---------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The controller's whole memory as plain JSON data: what a resumed crawl or
        another fleet worker needs to treat the host exactly as before.

        The top-level fields say what the host is now (gap, limit, pause, latency
        baseline); ``memory`` holds what the rules read later (the round and its
        bookkeeping, pace samples, latency windows, pushback and probe times, the
        requests in flight). Times are on this controller's clock (absolute: a
        fleet's workers share Redis's); to move them to another clock, see
        :func:`shift_state`. Infinite times are stored as None.
        """
        until = self._pauses.until
        rnd, pauses, lat = self._round, self._pauses, self._latency
        rise = self._rise
        memory: dict[str, Any] = {
            "round": self._round_number,
            "round_good": rnd.good,
            "round_served": rnd.served,
            "reached_limit": rnd.reached_limit,
            "held_back": rnd.held_back,
            "full_time": rnd.full_time,
            "full_since": rnd.full_since,
            "pause_until": _finite_or_none(until),
            "pause_start": _finite_or_none(pauses.start),
            "paused_before": pauses.earlier,
            "last_start": _finite_or_none(self._last_start),
            "previous_start": _finite_or_none(self._previous_start),
            "last_serial": self._last_serial,
            "latency_since": lat.since,
            "low": _finite_or_none(lat.low),
            "earlier_low": _finite_or_none(lat.earlier_low),
            "high": _finite_or_none(lat.high),
            "earlier_high": _finite_or_none(lat.earlier_high),
            "latency_floor": None if lat.floor is None else list(lat.floor),
            "accepted": list(self._accepted),
            "doubled": self._doubled,
            "overloaded_at": None if self._overloaded_at is None else list(self._overloaded_at),
            "last_decrease": self._last_decrease,
            "survivors": self._survivors,
            "survivor_cap": self._survivor_cap,
            "survivor_fetches": [list(fetch) for fetch in self._survivor_fetches],
            "survivors_until": self._survivors_until,
            "good_since_decrease": self._good_since_decrease,
            "rise": None
            if rise is None
            else [rise[0], rise[1], rise[2], rise[3], None if rise[4] is None else list(rise[4])],
            "rise_pages": list(self._rise_pages),
            "rise_seen": self._rise_seen,
            "held": self._held,
            "probe_good": self._probe_good,
            "held_since": self._held_since,
            "accepted_start": _finite_or_none(self._accepted_start),
            "accepted_spacing": self._accepted_spacing,
            "in_flight": [[serial, at] for serial, at in self._live.items()],
            "cycle": [_finite_or_none(self._cycle[0]), self._cycle[1], self._cycle[2]],
            "burst": None if self._burst is None else list(self._burst),
            "outage": None if self._outage is None else _outage_state(self._outage),
            "restored_at": _finite_or_none(self._restored_at),
            "answered_well": self._answered_well,
            "since_refusal": self._since_refusal,
            "served": None if self._served is None else list(self._served),
            "round_pages": list(rnd.pages),
            "round_since": _finite_or_none(rnd.since),
            "round_own": list(rnd.own),
            "unloaded": self._unloaded,
            "credit": self._credit,
            "round_pace": rnd.pace,
            "round_paced_from": rnd.paced_from,
            "round_pace_for": rnd.pace_for,
            "fastest": _finite_or_none(self._fastest),
        }
        return {
            "version": _STATE_VERSION,
            "delay": self._gap,
            "concurrency": self._concurrency,
            "crawl_delay": self._crawl_delay,
            "best_latency": self._latency.baseline,
            "latencies": list(self._latency.values),
            "slow_start": self._slow_start,
            "paused_until": until if math.isfinite(until) else None,
            "pushback": self._pushback,
            "rate_gap": self._rate_gap,
            "memory": memory,
        }

    @classmethod
    def from_state(
        cls, cfg: ControllerConfig, state: Mapping[str, Any], *, in_flight: bool = False
    ) -> HostController:
        """A controller that goes on from :meth:`state`, fitted into ``cfg``.

        ``in_flight``: the requests in flight when the state was taken are still
        running and their tickets will come back (a fleet's other workers, or the
        same process); by default they are gone with the process that held them
        (a resumed crawl queues them again), and their places are free.
        """
        if not isinstance(state, Mapping):
            raise ValueError(f"controller state {state!r}: expected a mapping")
        host = cls(cfg)
        host._crawl_delay = _state_number(state, "crawl_delay", 0.0)
        host._gap = host._clamp(_state_number(state, "delay", cfg.min_delay))
        concurrency = _state_int(state, "concurrency", host._concurrency, 1)
        if cfg.adaptive:
            host._concurrency = min(concurrency, cfg.max_concurrency)
        latencies = state.get("latencies")
        if latencies is None:
            best = _state_optional(state, "best_latency")  # a state of version 1
            latencies = [] if best is None else [best]
        host._latency.values.extend(_state_floats(state, "latencies", latencies, LATENCY_SAMPLES))
        host._slow_start = _state_bool(state, "slow_start", False)
        # A state from before ``answered_well``: a host with page latencies did.
        host._answered_well = bool(host._latency.values)
        until = _state_optional(state, "paused_until", allow_negative=True)
        if until is not None:
            host._pauses.until = host._pauses.start = until
        host._pushback = _state_optional(state, "pushback")
        host._rate_gap = _state_optional(state, "rate_gap") if host._pushback else None
        memory = state.get("memory")
        if memory is not None:
            if not isinstance(memory, Mapping):
                raise ValueError(f"controller state memory={memory!r}: expected a mapping")
            host._restore_memory(_shifted_memory(memory, until), in_flight=in_flight)
        return host

    def _restore_memory(self, memory: Mapping[str, Any], *, in_flight: bool) -> None:
        """The rest of :meth:`state`'s ``memory``, checked field by field."""
        m, cfg = memory, self.cfg
        self._round_number = _state_int(m, "round", 0, 0)
        rnd = self._round
        rnd.good = _state_int(m, "round_good", 0, 0)
        rnd.served = _state_int(m, "round_served", 0, 0)
        rnd.reached_limit = _state_bool(m, "reached_limit", False)
        rnd.held_back = _state_bool(m, "held_back", False)
        rnd.full_time = _state_number(m, "full_time", 0.0)
        rnd.full_since = _state_optional(m, "full_since", allow_negative=True)
        pauses = self._pauses
        pauses.start = _state_time(m, "pause_start", pauses.start)
        pauses.earlier = _state_number(m, "paused_before", 0.0)
        self._last_start = _state_time(m, "last_start", -math.inf)
        self._previous_start = _state_time(m, "previous_start", -math.inf)
        self._last_serial = _state_int(m, "last_serial", 0, 0)
        lat = self._latency
        lat.since = _state_optional(m, "latency_since", allow_negative=True)
        lat.low = _state_time(m, "low", math.inf)
        lat.earlier_low = _state_time(m, "earlier_low", math.inf)
        lat.high = _state_time(m, "high", -math.inf)
        lat.earlier_high = _state_time(m, "earlier_high", -math.inf)
        floor = _state_pair(m, "latency_floor")
        lat.floor = None if floor is None else (floor[0], floor[1])
        accepted = _state_floats(m, "accepted", m.get("accepted", []), None, allow_negative=True)
        self._accepted.extend(accepted[-cfg.pace_samples :])
        self._doubled = _state_bool(m, "doubled", False)
        overloaded = _state_pair(m, "overloaded_at")
        self._overloaded_at = None if overloaded is None else (int(overloaded[0]), overloaded[1])
        last = m.get("last_decrease")
        if last not in (None, "good", "neutral", "overload", "rate_limit"):
            raise ValueError(f"controller state last_decrease={last!r}: expected an outcome")
        self._last_decrease = last
        survivors = m.get("survivors")
        self._survivors = None if survivors is None else _state_int(m, "survivors", 0, 0)
        self._survivor_cap = _state_int(m, "survivor_cap", 1, 0)
        self._survivor_fetches = _state_pairs(m, "survivor_fetches", cfg.max_concurrency)
        until = m.get("survivors_until")
        self._survivors_until = None if until is None else _state_int(m, "survivors_until", 0, 0)
        self._good_since_decrease = _state_bool(m, "good_since_decrease", False)
        self._rise = _state_rise(m.get("rise"))
        self._rise_pages = tuple(
            _state_floats(m, "rise_pages", m.get("rise_pages", []), 2 * RISE_WINDOW)
        )
        self._rise_seen = _state_int(m, "rise_seen", 0, 0)
        self._held = _state_optional(m, "held")
        self._probe_good = _state_int(m, "probe_good", 0, 0)
        self._held_since = _state_optional(m, "held_since", allow_negative=True)
        self._accepted_start = _state_time(m, "accepted_start", -math.inf)
        self._accepted_spacing = _state_optional(m, "accepted_spacing")
        cycle = m.get("cycle", [None, 0, 0.0])
        if not (isinstance(cycle, list) and len(cycle) == 3):
            raise ValueError(f"controller state cycle={cycle!r}: expected three values")
        parts = {"since": cycle[0], "started": cycle[1], "paused": cycle[2]}
        self._cycle = (
            _state_time(parts, "since", -math.inf),
            _state_int(parts, "started", 0, 0),
            _state_number(parts, "paused", 0.0),
        )
        burst = _state_pair(m, "burst")
        self._burst = None if burst is None else (int(burst[0]), burst[1])
        self._outage = _state_outage(m.get("outage"))
        self._restored_at = _state_time(m, "restored_at", -math.inf)
        self._answered_well = _state_bool(m, "answered_well", self._answered_well)
        self._since_refusal = _state_int(m, "since_refusal", 0, 0)
        served = _state_pair(m, "served")
        self._served = None if served is None else (int(served[0]), served[1])
        rnd.pages = _state_floats(m, "round_pages", m.get("round_pages", []), None)[
            -LATENCY_SAMPLES:
        ]
        rnd.since = _state_time(m, "round_since", -math.inf)
        rnd.own = _state_floats(m, "round_own", m.get("round_own", []), None)[-LATENCY_SAMPLES:]
        self._unloaded = _state_optional(m, "unloaded")
        self._credit = _state_int(m, "credit", 0, 0)
        rnd.pace = _state_number(m, "round_pace", 0.0)
        rnd.paced_from = _state_int(m, "round_paced_from", 0, 0)
        rnd.pace_for = _state_number(m, "round_pace_for", 0.0)
        fastest = _state_optional(m, "fastest")
        self._fastest = math.inf if fastest is None else fastest
        live = m.get("in_flight", [])
        if not isinstance(live, list):
            raise ValueError(f"controller state in_flight={live!r}: expected a list")
        for entry in live:
            if not (isinstance(entry, list) and len(entry) == 2):
                raise ValueError(f"controller state in_flight entry {entry!r}: expected a pair")
            serial = _state_int({"serial": entry[0]}, "serial", 0, 1)
            at = _state_number({"in_flight": entry[1]}, "in_flight", 0.0, allow_negative=True)
            if in_flight:
                self._live[serial] = at
        if not in_flight:
            rnd.full_since = None  # the requests that held the limit full are gone
            self._survivors_until = None  # and the survivors with them
        # Later tickets are numbered after every one this state knows of: those in
        # flight, and those the survivors' count reads (all started before its mark).
        _skip_serials_past(max(self._last_serial, self._survivors_until or 0, *self._live))


def shift_state(state: Mapping[str, Any], offset: float) -> dict[str, Any]:
    """A copy of a :meth:`HostController.state` with every time moved by ``offset``
    seconds: from one clock to another (a resumed crawl's, POSIX time)."""
    moved = dict(state)
    until = moved.get("paused_until")
    if isinstance(until, (int, float)) and not isinstance(until, bool):
        moved["paused_until"] = until + offset
    memory = moved.get("memory")
    if isinstance(memory, Mapping):
        moved["memory"] = _moved_memory(memory, offset)
    return moved


#: The times in a state's ``memory``, on the controller's clock (plain numbers).
_MEMORY_TIMES = (
    "full_since",
    "round_since",
    "pause_until",
    "pause_start",
    "last_start",
    "previous_start",
    "latency_since",
    "held_since",
    "accepted_start",
    "restored_at",
)


def _moved_memory(memory: Mapping[str, Any], offset: float) -> dict[str, Any]:
    """``memory`` with its times moved by ``offset``: the plain ones, the second of
    the latency floor and of the overloaded limit, the unpaused-clock starts."""

    def move(value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value + offset
        return value

    moved = dict(memory)
    for key in _MEMORY_TIMES:
        moved[key] = move(moved.get(key))
    for key in ("latency_floor", "overloaded_at", "served"):
        pair = moved.get(key)
        if isinstance(pair, list) and len(pair) == 2:
            moved[key] = [pair[0], move(pair[1])]
    cycle = moved.get("cycle")
    if isinstance(cycle, list) and len(cycle) == 3:
        moved["cycle"] = [move(cycle[0]), *cycle[1:]]
    outage = moved.get("outage")
    if isinstance(outage, Mapping):
        outage = moved["outage"] = dict(outage)
        outage["since"] = move(outage.get("since"))
        pair = outage.get("overloaded_at")
        if isinstance(pair, list) and len(pair) == 2:
            outage["overloaded_at"] = [pair[0], move(pair[1])]
    rise = moved.get("rise")
    if (
        isinstance(rise, list)
        and len(rise) == 5
        and isinstance(rise[4], list)
        and len(rise[4]) == 2
    ):
        moved["rise"] = [*rise[:4], [rise[4][0], move(rise[4][1])]]
    accepted = moved.get("accepted")
    if isinstance(accepted, list):
        moved["accepted"] = [move(t) for t in accepted]
    fetches = moved.get("survivor_fetches")
    if isinstance(fetches, list):
        moved["survivor_fetches"] = [
            [move(p[0]), move(p[1])] if isinstance(p, list) and len(p) == 2 else p for p in fetches
        ]
    live = moved.get("in_flight")
    if isinstance(live, list):
        moved["in_flight"] = [
            [e[0], move(e[1])] if isinstance(e, list) and len(e) == 2 else e for e in live
        ]
    return moved


def _shifted_memory(memory: Mapping[str, Any], until: float | None) -> Mapping[str, Any]:
    """A state whose ``paused_until`` alone was moved to another clock (a JOBDIR of
    an earlier release converts that field only): move the memory's times with it."""
    raw = memory.get("pause_until")
    if (
        until is None
        or isinstance(raw, bool)
        or not isinstance(raw, (int, float))
        or not math.isfinite(raw)
        or raw == until
    ):
        return memory
    return _moved_memory(memory, until - raw)


def _bucket_rate(
    burst: tuple[int, float], accepted: int, lasted: float, paused: float
) -> float | None:
    """A token bucket's rate from two runs that each ended in a refusal: the first
    from a full bucket (``burst``: accepted, seconds), the second after a pause of
    ``paused`` seconds (``accepted`` in ``lasted`` seconds). A bucket of rate r and
    burst b accepts b + r x seconds from full, and min(b, r x paused) + r x seconds
    after a pause: r is the larger of the two runs' difference over their lengths'
    and the second run's count (plus half a request) over its time with the pause
    (exact when the pause did not refill the bucket), never above the second run's
    own pace. None when the runs say nothing (too short)."""
    first, first_lasted = burst
    if accepted < 2 or lasted <= 0:
        return None
    # The refused request found less than one token: the refill was between the
    # count and one more (nginx's 2 r/s after a 2 s pause: 4 accepted, 4.6 due).
    refill = (accepted + 0.5) / (paused + lasted)
    rate = refill
    if lasted > first_lasted:
        rate = max(rate, (accepted - first) / (lasted - first_lasted))
    return min(rate, accepted / lasted)


def _bucket_credit(burst: tuple[int, float], rate: float, pause: float, margin: float) -> int:
    """Requests a token bucket takes at once when a pause of ``pause`` seconds ends:
    its burst (what its first run from full accepted, less what its ``rate`` added
    meanwhile), or what the pause refilled if less, with half the ``margin`` kept
    back. GCRA's credit: the farm's ``bursty`` bucket (20/s, a burst of 20,
    ``Retry-After: 2``) took 90 pages at 18 a second after its second pause; nginx's
    ``limit_req`` 2 r/s with a burst of 10 refilled 4 in its 2 s pause."""
    first, first_lasted = burst
    size = min(first - rate * first_lasted, rate * pause)
    return max(0, math.floor(size * (1 - margin / 2)))


def _most_together(fetches: list[tuple[float, float]]) -> int:
    """The most of these (start, end) intervals that overlap at one time (those that
    start together do, even at a latency of 0). One whose start is after its end (a
    fetch read too late to be sure when it was at the host) overlaps none."""
    sure = [(b, e) for b, e in fetches if b <= e]
    most = max(
        (sum(1 for b, e in sure if b <= begin < e or b == begin) for begin, _ in sure),
        default=0,
    )
    return max(most, 1) if len(sure) < len(fetches) else most


def _skip_serials_past(serial: int) -> None:
    """Tickets restored in flight keep their serials, and a restored state compares
    serials: later ones must come after them (another process numbers its own)."""
    global _serials
    current = next(_serials)
    _serials = itertools.count(max(current, serial + 1))


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _state_time(state: Mapping[str, Any], key: str, infinite: float) -> float:
    """A time that may be infinite (stored as None): ``infinite`` then."""
    value = _state_optional(state, key, allow_negative=True)
    return infinite if value is None else value


def _state_int(state: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    value = state.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"controller state {key}={value!r}: expected a whole number >= {minimum}")
    return value


def _state_bool(state: Mapping[str, Any], key: str, default: bool) -> bool:
    value = state.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"controller state {key}={value!r}: expected a boolean")
    return value


def _state_floats(
    state: Mapping[str, Any],
    key: str,
    values: Any,
    most: int | None,
    *,
    allow_negative: bool = False,
) -> list[float]:
    if not isinstance(values, list) or (most is not None and len(values) > most):
        raise ValueError(f"controller state {key}={values!r}: expected a short list")
    return [
        _state_number({key: value}, key, 0.0, allow_negative=allow_negative) for value in values
    ]


def _state_pair(state: Mapping[str, Any], key: str) -> tuple[float, float] | None:
    pair = state.get(key)
    if pair is None:
        return None
    if not isinstance(pair, list) or len(pair) != 2:
        raise ValueError(f"controller state {key}={pair!r}: expected a pair")
    first, second = _state_floats(state, key, pair, 2, allow_negative=True)
    return first, second


def _state_pairs(state: Mapping[str, Any], key: str, most: int) -> list[tuple[float, float]]:
    """A list of pairs of times (a state of an earlier release has none); the latest
    ``most`` are kept."""
    pairs = state.get(key, [])
    if not isinstance(pairs, list):
        raise ValueError(f"controller state {key}={pairs!r}: expected a list of pairs")
    checked = [_state_pair({key: pair}, key) for pair in pairs]
    if None in checked:
        raise ValueError(f"controller state {key}={pairs!r}: expected a list of pairs")
    return [pair for pair in checked if pair is not None][-most:]


def _state_rise(
    rise: Any,
) -> tuple[float, int, float, bool, tuple[int, float] | None] | None:
    if rise is None:
        return None
    if not isinstance(rise, list) or len(rise) != 5:
        raise ValueError(f"controller state rise={rise!r}: expected five values")
    fields = {"median": rise[0], "limit": rise[1], "gap": rise[2], "slow_start": rise[3]}
    overloaded = _state_pair({"overloaded": rise[4]}, "overloaded")
    return (
        _state_number(fields, "median", 0.0),
        _state_int(fields, "limit", 1, 1),
        _state_number(fields, "gap", 0.0),
        _state_bool(fields, "slow_start", False),
        None if overloaded is None else (int(overloaded[0]), overloaded[1]),
    )


def _outage_state(streak: _Outage) -> dict[str, Any]:
    state = asdict(streak)
    if streak.overloaded_at is not None:
        state["overloaded_at"] = list(streak.overloaded_at)  # as JSON gives it back
    return state


def _state_outage(value: Any) -> _Outage | None:
    """A run of refusals from a state (None in states of earlier releases)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"controller state outage={value!r}: expected a mapping")
    overloaded = _state_pair(value, "overloaded_at")
    return _Outage(
        since=_state_number(value, "since", 0.0, allow_negative=True),
        spacing=_state_optional(value, "spacing"),
        gap=_state_number(value, "gap", 0.0),
        limit=_state_int(value, "limit", 1, 1),
        slow_start=_state_bool(value, "slow_start", False),
        overloaded_at=None if overloaded is None else (int(overloaded[0]), overloaded[1]),
        pushback=_state_optional(value, "pushback"),
        rate_gap=_state_optional(value, "rate_gap"),
        refusals=_state_int(value, "refusals", 1, 1),
        proven=_state_bool(value, "proven", False),
    )


def _state_optional(
    state: Mapping[str, Any], key: str, *, allow_negative: bool = False
) -> float | None:
    value = state.get(key)
    if value is None:
        return None
    return _state_number(state, key, 0.0, allow_negative=allow_negative)


def _state_number(
    state: Mapping[str, Any], key: str, default: float, *, allow_negative: bool = False
) -> float:
    value = state.get(key, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or (value < 0 and not allow_negative)
    ):
        raise ValueError(f"controller state {key}={value!r}: expected a finite number")
    return float(value)
