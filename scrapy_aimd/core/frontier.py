"""The frontier: per-host queues, and the hosts ordered by when they may start.

``pop(now)`` hands out only a request whose host may start now, so a paused or
busy host never blocks another one. Across the hosts that are ready, and within
a host, requests come out by priority, then click depth (shallow first), then
arrival. Hosts live in two heaps with lazy invalidation: ``_ready`` (hosts that
may start now, by their best queued request) and ``_timers`` (hosts that will
be ready at a known time). A host at its concurrency limit is in neither: it
is filed again when one of its requests is released. Every operation is
O(log n) in the number of hosts.

The queues themselves live in a ``QueueStore``, so that they can live in memory
(``MemoryQueueStore``) or on disk (``scrapy_aimd.sqlite_store``), and later in a
store shared by several crawlers. No Scrapy import: the items are opaque and
the clock is an argument.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from scrapy_aimd.core.controller import HostController, Reaction, Ticket

T = TypeVar("T")

#: (-priority, depth, arrival): smaller comes out first.
SortKey = tuple[int, int, int]


class QueueStore(Protocol[T]):
    """Per-host priority queues of opaque items, and the hosts' bookkeeping.

    A durable store keeps an item from ``push`` (or ``keep``) until ``done``:
    ``pop`` only takes it out of its queue. If the process dies in between, the
    store opened again has the item queued for its host, so that nothing handed
    out and unfinished is lost. ``commit`` marks what a crash may not undo.
    """

    def push(self, host: str, key: SortKey, item: T) -> None:
        """Queue an item. If the store still holds it (popped or kept), that
        copy is dropped in the same commit: the item is stored once."""

    def pop(self, host: str) -> T | None:
        """Take the host's first item out of its queue (a durable store keeps
        it until ``done``)."""

    def keep(self, host: str, key: SortKey, item: T) -> None:
        """Hold an item outside the queues until ``done``: one the caller keeps
        aside (a request waiting for robots.txt). A reopened store queues it for
        ``host``. An item the store holds already stays as it is."""

    def done(self, item: T) -> None:
        """Forget a popped or kept item: the crawl has finished with it."""

    def head(self, host: str) -> SortKey | None:
        """The key of the host's first item, or None when it has none."""

    def count(self, host: str) -> int:
        """Items queued for the host (not those popped or kept)."""

    def __len__(self) -> int: ...

    def queued_hosts(self) -> Iterator[str]:
        """Hosts with queued items: a reopened store's, for the frontier to file."""

    def next_arrival(self) -> int:
        """An arrival number above every stored key's, so that new items queue
        after the ones a reopened store holds."""

    def save_state(self, name: str, state: Mapping[str, Any]) -> None:
        """Keep a small JSON-able state (a host's controller, an origin's robots.txt)."""

    def load_state(self, name: str) -> dict[str, Any] | None: ...

    def commit(self) -> None:
        """Make every change so far survive a crash."""

    def close(self) -> None: ...


class MemoryQueueStore(Generic[T]):
    """Heaps in a dict; an emptied host's heap is dropped to keep memory flat.

    Nothing survives the process, so ``keep``, ``done`` and ``commit`` have
    nothing to do.
    """

    def __init__(self) -> None:
        self._heaps: dict[str, list[tuple[SortKey, T]]] = {}
        self._size = 0
        self._next_arrival = 0
        self._states: dict[str, dict[str, Any]] = {}

    def push(self, host: str, key: SortKey, item: T) -> None:
        heapq.heappush(self._heaps.setdefault(host, []), (key, item))
        self._size += 1
        if key[2] >= self._next_arrival:
            self._next_arrival = key[2] + 1

    def pop(self, host: str) -> T | None:
        heap = self._heaps.get(host)
        if not heap:
            return None
        _, item = heapq.heappop(heap)
        if not heap:
            del self._heaps[host]
        self._size -= 1
        return item

    def keep(self, host: str, key: SortKey, item: T) -> None:
        pass

    def done(self, item: T) -> None:
        pass

    def head(self, host: str) -> SortKey | None:
        heap = self._heaps.get(host)
        return heap[0][0] if heap else None

    def count(self, host: str) -> int:
        return len(self._heaps.get(host, ()))

    def __len__(self) -> int:
        return self._size

    def queued_hosts(self) -> Iterator[str]:
        return iter(list(self._heaps))

    def next_arrival(self) -> int:
        return self._next_arrival

    def save_state(self, name: str, state: Mapping[str, Any]) -> None:
        self._states[name] = dict(state)

    def load_state(self, name: str) -> dict[str, Any] | None:
        state = self._states.get(name)
        return None if state is None else dict(state)

    def commit(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class _Host:
    controller: HostController
    version: int = 0
    #: "ready", "timer", "full" (at its limit) or "idle" (nothing queued).
    filed_as: str = "idle"


@dataclass(frozen=True)
class Popped(Generic[T]):
    """A request that may start now, with the ticket that its host issued."""

    host: str
    item: T
    ticket: Ticket


class Frontier(Generic[T]):
    """Per-host queues plus the order in which hosts may next start."""

    def __init__(
        self,
        make_controller: Callable[[str], HostController],
        store: QueueStore[T] | None = None,
    ) -> None:
        self._make_controller = make_controller
        self._store: QueueStore[T] = store if store is not None else MemoryQueueStore()
        self._hosts: dict[str, _Host] = {}
        self._ready: list[tuple[SortKey, int, str]] = []
        self._timers: list[tuple[float, int, str]] = []
        self._arrival = itertools.count(self._store.next_arrival())

    # -- queue ------------------------------------------------------------

    def push(self, host: str, item: T, *, priority: int = 0, depth: int = 0, now: float) -> None:
        """Queue an item for its host."""
        key = (-priority, depth, next(self._arrival))
        before = self._store.head(host)
        self._store.push(host, key, item)
        state = self._host(host)
        if before is None or key < before or state.filed_as == "idle":
            self._file(host, state, now)

    def keep(self, host: str, item: T, *, priority: int = 0, depth: int = 0) -> None:
        """Store an item that the caller holds outside the queues, until ``done``."""
        self._store.keep(host, (-priority, depth, next(self._arrival)), item)

    def done(self, item: T) -> None:
        """The crawl has finished with a popped or kept item."""
        self._store.done(item)

    def drain(self, host: str) -> list[T]:
        """Take every item queued for the host out of its queue, best first (a
        durable store keeps them until ``done``); the host is idle after."""
        items = []
        while (item := self._store.pop(host)) is not None:
            items.append(item)
        state = self._hosts.get(host)
        if state is not None:
            state.version += 1
            state.filed_as = "idle"
        return items

    def restore(self, now: float) -> int:
        """File the hosts of the items that the store held when it was opened;
        returns how many hosts have queued items."""
        hosts = 0
        for host in self._store.queued_hosts():
            self._file(host, self._host(host), now)
            hosts += 1
        return hosts

    def pop(self, now: float) -> Popped[T] | None:
        """The best request whose host may start now; its host starts it."""
        self._promote_timers(now)
        while self._ready:
            _, version, host = heapq.heappop(self._ready)
            state = self._hosts[host]
            if version != state.version:
                continue
            if state.controller.ready_at(now) > now:
                self._file(host, state, now)
                continue
            item = self._store.pop(host)
            if item is None:  # pragma: no cover - a filed host always has items
                self._file(host, state, now)
                continue
            ticket = state.controller.start(now)
            self._file(host, state, now)
            return Popped(host, item, ticket)
        return None

    def next_ready_at(self, now: float) -> float:
        """When the earliest waiting host becomes ready; inf when none waits on time."""
        self._promote_timers(now)
        if self._ready:
            return now
        while self._timers:
            at, version, host = self._timers[0]
            if version == self._hosts[host].version:
                return at
            heapq.heappop(self._timers)
        return math.inf

    def __len__(self) -> int:
        return len(self._store)

    def queued(self, host: str) -> int:
        return self._store.count(host)

    # -- host bookkeeping ---------------------------------------------------

    def controller(self, host: str) -> HostController:
        """The host's controller, created on first use."""
        return self._host(host).controller

    def hosts(self) -> Iterator[tuple[str, HostController]]:
        for host, state in self._hosts.items():
            yield host, state.controller

    def __contains__(self, host: str) -> bool:
        return host in self._hosts

    def finish(
        self,
        host: str,
        ticket: Ticket,
        now: float,
        *,
        status: int,
        latency: float | None,
        retry_after: float | None = None,
        page: bool = True,
        quota: Any = None,
        again: bool = False,
    ) -> Reaction:
        """A response came back; ``page`` is False for one that is not a page
        (robots.txt), whose latency must not set the host's baseline; ``again``
        as ``HostController.finish`` takes it."""
        state = self._host(host)
        reaction = state.controller.finish(
            ticket,
            now,
            status=status,
            latency=latency,
            retry_after=retry_after,
            page=page,
            quota=quota,
            again=again,
        )
        self._file(host, state, now)
        return reaction

    def fail(self, host: str, ticket: Ticket, now: float, *, timeout: bool) -> Reaction:
        state = self._host(host)
        reaction = state.controller.fail(ticket, now, timeout=timeout)
        self._file(host, state, now)
        return reaction

    def cancel(self, host: str, ticket: Ticket, now: float) -> None:
        state = self._host(host)
        state.controller.cancel(ticket)
        self._file(host, state, now)

    def start(self, host: str, now: float) -> Ticket:
        """A request that was never queued here starts now: its host issues a
        ticket as for a popped one (the caller made sure the host is ready)."""
        state = self._host(host)
        ticket = state.controller.start(now)
        self._file(host, state, now)
        return ticket

    def refile(self, host: str, now: float) -> None:
        """File the host again after its controller changed outside this class."""
        self._file(host, self._host(host), now)

    # -- internals ------------------------------------------------------------

    def _host(self, host: str) -> _Host:
        state = self._hosts.get(host)
        if state is None:
            state = self._hosts[host] = _Host(self._make_controller(host))
        return state

    def _file(self, host: str, state: _Host, now: float) -> None:
        """Put the host in the heap that matches its state; older entries go stale."""
        state.version += 1
        if len(self._ready) + len(self._timers) > 4 * len(self._hosts) + 1024:
            self._compact()
        head = self._store.head(host)
        if head is None:
            state.filed_as = "idle"
            return
        at = state.controller.ready_at(now)
        if at <= now:
            state.filed_as = "ready"
            heapq.heappush(self._ready, (head, state.version, host))
        elif math.isinf(at):
            state.filed_as = "full"
        else:
            state.filed_as = "timer"
            heapq.heappush(self._timers, (at, state.version, host))

    def _compact(self) -> None:
        """Drop stale heap entries, so that the heaps stay O(hosts)."""
        hosts = self._hosts
        self._ready = [e for e in self._ready if e[1] == hosts[e[2]].version]
        self._timers = [e for e in self._timers if e[1] == hosts[e[2]].version]
        heapq.heapify(self._ready)
        heapq.heapify(self._timers)

    def _promote_timers(self, now: float) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, version, host = heapq.heappop(timers)
            state = self._hosts[host]
            if version == state.version:
                self._file(host, state, now)
