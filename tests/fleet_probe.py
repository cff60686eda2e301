"""What tests read of a fleet that the workers never ask for: one claim at a
time, a host's fields as Redis holds them, a send reported now. Read with plain
Redis commands (or the workers' own calls), not with scripts of their own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from scrapy_aimd.fleet import Claim, FleetFrontier, Wait
from scrapy_aimd.fleet.host_state import decode_state

T = TypeVar("T")


def claim_one(frontier: FleetFrontier[T]) -> Claim[T] | Wait:
    """The best request of a host that may start now, leased; or when one may."""
    got = frontier.claim_many(1)
    return got[0] if isinstance(got, list) else got


@dataclass(frozen=True, slots=True)
class HostView:
    """One host as the fleet holds it."""

    delay: float
    concurrency: int
    paused_until: float
    in_flight: int
    queued: int
    version: int
    state: dict[str, Any] | None
    last: float | None


def host_view(frontier: FleetFrontier[Any], host: str) -> HostView | None:
    """The host's fields in Redis (after what waits is sent), None if never queued."""
    frontier.flush()
    client, fleet = frontier.fleet.redis, frontier.fleet
    fields = client.hmget(fleet.key(f"h:{host}"), "v", "st", "gap", "lim", "pause", "fl", "last")
    version, state, gap, limit, pause, in_flight, last = fields
    if not version and not gap:
        return None
    return HostView(
        delay=float(gap or 0),
        concurrency=int(limit or 1),
        paused_until=float(pause or "-inf"),
        in_flight=int(in_flight or 0),
        queued=int(client.zcard(fleet.key(f"q:{host}"))),
        version=int(float(version or 0)),
        state=decode_state(state or b""),
        last=float(last) if last else None,
    )


def report_sent(frontier: FleetFrontier[T], claim: Claim[T]) -> None:
    """The claimed request left now: told at once (the worker tells it with its
    next call)."""
    frontier.sent_later(claim)
    frontier.flush()


def leases_dropped_later(frontier: FleetFrontier[Any]) -> set[str]:
    """Leases told done (with their answer, or since) whose answer is not stored
    yet: it lost its race, or waits for another worker's turn on its host. Redis
    keeps them until the answer goes with the worker's next call."""
    return {answer.lease for answer in frontier._answers if answer.done and answer.lease}


def hosts_waiting(frontier: FleetFrontier[Any]) -> set[str]:
    """Hosts of the answers that wait for the worker's next call."""
    return {answer.host for answer in frontier._answers}
