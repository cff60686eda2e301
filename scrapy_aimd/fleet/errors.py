"""What can go wrong with the fleet's Redis, as errors the scheduler can act on."""

from __future__ import annotations

__all__ = ["FleetConnectionLost", "FleetStoreError"]


class FleetStoreError(RuntimeError):
    """The fleet's Redis cannot be used as it is: unreachable, a foreign or corrupt
    key under the prefix (the message names it), or a refused command."""


class FleetConnectionLost(FleetStoreError):
    """The connection to Redis failed during a call. The call may or may not have
    taken effect: a lease it took expires and its request is queued again, so the
    worker can stop cleanly without losing a request."""
