"""The policy: from what the estimators say to the host's limits.

A host is in one of five phases, each with one job (as TCP BBR's are):

``startup``
    Find the host's room fast: each full round of good answers doubles the
    limit, each accepted answer halves the gap's excess over its floor. Ends at
    the first refusal, or when the pages slow with the load (a queue inside).
``steady``
    Stay just below what the host takes, and look for more: a full round of
    good answers at unchanged speed adds one to the limit. The gap closes on
    the spacing last refused by halving the distance per stretch (as many
    answers as the host's last run); refused on the way, it goes back to the
    last gap taken; refused at a gap taken (a window, a burst spent), the
    cycle's rate holds for ``LONE_AFTER`` answers. Later it narrows by
    ``MARGIN`` per probe period.
``backing_off``
    Refused where the gap set the pace: each refusal doubles the gap (within a
    quarter of the refusals' age); the first accepted request ends the cycle at
    the rate the host accepted over it, with a margin
    (:class:`.estimators.AcceptedRate`), whatever the spacing it refused.
``outage``
    Overloads at four times the spacing the host took before: the host is
    down, not counting; the first accepted request restores the limits.
``blocked``
    ``BLOCK_RUN`` block statuses in a row after pages (fewer are forbidden
    pages): no start for a wait (half the last block's, 1 s at least), then
    one probe at a time, the wait doubling while it is still blocked, up to
    ``max_delay`` (every hit may renew a block). The first accepted request
    ends it at the cycle's rate, the block's time in it: below the rate that
    brought it on. Then ``steady``, narrowing by margins only.

A refusal where the limit set the pace (a 503 or a timeout at the limit, the
gap at its floor) halves the limit instead. A pause (Retry-After, a spent told
quota) holds every start until it ends; a told quota (:func:`told`) is a floor
under the gap, never probed for. At most one decrease per round: a refusal of a
request started before the last decrease is not acted on again. Every
transition is in this module; :class:`~.HostController` only feeds it.
"""

from __future__ import annotations

import math

from ..rate_limit_headers import Quota
from .answer import Answer, Outcome, Reaction
from .config import ControllerConfig
from .estimators import median
from .gate import Ticket
from .state import HostState, Phase

__all__ = ["BLOCK_RUN", "GROWTH", "LONE_AFTER", "MARGIN", "on_answer", "on_start", "told"]

MARGIN = 0.1
"""The gap keeps this share above the spacing the host accepted, and narrows
by as much per probe: a crawler's send jitter is a few per cent."""
GROWTH = 2.0
"""A refusal at the gap doubles it (exponential backoff, as TCP's timer)."""
OUTAGE_SHARE = 0.25
"""... but never wider than this share of how long the refusals have lasted:
the first request after the host comes back is at most a quarter late."""
OUTAGE_PROOF = 4.0
"""Overloads at a gap this many times the spacing taken before are an outage:
the crawl's pace was not the cause."""
LONE_AFTER = 50
"""A 503 or timeout this many answers after the last refusal is lone (counted,
not acted on): below 2 % of requests, backing off would cost more than it
saves. The same 2 % sets the probe period: at most one probe per 50 answers."""
DEFAULT_SPACING = 1.0
"""The gap after a refusal with no spacing measured: the classic one request a second."""
BLOCK_RUN = 4
"""Block statuses in a row that make a block: where a fifth of a site's links
are forbidden, four in a row come by chance once in 625 answers."""
RESOLUTION = 1.0
"""Quota resets are told in whole seconds: a spent quota waits at least this."""
SNAP = 0.001
"""A gap within a millisecond of its floor is at it (below a reactor's jitter)."""
JITTER = 1.25
"""A limit's median page within this factor of the unloaded one is no queue,
whatever the estimate: pages vary by +-10 % on their own (1.1 / 0.9 = 1.22)."""
CUT_HELD = 0.9
"""A limit cut for a queue is undone if the lower load did not take a tenth off
the pages' median: the pages became slower, not because of the crawl."""


def floor(s: HostState, min_delay: float) -> float:
    return max(min_delay, s.crawl_delay)


def set_gap(s: HostState, gap: float, min_delay: float, max_delay: float) -> None:
    low = floor(s, min_delay)
    gap = max(low, min(max(max_delay, low), gap))
    s.gap = low if gap - low < SNAP else gap


def on_start(s: HostState, now: float, serial: int) -> None:
    s.in_flight[serial] = now - s.last_start if s.last_start > -math.inf else -1.0
    s.previous_start, s.last_start, s.last_serial = s.last_start, now, serial
    if len(s.in_flight) >= s.limit:
        s.level_full = True


def on_answer(
    s: HostState,
    r: ControllerConfig,
    ticket: Ticket,
    now: float,
    answer: Answer,
    latency: float,
    spacing: float,
) -> Reaction:
    """Feed one answer of ``ticket``'s request, started ``spacing`` after the one
    before it (negative: none before); return what was made of it."""
    if answer.pause is not None:
        s.pause = max(s.pause, now + answer.pause)
    if answer.kind == "block":
        return _block(s, r, ticket, now)
    if answer.refusal:
        return _refused(s, r, ticket, now, answer, spacing)
    ended = False
    if answer.served:
        s.since_refusal, s.run = s.since_refusal + 1, 0
        ended = _accepted(s, r, ticket, now)
    if answer.kind != "good" or not answer.page:
        return Reaction(answer.kind if answer.kind == "good" else "neutral", False)
    s.answered_well = True
    if answer.measured:
        s.latency.add(latency)
        if ticket.started >= s.level_since and ticket.round == s.round:
            s.capacity.add(latency)
    if ticket.started >= s.level_since and ticket.round == s.round:
        s.level_good += 1
        _round(s, r, now)
    if not ended:
        _probe_gap(s, r, now)
    return Reaction("good", False)


def _refused(
    s: HostState, r: ControllerConfig, ticket: Ticket, now: float, answer: Answer, spacing: float
) -> Reaction:
    paused = s.pause if answer.pause is not None else None
    kind: Outcome = "rate_limit" if answer.kind == "rate_limit" else "overload"
    refused = kind == "rate_limit" or s.answered_well
    lone = answer.kind == "overload" and s.since_refusal >= LONE_AFTER
    # A timeout from before the limit last changed speaks of a load that is gone.
    stale = answer.timeout and ticket.started < s.level_since
    s.since_refusal = 0
    if lone or stale or ticket.round != s.round:
        if ticket.round != s.round and not answer.counted and s.halved:
            kind = "overload"  # read as the answer that made the last decrease
        return Reaction(kind, False, paused, refused)
    if s.outage.since is None:
        s.outage.begin(now, s.gap, s.limit, s.phase, s.rate.pace(now))
    s.rate.refuse(now)
    s.round, s.outage.refusals, s.probes = s.round + 1, s.outage.refusals + 1, 0
    limit_bound = answer.kind == "overload" or s.gap <= floor(s, r.min_delay)
    s.halved = r.adaptive and s.limit > 1 and not answer.counted and limit_bound
    if s.halved:
        # Refused again at the limit it refused before: back to the one it served.
        again = s.over and s.limit >= s.over
        s.over = min(s.over or s.limit, s.limit)
        _set_limit(s, s.over - 1 if again else (s.limit + 1) // 2, now)
        s.phase = "steady" if s.phase == "startup" else s.phase
        return Reaction("overload", True, paused, refused)
    _widen_gap(s, r, now, spacing, overload=kind == "overload")
    return Reaction(kind, True, paused, refused)


def _block(s: HostState, r: ControllerConfig, ticket: Ticket, now: float) -> Reaction:
    """A block status: a forbidden page (fetched once more: the answers after it
    may prove a block), the run's last that makes a block, or a probe still blocked."""
    if s.phase != "blocked":
        s.run += 1
        if s.run < BLOCK_RUN or not s.answered_well:
            return Reaction("forbidden", False, refused=s.answered_well)
        s.outage.begin(now, s.gap, s.limit, s.phase, s.rate.pace(now))
        s.rate.refuse(now)
        s.phase, s.wait, s.probes = "blocked", max(DEFAULT_SPACING, s.wait / GROWTH), 0
        _set_limit(s, 1, now)
    elif ticket.round == s.round:
        s.wait *= GROWTH
    else:  # started before the block was seen: not acted on again
        return Reaction("block", False, refused=True)
    s.round, s.wait = s.round + 1, min(s.wait, r.max_delay)
    s.pause = max(s.pause, now + s.wait)
    return Reaction("block", True, s.pause, refused=True)


def told(s: HostState, now: float, quota: Quota) -> float | None:
    """A quota the host told: the gap at which what remains, less the requests in
    flight, lasts until the reset; at none, a pause to the reset (its end returned)."""
    left = quota.remaining - len(s.in_flight)
    s.told = quota.resets_in / left if left > 0 and quota.resets_in > 0 else 0.0
    if left > 0 or (quota.remaining > 0 and quota.resets_in <= 0):
        return None
    s.pause = max(s.pause, now + max(quota.resets_in, RESOLUTION))
    return s.pause


def _widen_gap(
    s: HostState, r: ControllerConfig, now: float, refused: float, *, overload: bool
) -> None:
    """Backing off: from the pace the host took, double the gap per refusal,
    within a quarter of the refusals' age. ``refused``: the refused spacing."""
    if s.phase in ("startup", "steady"):
        spacing = s.outage.spacing or (s.gap if s.gap > 0 else DEFAULT_SPACING)
        s.hold = max(0.0, refused)
        gap = max(s.gap, spacing)
        s.phase = "backing_off"
    else:
        age = now - (s.outage.since if s.outage.since is not None else now)
        gap = max(s.gap, min(GROWTH * s.gap, OUTAGE_SHARE * age))
    set_gap(s, gap, r.min_delay, r.max_delay)
    if overload and s.outage.proven(s.gap, OUTAGE_PROOF):
        s.phase = "outage"


def _accepted(s: HostState, r: ControllerConfig, ticket: Ticket, now: float) -> bool:
    """The host took a request: a cycle may end, and with it an episode (True)."""
    refusing = s.rate.refused_since is not None
    rate = s.rate.accept(ticket.started)
    if not refusing or s.rate.refused_since is not None:
        return False  # no episode, or a request from before it
    blocked = s.phase == "blocked"
    if s.phase in ("outage", "blocked"):
        # An outage's limits come back; a block's gap is the cycle's rate, the block's
        # time in it: below the rate that brought it on.
        gap = (1.0 + MARGIN) / rate if rate else DEFAULT_SPACING
        set_gap(s, gap if blocked else s.outage.gap, r.min_delay, r.max_delay)
        most = min(s.outage.limit, r.max_concurrency) if r.adaptive else r.max_concurrency
        _set_limit(s, most, now)
        s.phase = "steady" if blocked or s.outage.phase == "backing_off" else s.outage.phase
    elif s.phase == "backing_off" and s.taken > s.outage.gap:
        # Refused a step below a gap it took for a stretch: back to it (bisection).
        set_gap(s, s.taken, r.min_delay, r.max_delay)
        s.phase = "steady"
    elif s.phase == "backing_off" and rate is not None:
        # The cycle's rate bounds the host's from below: go at it, and close on the
        # spacing refused from there (a window's next refusal confirms it).
        set_gap(s, (1.0 + MARGIN) / rate, r.min_delay, r.max_delay)
        s.phase = "steady"
    elif s.phase == "backing_off":  # nothing accepted before: nothing measured; a
        if s.outage.refusals > 1:  # closure's gap from before comes back, a pace's not
            set_gap(s, s.outage.gap, r.min_delay, r.max_delay)
        s.phase = "startup"
    # Refused at a gap it took (a window, a burst): the cycle's rate, LONE_AFTER answers.
    void = s.taken and s.taken <= s.outage.gap and s.phase == "steady"
    first = LONE_AFTER if void else 0 if rate and not s.taken else _stretch(s)
    s.taken, s.stretch = 0.0, s.since_refusal + first
    s.outage.end()
    s.probe_at = now + _probe_period(s)
    held = max(LONE_AFTER * s.rate.waited, 2 * LONE_AFTER * s.gap)
    s.hold_until = now if blocked else now + held  # after a block: no bisection
    return True


def _probe_period(s: HostState) -> float:
    """A probe lasts ``LONE_AFTER`` answers and a window's reopening, each a step shorter."""
    return max(s.rate.waited, LONE_AFTER * s.gap / (s.probes + 1))


def _stretch(s: HostState) -> int:
    """Answers a gap is held for: the host's last run (a burst, a quota), 2 to 50."""
    return max(2, min(s.rate.counted, LONE_AFTER))


def _probe_gap(s: HostState, r: ControllerConfig, now: float) -> None:
    """Startup halves the gap's excess per good answer; steady halves it per
    stretch taken, then narrows it by ``MARGIN``, a step more each time, once
    per probe period. Neither goes below ``MARGIN`` above the spacing last
    refused, until that is forgotten: after 50 of the host's waits, or 100
    answers (a probe costs 2 % at most)."""
    low = floor(s, r.min_delay)
    if now < s.hold_until:
        low = max(low, (1.0 + MARGIN) * s.hold)
    if s.gap <= low or s.phase in ("backing_off", "outage", "blocked"):
        return
    if s.phase == "startup":
        set_gap(s, low + (s.gap - low) / 2.0, r.min_delay, r.max_delay)
    elif now < s.hold_until:
        if s.since_refusal >= s.stretch:  # halve the distance to the bracket's end
            s.taken, gap = s.gap, low + (s.gap - low) / 2.0
            set_gap(s, low if gap - low < MARGIN * low else gap, r.min_delay, r.max_delay)
            s.stretch = s.since_refusal + _stretch(s)
    elif now >= s.probe_at:
        s.probes += 1
        set_gap(s, max(low, s.gap / (1.0 + MARGIN) ** s.probes), r.min_delay, r.max_delay)
        s.probe_at = now + _probe_period(s)


def _round(s: HostState, r: ControllerConfig, now: float) -> None:
    """A full round of good answers at a limit the host used: grow, hold or cut."""
    if not r.adaptive or s.level_good < s.limit or not s.level_full:
        return
    waiting = s.capacity.waiting(s.limit)
    current = median(s.capacity.pages) if s.capacity.pages else 0.0
    if s.cut is not None and current:
        # Only a cut to half or less can be judged by a median of a few pages:
        # at a queue, its pages take half as long; any jitter is far smaller.
        judged = 2 * s.limit <= s.cut[1]
        held = judged and current >= CUT_HELD * s.cut[0]
        limit, s.cut = int(s.cut[1]), None
        if held:  # a new normal: the pages are this slow at any load
            s.capacity.unloaded, s.capacity.most = current, None
            _set_limit(s, max(limit, s.limit), now)
            return
    unloaded = s.capacity.unloaded or 0.0
    rise = current > JITTER * unloaded and current > r.fast_latency
    if waiting is not None and rise and (waiting >= 1.0 or current > r.latency_factor * unloaded):
        s.cut = (current, float(s.limit))
        s.capacity.most = max(1, math.ceil(s.limit * unloaded / current))
        _set_limit(s, s.capacity.most, now)
        s.phase = "steady" if s.phase == "startup" else s.phase
        return
    if waiting is not None and waiting >= 0.5 and rise and s.phase == "steady":
        s.level_good, s.level_full = 0, False  # holds: about one request waits
        return
    if s.over and s.limit >= s.over:
        s.over = 0  # the limit the host refused was served: try above it
    grown = 2 * s.limit if s.phase == "startup" else s.limit + 1
    if s.over and grown >= s.over:
        grown = s.over if s.since_refusal >= 2 * LONE_AFTER and now >= s.hold_until else s.over - 1
    _set_limit(s, max(s.limit, min(grown, r.max_concurrency)), now)


def _set_limit(s: HostState, limit: int, now: float) -> None:
    if limit != s.limit:
        s.capacity.new_level()
    s.limit = max(1, limit)
    s.level_since, s.level_good = now, 0
    s.level_full = len(s.in_flight) >= s.limit


def phase_at(s: HostState, now: float) -> Phase | str:
    """The phase, with ``paused`` while a Retry-After or a spent quota holds the host."""
    return "paused" if s.pause > now and s.phase != "blocked" else s.phase
