"""The feedback middleware: what each host said, sent out as a signal.

It sits next to the downloader (priority 950), so it sees raw responses and
exceptions before RetryMiddleware (550) and RedirectMiddleware (600) act on
them. For every request it sees come back it sends
``scrapy_aimd.signals.response_feedback``; the scheduler listens, updates the
host's controller and leaves the controller's :class:`Reaction` in the crawl's
in-flight registry. When that reaction says the host refused the request
(``Reaction.refused``: a 429 or a Retry-After always, a 503 without one or a
timeout only from a host that has answered a page well), the request goes back
to the scheduler, which holds it until its host is ready again, up to
``AIMD_THROTTLE_RETRIES`` times, without using up ``RETRY_TIMES``: a 429 is a
host asking for later, not a failed page. Any other answer is left to Scrapy's
RetryMiddleware (``RETRY_TIMES``, "Gave up retrying", the errback) as in stock
Scrapy. This middleware decides nothing about the host itself.

A block status (``AIMD_BLOCK_CODES``, 403) from a host that serves pages is
queued again, as the controller says (``forbidden``): the answers after it may
prove a block, and a page must not be lost to a block that ends. It is marked
(:data:`FORBIDDEN_META`, priority -1, so that it is not a block's probe while
other requests wait), and its URL's next block status is handed to the spider
as a forbidden page (``aimd/forbidden``) only on evidence that the 403 was the
page's own: the first answer of its host to a request sent after the 403'd one
was a page (2xx or 3xx, not robots.txt), not another block status, and no block
is proven now. A page that was asked for in a block's first 403s, then again at
the start of the next block, is not handed on: the answer after its first 403
was a 403. Without that evidence it is queued again, as any request answered
during a block (``block``) is, within ``AIMD_THROTTLE_RETRIES`` and the
``AIMD_HOST_GIVE_UP`` budget; once those are spent it is handed on, counted. A
host's last page, if forbidden, has no answer after it and costs its retries,
bounded. The evidence is this process's: in a fleet, or after a JOBDIR restart,
a URL marked by another process is marked again here (one more try) first.

It reads the quota a response tells (``X-RateLimit-*``, ``RateLimit-*``, see
:mod:`scrapy_aimd.core.rate_limit_headers`), bounded by ``AIMD_MAX_RETRY_AFTER``,
and sends it with the feedback for the controller to pace the host by.

It also tells, in the in-flight registry, whether a request may have gone on
a new connection (:mod:`scrapy_aimd.core.connections`), from the sends and
answers it sees (one it never sees answered leaves its connection out of the
guess: the cautious side).
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import DownloadTimeoutError
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.error import TimeoutError as TwistedTimeoutError

from scrapy_aimd import give_up, signals
from scrapy_aimd.core.connections import OpenConnections
from scrapy_aimd.core.rate_limit_headers import Quota, read_quota
from scrapy_aimd.core.retry_after import longest_retry_after
from scrapy_aimd.crawl import FORBIDDEN_META, THROTTLE_RETRIES_META, crawl_parts, request_host
from scrapy_aimd.give_up import HostGaveUp
from scrapy_aimd.robots_middleware import ROBOTS_META, bounded_robots_response
from scrapy_aimd.scheduler import AimdScheduler
from scrapy_aimd.settings import read_int

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from typing_extensions import Self

    from scrapy_aimd.core.controller import Reaction

logger = logging.getLogger(__name__)

TIMEOUT_ERRORS = (DownloadTimeoutError, TwistedTimeoutError, TimeoutError)
#: Set on a request given up on (to its URL), so that its copies are not counted
#: again; a copy for another URL (an errback's fallback) is a request of its own.
GAVE_UP_META = "aimd_gave_up"
#: Set on a request queued again for a block status that may have been a forbidden
#: page: ``[process token, send time of the try that answered so]``. Its next such
#: answer goes to the spider if its host's first answer after that try was a page.


class AimdDownloaderMiddleware:
    """Measures fetch latency, reads status and Retry-After, sends the feedback."""

    def __init__(self, crawler: Crawler) -> None:
        parts = crawl_parts(crawler)
        self.crawler = crawler
        self.stats = crawler.stats
        self.configs = parts.configs
        self.flights = parts.flights
        self.clock = parts.clock
        self.max_throttle_retries = read_int(
            crawler.settings, "AIMD_THROTTLE_RETRIES", 10, minimum=0
        )
        #: ``RETRY_ENABLED=False``: the user wants no request fetched twice.
        self.retry_enabled = crawler.settings.getbool("RETRY_ENABLED", True)
        self.parts = parts
        self.connections = OpenConnections()
        #: Per host, the marks (send times of 403'd tries, this process's clock)
        #: that no answer to a later-sent request has settled yet; then, per mark,
        #: whether that first answer was a page. Only marked requests have entries,
        #: popped when they come back.
        self.unsettled: dict[str, list[float]] = {}
        self.verdicts: dict[tuple[str, float], bool] = {}
        #: Per host, the send time of the latest-sent request answered with a page,
        #: and with a block status: answers that came before a mark was made (13 MB
        #: per 100,000 hosts with their names, as a dict of ints would take).
        self.served: dict[str, float] = {}
        self.refused: dict[str, float] = {}
        #: Names this process's marks (:data:`FORBIDDEN_META`): another's clock differs.
        self.token = secrets.token_hex(8)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        # Built with the engine, before the spider opens: the scheduler's
        # settings and files are checked now, so that their error is the one shown.
        AimdScheduler.prepare(crawler)
        return cls(crawler)

    async def process_request(self, request: Request) -> None:
        given_up = request.meta.get(give_up.META)
        if given_up is True or (given_up and given_up == request_host(request)):
            raise HostGaveUp(
                f"Gave up on the host of {request.url}: no success for "
                f"{give_up.SETTING} seconds while it refused or timed out"
            )
        flight = self.flights.get(request)
        gate = self.parts.outside
        if gate is not None and (flight is None or flight.handed_at is None):
            # Not handed out by the scheduler (engine.download_async: a media
            # pipeline, an inline download): it waits for its host's turn.
            waiter = gate.turn(request)
            if waiter is not None:
                await maybe_deferred_to_future(waiter)
        flight = self.flights.open(request)
        flight.sent_at = now = self.clock()
        flight.new_connection = self.connections.opens_connection(_pool_key(request), now)
        if flight.new_connection:
            self.stats.inc_value("aimd/new_connections")

    def process_response(self, request: Request, response: Response) -> Request | Response:
        if ROBOTS_META in request.meta:
            response = bounded_robots_response(response)
        sent_at = self._sent_at(request)
        if sent_at is not None:
            kept = not closes_connection(response)
            self.connections.answered(_pool_key(request), self.clock(), kept=kept)
        status = response.status
        retry_after = None
        host = request_host(request)
        cfg = self.configs.for_host(host)
        if status in cfg.throttle_codes:
            retry_after = self._retry_after(request, response)
        self._send(
            request,
            response=response,
            status=status,
            latency=self._latency(request, sent_at),
            retry_after=retry_after,
            downloaded=sent_at is not None,
            quota=self._quota(response, cfg.max_retry_after) if sent_at is not None else None,
        )
        reaction = self._reaction(request)
        blocked = reaction is not None and reaction.kind in ("forbidden", "block")
        # Its own mark first (let go of whatever the answer), then it settles others'.
        own = self._verdict(request) if FORBIDDEN_META in request.meta else None
        if sent_at is not None and ROBOTS_META not in request.meta:
            if 200 <= status < 400:
                self._settle(host, sent_at, page=True)
            elif blocked:
                self._settle(host, sent_at, page=False)
        if reaction is not None and blocked:
            return self._blocked(request, response, reaction, sent_at, own=own)
        if sent_at is not None and reaction is not None and reaction.refused:
            return self._requeue(request, str(status)) or response
        return response

    def _blocked(
        self,
        request: Request,
        response: Response,
        reaction: Reaction,
        sent_at: float | None,
        *,
        own: bool | None,
    ) -> Request | Response:
        """A block status: handed to the spider as a forbidden page when it is the
        page's ``own`` (:meth:`_verdict`) and no block is proven, else queued again
        (marked, after its host's other requests, if it was marked or no block is
        proven); handed on when its retries are spent, or at once from a host that
        never served a page (``refused`` False)."""
        mark = request.meta.get(FORBIDDEN_META)
        before = bool(mark)
        if sent_at is not None and reaction.refused and not (own and reaction.kind == "forbidden"):
            again = self._requeue(request, str(response.status))
            if again is not None and (before or reaction.kind == "forbidden"):
                # If a block follows, its probes are the host's other requests,
                # and this one comes once the block is over. A mark that no later
                # answer has settled yet is kept: those in flight may settle it.
                host = request_host(request)
                kept = own is None and isinstance(mark, list) and mark[0] == self.token
                sent = mark[1] if kept and isinstance(mark, list) else sent_at
                again.meta[FORBIDDEN_META] = [self.token, sent]
                if kept:  # only its own answer came after it
                    self.unsettled.setdefault(host, []).append(sent)
                else:
                    self._mark(host, sent)
                if not before:
                    again.priority -= 1
            if again is not None:
                return again
        self.stats.inc_value("aimd/forbidden")  # whatever its reading: the spider gets a 403
        return response

    def _verdict(self, request: Request) -> bool | None:
        """Whether the host's first answer to a request sent after the request's
        marked try was a page (the host was not blocking then, so that 403 was the
        page's own), None if no such answer came yet; False for a mark of another
        process. The mark is let go of."""
        mark = request.meta.get(FORBIDDEN_META)
        if not isinstance(mark, (list, tuple)) or len(mark) != 2 or mark[0] != self.token:
            return False
        host, sent = request_host(request), mark[1]
        waiting = self.unsettled.get(host)
        if waiting and sent in waiting:
            waiting.remove(sent)
            if not waiting:
                del self.unsettled[host]
            return None
        return self.verdicts.pop((host, sent), False)

    def _mark(self, host: str, sent: float) -> None:
        """A mark awaits the first answer to a request sent after it, unless answers
        to such requests came already (ahead of the 403's): a page only, or not."""
        if self.refused.get(host, sent) > sent:
            self.verdicts[host, sent] = False
        elif self.served.get(host, sent) > sent:
            self.verdicts[host, sent] = True
        else:
            self.unsettled.setdefault(host, []).append(sent)

    def _settle(self, host: str, sent_at: float, *, page: bool) -> None:
        """An answer of the host, a page or a block status, to a request sent at
        ``sent_at``: the verdict of every mark sent before it and still unsettled
        (the first answer after a mark, as they arrive: a fast 403 before a slow
        page reads as a block, the cautious side)."""
        latest = self.served if page else self.refused
        latest[host] = max(sent_at, latest.get(host, sent_at))
        waiting = self.unsettled.get(host)
        if not waiting:
            return
        later = [t for t in waiting if t >= sent_at]
        for t in waiting:
            if t < sent_at:
                self.verdicts[host, t] = page
        if later:
            self.unsettled[host] = later
        else:
            del self.unsettled[host]

    def _quota(self, response: Response, max_seconds: float) -> Quota | None:
        """The quota the response tells, if any; garbled and capped values counted."""
        reading = read_quota(response.headers, time.time(), max_seconds)
        if reading is None:
            return None
        if reading.garbled:
            self.stats.inc_value("aimd/quota/garbled")
        if reading.capped:
            self.stats.inc_value("aimd/quota/capped")
        if reading.quota is not None:
            self.stats.inc_value("aimd/quota/told")
        return reading.quota

    def process_exception(self, request: Request, exception: Exception) -> Request | None:
        sent_at = self._sent_at(request)
        if sent_at is not None:
            self.connections.answered(_pool_key(request), self.clock(), kept=False)
        timeout = isinstance(exception, TIMEOUT_ERRORS)
        self._send(
            request,
            exception=exception,
            timeout=timeout,
            downloaded=sent_at is not None,
        )
        reaction = self._reaction(request)
        if sent_at is not None and timeout and reaction is not None and reaction.refused:
            return self._requeue(request, "timeout")
        return None

    def _sent_at(self, request: Request) -> float | None:
        flight = self.flights.get(request)
        return None if flight is None else flight.sent_at

    def _reaction(self, request: Request) -> Reaction | None:
        """What the controller made of this answer (None: not ours to judge), and
        the request's entry is let go of."""
        flight = self.flights.get(request)
        if flight is None:
            return None
        reaction, flight.reaction, flight.sent_at = flight.reaction, None, None
        self.flights.settle(request)
        return reaction

    def _send(self, request: Request, **feedback: Any) -> None:
        feedback.setdefault("response", None)
        feedback.setdefault("status", None)
        feedback.setdefault("latency", None)
        feedback.setdefault("retry_after", None)
        feedback.setdefault("exception", None)
        feedback.setdefault("timeout", False)
        feedback.setdefault("quota", None)
        self.crawler.signals.send_catch_log(
            signal=signals.response_feedback, request=request, **feedback
        )

    def _latency(self, request: Request, sent_at: float | None) -> float | None:
        """Fetch latency: Scrapy's ``download_latency`` (send to headers) when it is
        this attempt's, else the time since this middleware let the request pass."""
        if sent_at is None:
            return None
        elapsed = self.clock() - sent_at
        latency = request.meta.get("download_latency")
        if isinstance(latency, (int, float)) and 0 <= latency <= elapsed + 0.01:
            return float(latency)
        return elapsed

    def _retry_after(self, request: Request, response: Response) -> float | None:
        """The longest wait that the answer's ``Retry-After`` headers ask for (a
        server or a proxy may send several)."""
        headers = response.headers.getlist(b"Retry-After")
        if not headers:
            return None
        seconds = longest_retry_after(headers, time.time())
        if seconds is None:
            self.stats.inc_value("aimd/retry_after/invalid")
            logger.debug("Ignoring an invalid Retry-After %r from %s", headers, request.url)
        return seconds

    def _allowed_requeues(self, request: Request) -> int | None:
        """How many times a refused request may be queued again; None when the
        user opted out of retries (``RETRY_ENABLED``, ``dont_retry``,
        ``max_retry_times=0``): those win over ``AIMD_THROTTLE_RETRIES``, and the
        controller has learnt from the answer anyway."""
        if not self.retry_enabled or request.meta.get("dont_retry"):
            return None
        user = request.meta.get("max_retry_times")
        if isinstance(user, int) and not isinstance(user, bool):
            return None if user <= 0 else min(self.max_throttle_retries, user)
        return self.max_throttle_retries

    def _requeue(self, request: Request, reason: str) -> Request | None:
        allowed = self._allowed_requeues(request)
        if allowed is None or request.meta.get(GAVE_UP_META) in (True, request.url):
            # A copy of a given-up request (RetryMiddleware's) was counted already.
            return None
        tries = int(request.meta.get(THROTTLE_RETRIES_META, 0))
        if tries >= allowed:
            request.meta[GAVE_UP_META] = request.url
            if "max_retry_times" in request.meta:
                # The user's budget of attempts is spent: RetryMiddleware must not
                # add as many again (max_retry_times=1: two fetches, as in stock).
                request.meta["retry_times"] = max(tries, request.meta.get("retry_times", 0))
            self.stats.inc_value("aimd/requeue/gave_up")
            logger.warning(
                "Gave up on %s after %d throttled attempts (%s); at most %d allowed",
                request.url,
                tries + 1,
                reason,
                allowed,
            )
            return None
        again = request.replace(dont_filter=True)
        again.meta[THROTTLE_RETRIES_META] = tries + 1
        self.stats.inc_value("aimd/requeued")
        self.stats.inc_value(f"aimd/requeued/{reason}")
        logger.debug("Queued %s again after %s (attempt %d)", request.url, reason, tries + 2)
        return again


#: Response flags of a body read until the server closed the connection, or of
#: a download stopped early (Scrapy's HTTP/1.1 handler then drops the connection).
CLOSING_FLAGS = frozenset({"partial", "dataloss", "download_stopped"})


def closes_connection(response: Response) -> bool:
    """The response's connection is not kept for another request: one of
    :data:`CLOSING_FLAGS`, an HTTP/1.0 answer, or ``Connection: close`` (which
    Scrapy's HTTP/1.1 handler leaves out of the response; other handlers keep
    it)."""
    if not CLOSING_FLAGS.isdisjoint(response.flags) or response.protocol == "HTTP/1.0":
        return True
    return b"close" in (response.headers.get(b"Connection") or b"").lower()


def _pool_key(request: Request) -> str:
    """What the downloader's pool keeps a request's connections by, or finer:
    the scheme and the netloc as written, the proxy and the bind address (a
    finer key only calls more sends new)."""
    url = urlparse_cached(request)
    meta = request.meta
    return f"{url.scheme}://{url.netloc} {meta.get('proxy')} {meta.get('bindaddress')}"
