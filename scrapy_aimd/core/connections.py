"""Which sends may go on a new connection, as the crawl can tell from outside
the downloader.

A request on a connection already open is written at once; one that needs a
new connection is written only when it is up: a TCP handshake, and a TLS one
to an HTTPS site, one to three round trips later (100 ms and more to a
distant site). A host's gap counted from the send would then reach the host
short by that much, and a Crawl-delay would be broken between robots.txt and
the home page. The scheduler counts such a send from its response instead:
the host had the request by then. That costs one answer time a connection,
so the guess must not call a free connection new, nor miss a new one.

The downloader keeps connections open for reuse (Scrapy's HTTP/1.1 pool, per
origin) and opens one when it has none free. A connection is free once its
request is answered and the connection kept, and no longer once it sat idle
long enough for the server to close it. Most wrong guesses fall on the
cautious side: a request the crawl never saw answered leaves its connection
out, and on HTTP/2 (one connection for many requests) sends are called new
that were not. Some cannot be seen from outside the downloader, and fall on
the other: a ``Connection: close`` on an answer of known length (Scrapy's
HTTP/1.1 handler keeps that header from the response: a server that closes
every connection, or every thousandth), a reactor blocked for longer than
the second between the trust and the shortest server timeout, and a plain
HTTP proxy's own connections to the host.
"""

from __future__ import annotations

#: Seconds an idle connection is trusted to be still open: servers close idle
#: kept-alive connections after a timeout, 5 s at the shortest common default
#: (Apache httpd, Node.js); nginx's is 75 s.
KEEP_ALIVE_TRUST = 4.0


class OpenConnections:
    """Per origin, the downloader's free connections, from its sends and answers.
    An origin is forgotten once its latest kept answer is older than the trust
    (its connections too old to reuse), so a crawl of many sites keeps only
    those answered lately."""

    def __init__(self, keep_alive_trust: float = KEEP_ALIVE_TRUST) -> None:
        self.keep_alive_trust = keep_alive_trust
        #: Per origin, when each free connection became free (oldest first).
        self._free: dict[str, list[float]] = {}
        #: Per origin, when its latest kept answer came; oldest origin first.
        self._latest: dict[str, float] = {}

    def opens_connection(self, origin: str, now: float) -> bool:
        """A request to ``origin`` is sent ``now``: True if it may need a new
        connection (none free), False if it takes a free one."""
        self._forget_idle(now)
        free = self._free.get(origin)  # never empty: an origin without one goes
        if free is None:
            return True
        while free and now - free[0] > self.keep_alive_trust:
            del free[0]  # the server may have closed it
        reused = bool(free)
        if reused:
            # The newest: if the pool takes an older one, the one kept here is
            # older than the pool's, and is let go sooner (the cautious side).
            free.pop()
        if not free:
            del self._free[origin], self._latest[origin]
        return not reused

    def answered(self, origin: str, now: float, *, kept: bool) -> None:
        """A request to ``origin`` was answered ``now``; ``kept``: its connection
        stays open for the next request."""
        if not kept:
            return
        self._free.setdefault(origin, []).append(now)
        self._latest.pop(origin, None)
        self._latest[origin] = now

    def _forget_idle(self, now: float) -> None:
        while self._latest:
            origin, since = next(iter(self._latest.items()))
            if now - since <= self.keep_alive_trust:
                return
            del self._latest[origin], self._free[origin]

    def __len__(self) -> int:
        """Origins with a connection free lately."""
        return len(self._free)
