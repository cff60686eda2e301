"""The fleet's shared seen set: 64-bit request keys in Redis intsets.

A Redis set of integers is stored as an *intset*, a sorted array at 8 bytes a
member, as long as it holds at most ``set-max-intset-entries`` (512 by
default); past that it becomes a hash table at about ten times the memory. So
the keys are spread over a fixed number of buckets (a power of 2, set by the
worker that created the fleet), keyed by the top bits of the key, each bucket
holding the remaining bits: with 2**15 buckets a bucket reaches 512 members
around 15 M URLs (docs/fleet.rst has the sizing). :attr:`FleetSeenSet.capacity`
says where that is for the server at hand, and a warning is logged once as a
crawl nears it.

Keys are added by the pushes (push.lua, with their requests): this module holds
the layout and the check of the buckets' room.
"""

from __future__ import annotations

import logging
from typing import Final

from scrapy_aimd.fleet.connection import Fleet

__all__ = ["FleetSeenSet"]

logger = logging.getLogger(__name__)

#: The share of a bucket's intset room at which the warning is logged.
WARN_AT: Final = 0.8


class FleetSeenSet:
    """The layout of the fleet's buckets of 64-bit keys, and their room."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.buckets = fleet.buckets
        self._bits = fleet.buckets.bit_length() - 1
        self._shift = 64 - self._bits
        self._mask = (1 << self._shift) - 1
        self._warned = False
        entries = fleet.intset_entries
        #: Keys the set holds before buckets outgrow an intset (None if unknown).
        self.capacity = None if entries is None else entries * self.buckets

    def bucket_and_member(self, key: int) -> tuple[str, str]:
        """The bucket (hex of the top bits) and member (the rest, as a decimal
        integer below 2**63, so that Redis keeps it as an integer)."""
        bucket, member = self._split(key)
        return format(bucket, "x"), str(member)

    def bucket_and_member_bytes(self, key: int) -> tuple[bytes, bytes]:
        """:meth:`bucket_and_member`, as bytes (a push frames them)."""
        bucket, member = self._split(key)
        return b"%x" % bucket, b"%d" % member

    def _split(self, key: int) -> tuple[int, int]:
        if not 0 <= key < 1 << 64:
            raise ValueError(f"request key {key!r}: expected an unsigned 64-bit integer")
        return key >> self._shift, key & self._mask

    def check_room(self, total: int) -> None:
        """Warn once when the set of ``total`` keys nears its buckets' intset room."""
        if self._warned or self.capacity is None:
            return
        if total >= WARN_AT * self.capacity:
            self._warned = True
            logger.warning(
                "The fleet's seen set nears %d keys, where its %d buckets outgrow Redis "
                "intsets (set-max-intset-entries); past that it takes ten times the "
                "memory. Raise set-max-intset-entries (docs/fleet.rst, sizing).",
                self.capacity,
                self.buckets,
            )

    def __len__(self) -> int:
        """Keys in the set, fleet-wide (one round trip)."""
        return int(self.fleet.call("status")[5])
