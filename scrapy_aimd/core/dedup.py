"""A compact set of 64-bit keys, for crawls of tens of millions of URLs.

A Python ``set`` of ints costs about 60-70 bytes per key and Scrapy's
RFPDupeFilter (a set of 20-byte digests) about 95. :class:`SeenSet` keeps the
keys themselves in one ``array('Q')`` with open addressing: 8 bytes per slot,
kept between 53 % and 75 % full, so 10.7 to 15.1 bytes per key once past a few
thousand keys. Standard library only: numpy would not pay here, because every
call tests one key, and indexing a numpy array from Python is slower than an
``array``.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["SeenSet"]

_MAX_LOAD: Final = 0.75
# The table grows to this load, so that it stays under 16 bytes per key.
_GROWN_LOAD: Final = 0.53
_MIN_CAPACITY: Final = 1021


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


class SeenSet:
    """A set of unsigned 64-bit ints: ``add(key) -> bool`` (True if new),
    ``key in seen``, ``len(seen)``.

    Open addressing with double hashing over a prime-sized ``array('Q')``;
    slot value 0 marks an empty slot, so key 0 is tracked apart. Keys are
    expected to be uniformly distributed (digests); any 64-bit values work.
    ``expected`` sizes the table up front, to skip the rehashes on the way.
    """

    __slots__ = ("_capacity", "_count", "_has_zero", "_limit", "_table")

    def __init__(self, expected: int = 0) -> None:
        self._count = 0
        self._has_zero = False
        self._allocate(_next_prime(max(_MIN_CAPACITY, int(expected / _GROWN_LOAD))))

    def _allocate(self, capacity: int) -> None:
        self._capacity = capacity
        self._limit = int(capacity * _MAX_LOAD)
        self._table = array("Q", [0]) * capacity

    def __len__(self) -> int:
        return self._count

    @property
    def capacity(self) -> int:
        """Slots in the table."""
        return self._capacity

    @property
    def nbytes(self) -> int:
        """Bytes held by the table (the object itself adds about 100)."""
        return self._capacity * self._table.itemsize

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, int):
            return False
        if key == 0:
            return self._has_zero
        table = self._table
        capacity = self._capacity
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
        table = self._table
        capacity = self._capacity
        index = key % capacity
        slot = table[index]
        if slot == key:
            if key:
                return False
            return self._add_zero()
        if slot:
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
        except OverflowError:
            raise ValueError(f"SeenSet keys are unsigned 64-bit ints, not {key!r}") from None
        self._count += 1
        if self._count > self._limit:
            self._grow()
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

    def _grow(self) -> None:
        old = self._table
        self._allocate(_next_prime(int(self._count / _GROWN_LOAD)))
        table = self._table
        capacity = self._capacity
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

    def __repr__(self) -> str:
        return f"<SeenSet keys={self._count} capacity={self._capacity}>"
