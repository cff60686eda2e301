"""The fleet's frontier in Redis: per-host queues, hosts by when they may start,
each host's controller state, and leases of claimed requests.

Every method is one round trip (a Lua script), synchronous, as Scrapy's
``enqueue_request`` and ``next_request`` are, and none loops on Redis: an
answer that lost its race with another worker's waits, in order with its
host's later answers, for the next call (see :class:`Contention`).

- :meth:`FleetFrontier.push`: queue requests, each checked against the shared
  seen set in the same step.
- :meth:`FleetFrontier.claim_many`: the best requests of hosts that may start
  now, each leased until the download timeout plus a margin; or when the next
  one may.
- :meth:`FleetFrontier.finish` / :meth:`FleetFrontier.fail`: the controller
  rules applied to the host's stored state, stored back if its version did not
  move (check-and-set in Lua), the lease's place freed in the same script.
- :meth:`FleetFrontier.done`: the crawl is done with requests (their callbacks
  ran, their children are pushed): their leases go. Until then a worker killed
  loses nothing: the lease expires and the request is queued again.
- :meth:`FleetFrontier.give_up`: ``AIMD_HOST_GIVE_UP`` ran out for a host: it
  is given up on fleet-wide (``P:gaveup``) and its queue is taken out whole;
  pushes and claims that meet its requests later hand them back to fail
  (:meth:`FleetFrontier.take_gave_up`).

What need not be answered at once waits for the next claim and goes with it,
in the same script: answers whose reaction cannot be a refusal
(:meth:`~FleetFrontier.finish_later`, :meth:`~FleetFrontier.fail_later`),
sends (:meth:`~FleetFrontier.sent_later`) and leases done
(:meth:`~FleetFrontier.done_later`). A fleet worker then costs one round trip
a request; :meth:`~FleetFrontier.flush` sends them alone, and every other call
that reads or moves a host's state sends them first, so that each host sees
its events in order.

Requests go in and out as bytes through the caller's codec (the JOBDIR's
:class:`~scrapy_aimd.request_codec.RequestCodec`). No Scrapy import.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Generic, TypeVar

from scrapy_aimd.core.controller import ControllerConfig, HostController, Reaction, Ticket
from scrapy_aimd.core.rate_limit_headers import Quota
from scrapy_aimd.fleet.connection import BULK, Encoded, Fleet
from scrapy_aimd.fleet.errors import FleetStoreError
from scrapy_aimd.fleet.host_state import (
    Applied,
    Event,
    HostData,
    Replica,
    apply,
    limits_of,
    parse_entry,
)
from scrapy_aimd.fleet.robots_store import SharedRobots, shared_of
from scrapy_aimd.fleet.seen import FleetSeenSet

__all__ = [
    "Claim",
    "ClaimReply",
    "Contention",
    "FleetFrontier",
    "FleetStatus",
    "Item",
    "Wait",
    "lease_time",
    "read_claim_reply",
    "sort_score",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds a lease holds past the download timeout, and after a response
#: while the callback runs, before its request is queued again (at most: with
#: a download timeout below it, that timeout, and never below MIN_MARGIN).
LEASE_MARGIN: Final = 30.0
MIN_MARGIN: Final = 5.0
#: Expired leases a claim puts back first (the rest: the next claims).
REAP_PER_CLAIM: Final = 16
#: Losses in a row after which an answer's worker asks for its host's turn (an
#: answer whose reaction is told at once asks at its first: see ``finish``).
TURN_AFTER: Final = 2
#: Seconds a host's turn holds, on Redis's clock: the holder's next call (a
#: reactor turn or two away) comes well within it, and a killed holder's ends
#: that fast.
TURN_TIME: Final = 0.05
#: Requests per push script, so that one script never holds Redis for long.
PUSH_BATCH: Final = 500
#: Requests a worker keeps of those it pushed, to hand out as they are when it
#: claims them itself (not decoded again: most of a claim's CPU); the oldest go
#: first (a few MB at most).
OWN_ITEMS: Final = 4096
_ARRIVAL_CHARS: Final = 16
#: A pushed request's 7 values framed (see ``FleetFrontier._pushable``): the host
#: and its gap and limit come framed already.
_PUSH_FRAME: Final = b"%b" + BULK * 4 + b"%b"
#: A feedback's 5 values framed (see ``FleetFrontier._feedback_args``).
_FEEDBACK_FRAME: Final = BULK * 5
#: A claim's reply's state when this worker stored the host's version (claim.lua).
MINE: Final = b"="
#: The sort key (-priority, depth) as one exact float score: priority in
#: [-2**31, 2**31), depth in [0, 2**21). Ties come out by arrival.
_DEPTH_BITS: Final = 21
_PRIORITY_LIMIT: Final = 1 << 31
_DEPTH_LIMIT: Final = 1 << _DEPTH_BITS


def unpack_fields(packed: bytes) -> list[bytes]:
    """The values a script packed into one string: their lengths, comma-separated,
    a ``;``, then the values one after the other (``pack`` in common.lua; empty
    for none): one reply element instead of one per value, which costs the client
    about 2 us each, cut apart with a split and a slice per value. Raises
    FleetStoreError on a broken string."""
    if not packed:
        return []
    head, separator, body = packed.partition(b";")
    try:
        if not separator:
            raise ValueError("no ';' after the lengths")
        lengths = [int(length) for length in head.split(b",")]
        if min(lengths) < 0:  # it would cut a value from the wrong end
            raise ValueError("a negative length")
        total = sum(lengths)
        if total != len(body):
            raise ValueError("cut short" if total > len(body) else "more than its lengths")
    except ValueError as exc:
        raise FleetStoreError(f"a fleet script's reply cannot be read: {exc}") from exc
    fields: list[bytes] = []
    at = 0
    for length in lengths:
        stop = at + length
        fields.append(body[at:stop])
        at = stop
    return fields


@dataclass(frozen=True, slots=True)
class ClaimReply:
    """A claim script's reply, cut apart (claim.lua): the server's time, the leases
    forgotten and given back, an arrival number per request queued, the
    feedbacks' values, and the claims' records."""

    now: bytes
    forgotten: int
    given: int
    arrivals: list[bytes]
    results: list[bytes]
    records: list[list[bytes]]


def read_claim_reply(packed: bytes) -> ClaimReply:
    """The claim script's reply, one packed list (one :func:`unpack_fields` for the
    whole call): each part after the first three given with its count first.
    Raises FleetStoreError on a reply of another shape."""
    fields = unpack_fields(packed)
    end = len(fields)
    try:
        if end < 5:
            raise ValueError(f"{end} values")
        now, forgotten, given, count = fields[:4]
        at = 4 + int(count)
        stop = at + 1 + int(fields[at])
        if at < 4 or stop <= at:
            raise ValueError("a negative count")
        arrivals, results, records = fields[4:at], fields[at + 1 : stop], []
        while stop < end:
            at, stop = stop + 1, stop + 1 + int(fields[stop])
            if stop <= at:
                raise ValueError("an empty claim record")
            records.append(fields[at:stop])
        if stop != end:
            raise ValueError("cut short")
        return ClaimReply(now, int(forgotten), int(given), arrivals, results, records)
    except (ValueError, IndexError) as exc:
        raise FleetStoreError(f"a claim's reply cannot be read: {exc}") from exc


def lease_time(download_timeout: float) -> float:
    """How long a claim holds: the download timeout plus a margin, :data:`LEASE_MARGIN`
    or, for short timeouts, the timeout itself (at least :data:`MIN_MARGIN`): a crawl
    that times out fast gets a killed worker's requests back as fast."""
    return download_timeout + min(LEASE_MARGIN, max(MIN_MARGIN, download_timeout))


def sort_score(priority: int, depth: int) -> int:
    """``(-priority, depth)`` in one score below 2**53 (a float holds it exactly);
    values beyond the range are clipped to its ends."""
    if not (-_PRIORITY_LIMIT < priority < _PRIORITY_LIMIT and 0 <= depth < _DEPTH_LIMIT):
        priority = max(-_PRIORITY_LIMIT + 1, min(_PRIORITY_LIMIT - 1, priority))
        depth = max(0, min(_DEPTH_LIMIT - 1, depth))
    return -priority * _DEPTH_LIMIT + depth


@dataclass(frozen=True, slots=True)
class Item(Generic[T]):
    """A request to queue. ``key``: its 64-bit fingerprint, checked against the
    shared seen set (None: queued anyway, as ``dont_filter``)."""

    host: str
    item: T
    priority: int = 0
    depth: int = 0
    key: int | None = None


@dataclass(frozen=True, slots=True)
class Claim(Generic[T]):
    """A leased request: hand ``lease`` back to finish/fail and then to done."""

    lease: str
    host: str
    item: T
    started: float
    """When it was claimed, on the fleet's clock: its host's start."""
    expires: float


@dataclass(frozen=True, slots=True)
class Wait:
    """No host may start now. ``ready_at``: when the first may (inf: none waits
    on time, only on a place freed)."""

    ready_at: float
    now: float
    queued: int
    leased: int


@dataclass(slots=True)
class _Answer:
    """An answer (or a change of a host) not yet stored: ``event`` moves the host's
    controller at ``at``; ``then`` is told the stored reaction."""

    host: str
    lease: str
    event: Event
    at: float
    then: Callable[[Reaction | None], None]
    done: bool = False
    #: Its reaction is told at once (``finish``, ``fail``): it asks for its
    #: host's turn at its first loss, so that the reaction told is the one stored.
    urgent: bool = False
    #: Times it went and was not stored (a lost race, another worker's turn).
    losses: int = 0
    #: The reaction told before it was stored (``told``), to compare.
    told: bool = False
    early: Reaction | None = None
    #: Filled when it goes: when it is applied (after the log it knew of; kept
    #: when it goes again), and the result that was sent.
    applied_at: float | None = None
    result: Applied | None = None


@dataclass
class Contention:
    """What contention for hosts' states did to this worker's answers, for the
    ``aimd/fleet/*`` stats. An answer that loses its race (another worker's
    answer or claim moved the host first: ``conflicts``) is never retried in a
    loop: it waits, before its host's later answers, and goes with the next call,
    applied to the host as the loss showed it. One that lost :data:`TURN_AFTER`
    times in a row asks for the host's turn: granted with its next loss if no
    other worker holds it, it keeps every other worker's feedback of the host
    waiting (``turn_waits``) for :data:`TURN_TIME` at most, or until it stores."""

    turns: int = 0
    """Turns of a host granted to this worker."""
    turn_waits: int = 0
    """Calls whose answers of a host were told to wait for another worker's turn."""
    most_losses: int = 0
    """The most times one answer went before it was stored."""
    told_early: int = 0
    """Answers whose reaction was told before they were stored (one that lost its
    race at once: computed on the host as the loss showed it, in the turn)."""
    told_changed: int = 0
    """Of those, stored with another reaction (the turn ended before the next call)."""

    def as_stats(self) -> dict[str, int]:
        return {f"aimd/fleet/{name}": value for name, value in asdict(self).items()}


class _Push(Generic[T]):
    """Requests to queue, as the push script takes them, and who is told how it went."""

    def __init__(
        self,
        frontier: FleetFrontier[T],
        items: Sequence[Item[T]],
        then: Callable[[list[bool | None]], None],
    ) -> None:
        self.frontier, self.items, self.then = frontier, items, then
        self.args: list[Any] = []
        self.places: list[int] = []

    def took(self, arrivals: Sequence[Any]) -> None:
        """The script's reply, an arrival number (0: seen) for each request sent."""
        result: list[bool | None] = [None] * len(self.items)
        queued = seen = 0
        for index, arrival in zip(self.places, arrivals, strict=True):
            number = int(arrival)
            result[index] = number != 0
            if number > 0:
                queued += 1
                self.frontier._keep_own(f"{number:016x}", self.items[index].item)
            elif number < 0:  # its host was given up on: the caller fails it
                item = self.items[index]
                self.frontier._gave_up_on(item.host, [item.item])
            else:
                seen += 1
        counters = self.frontier.counters
        counters.pushed += queued
        counters.duplicates += seen
        self.then(result)


@dataclass(frozen=True, slots=True)
class FleetStatus:
    """The fleet as a whole, for the closing rule (``AIMD_FLEET_IDLE_CLOSE``)."""

    queued: int
    leased: int
    idle_for: float
    """Seconds with nothing queued and nothing leased fleet-wide (0 when busy)."""
    now: float
    reaped: int
    """Leases expired fleet-wide since the fleet began."""
    seen: int
    """Keys in the shared seen set."""


class FleetFrontier(Generic[T]):
    """Per-host queues, leases and controller states, shared through Redis."""

    def __init__(
        self,
        fleet: Fleet,
        *,
        encode: Callable[[T], bytes | None],
        decode: Callable[[bytes], T],
        config: Callable[[str], ControllerConfig],
        lease_time: float,
        seen: FleetSeenSet | None = None,
        in_use: Callable[[T], bool] | None = None,
        again: Callable[[], None] | None = None,
    ) -> None:
        """``lease_time``: seconds a claim holds (the download timeout plus a margin).
        ``in_use``: whether the caller still has an item out (claimed, not done):
        one pushed again meanwhile is decoded afresh when claimed, never handed
        out as the same object twice. ``again``: told when answers that were not
        stored wait (see :meth:`retry_in`), for the caller to call :meth:`flush`
        then if no claim comes first."""
        if not math.isfinite(lease_time) or lease_time <= 0:
            raise ValueError(f"lease_time={lease_time!r}: expected a finite number > 0")
        self.fleet = fleet
        self.counters = fleet.counters
        self.seen = seen if seen is not None else FleetSeenSet(fleet)
        self._encode = encode
        self._decode = decode
        self._config = config
        self._configs: dict[str, tuple[ControllerConfig, tuple[str, str]]] = {}
        self.lease_time = lease_time
        #: Seconds a lease still holds after its answer, while the callback runs.
        self.callback_time = min(LEASE_MARGIN, lease_time)
        #: Per host, the framed values of its pushed requests (see ``_push_frame``).
        self._push_frames: dict[str, tuple[bytes, bytes]] = {}
        #: Each host as this worker's latest reply about it showed it.
        self._hosts: dict[str, HostData] = {}
        #: Bumped whenever a host's data or replica changes, so whatever
        #: :meth:`controller` returns may have: a caller that found nothing to do
        #: about the controllers it read may skip until it moves (or time does).
        self.changes = 0
        #: Each host's controller, restored once per stored state (see ``Replica``).
        self._replicas: dict[str, Replica] = {}
        #: Logged starts that a restored controller would not take (never, if the
        #: claim script and the controller agree).
        self.stray_starts = 0
        #: Claims' replies that left out a state this worker stored, which it no
        #: longer held: read again from Redis (never, on the common path).
        self.state_reads = 0
        #: Requests that ``encode`` could not serialize: the caller keeps them.
        self.unserializable = 0
        #: Per host: feedbacks, and of them those applied again (a lost race).
        self.feedbacks_by_host: dict[str, list[int]] = {}
        #: What goes with the next call (see the module's docstring): answers,
        #: sends (host, lease, time) and leases done.
        self._answers: list[_Answer] = []
        #: Calls that took what waited (each :meth:`_exchange`): a caller that
        #: times how long something waits can tell that what waited went.
        self.exchanges = 0
        #: When no host may start, as the latest call found it if it was a claim
        #: that made fewer claims than asked (a :class:`Wait`; None after any
        #: other call): until a host is ready, nothing waits to go and no other
        #: worker moved the fleet, another claim would make none.
        self.ran_out: Wait | None = None
        self._pushes: list[_Push[T]] = []
        self._sent: list[tuple[str, str, str]] = []
        self._done: list[str] = []
        #: Leases to give back with the next call, and how many the latest gave back.
        self._back: list[str] = []
        self._given = 0
        #: Leases the latest call forgot of those it carried as done.
        self._forgotten = 0
        #: A call failed that carried requests to queue (the script may not have
        #: run): leases done are no longer sent, so that their requests come back
        #: when the leases expire, and their children with them.
        self._pushes_lost = False
        #: Items this worker pushed, by arrival number (16 hex digits, the head of
        #: their queue member), while it may claim them itself.
        self._own: dict[str, T] = {}
        self._own_ids: set[int] = set()
        self._in_use = in_use
        self._again = again
        self.contention = Contention()
        #: Hosts whose answers wait for another worker's turn: until when (the
        #: fleet's clock).
        self._turns: dict[str, float] = {}
        #: Hosts given up on fleet-wide (AIMD_HOST_GIVE_UP) that this worker
        #: learnt of: from its own :meth:`give_up`, or from a push or a claim
        #: that handed it requests of theirs.
        self.given_up: set[str] = set()
        #: Requests of hosts given up on that Redis handed to this worker, with
        #: their hosts, for the caller to fail (see :meth:`take_gave_up`).
        self._gave_up: list[tuple[str, T]] = []

    # -- queue -------------------------------------------------------------------------

    def push(self, items: Sequence[Item[T]]) -> list[bool | None]:
        """Queue requests; one round trip per :data:`PUSH_BATCH`. For each: True if
        queued, or taken for a host given up on (not queued: it waits in
        :meth:`take_gave_up` to be failed), False if its key was seen already,
        None if it cannot be serialized (the caller keeps it locally; counted in
        ``unserializable``)."""
        got: list[list[bool | None]] = []
        try:
            self.flush()  # in order: what waits was queued first
            for start in range(0, len(items), PUSH_BATCH):
                batch = self._pushable(items[start : start + PUSH_BATCH], got.append)
                reply = self.fleet.call("push", *batch.args) if batch.places else []
                batch.took(reply)
        except Exception:
            self._pushes_lost = True  # some of them may be: see _pushes_lost
            raise
        return [flag for flags in got for flag in flags]

    def push_later(
        self, items: Sequence[Item[T]], then: Callable[[list[bool | None]], None]
    ) -> None:
        """:meth:`push`, with the next call (before the leases done that go with
        it: children are queued before their parent's lease goes); ``then`` is
        told the results. At most :data:`PUSH_BATCH` wait: the rest go now."""
        if len(items) + sum(len(b.places) for b in self._pushes) > PUSH_BATCH:
            then(self.push(items))
            return
        self._pushes.append(self._pushable(items, then))

    def _pushable(
        self, items: Sequence[Item[T]], then: Callable[[list[bool | None]], None]
    ) -> _Push[T]:
        """The push script's arguments for ``items`` (those that can be serialized)."""
        batch: _Push[T] = _Push(self, items, then)
        frames = self._push_frames
        for index, entry in enumerate(items):
            data = self._encode(entry.item)
            if data is None:
                self.unserializable += 1
                continue
            if entry.key is None:
                bucket, member = b"", b""
            else:
                bucket, member = self.seen.bucket_and_member_bytes(entry.key)
            framed = frames.get(entry.host)
            if framed is None:
                framed = frames[entry.host] = self._push_frame(entry.host)
            score = b"%d" % sort_score(entry.priority, entry.depth)
            # The 7 values in one format (see Encoded): host, score, the request,
            # its seen bucket and member, the host's initial gap and limit.
            frame = _PUSH_FRAME % (
                framed[0],
                len(score),
                score,
                len(data),
                data,
                len(bucket),
                bucket,
                len(member),
                member,
                framed[1],
            )
            batch.args.append(Encoded(frame, 7))
            batch.places.append(index)
        return batch

    def _push_frame(self, host: str) -> tuple[bytes, bytes]:
        """A pushed request's values that are its host's (see ``_pushable``), framed:
        the host, and its initial gap and limit."""
        name = host.encode()
        gap, limit = (value.encode() for value in self._initial(host))
        return BULK % (len(name), name), BULK % (len(gap), gap) + BULK % (len(limit), limit)

    def _keep_own(self, arrival: str, item: T) -> None:
        """Keep a pushed item to hand out as it is if this worker claims it (an
        item pushed twice is kept once: two claims must not share one object)."""
        if id(item) in self._own_ids:
            return
        if len(self._own) >= OWN_ITEMS:
            oldest = next(iter(self._own))
            self._own_ids.discard(id(self._own.pop(oldest)))
        self._own[arrival] = item
        self._own_ids.add(id(item))

    def _item(self, member: bytes) -> T:
        """The claimed item: this worker's own if it kept it (by its arrival number,
        the member's head), else decoded."""
        own = self._own.pop(member[:_ARRIVAL_CHARS].decode("ascii"), None)
        if own is not None:
            self._own_ids.discard(id(own))
            if self._in_use is None or not self._in_use(own):
                return own
        return self._decode(member[_ARRIVAL_CHARS:])

    def _initial(self, host: str) -> tuple[str, str]:
        """A new host's gap and limit, as its controller starts."""
        return self._cfg(host)[1]

    def _cfg(self, host: str) -> tuple[ControllerConfig, tuple[str, str]]:
        known = self._configs.get(host)
        if known is None:
            cfg = self._config(host)
            limits = limits_of(HostController(cfg))
            known = self._configs[host] = (cfg, (repr(limits.gap), str(limits.limit)))
        return known

    # -- claim -------------------------------------------------------------------------

    def claim_many(self, count: int) -> list[Claim[T]] | Wait:
        """Up to ``count`` requests, each the best request of a host that may start
        now, leased, in one round trip (which also takes what waits for it:
        requests to queue, answers, sends, leases done); or when one may start,
        if none may now. A feedback that lost a race costs one more round trip,
        and so does a request that cannot be read (to drop it)."""
        while True:
            records = self._exchange(claim=max(1, count))
            if not records:
                raise FleetStoreError("a claim's reply has neither a claim nor a wait")
            first = records[0]
            if first[0] == b"0":
                self.counters.claim_misses += 1
                self.ran_out = self._wait(first)
                return self.ran_out
            claimed = []
            for reply in records:
                if reply[0] == b"0":  # fewer than asked: none may start now
                    self.ran_out = self._wait(reply)
                    break
                claimed.append((reply[3], *self._claimed(reply, seen=True)))
            claims: list[Claim[T]] = []
            for member, lease_id, host, started, expires in claimed:
                try:
                    item = self._item(member)
                except Exception:
                    self.counters.undecodable += 1
                    logger.exception(
                        "Dropping a request of %s from the fleet's queue that cannot be read "
                        "(lease %s)",
                        host,
                        lease_id,
                    )
                    self.done([lease_id])
                    continue
                self.counters.claims += 1
                claims.append(Claim(lease_id, host, item, started, expires))
            if claims:
                return claims

    def _wait(self, reply: list[bytes]) -> Wait:
        """A claim's record of a miss (see claim.lua). Its time is the claim call's,
        already on the clock (:meth:`_exchange`): set again now, after a call
        made since (:meth:`_own_state`), it would be anchored at that call's send."""
        self.counters.reaped += int(reply[5])
        return Wait(
            ready_at=float(reply[1]),
            now=float(reply[2]),
            queued=int(reply[3]),
            leased=int(reply[4]),
        )

    def flush(self) -> None:
        """Send what waits for the next claim now, without claiming (one round trip;
        none if nothing waits, or only answers of hosts in another worker's turn).
        Answers that are not stored wait again (see :class:`Contention`)."""
        if self._pushes or self._sent or self._done or self._back or self._ready_answers():
            self._exchange(claim=0)

    @property
    def waiting(self) -> bool:
        """Requests to queue, answers, sends or leases done wait for the next call."""
        return bool(self._pushes or self._answers or self._sent or self._done or self._back)

    def retry_in(self) -> float | None:
        """Seconds until answers that went and were not stored may go again: 0 for
        one that lost its race, the rest of the turn for a host in another
        worker's (its later answers wait with it); None if none waits."""
        now, soonest = self.fleet.now(), math.inf
        for answer in self._answers:
            until = self._turns.get(answer.host)
            if until is not None:
                soonest = min(soonest, max(0.0, until - now))
            elif answer.losses:
                soonest = 0.0
        return None if soonest == math.inf else soonest

    def flush_all(self, timeout: float) -> bool:
        """:meth:`flush` until nothing waits, for a worker that stops: answers that
        lose their race or wait for another worker's turn go again (each turn
        lasts :data:`TURN_TIME` at most), for ``timeout`` seconds at most. True if
        nothing waits any more."""
        deadline = time.monotonic() + timeout
        while self.waiting:
            self.flush()
            delay = self.retry_in()
            if not self.waiting or time.monotonic() + (delay or 0.0) > deadline:
                break
            if delay:
                time.sleep(delay)
        return not self.waiting

    def _ready_answers(self) -> bool:
        now = self.fleet.now()
        return any(self._turns.get(answer.host, now) <= now for answer in self._answers)

    def _answers_to_send(self) -> list[_Answer]:
        """The waiting answers to carry now, in order; those of a host in another
        worker's turn stay, in order, until it ends (they would only be told to
        wait again)."""
        if self._turns:
            now = self.fleet.now()
            for host, until in list(self._turns.items()):
                if until <= now:
                    del self._turns[host]
        if not self._turns:
            answers, self._answers = self._answers, []
            return answers
        answers = [a for a in self._answers if a.host not in self._turns]
        self._answers = [a for a in self._answers if a.host in self._turns]
        return answers

    def _exchange(self, *, claim: int) -> list[list[bytes]]:
        """One claim script: what waits, then up to ``claim`` claims. Returns the
        claims' records (one wait record if none could be made, none without a
        claim). Answers not stored wait again, first."""
        answers = self._answers_to_send()
        pushes, self._pushes = self._pushes, []
        sent, self._sent = self._sent, []
        done, self._done = self._done, []
        back, self._back = self._back, []
        self.exchanges += 1
        self.ran_out = None
        if self._pushes_lost:
            done = []
            for answer in answers:
                answer.done = False
        args: list[Any] = [repr(self.lease_time), REAP_PER_CLAIM, claim]
        args += (sum(len(p.places) for p in pushes), len(sent), len(answers), len(done))
        args += (self.fleet.token, len(back), self.fleet.heartbeat_ms)
        for push in pushes:
            args += push.args
        for report in sent:
            args += report
        last = {answer.host: index for index, answer in enumerate(answers)}
        if answers:
            hosts = {answer.host: self._hosts.get(answer.host) for answer in answers}
            # A host's first answer of the call is the one the script tries: it asks
            # for the turn for all of them (each is computed on the one before).
            asks = {a.host for a in answers if a.urgent or a.losses >= TURN_AFTER}
            try:
                for index, answer in enumerate(answers):
                    asked = repr(TURN_TIME) if answer.host in asks else "-"
                    args.append(self._prepare(answer, asked, last[answer.host] == index))
            except Exception:
                # Nothing was sent: all of it waits again, its hosts as they were.
                self._put_back(hosts, answers, pushes, sent, done, back)
                raise
        args += done
        args += back

        def what() -> str:  # for an error only
            carried = [("push", pushes), ("feedback", answers), ("sent", sent), ("done", done)]
            carried.append(("give back", back))
            named = ", ".join(name for name, items in carried if items)
            return f"claim{' with ' if named else ''}{named}" if claim else named

        lost, self._pushes_lost = self._pushes_lost, self._pushes_lost or bool(pushes)
        reply = read_claim_reply(self.fleet.call("claim", *args, what=what))
        self._pushes_lost = lost
        self.fleet.saw_time(reply.now)
        self._forgotten, self._given = reply.forgotten, reply.given
        numbers = reply.arrivals
        at = 0
        for push in pushes:
            push.took(numbers[at : at + len(push.places)])
            at += len(push.places)
        retries: list[_Answer] = []
        fields = reply.results
        at = 0
        for index, answer in enumerate(answers):
            ok, version, third, tickets, turn, count = fields[at : at + 6]
            log = fields[at + 6 : at + 6 + int(count)]
            at += 6 + int(count)
            if ok == b"1":
                kept = log if last[answer.host] == index else None
                self._stored(answer, int(float(version)), third == b"1", kept)
            else:
                first = not any(a.host == answer.host for a in retries)
                self._not_stored(answer, ok, turn, first, [version, third, tickets, *log])
                retries.append(answer)
        if retries:
            self._answers[:0] = retries
            if self._again is not None:
                self._again()
        records = reply.records
        if any(record[0] in (b"2", b"3") for record in records):
            for record in records:
                if record[0] == b"2":  # a host given up on: what its queue held
                    self._drained(record[1], record[2:])
                elif record[0] == b"3":  # a host this call's leases cancelled on
                    self._cancelled_on(record[1], record[2], record[3:])
            records = [record for record in records if record[0] not in (b"2", b"3")]
        return records

    def _cancelled_on(self, host_bytes: bytes, version: bytes, log: Sequence[bytes]) -> None:
        """A host's log after the cancels this worker's leases done or given back
        logged on it (their places had no feedback). Kept when the host's version is
        the one this worker knows, so that its next answer of the host replays them:
        else that answer would find entries it never saw and lose its race to this
        worker's own cancels (a false conflict, a turn taken from the other
        workers). A newer version is another worker's store: its answer learns it
        by losing, as ever."""
        host = host_bytes.decode("utf-8", "surrogateescape")
        known = self._hosts.get(host)
        if known is None or known.version != int(float(version)):
            return
        self.changes += 1
        self._hosts[host] = HostData(
            known.version, known.state, known.tickets, [e.decode() for e in log]
        )

    def _put_back(
        self,
        hosts: dict[str, HostData | None],
        answers: list[_Answer],
        pushes: list[_Push[T]],
        sent: list[tuple[str, str, str]],
        done: list[str],
        back: list[str],
    ) -> None:
        """What a call that failed before its script ran carried, waiting again."""
        self.changes += 1
        for host, data in hosts.items():
            self._replicas.pop(host, None)
            if data is None:
                self._hosts.pop(host, None)
            else:
                self._hosts[host] = data
        self._answers[:0], self._pushes[:0] = answers, pushes
        self._sent[:0], self._done[:0], self._back[:0] = sent, done, back

    def _prepare(self, answer: _Answer, turn: str, with_log: bool) -> Encoded:
        """Apply the answer to the host as this worker last saw it (an earlier
        answer of the same call included), the feedback's arguments as sent (see
        :meth:`_feedback_args`)."""
        host = answer.host
        if not answer.losses:
            self.counters.feedbacks += 1
            self.feedbacks_by_host.setdefault(host, [0, 0])[0] += 1
        data = self._hosts.get(host) or HostData()
        self._handle(answer, data)
        result = self._apply(answer, data)
        # The next answer of the same host in this call goes on from this one (the
        # script takes none after one that lost its race).
        after = self._hosts[host] = HostData(
            data.version + 1, result.state, result.tickets, data.log[result.replayed :]
        )
        result.replica.stored(data.version + 1, result.state, result.tickets)
        if not after.log:  # nothing left to replay: controller() has it as it is
            result.replica.viewed = after
        self._replicas[host] = result.replica
        return self._feedback_args(answer, data, result, turn, with_log)

    def _handle(self, answer: _Answer, data: HostData) -> None:
        """When the answer is applied, set the first time it goes (or is told):
        never before what this worker already knew had happened at the host (its
        own claims, as in a single process, where a start made before an answer
        was handled comes first: the host's controller in hand has those entries
        replayed, and goes on without a restore). An answer that goes again keeps
        it: what the host did since comes after it, as it would have had it won."""
        if answer.applied_at is not None:
            return
        at = answer.at
        if data.log:
            try:
                at = max(at, parse_entry(data.log[-1])[2])
            except ValueError as exc:
                log_key = self.fleet.key(f"e:{answer.host}")
                raise FleetStoreError(
                    f"Redis key {log_key} holds a log that cannot be read: {exc}"
                ) from exc
        answer.applied_at = at

    def _told_now(self, answer: _Answer) -> Reaction | None:
        """The reaction of an answer that its caller needs now but that was not
        stored (it lost its race, or waits for another worker's turn): the answer
        applied to the host as this worker now knows it, the state the answer
        goes on with (with the turn granted by its loss, the state it is stored
        on). It is stored with a later call."""
        data = self._hosts.get(answer.host) or HostData()
        self._handle(answer, data)
        result = self._apply(answer, data)
        answer.told, answer.early = True, result.reaction
        self.contention.told_early += 1
        return result.reaction

    def _apply(self, answer: _Answer, data: HostData) -> Applied:
        host = answer.host
        cfg = self._cfg(host)[0]
        # The replica is taken: the event moves it on, and it is kept again only
        # once its state is stored.
        self.changes += 1
        replica = self._replicas.pop(host, None)
        at = answer.applied_at
        assert at is not None
        try:
            result = apply(cfg, data, answer.event, lease=answer.lease, at=at, replica=replica)
        except ValueError as exc:
            key = self.fleet.key(f"h:{host}")
            raise FleetStoreError(
                f"Redis key {key} holds a state that cannot be read: {exc}"
            ) from exc
        answer.result = result
        return result

    def _feedback_args(
        self, answer: _Answer, data: HostData, result: Applied, turn: str, with_log: bool
    ) -> Encoded:
        """The feedback as claim.lua takes it (``feedback_at``), its five values
        framed in one format (see :class:`Encoded`): host, state, tickets, the last
        log entry replayed, and the rest in one string (one argument to pack
        instead of eleven): the version it goes on from, the gap, limit and pause,
        the lease ('-' for none), '1' to forget it, how long it holds after, the
        entries replayed, the time, the ``turn`` asked for ('-' for none) and '1'
        if the reply should carry the host's log."""
        limits = result.limits
        rest = (
            "%d %r %d %r %s %s %r %d %r %s %s"  # noqa: UP031 (one format, no calls)
            % (
                data.version,
                limits.gap,
                limits.limit,
                limits.pause,
                answer.lease or "-",
                "1" if answer.done else "0",
                self.callback_time,
                result.replayed,
                answer.applied_at,
                turn,
                "1" if with_log else "0",
            )
        ).encode()
        host = answer.host.encode()
        state, tickets, last = result.state, result.tickets, result.last_replayed.encode()
        frame = _FEEDBACK_FRAME % (
            len(host),
            host,
            len(state),
            state,
            len(tickets),
            tickets,
            len(last),
            last,
            len(rest),
            rest,
        )
        return Encoded(frame, 5)

    def _stored(self, answer: _Answer, version: int, released: bool, log: list[Any] | None) -> None:
        """The answer's state is stored as ``version``; ``log``: the host's log
        after it, when the reply carries it (the host's last answer of a call)."""
        result = answer.result
        assert result is not None
        if log is not None:
            self.changes += 1
            self._hosts[answer.host] = HostData(
                version, result.state, result.tickets, [e.decode() for e in log]
            )
        self.stray_starts += result.stray
        if answer.lease and not released:
            self.counters.late_feedback += 1
        if answer.told:
            self.contention.told_changed += result.reaction != answer.early
            return
        answer.then(result.reaction)

    def _not_stored(
        self, answer: _Answer, status: bytes, turn: bytes, first: bool, reply: list[bytes]
    ) -> None:
        """The answer was not stored: it lost its race (status 0: another worker's
        feedback or claim came first; ``turn``, the end of the host's turn if this
        one was granted it), or another worker holds the host's turn (2, until
        ``turn``). ``first``: the host's first answer of the call (the others of
        the host were not tried). Kept: the host as it is now."""
        host = answer.host
        answer.losses += 1
        contention = self.contention
        contention.most_losses = max(contention.most_losses, answer.losses)
        if status == b"2":
            self._turns[host] = float(turn)
            contention.turn_waits += first
        else:
            self.counters.conflicts += 1
            self.feedbacks_by_host[host][1] += 1
            self._turns.pop(host, None)
            contention.turns += first and bool(turn)
        self.changes += 1
        self._replicas.pop(host, None)
        version, state, tickets = reply[:3]
        self._hosts[host] = HostData(
            int(float(version)), state, tickets, [e.decode() for e in reply[3:]]
        )

    def _claimed(self, reply: list[Any], *, seen: bool = False) -> tuple[str, str, float, float]:
        """A claim's or a hold's reply: the host as it shows it is kept; the lease,
        the host, the start and the expiry. ``seen``: the fleet's clock was set
        from the start already (a claim's is its reply's time)."""
        _, lease, host_bytes, _, started, expires, version, state, tickets = reply[:9]
        reaped, log = reply[9], reply[10:]
        if reaped != b"0":
            self.counters.reaped += int(reaped)
        if not seen:
            self.fleet.saw_time(started)
        host = host_bytes.decode("utf-8", "surrogateescape")
        number = int(float(version))
        entries = [e.decode() for e in log]
        self.changes += 1
        if state == MINE:
            self._hosts[host] = self._own_state(host, number, entries)
        else:
            self._hosts[host] = HostData(number, state, tickets, entries)
        return lease.decode("ascii"), host, float(started), float(expires)

    def _own_state(self, host: str, version: int, log: list[str]) -> HostData:
        """The host as a claim's reply shows it when this worker stored its state's
        version (the reply leaves the state out): the state and tickets in hand,
        those of the host's replica at that version (its controller goes on
        without a restore), or of the latest reply about it (an answer that lost
        its race brought them); else read from Redis (one round trip)."""
        replica = self._replicas.get(host)
        if replica is not None and replica.version == version:
            return HostData(version, replica.state, replica.stored_tickets, log)
        known = self._hosts.get(host)
        if known is not None and known.version == version and known.state:
            return HostData(version, known.state, known.tickets, log)
        self.state_reads += 1
        number, state, tickets, *entries = self.fleet.call("state", host)
        return HostData(int(float(number)), state, tickets, [e.decode() for e in entries])

    def hold(self, host: str, item: T, origin: str = "") -> Claim[T] | Wait | SharedRobots:
        """A place on ``host`` for a request the caller keeps and sends itself (its
        robots.txt), by the claim's rule, leased and counted as a start of the
        host fleet-wide; or when the host may start. One round trip. Answer it with
        :meth:`finish` (``page=False``) or :meth:`fail`, then :meth:`done`, as a
        claim; an expired hold frees its place.

        With the robots.txt's ``origin``, fetched once per fleet
        (:mod:`~scrapy_aimd.fleet.robots_store`): its stored answer if there is
        one, a wait while another worker holds its lock, and with the place the
        lock, for as long as the lease."""
        self.flush()  # the host's events in order
        gap, limit = self._initial(host)
        reply = self.fleet.call(
            "hold",
            host,
            repr(self.lease_time),
            gap,
            limit,
            origin,
            self.fleet.token,
            self.fleet.heartbeat_ms,
        )
        if reply[0] == 2:
            self.fleet.saw_time(reply[1])
            return shared_of(reply[2:], origin, self.fleet)
        if reply[0] == 0:
            now = self.fleet.saw_time(reply[2])
            return Wait(ready_at=float(reply[1]), now=now, queued=0, leased=0)
        lease_id, claimed_host, started, expires = self._claimed(reply)
        return Claim(lease_id, claimed_host, item, started, expires)

    # -- giving up on a host (AIMD_HOST_GIVE_UP) ---------------------------------------

    def give_up(self, host: str) -> tuple[bool, int]:
        """Give ``host`` up fleet-wide (one round trip, after what waits): its
        queued requests are taken out of Redis in the same script and wait in
        :meth:`take_gave_up`, to be failed; its requests pushed or coming back
        later, by any worker, are never queued again. Returns whether this call
        gave it up (False: another worker did first) and how many requests it
        took."""
        self.flush()  # the host's requests waiting to go are queued first, then taken
        added, *members = self.fleet.call("giveup", host)
        taken = self._drained(host.encode("utf-8", "surrogateescape"), members)
        return int(added) == 1, taken

    def take_gave_up(self) -> list[tuple[str, T]]:
        """The requests of hosts given up on that Redis handed to this worker
        (drained, pushed, or back from a lease), with their hosts; each once."""
        taken, self._gave_up = self._gave_up, []
        return taken

    def _gave_up_on(self, host: str, items: Iterable[T]) -> None:
        self.given_up.add(host)
        self._gave_up.extend((host, item) for item in items)

    def _drained(self, host_bytes: bytes, members: Sequence[bytes]) -> int:
        """Requests taken out of a given-up host's queue, for the caller to fail;
        one that cannot be read is dropped, as a claim drops it. Returns how many."""
        host = host_bytes.decode("utf-8", "surrogateescape")
        items: list[T] = []
        for member in members:
            try:
                items.append(self._item(member))
            except Exception:
                self.counters.undecodable += 1
                logger.exception("Dropping a request of %s, given up on, that cannot be read", host)
        self._gave_up_on(host, items)
        return len(items)

    # -- feedback ----------------------------------------------------------------------

    def finish(
        self,
        claim: Claim[T],
        *,
        status: int,
        latency: float | None = None,
        retry_after: float | None = None,
        now: float | None = None,
        done: bool = False,
        page: bool = True,
        quota: Quota | None = None,
        again: bool = False,
    ) -> Reaction | None:
        """A response came back: the host's controller learns from it, the lease's
        place is freed (the lease itself stays until :meth:`done`, or goes now if
        ``done``). None if the host's controller did not know the request.
        ``page`` (False for robots.txt) and ``again`` are as ``HostController.finish``
        takes them. Stored now, with whatever waited for the next call: one round
        trip (if it loses its race, it goes again with the next call: see
        :meth:`_store_now`)."""
        got: list[Reaction | None] = []
        self.finish_later(
            claim,
            status=status,
            latency=latency,
            retry_after=retry_after,
            now=now,
            done=done,
            page=page,
            quota=quota,
            again=again,
            then=got.append,
        )
        return self._store_now(got)

    def finish_later(
        self,
        claim: Claim[T],
        *,
        status: int,
        then: Callable[[Reaction | None], None],
        latency: float | None = None,
        retry_after: float | None = None,
        now: float | None = None,
        done: bool = False,
        page: bool = True,
        quota: Quota | None = None,
        again: bool = False,
    ) -> None:
        """:meth:`finish`, stored with the next call; ``then`` is told the reaction
        once it is. For an answer whose reaction the caller need not know at once
        (one that cannot be a refusal: the host's events keep their order)."""

        def event(controller: HostController, ticket: Ticket | None) -> Reaction | None:
            if ticket is None:
                return None
            return controller.finish(
                ticket,
                at,
                status=status,
                latency=latency,
                retry_after=retry_after,
                page=page,
                quota=quota,
                again=again,
            )

        at = self._event_time(claim, now, latency)
        self._answers.append(_Answer(claim.host, claim.lease, event, at, then, done))

    def fail(
        self, claim: Claim[T], *, timeout: bool, now: float | None = None, done: bool = False
    ) -> Reaction | None:
        """The download failed without a response (a timeout is a throttle signal).
        Stored now, with whatever waited for the next call: one round trip."""
        got: list[Reaction | None] = []
        self.fail_later(claim, timeout=timeout, now=now, done=done, then=got.append)
        return self._store_now(got)

    def _store_now(self, got: list[Reaction | None]) -> Reaction | None:
        """The answer just added, stored now with what waits (one round trip), its
        reaction in ``got``. One that lost its race asks for its host's turn with
        the loss, and goes again with the next call; its reaction is told now, on
        the host as the loss showed it (see :meth:`_told_now`)."""
        answer = self._answers[-1]
        answer.urgent = True
        self.flush()
        return got[0] if got else self._told_now(answer)

    def fail_later(
        self,
        claim: Claim[T],
        *,
        timeout: bool,
        then: Callable[[Reaction | None], None],
        now: float | None = None,
        done: bool = False,
    ) -> None:
        """:meth:`fail`, stored with the next call (see :meth:`finish_later`)."""

        def event(controller: HostController, ticket: Ticket | None) -> Reaction | None:
            return None if ticket is None else controller.fail(ticket, at, timeout=timeout)

        at = self._event_time(claim, now)
        self._answers.append(_Answer(claim.host, claim.lease, event, at, then, done))

    def update_host(
        self, host: str, change: Callable[[HostController], None], *, now: float | None = None
    ) -> HostController | None:
        """Change a host's controller outside a request (its robots.txt Crawl-delay).
        Stored now, with what waits (one round trip); if it loses its race, with
        the next call, before the host's later answers. Returns the host's
        controller with the change: as stored, or, while the change waits, as it
        leaves the host this worker now knows (the newer state its loss brought),
        which :meth:`controller` does not show until it is stored (None: the
        host's state cannot be read; the next call reports it)."""

        def event(controller: HostController, ticket: Ticket | None) -> None:
            change(controller)

        at = self.fleet.now() if now is None else now
        # It asks for the host's turn at its first loss, as an answer told at once:
        # the host's next start should keep to it.
        answer = _Answer(host, "", event, at, lambda reaction: None, urgent=True)
        self._answers.append(answer)
        self.flush()
        if not any(waiting is answer for waiting in self._answers):
            return self.controller(host)
        data = self._hosts.get(host) or HostData()
        applied_at = answer.at if answer.applied_at is None else answer.applied_at
        try:  # on a replica of its own: the host's stays as stored
            return apply(self._cfg(host)[0], data, event, lease="", at=applied_at).controller
        except ValueError:
            return None

    def _event_time(
        self, claim: Claim[T], now: float | None, latency: float | None = None
    ) -> float:
        """When the answer came back, on the fleet's clock: never before its claim,
        nor before its fetch could have taken ``latency``: an answer timed before
        its own fetch ended would read as a round that never loaded the host."""
        at = self.fleet.now() if now is None else now
        if latency is not None and math.isfinite(latency) and latency > 0:
            at = max(at, claim.started + latency)
        return max(at, claim.started)

    def sent_later(self, claim: Claim[T]) -> None:
        """The claimed request left this worker now, later than its claim: the
        host's gap counts from now, told with the next call (worth it only where
        the host has a gap)."""
        self._sent.append((claim.host, claim.lease, repr(self.fleet.now())))

    # -- leases ------------------------------------------------------------------------

    def done(self, leases: Iterable[str]) -> int:
        """The crawl is done with these requests: forget their leases (one round trip,
        with whatever waited). A lease with no feedback (dropped before its
        download) frees its place. Returns how many leases were still there (of
        those whose answer did not wait with them)."""
        ids = list(leases)
        if not ids:
            return 0
        self.done_later(ids)
        self._forgotten = 0
        self.flush()
        return self._forgotten

    def done_later(self, leases: Iterable[str]) -> None:
        """:meth:`done`, with the next call. A lease whose answer waits goes with
        that answer (so that an answer that loses its race is never taken for a
        request dropped before its download)."""
        waiting = {answer.lease: answer for answer in self._answers if answer.lease}
        for lease in leases:
            answer = waiting.get(lease)
            if answer is not None:
                answer.done = True
            else:
                self._done.append(lease)

    def give_back(self, leases: Iterable[str]) -> int:
        """Queue these requests again now: the worker stops without finishing them
        (a shutdown's cancelled downloads). One round trip, with what waits;
        returns how many."""
        ids = list(leases)
        if not ids:
            return 0
        self.give_back_later(ids)
        self._given = 0
        self.flush()
        return self._given

    def give_back_later(self, leases: Iterable[str]) -> None:
        """:meth:`give_back`, with the next call (after its leases done, before its
        claims: a claim in the same script may take them again, by the claim's
        rule)."""
        self._back.extend(leases)

    def controller(self, host: str) -> HostController | None:
        """The host's controller as this worker's latest reply about it showed it,
        every logged start in it (for stats, events and the summary; None if it
        never claimed from the host). Do not feed it events: they go to Redis."""
        data = self._hosts.get(host)
        if data is None:
            return None
        replica = self._replicas.get(host)
        if replica is not None and replica.up_to_date(data):
            return replica.controller  # asked four times a request: nothing new since
        try:
            if replica is None or not replica.fits(data, math.inf):
                replica = self._replicas[host] = Replica.of(self._cfg(host)[0], data)
            replica.replay(data.log, math.inf)
        except ValueError:
            self._replicas.pop(host, None)
            return None  # the next feedback reports it, naming the key
        replica.viewed = data
        return replica.controller

    def renew(self, leases: Iterable[str], seconds: float) -> int:
        """The worker still holds these requests: each lease still there holds at
        least ``seconds`` more (one round trip). Without it, a callback slower
        than the lease's hold after its answer had its request queued again, and
        fetched again, for as long as it ran. Returns how many were renewed."""
        ids = list(leases)
        if not ids:
            return 0
        renewed = int(self.fleet.call("renew", repr(seconds), *ids))
        self.counters.renewed += renewed
        return renewed

    # -- reading -----------------------------------------------------------------------

    def status(self) -> FleetStatus:
        """Queued, leased and idle time fleet-wide: one round trip."""
        reply = self.fleet.call("status")  # its counts checked there: see status.lua
        try:
            queued, leased, idle_since, now, reaped, seen = reply
            server_now = self.fleet.saw_time(now)
            idle_for = max(0.0, server_now - float(idle_since)) if idle_since else 0.0
            status = FleetStatus(
                int(float(queued)),
                int(leased),
                idle_for,
                server_now,
                int(float(reaped)),
                int(float(seen)),
            )
        except (TypeError, ValueError, OverflowError) as exc:
            raise FleetStoreError(f"the fleet's status cannot be read: {reply!r}") from exc
        self.seen.check_room(status.seen)
        return status
