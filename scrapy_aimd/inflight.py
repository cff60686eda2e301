"""The one registry of requests in flight, keyed by request.

A request handed out by the scheduler is followed by several parts of the
crawl, each for its own reason: the scheduler holds its host's place (the
controller's ticket) until feedback comes; the feedback middleware times it
from when it passed towards the network; with JOBDIR its row stays until the
engine is done with it; with ``AIMD_SHUTDOWN_GRACE`` its running download may
be cancelled. One :class:`Flight` per request holds all of that, and the entry
goes when no part holds it any more. (The controller keeps its own count of
places taken, by ticket, inside the controller.)

No Scrapy import: requests are keys, downloads are opaque.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from scrapy_aimd.core.controller import Reaction, Ticket

R = TypeVar("R")

#: A ticket with no feedback this long after twice the request's download
#: timeout is released by :meth:`InFlight.stale`: surely over.
STALE_AFTER_TIMEOUTS = 2.0
STALE_MARGIN = 60.0


@dataclass(slots=True, eq=False)
class Flight:
    """What the parts of the crawl hold of one request."""

    host: str | None = None
    #: The host's place, from ``next_request()`` until feedback (scheduler).
    ticket: Ticket | None = None
    #: When ``next_request()`` returned it, on the crawl's clock (scheduler).
    handed_at: float | None = None
    #: When it passed the feedback middleware towards the network.
    sent_at: float | None = None
    #: It may have needed a new connection, and so been written late
    #: (:mod:`scrapy_aimd.core.connections`): its send counts from its answer.
    new_connection: bool = False
    #: What the controller made of its answer, for the feedback middleware.
    reaction: Reaction | None = None
    #: Its JOBDIR row waits until the engine is done with it.
    stored: bool = False
    #: Its running download (``AIMD_SHUTDOWN_GRACE``).
    download: Any = None
    #: Its download was cancelled by ``AIMD_SHUTDOWN_GRACE``: never done.
    cancelled: bool = False

    @property
    def held(self) -> bool:
        """Some part of the crawl still holds this entry."""
        return (
            self.ticket is not None
            or self.sent_at is not None
            or self.stored
            or self.download is not None
            or self.cancelled
        )


class InFlight(Generic[R]):
    """Requests in flight and what each part of the crawl holds of them."""

    def __init__(self) -> None:
        self._flights: dict[R, Flight] = {}
        self._stored = 0
        self._tickets = 0

    def get(self, request: R) -> Flight | None:
        return self._flights.get(request)

    def open(self, request: R) -> Flight:
        """The request's entry, made on first use."""
        flight = self._flights.get(request)
        if flight is None:
            flight = self._flights[request] = Flight()
        return flight

    def settle(self, request: R) -> None:
        """Forget the entry if no part holds it any more."""
        flight = self._flights.get(request)
        if flight is not None and not flight.held:
            del self._flights[request]

    def __len__(self) -> int:
        return len(self._flights)

    # -- the scheduler -------------------------------------------------------------

    def handed_out(self, request: R, host: str, ticket: Ticket | None, now: float) -> Flight:
        flight = self.open(request)
        self._tickets += (ticket is not None) - (flight.ticket is not None)
        flight.host, flight.ticket, flight.handed_at = host, ticket, now
        flight.reaction = None
        return flight

    def take_ticket(self, request: R) -> tuple[str, Ticket] | None:
        """The host and ticket of a request whose place is still held, now given up."""
        flight = self._flights.get(request)
        if flight is None or flight.ticket is None or flight.host is None:
            return None
        ticket, flight.ticket = flight.ticket, None
        self._tickets -= 1
        self.settle(request)
        return flight.host, ticket

    @property
    def tickets(self) -> int:
        """How many requests hold their host's place."""
        return self._tickets

    def done_without_feedback(self, in_progress: Collection[R]) -> list[R]:
        """Requests holding a place that the engine is done with (not in
        ``in_progress``): a downloader middleware before ours returned another
        request in their place, so no feedback will ever come for them.

        Cheap when nothing is to be found: every request handed out stays in the
        engine's set until it is done, so fewer places held than requests in
        progress means none is.
        """
        if self._tickets <= len(in_progress):
            return []
        return [request for request, _ in self.with_tickets() if request not in in_progress]

    def with_tickets(self) -> Iterator[tuple[R, Flight]]:
        for request, flight in list(self._flights.items()):
            if flight.ticket is not None:
                yield request, flight

    def stale(self, now: float, default_timeout: float) -> list[R]:
        """Requests holding a place with no feedback long after their timeout: a
        downloader middleware before ours swapped them for others, say."""
        expired = []
        for request, flight in self.with_tickets():
            timeout = _timeout(request, default_timeout)
            started = flight.handed_at if flight.handed_at is not None else now
            if now - started > STALE_AFTER_TIMEOUTS * timeout + STALE_MARGIN:
                expired.append(request)
        return expired

    # -- the JOBDIR and the shutdown grace -------------------------------------------

    def store(self, request: R) -> None:
        flight = self.open(request)
        if not flight.stored:
            flight.stored = True
            self._stored += 1

    @property
    def stored(self) -> int:
        """How many requests' rows wait for the engine."""
        return self._stored

    def stored_requests(self) -> list[R]:
        return [request for request, flight in self._flights.items() if flight.stored]

    def unstore(self, request: R) -> None:
        flight = self._flights.get(request)
        if flight is not None and flight.stored:
            flight.stored = False
            self._stored -= 1
            self.settle(request)

    def downloads(self) -> list[tuple[R, Flight]]:
        """Requests whose download is running (``AIMD_SHUTDOWN_GRACE``)."""
        return [(r, f) for r, f in self._flights.items() if f.download is not None]

    def cancelled(self, request: R) -> bool:
        flight = self._flights.get(request)
        return flight is not None and flight.cancelled


def _timeout(request: Any, default: float) -> float:
    """The request's own download timeout, or the crawl's."""
    meta = getattr(request, "meta", {})
    timeout = meta.get("download_timeout", default)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        timeout = default
    return float(timeout)
