"""robots.txt fetched once per fleet: the answers the workers share in Redis.

The worker that takes an origin's place for its robots.txt (``hold.lua``) also
takes the origin's lock, ``P:rl:<origin>``, for as long as the hold's lease:
the other workers' robots.txt requests for it wait (their origin's requests are
held, as while any robots.txt is fetched) until the answer is stored in
``P:r:<origin>``, and read it instead of fetching. If the fetching worker dies,
the lock goes with its heartbeat (the lock names its worker), also while it
waits to retry, and the next worker to ask fetches.

What is shared (docs/fleet.rst): a settled answer, the rules of a 2xx (the
first 500 KiB of the body, compressed) or a 4xx's allow-all, kept for
``AIMD_ROBOTS_MAX_AGE``; and an origin unreachable after every retry, kept as
long, so that every worker skips it. While the fetching worker retries an
unreachable file (RFC 9309: 5xx, 429, a network failure) it keeps the lock
through its backoff, and the others go on waiting. No Scrapy import.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from scrapy_aimd.core.robots import MAX_BYTES
from scrapy_aimd.fleet.connection import Fleet
from scrapy_aimd.fleet.errors import FleetStoreError

__all__ = ["FleetRobots", "SharedRobots", "shared_of"]

#: How hard a body is compressed for Redis (robots.txt: about a fifth of its size).
_LEVEL: Final = 6


@dataclass(frozen=True, slots=True)
class SharedRobots:
    """An origin's robots.txt answer as the worker that fetched it stored it."""

    status: int | None
    body: bytes
    truncated: bool
    gave_up: bool
    age: float
    """Seconds since it was stored, on the server's clock."""


def shared_of(fields: Sequence[Any], origin: str, fleet: Fleet) -> SharedRobots:
    """An answer from a script's reply: status, body, truncated, gave up, age."""
    status, body, truncated, gave_up, age = fields
    try:
        return SharedRobots(
            int(status) if status else None,
            zlib.decompressobj().decompress(body, MAX_BYTES) if body else b"",
            truncated == b"1",
            gave_up == b"1",
            float(age),
        )
    except (ValueError, zlib.error) as exc:
        key = fleet.key(f"r:{origin}")
        raise FleetStoreError(
            f"Redis key {key} holds a robots.txt answer that cannot be read: {exc}"
        ) from exc


class FleetRobots:
    """One worker's side of the shared answers: one round trip a call, a few per
    origin, none per page."""

    def __init__(self, fleet: Fleet, *, lease_time: float) -> None:
        """``lease_time``: how long a hold, and so the lock, lasts."""
        self.fleet = fleet
        self.lease_time = lease_time

    def known(self, origin: str) -> SharedRobots | None:
        """The origin's answer, if a worker stored it."""
        reply = self.fleet.call("robots", origin)
        self.fleet.saw_time(reply[1])
        return shared_of(reply[2:], origin, self.fleet) if reply[0] == 1 else None

    def share(
        self,
        origin: str,
        *,
        status: int | None,
        body: bytes,
        truncated: bool,
        gave_up: bool,
        max_age: float,
    ) -> bool:
        """Store a settled answer for ``max_age`` seconds and let go of the lock;
        True if it was this worker's."""
        packed = zlib.compress(body[:MAX_BYTES], _LEVEL) if body else b""
        flags = ("1" if truncated else "0", "1" if gave_up else "0")
        seconds = max_age if math.isfinite(max_age) else 1e9
        reply = self.fleet.call(
            "robots_put", origin, self.fleet.token, "answer", repr(seconds),
            "" if status is None else str(status), packed, *flags,
        )  # fmt: skip
        return bool(reply)

    def retrying(self, origin: str, retry_in: float) -> bool:
        """Keep the lock until a retry ``retry_in`` seconds from now has had its
        lease; True if it was this worker's (else taken, if no one had it)."""
        seconds = max(0.0, retry_in) + self.lease_time
        return bool(self.fleet.call("robots_put", origin, self.fleet.token, "retry", repr(seconds)))
