"""The policy: from what the estimators say to the host's limits.

Five phases, each with one job (as TCP BBR's are; docs/controller.rst tells more):

``startup``
    Find the room: a round of good answers doubles the limit, an answer halves the gap.
``steady``
    Stay just below what the host takes: a round of good answers at unchanged speed adds
    one to the limit (past a queue's workers once a probe period); the gap halves its
    distance to the spacing last refused per stretch, then narrows by ``MARGIN`` a period.
``backing_off``
    Refused where the gap set the pace: each refusal doubles the gap (from a second
    out of startup; an overload's within a quarter of their age); the first
    accepted request ends the cycle at the rate the host accepted over it.
``outage``
    Overloads at four times the spacing taken before: down; an accepted request restores it.
``blocked``
    ``BLOCK_RUN`` block statuses in a row after pages, opened by a page not refused
    before (``AGAIN_RUN``, opened by any, once it has blocked): no start for a wait
    (the last block's, or ``BLOCK_WAIT``), then one probe at a time, the wait
    doubling while it is still blocked (every hit may renew a block); the first
    accepted probe ends the cycle as ``backing_off`` does.
    While a run is open, each of its statuses keeps its slot (:func:`gate_limit`).

A refusal where the limit set the pace halves the limit instead; at most one
decrease per round. A pause (Retry-After, a spent quota) holds every start; a told
quota (:func:`told`) is a floor under the gap, never probed for. Every transition
is here; :class:`~.HostController` only feeds it.
"""

from __future__ import annotations

import math

from ..rate_limit_headers import Quota, quota_pace
from .answer import Answer, Outcome, Reaction
from .config import ControllerConfig
from .estimators import median
from .gate import Ticket
from .state import HostState

__all__ = ["BLOCK_RUN", "GROWTH", "LONE_AFTER", "MARGIN", "on_answer", "on_start", "told"]

MARGIN = 0.1
"""The gap's share above the spacing accepted, and a probe's step: send jitter is a few %."""
GROWTH = 2.0
"""A refusal at the gap doubles it (exponential backoff, as TCP's timer)."""
OUTAGE_SHARE = 0.25
"""... an overload's within this share of the refusals' age: a host back is found soon."""
OUTAGE_PROOF = 4.0
"""Overloads at this many times the spacing taken before: an outage, not the crawl's pace."""
LONE_AFTER = 50
"""A 503 or timeout this many answers after the last refusal is lone (not acted on):
below 2 %, backing off costs more than it saves. So is a probe: one per 50 answers."""
DEFAULT_SPACING = 1.0
"""The gap after a refusal in startup or with no spacing measured: one request a second."""
BLOCK_RUN = 4
"""Block statuses in a row that are a block: with a fifth of the links forbidden, 1 in 625."""
AGAIN_RUN = 2
"""... from a host that blocked before: 1 in 25, where each status of a run may renew a block."""
BLOCK_WAIT = 4.0
"""A block's first wait: blocks last seconds, and a probe inside one renews or counts it."""
JITTER = 1.25
"""A median page within this factor of the unloaded one is no queue (+-10 %: 1.1 / 0.9)."""
CUT_HELD = 0.9
"""A cut taking no tenth off the median is undone; one keeping the throughput (+-10 %) is held."""


def gate_limit(s: HostState) -> int:
    """The gate's limit: an open run's block statuses keep their slots; a told quota caps it."""
    return max(1, min(s.limit - s.run, s.told_most or s.limit))


def on_start(s: HostState, now: float, serial: int) -> None:
    s.in_flight[serial] = now - s.last_start if s.last_start > -math.inf else -1.0
    s.previous_start, s.last_start, s.last_serial = s.last_start, now, serial
    s.level_full = s.level_full or len(s.in_flight) >= s.limit


def on_answer(
    s: HostState, r: ControllerConfig, ticket: Ticket, now: float, answer: Answer, latency: float
) -> Reaction:
    """Feed one answer of ``ticket``'s request (in flight); return what was made of it."""
    spacing = s.in_flight.pop(ticket.serial)  # after the start before it (negative: none)
    if answer.pause is not None:
        s.pause = max(s.pause, now + answer.pause)
    if answer.kind == "block":
        return _block(s, r, ticket, now, spacing, again=answer.again)
    if answer.refusal:
        return _refused(s, r, ticket, now, answer, spacing)
    ended = False
    if answer.served:
        s.since_refusal += 1
        s.run = s.run if ticket.started <= s.run_since else 0  # sent before the run: no news
        ended = _accepted(s, r, ticket, now)
    if answer.page:
        s.answered_well = True
        if answer.measured:
            s.latency.add(latency)
            if ticket.started >= s.level_since and ticket.round == s.round:
                s.capacity.add(latency)
        if ticket.started >= s.level_since and ticket.round == s.round:
            s.level_good += 1
            _round(s, r, now)
    if answer.served and (not ended or s.phase == "startup"):
        _probe_gap(s, r, now)  # a limiter counts every request it serves
    return Reaction("good" if answer.kind == "good" else "neutral", False)


def _refused(
    s: HostState, r: ControllerConfig, ticket: Ticket, now: float, answer: Answer, spacing: float
) -> Reaction:
    paused = s.pause if answer.pause is not None else None
    kind: Outcome = "rate_limit" if answer.kind == "rate_limit" else "overload"
    refused = kind == "rate_limit" or s.answered_well
    lone = answer.kind == "overload" and s.since_refusal >= LONE_AFTER
    stale = answer.timeout and ticket.started < s.level_since  # of a load that is gone
    s.since_refusal = s.queue_probe = 0  # the host's refusals lead now
    if lone or stale or ticket.round != s.round:
        if ticket.round != s.round and not answer.counted and s.halved:
            kind = "overload"  # read as the answer that made the last decrease
        return Reaction(kind, False, paused, refused)
    s.outage.begin(now, s.gap, s.limit, s.phase, s.rate.pace(now))
    s.rate.refuse(now)
    s.round, s.outage.refusals, s.probes = s.round + 1, s.outage.refusals + 1, 0
    limit_bound = answer.kind == "overload" or s.gap <= s.floor(r.min_delay)
    s.halved = r.adaptive and s.limit > 1 and not answer.counted and limit_bound
    if s.halved:
        again = s.over and s.limit >= s.over  # refused there before: back to the one served
        s.over = min(s.over or s.limit, s.limit)
        _set_limit(s, s.over - 1 if again else (s.limit + 1) // 2, now)
        s.phase = "steady" if s.phase == "startup" else s.phase
        return Reaction("overload", True, paused, refused)
    _widen_gap(s, r, now, spacing, overload=kind == "overload")
    return Reaction(kind, True, paused, refused)


def _block(
    s: HostState, r: ControllerConfig, ticket: Ticket, now: float, spacing: float, *, again: bool
) -> Reaction:
    """A block status: a forbidden page (fetched once more), a run's last, or a probe.
    A page's status ``again`` opens no run before a first block (that refuses pages it
    never refused); after one, it may be the next (each hit may renew it)."""
    if s.phase != "blocked":
        if not (again and s.run == 0 and not s.wait):
            s.run, s.run_since = s.run + 1, ticket.started if s.run == 0 else s.run_since
        if s.run < (BLOCK_RUN if not s.wait else AGAIN_RUN) or not s.answered_well:
            return Reaction("forbidden", False, refused=s.answered_well)
        s.outage.begin(now, s.gap, s.limit, s.phase, s.rate.pace(now))
        s.rate.refuse(now)
        s.hold = max(0.0, spacing) if s.phase in ("startup", "steady") else s.hold
        s.phase, s.wait, s.probes = "blocked", max(BLOCK_WAIT, s.wait), 0
        _set_limit(s, 1, now)
    elif ticket.round == s.round:
        s.wait *= GROWTH
    else:  # started before the block was seen: not acted on again
        return Reaction("block", False, refused=True)
    s.round, s.wait = s.round + 1, min(s.wait, r.max_delay)
    s.pause = max(s.pause, now + s.wait)
    return Reaction("block", True, s.pause, refused=True)


def told(s: HostState, now: float, quota: Quota) -> float | None:
    """A told quota (:func:`quota_pace`): a gap's floor, a cap on those in flight, or a pause."""
    pace = quota_pace(quota, len(s.in_flight))
    s.told, s.told_most = pace.gap, quota.remaining
    if pace.pause > 0:
        s.pause = max(s.pause, now + pace.pause)
    return s.pause if pace.pause > 0 else None


def _widen_gap(
    s: HostState, r: ControllerConfig, now: float, refused: float, *, overload: bool
) -> None:
    """Backing off: from the pace the host took (out of startup, a second at least), double
    the gap per refusal (an overload's within a quarter of the refusals' age)."""
    if s.phase in ("startup", "steady"):
        spacing = s.outage.spacing or s.gap or DEFAULT_SPACING
        low = DEFAULT_SPACING if s.phase == "startup" else 0.0  # only the answers paced it
        gap = max(s.gap, spacing, low)
        s.hold = max(0.0, refused)
        s.phase = "backing_off"
    else:
        age = now - (s.outage.since if s.outage.since is not None else now)
        gap = max(s.gap, min(GROWTH * s.gap, OUTAGE_SHARE * age if overload else math.inf))
    s.set_gap(gap, r.min_delay, r.max_delay)
    if overload and s.outage.proven(s.gap, OUTAGE_PROOF):
        s.phase = "outage"


def _accepted(s: HostState, r: ControllerConfig, ticket: Ticket, now: float) -> bool:
    """The host took a request: a cycle may end, and with it an episode (True)."""
    refusing = s.rate.refused_since is not None
    rate = s.rate.accept(ticket.started)
    s.rate.waited = min(s.rate.waited, max(r.max_retry_after, r.max_delay))  # longer: an outage
    if not refusing or s.rate.refused_since is not None:
        return False  # no episode, or a request from before it
    if s.phase == "blocked":  # a block refuses all in flight: the limit is earned again
        _set_limit(s, 1 if r.adaptive else r.max_concurrency, now)
        s.phase = "backing_off"  # and the cycle ends as a backoff's does
    if s.phase == "outage":
        most = min(s.outage.limit, r.max_concurrency) if r.adaptive else r.max_concurrency
        _set_limit(s, most, now)
        s.set_gap(s.outage.gap, r.min_delay, r.max_delay)
        s.phase = s.outage.phase if s.outage.phase != "backing_off" else "steady"
    elif s.phase == "backing_off" and s.taken > s.outage.gap:
        # Refused a step below a gap it took for a stretch: back to it (bisection).
        s.set_gap(s.taken, r.min_delay, r.max_delay)
        s.phase = "steady"
    elif s.phase == "backing_off" and rate is not None:
        # The cycle's rate bounds the host's from below: go at it, and close on the
        # spacing refused from there (a window's next refusal confirms it).
        s.set_gap((1.0 + MARGIN) / rate, r.min_delay, r.max_delay)
        s.phase = "steady"
    elif s.phase == "backing_off":  # nothing accepted before: nothing measured; a
        if s.outage.refusals > 1:  # closure's gap from before comes back, a pace's not
            s.set_gap(s.outage.gap, r.min_delay, r.max_delay)
        s.phase = "startup"
    # Refused at a gap it took (a window, a burst): the cycle's rate, LONE_AFTER answers.
    void = s.taken and s.taken <= s.outage.gap and s.phase == "steady"
    first = LONE_AFTER if void else 0 if rate and not s.taken else _stretch(s)
    s.taken, s.stretch = 0.0, s.since_refusal + first
    s.outage.end()
    s.probe_at = now + _probe_period(s)
    s.hold_until = now + max(LONE_AFTER * s.rate.waited, 2 * LONE_AFTER * s.gap)
    return True


def _probe_period(s: HostState) -> float:
    """A probe lasts ``LONE_AFTER`` answers and a window's reopening, each a step shorter."""
    return max(s.rate.waited, LONE_AFTER * s.gap / (s.probes + 1))


def _stretch(s: HostState) -> int:
    """Answers a gap is held for: the host's last run (a burst, a quota), 2 to 50."""
    return max(2, min(s.rate.counted, LONE_AFTER))


def _probe_gap(s: HostState, r: ControllerConfig, now: float) -> None:
    """Startup halves the gap's excess per answer served; steady per stretch, then
    by ``MARGIN`` per probe period, never ``MARGIN`` close to the spacing last
    refused until it is forgotten (50 of the host's waits, or 100 answers)."""
    low = max(s.floor(r.min_delay), (1.0 + MARGIN) * s.hold if now < s.hold_until else 0.0)
    if s.gap <= low or s.phase in ("backing_off", "outage", "blocked"):
        return
    if s.phase == "startup":
        s.set_gap(low + (s.gap - low) / 2.0, r.min_delay, r.max_delay)
    elif now < s.hold_until:
        if s.since_refusal >= s.stretch:  # halve the distance to the bracket's end
            s.taken, gap = s.gap, low + (s.gap - low) / 2.0
            s.set_gap(low if gap - low < MARGIN * low else gap, r.min_delay, r.max_delay)
            s.stretch = s.since_refusal + _stretch(s)
    elif now >= s.probe_at:
        s.probes += 1
        s.set_gap(max(low, s.gap / (1.0 + MARGIN) ** s.probes), r.min_delay, r.max_delay)
        s.probe_at = now + _probe_period(s)


def _round(s: HostState, r: ControllerConfig, now: float) -> None:
    """A full round of good answers at a limit the host used: grow, hold or cut."""
    if not r.adaptive or s.level_good < s.limit or not s.level_full:
        return
    waiting = s.capacity.waiting(s.limit)
    current = median(s.capacity.pages) if s.capacity.pages else 0.0
    if s.cut is not None and current:
        (median_before, limit_before), s.cut = s.cut, None
        share, fell = s.limit / limit_before, current / median_before
        if 2 * share <= 1 and fell >= CUT_HELD:  # a new normal: this slow at any load
            s.capacity.unloaded, s.capacity.most = current, None
            return _set_limit(s, max(int(limit_before), s.limit), now)
        # Throughput kept within a tenth by a cut beyond jitter (Little's law): a queue's.
        if share < 1 / JITTER and share / 2 <= fell <= share / CUT_HELD:
            s.queue_probe = s.since_refusal + LONE_AFTER
    unloaded = s.capacity.unloaded or 0.0
    rise = current > JITTER * unloaded and current > r.fast_latency
    if waiting is not None and rise and (waiting >= 1.0 or current > r.latency_factor * unloaded):
        s.cut = (current, float(s.limit))
        s.capacity.most = max(1, math.ceil(s.limit * unloaded / current))
        _set_limit(s, s.capacity.most, now)
        s.phase = "steady" if s.phase == "startup" else s.phase
        return
    if s.over and s.limit >= s.over:
        s.over = 0  # the limit the host refused was served: try above it
    grown = 2 * s.limit if s.phase == "startup" else s.limit + 1
    if s.capacity.most and s.limit >= s.capacity.most and s.since_refusal < s.queue_probe:
        grown = s.limit  # no probe above a queue's workers before its period ends
    if s.over and grown >= s.over:
        grown = s.over if s.since_refusal >= 2 * LONE_AFTER and now >= s.hold_until else s.over - 1
    _set_limit(s, max(s.limit, min(grown, r.max_concurrency)), now)


def _set_limit(s: HostState, limit: int, now: float) -> None:
    if limit != s.limit:
        s.capacity.new_level()
    s.limit = max(1, limit)
    s.level_since, s.level_good = now, 0
    s.level_full = len(s.in_flight) >= s.limit
