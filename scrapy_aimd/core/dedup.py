"""A compact set of 64-bit keys, for crawls of tens of millions of URLs.

A Python ``set`` of ints costs about 60-70 bytes per key and Scrapy's
RFPDupeFilter (a set of 20-byte digests) about 95. :class:`SeenSet` keeps the
keys themselves in ``array('Q')`` tables with open addressing: 8 bytes per slot,
each kept between 53 % and 75 % full, about 12.5 bytes per key on the whole once
past a few hundred thousand keys (the segments below grow out of step).
Standard library only: numpy would not pay here, because every call tests one
key, and indexing a numpy array from Python is slower than an ``array``.

The keys are spread over 1024 segments by their low bits, each its own table
that grows on its own. A table that grows copies its keys, and one table of 2.3
million keys took 0.57 s to copy, a stall of the whole crawl; a segment holds a
1024th of the keys, so a growth at 10 million keys copies about 10,000 (a few
milliseconds), and it never needs the old and the new copy of everything at
once. Keys are expected to be uniformly distributed (digests). Tables of a page
or more are mapped memory of their own (see ``_MAPPED_BYTES``), so that the
resident set is the tables: 12 bytes per key at 10 million.
"""

from __future__ import annotations

import mmap
from array import array
from typing import TYPE_CHECKING, Final, TypeAlias, Union

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["SeenSet"]

_MAX_LOAD: Final = 0.75
# A segment grows to at least this load, so that it stays under 16 bytes per key.
_GROWN_LOAD: Final = 0.53
#: The smallest segment: 1024 of them make an empty set about 100 KB.
_MIN_CAPACITY: Final = 11
_SEGMENT_BITS: Final = 10
_SEGMENTS: Final = 1 << _SEGMENT_BITS
_SEGMENT_MASK: Final = _SEGMENTS - 1
#: Each segment grows to its own load, from 53 % to 57 %, so that segments that
#: fill at the same pace (uniform keys) drift out of step: they grow at
#: different moments, the whole set's load stays near its mean instead of
#: swinging from 53 % to 75 % together, and the memory a growth frees fits
#: the next segment's growth.
_GROWN_LOADS: Final = tuple(_GROWN_LOAD + 0.04 * s / _SEGMENTS for s in range(_SEGMENTS))


def _next_prime(number: int) -> int:
    """The smallest prime >= number: any probe step is then coprime with the
    table size, so double hashing visits every slot."""
    candidate = max(number, 3) | 1
    while True:
        divisor = 3
        while divisor * divisor <= candidate:
            if candidate % divisor == 0:
                break
            divisor += 2
        else:
            return candidate
        candidate += 2


def _previous_prime(number: int) -> int:
    """The largest prime <= number (number >= 3)."""
    candidate = number if number % 2 else number - 1
    while _next_prime(candidate) != candidate:
        candidate -= 2
    return candidate


#: A table this large is mapped memory of its own, not heap: freeing it gives
#: its pages back at once, where heap tables of many sizes, freed as segments
#: grew, left 2 to 10 bytes per key of holes in the resident set.
_MAPPED_BYTES: Final = 4 * 1024

#: An ``array('Q')`` or a memoryview of mapped memory cast to "Q": both index
#: as fast.
_Table: TypeAlias = Union["array[int]", memoryview]


def _capacity_for(keys: int, load: float = _GROWN_LOAD) -> int:
    """A prime number of slots for ``keys`` at ``load``; a mapped table fills
    its last page (the largest prime that fits the pages it needs)."""
    capacity = _next_prime(max(_MIN_CAPACITY, int(keys / load)))
    if capacity * 8 < _MAPPED_BYTES:
        return capacity
    pages = -(-capacity * 8 // mmap.PAGESIZE)
    return _previous_prime(pages * mmap.PAGESIZE // 8)


def _new_table(capacity: int) -> _Table:
    """``capacity`` zeroed slots."""
    if capacity * 8 < _MAPPED_BYTES:
        return array("Q", bytes(8 * capacity))
    return memoryview(mmap.mmap(-1, capacity * 8)).cast("Q")


class SeenSet:
    """A set of unsigned 64-bit ints: ``add(key) -> bool`` (True if new),
    ``key in seen``, ``len(seen)``.

    Per segment, open addressing with double hashing over a prime-sized
    ``array('Q')``; slot value 0 marks an empty slot, so key 0 is tracked
    apart. Any 64-bit values work; uniformly distributed ones (digests) keep
    every segment small. ``expected`` sizes the tables up front, to skip the
    growths on the way.
    """

    __slots__ = ("_count", "_counts", "_has_zero", "_limits", "_tables")

    def __init__(self, expected: int = 0) -> None:
        self._count = 0
        self._has_zero = False
        capacity = _capacity_for(expected // _SEGMENTS + 1)
        self._tables = [_new_table(capacity) for _ in range(_SEGMENTS)]
        self._counts = [0] * _SEGMENTS
        self._limits = [int(capacity * _MAX_LOAD)] * _SEGMENTS

    def __len__(self) -> int:
        return self._count

    @property
    def capacity(self) -> int:
        """Slots in all the tables."""
        return sum(len(table) for table in self._tables)

    @property
    def nbytes(self) -> int:
        """Bytes held by the tables (the lists and objects add about 100 KB)."""
        return self.capacity * 8

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, int):
            return False
        if key == 0:
            return self._has_zero
        table = self._tables[key & _SEGMENT_MASK]
        capacity = len(table)
        index = key % capacity
        slot = table[index]
        if slot == key:
            return True
        if slot == 0:
            return False
        step = 1 + (key // capacity) % (capacity - 1)
        while True:
            index += step
            if index >= capacity:
                index -= capacity
            slot = table[index]
            if slot == key:
                return True
            if slot == 0:
                return False

    def add(self, key: int) -> bool:
        """Add ``key`` (0 <= key < 2**64); True if it was not there before."""
        segment = key & _SEGMENT_MASK
        table = self._tables[segment]
        capacity = len(table)
        index = key % capacity
        slot = table[index]
        if slot == key:
            if key:
                return False
            return self._add_zero()
        if slot:
            # The probe loop of __contains__, inlined on purpose: add() runs for
            # every request, and a shared helper would cost a call per probe.
            step = 1 + (key // capacity) % (capacity - 1)
            while True:
                index += step
                if index >= capacity:
                    index -= capacity
                slot = table[index]
                if slot == 0:
                    break
                if slot == key:
                    return False
        if key == 0:
            return self._add_zero()
        try:
            table[index] = key
        except (OverflowError, ValueError):  # ValueError: a memoryview's
            raise ValueError(f"SeenSet keys are unsigned 64-bit ints, not {key!r}") from None
        self._count += 1
        count = self._counts[segment] = self._counts[segment] + 1
        if count > self._limits[segment]:
            self._grow(segment)
        return True

    def _add_zero(self) -> bool:
        if self._has_zero:
            return False
        self._has_zero = True
        self._count += 1
        return True

    def update(self, keys: Iterable[int]) -> int:
        """Add every key; the number that were new."""
        add = self.add
        return sum(1 for key in keys if add(key))

    def _grow(self, segment: int) -> None:
        """Copy one segment into a table sized for its keys at the grown load."""
        old = self._tables[segment]
        capacity = _capacity_for(self._counts[segment], _GROWN_LOADS[segment])
        table = _new_table(capacity)
        for key in filter(None, old):
            index = key % capacity
            if table[index]:
                step = 1 + (key // capacity) % (capacity - 1)
                while True:
                    index += step
                    if index >= capacity:
                        index -= capacity
                    if not table[index]:
                        break
            table[index] = key
        self._tables[segment] = table
        self._limits[segment] = int(capacity * _MAX_LOAD)

    def __repr__(self) -> str:
        return f"<SeenSet keys={self._count} capacity={self.capacity}>"
