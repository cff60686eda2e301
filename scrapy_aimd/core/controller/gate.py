"""The gate: may a request to a host start now, and if not, when.

A pure function of the host's limits (gap, concurrency limit, pause), the
requests in flight and the last start. The fleet's claim script implements the
same (``fleet/lua/common.lua``, ``gate_ready_at``); ``tests/test_gate_lua.py``
checks with random limits and events that the two agree.
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["HostNotReady", "Limits", "Ticket", "ready_at"]


class Limits(NamedTuple):
    """What the policy decides for a host, and all the gate reads of it."""

    gap: float
    """The least time between two starts, in seconds."""
    limit: int
    """The most requests in flight at once."""
    pause: float
    """No start before this time (a Retry-After); ``-inf`` for none."""


class Ticket(NamedTuple):
    """One started request; hand it back to exactly one of finish, fail or cancel."""

    serial: int
    """Unique across all controllers of the process, so a stray ticket is recognised."""
    started: float
    """When the request started, on the controller's clock."""
    round: int
    """How many decreases the host had made when the request started."""


class HostNotReady(RuntimeError):
    """:meth:`HostController.start` was called before :meth:`HostController.ready_at`."""


def ready_at(limits: Limits, in_flight: int, last_start: float, now: float) -> float:
    """The earliest time a request may start; ``<= now`` means now.

    ``inf`` while the host is at its limit: it becomes ready when a request is
    released, not at a time. Never earlier than the pause's end.
    """
    if in_flight >= limits.limit:
        return math.inf
    earliest = max(last_start + limits.gap, limits.pause)
    return earliest if earliest > -math.inf else now
