"""Which sends may go on a new connection, as the crawl can tell from outside
the downloader.

A request on a connection already open is written at once; one that needs a
new connection is written only when it is up: a TCP handshake, and a TLS one
to an HTTPS site, one to three round trips later (100 ms and more to a
distant site). A host's gap counted from the send would then reach the host
short by that much, and a Crawl-delay would be broken between robots.txt and
the home page. The scheduler counts such a send from its answer instead: the
host had the request by then. That costs one answer time a connection, so
the guess must not call an open connection new, nor miss a new one.

The downloader keeps connections open for reuse (Scrapy's HTTP/1.1 pool, per
origin); it opens one when it has none free: at an origin's first send, when
more requests are in flight than ever before, after a connection was closed
(an error, or ``Connection: close``), or after the origin sat idle long
enough for the server to close its idle connections.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Seconds an idle connection is trusted to be still open: servers close idle
#: kept-alive connections after a timeout, 5 s at the shortest common default
#: (Apache httpd, Node.js); nginx's is 75 s.
KEEP_ALIVE_TRUST = 4.0


@dataclass(slots=True)
class _Origin:
    #: Connections believed open (in use or idle).
    open: int = 0
    #: Requests in flight.
    busy: int = 0


class OpenConnections:
    """Per origin, the connections the downloader holds, from its sends and
    answers. An origin idle past the trust is forgotten (as good as none open),
    so a crawl of many sites keeps only those in use lately."""

    def __init__(self, keep_alive_trust: float = KEEP_ALIVE_TRUST) -> None:
        self.keep_alive_trust = keep_alive_trust
        self._origins: dict[str, _Origin] = {}
        #: Origins with nothing in flight, by when they became idle (oldest first).
        self._idle: dict[str, float] = {}

    def sent(self, origin: str, now: float) -> bool:
        """A request to ``origin`` goes out ``now``; True if it may need a new connection."""
        self._forget_idle(now)
        state = self._origins.get(origin)
        if state is None:
            state = self._origins[origin] = _Origin()
        elif state.busy == 0:
            del self._idle[origin]
        state.busy += 1
        if state.busy <= state.open:
            return False
        state.open = state.busy
        return True

    def answered(self, origin: str, now: float, *, kept: bool) -> None:
        """A request to ``origin`` is over; ``kept``: its connection stays open
        (False after an error or a ``Connection: close``)."""
        state = self._origins.get(origin)
        if state is None or state.busy == 0:
            return
        state.busy -= 1
        if not kept:
            state.open = max(state.busy, state.open - 1)
        if state.busy == 0:
            if state.open == 0:
                del self._origins[origin]
            else:
                self._idle[origin] = now

    def _forget_idle(self, now: float) -> None:
        while self._idle:
            origin, since = next(iter(self._idle.items()))
            if now - since <= self.keep_alive_trust:
                return
            del self._idle[origin], self._origins[origin]

    def __len__(self) -> int:
        """Origins remembered: with requests in flight, or idle within the trust."""
        return len(self._origins)
