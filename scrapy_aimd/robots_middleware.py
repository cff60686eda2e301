"""``RobotsTxtMiddleware``: robots.txt by RFC 9309, with Crawl-delay feeding the controller.

Scrapy's own middleware parses the body of any status (a 503 page counts as
rules), allows everything when the file cannot be fetched, caches it for ever
and ignores Crawl-delay. This one asks ``scrapy_aimd.core.robots.RobotsBook``
what each outcome means. Requests whose origin's rules are not known yet wait
in one place, :meth:`RobotsTxtMiddleware.hold`: with ``AimdScheduler`` they
wait there before they reach the frontier (other origins go on), the robots.txt
request goes through the host's controller like any other request, and the
Crawl-delay becomes the floor of the host's gap before its first page starts;
alone, the middleware holds each request there on its way to the downloader.

A listener that shares answers with other processes of the crawl (a fleet's
scheduler: :class:`RobotsSharing`) is asked before each fetch; an answer it
knows is read as one fetched here, without a request.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from weakref import WeakKeyDictionary

from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest, NotConfigured, StopDownload
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.asyncio import call_later
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet.defer import Deferred

from scrapy_aimd.core.robots import (
    DEFAULT_MEMORY,
    MAX_BYTES,
    MAX_DOWNLOAD_BYTES,
    FetchResult,
    RobotsBook,
    RobotsConfig,
    RobotsOutcome,
    Verdict,
    content_codings,
    decoded_body,
    http_url,
    resolve_sitemaps,
)
from scrapy_aimd.crawl import crawl_parts, origin_host, request_origin, user_slot
from scrapy_aimd.settings import read_bool, read_float, read_int

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings
    from twisted.python.failure import Failure
    from typing_extensions import Self

    from scrapy_aimd.reporter import Reporter

logger = logging.getLogger(__name__)

ROBOTS_SETTINGS = (
    "AIMD_ROBOTS_RETRIES",
    "AIMD_ROBOTS_MAX_AGE",
    "AIMD_MAX_CRAWL_DELAY",
    "AIMD_ROBOTS_SITEMAPS",
    "AIMD_ROBOTS_MEMORY",
)
ROBOTS_META = "aimd_robots_origin"
#: The flag of a robots.txt answer whose body could not be decoded (see
#: :func:`bounded_robots_response`): its body is empty.
UNDECODABLE = "aimd_robots_undecodable"
#: The shortest ``AIMD_ROBOTS_MAX_AGE`` accepted, in seconds.
MIN_ROBOTS_MAX_AGE = 60.0
#: RFC 9309 §2.3.1.2: follow at least five consecutive redirects.
MAX_REDIRECTS = 5
#: The fraction added to a Crawl-delay. The gap counts from when a request
#: reaches the downloader; the server sees it a little later (a busy reactor,
#: the network), and by a varying amount, so two arrivals can be a little
#: closer than their sends (a new connection's setup is not left to the margin:
#: see ``scrapy_aimd.core.connections``). 2 % costs at most 2 % of the ideal rate at any
#: delay (a fixed 50 ms cost 10 % at 0.5 s and 50 % at 0.1 s) and covers a send
#: jitter of 2 % of the delay. Measured at the server (benchmarks/README.md,
#: "Crawl-delay and send jitter"): the farm's polite host (0.25 s), 37 gaps a
#: crawl, smallest 0.2491-0.2516 s on a machine at load 0.6-1.5 and 0.2433 s at
#: load 2; nginx's (0.5 s), smallest 0.502 s at load 0.6 and 0.488 s at load 1,
#: after a request that reached nginx 31 ms after its start, 21 ms of them after
#: it reached the downloader. Jitter of that size is above any margin that costs
#: 2 %, so the gap counts from the socket write instead (``crawl.when_written``);
#: the margin covers what is left, the server's own and the network's.
CRAWL_DELAY_MARGIN = 0.02


def crawl_delay_floor(crawl_delay: float) -> float:
    """The gap floor that honours ``crawl_delay`` as the server measures it."""
    return crawl_delay * (1 + CRAWL_DELAY_MARGIN)


def bounded_robots_response(response: Response, max_bytes: int = MAX_BYTES) -> Response:
    """A compressed robots.txt answer (gzip, deflate, br, zstd, or several of
    them) inflated to its first ``max_bytes`` (and one more, to tell that it was
    longer) only: RFC 9309 §2.5 asks for 500 KiB, and a bomb would otherwise be
    refused whole by Scrapy's HttpCompressionMiddleware (over
    ``DOWNLOAD_MAXSIZE``), its rules lost. A body that cannot be decoded (a
    broken stream, an unknown coding) comes back empty and flagged
    :data:`UNDECODABLE`, where Scrapy's middleware would raise and the fetch
    would count as a network failure. Called by the feedback middleware, which
    sees raw answers before that middleware does, and by the robots.txt
    middleware for a raw answer that a middleware failed on."""
    values = response.headers.getlist(b"Content-Encoding")
    if not values:
        return response
    headers = response.headers.copy()
    del headers[b"Content-Encoding"]
    body = decoded_body(response.body, content_codings(values), max_bytes)
    if body is None:
        return response.replace(body=b"", headers=headers, flags=[*response.flags, UNDECODABLE])
    return response.replace(body=body, headers=headers)


class RobotsListener(Protocol):
    """What the scheduler does with robots.txt news."""

    def robots_settled(self, origin: str, released: int) -> None:
        """``origin``'s rules are known; ``released`` requests held for them were
        handed back."""

    def set_crawl_delay(self, host: str, crawl_delay: float, floor: float) -> None:
        """robots.txt asks for ``crawl_delay``; the host's gap keeps to ``floor``."""

    @property
    def reporter(self) -> Reporter:
        """Told of every fetch of a robots.txt (``Reporter.robots``)."""


@dataclass(frozen=True, slots=True)
class RobotsAnswer:
    """An origin's robots.txt answer as one process of the crawl fetched it, for
    the others to read without fetching it again."""

    #: None: a network failure.
    status: int | None
    #: What is parsed: the first ``MAX_BYTES`` of the body.
    body: bytes = b""
    #: The body was longer than ``body``.
    truncated: bool = False
    #: Unreachable after every retry (RFC 9309 §2.3.1.4): its origin is skipped.
    gave_up: bool = False
    #: Seconds since it was fetched: it is stale ``AIMD_ROBOTS_MAX_AGE`` after that.
    age: float = 0.0


@runtime_checkable
class RobotsSharing(Protocol):
    """A listener that shares robots.txt answers with the crawl's other processes
    (a fleet's: the scheduler over the Redis store); over the memory and JOBDIR
    stores the scheduler's listener is not one."""

    def robots_known(self, origin: str) -> RobotsAnswer | None:
        """The answer for ``origin`` that another process fetched, if there is one;
        None: this process fetches it."""

    def robots_share(self, origin: str, answer: RobotsAnswer, max_age: float) -> None:
        """This process fetched ``answer``, settled: the others may read it for
        ``max_age`` seconds."""

    def robots_retrying(self, origin: str, retry_in: float) -> None:
        """The fetch found ``origin``'s robots.txt unreachable: this process fetches
        it again in ``retry_in`` seconds, and the others go on waiting for it."""


def is_exempt(request: Request) -> bool:
    return bool(request.meta.get("dont_obey_robotstxt")) or not request.url.startswith(
        ("http://", "https://")
    )


#: Scrapy's default ROBOTSTXT_PARSER: Protego, whose rules this middleware applies too.
SCRAPY_ROBOTSTXT_PARSER = "scrapy.robotstxt.ProtegoRobotParser"


def _warn_about_robotstxt_parser(settings: BaseSettings) -> None:
    """``ROBOTSTXT_PARSER`` plugs a parser into Scrapy's robots middleware, which this
    one replaces: a parser that the user chose is not used, and must not be
    silently so."""
    parser = settings.get("ROBOTSTXT_PARSER")
    shown = (
        f"{parser.__module__}.{parser.__qualname__}" if isinstance(parser, type) else str(parser)
    )
    if parser is None or shown == SCRAPY_ROBOTSTXT_PARSER:
        return
    logger.warning(
        "ROBOTSTXT_PARSER=%s is not used: scrapy-aimd's robots.txt middleware parses "
        "robots.txt by RFC 9309 (with Protego's rules, as Scrapy's default parser "
        "does), and reads its Crawl-delay",
        shown,
    )


class RobotsTxtMiddleware:
    """Downloader middleware: skips what robots.txt disallows (``IgnoreRequest``)."""

    def __init__(self, crawler: Crawler, *, clock: Callable[[], float] = time.monotonic) -> None:
        settings = crawler.settings
        if not settings.getbool("ROBOTSTXT_OBEY"):
            raise NotConfigured
        _warn_about_robotstxt_parser(settings)
        self.crawler = crawler
        self.stats = crawler.stats
        self.book = RobotsBook(
            RobotsConfig(
                retries=read_int(settings, "AIMD_ROBOTS_RETRIES", 3),
                # At least a minute: 0 would fetch robots.txt before every request.
                max_age=read_float(
                    settings, "AIMD_ROBOTS_MAX_AGE", 24 * 3600.0, minimum=MIN_ROBOTS_MAX_AGE
                ),
                max_crawl_delay=read_float(settings, "AIMD_MAX_CRAWL_DELAY", 60.0),
                persist=bool(settings.get("JOBDIR")),
                memory=read_int(settings, "AIMD_ROBOTS_MEMORY", DEFAULT_MEMORY),
            )
        )
        #: The book's counts already in the stats.
        self._evicted = self._parsed_again = 0
        #: The crawl's clock; the scheduler gives its own in :meth:`attach`.
        self.clock = clock
        self.sitemaps = read_bool(settings, "AIMD_ROBOTS_SITEMAPS", False)
        self.robots_user_agent: str | None = settings.get("ROBOTSTXT_USER_AGENT") or None
        self.default_user_agent: str = settings.get("USER_AGENT") or "Scrapy"
        self.listener: RobotsListener | None = None
        #: The listener, when it shares answers with other processes.
        self.sharing: RobotsSharing | None = None
        self.flights = crawl_parts(crawler).flights
        #: Requests waiting for their origin's rules, with what to do once they are known.
        self._held: dict[str, list[tuple[Request, Callable[[Request], None]]]] = {}
        #: How many requests wait in ``_held``.
        self.held = 0
        self._crawl_delays: dict[str, float] = {}
        #: The largest Crawl-delay of the hosts seen in each user's ``download_slot``.
        self._slot_delays: dict[str, float] = {}
        #: The user's slot of an origin's first request that had one: its robots.txt
        #: is fetched in that slot, whose gap then counts from it.
        self._origin_slots: dict[str, str] = {}
        #: The network error of each origin's last robots.txt fetch that had one.
        self._network_errors: dict[str, Exception] = {}
        #: Bytes received so far of each robots.txt request being downloaded.
        self._received: WeakKeyDictionary[Request, int] = WeakKeyDictionary()
        #: Each robots.txt request's answer as downloaded, until its callback or
        #: errback: an errback from a middleware that failed on it reads it here.
        self._answers: WeakKeyDictionary[Request, Response] = WeakKeyDictionary()
        crawler.signals.connect(self._bytes_received, signal=signals.bytes_received)
        crawler.signals.connect(self._response_downloaded, signal=signals.response_downloaded)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    # -- for the scheduler ----------------------------------------------------

    def attach(self, listener: RobotsListener, clock: Callable[[], float]) -> None:
        """Let the scheduler hold requests until their origin's rules are known,
        on the scheduler's clock."""
        self.listener = listener
        self.sharing = listener if isinstance(listener, RobotsSharing) else None
        self.clock = clock

    def hold(self, request: Request, resume: Callable[[Request], None]) -> None:
        """Keep ``request`` until its origin's rules are known, then call ``resume``
        with it: the one place where requests wait for robots.txt."""
        self._held.setdefault(request_origin(request), []).append((request, resume))
        self.held += 1

    def verdict(self, request: Request) -> Verdict:
        """Allow, deny, or wait (a fetch of the origin's robots.txt is started)."""
        if is_exempt(request):
            return Verdict.ALLOW
        origin = request_origin(request)
        slot = user_slot(request)
        if slot is not None:
            self._origin_slots.setdefault(origin, slot)
        if self.book.needs_fetch(origin, self.clock()):
            self._fetch(origin)
        verdict = self.book.verdict(origin, request.url, self.user_agent(request))
        self._count_memory()
        return verdict

    def _count_memory(self) -> None:
        """What the book did to keep within ``AIMD_ROBOTS_MEMORY``, in the stats."""
        book = self.book
        if book.evicted != self._evicted:
            self.stats.inc_value("aimd/robots/evicted", book.evicted - self._evicted)
            self._evicted = book.evicted
        if book.parsed_again != self._parsed_again:
            self.stats.inc_value("aimd/robots/parsed_again", book.parsed_again - self._parsed_again)
            self._parsed_again = book.parsed_again

    # -- middleware -------------------------------------------------------------

    async def process_request(self, request: Request) -> None:
        if ROBOTS_META in request.meta:
            # Each hop: a redirect's request carries the decoding bound of the
            # answer before it (see _response_downloaded).
            request.meta.update(download_maxsize=0, download_warnsize=0)
        verdict = self.verdict(request)
        if verdict is Verdict.WAIT and self._holds_a_place(request):
            # The scheduler let it through on rules that were forgotten since
            # (AIMD_ROBOTS_MEMORY); their refetch has begun, and waiting for it
            # here would hold the host's place that the refetch needs.
            self.stats.inc_value("aimd/robots/evicted_in_flight")
            verdict = Verdict.ALLOW
        # Without AimdScheduler, which holds them itself (and for a request that
        # holds no place: a disallowed one, or one that came around the scheduler).
        while verdict is Verdict.WAIT:
            waiter: Deferred[None] = Deferred()
            self.hold(request, partial(_wake, waiter))
            await maybe_deferred_to_future(waiter)
            verdict = self.verdict(request)
        if verdict is Verdict.DENY:
            origin = request_origin(request)
            if self.book.state(origin).denied:
                raise self._unreachable_error(request, origin)
            self.stats.inc_value("aimd/robots/disallowed")
            self.stats.inc_value("robotstxt/forbidden")  # Scrapy's, which monitoring reads
            logger.debug("Forbidden by robots.txt: %s", request)
            raise IgnoreRequest("Forbidden by robots.txt")

    def _holds_a_place(self, request: Request) -> bool:
        """The scheduler handed ``request`` out with a place of its host's (a
        ticket, or a fleet's lease); a disallowed one is handed out without."""
        flight = self.flights.get(request)
        return flight is not None and flight.handed_at is not None

    def _unreachable_error(self, request: Request, origin: str) -> Exception:
        """What a request of a skipped origin fails with: the network error that
        made its robots.txt unreachable (the origin is dead: DNS, refused ...),
        else an ``IgnoreRequest`` that says so. Not retried: the origin's fate is
        settled until its robots.txt is fetched again."""
        self.stats.inc_value("aimd/robots/unreachable")
        logger.debug("Skipped, robots.txt unreachable: %s", request)
        request.meta["dont_retry"] = True
        error = self._network_errors.get(origin)
        if error is not None:
            try:
                return copy.copy(error)
            except Exception:  # pragma: no cover - an exception that cannot be copied
                return error
        return IgnoreRequest(f"{origin}/robots.txt unreachable")

    def user_agent(self, request: Request) -> str:
        if self.robots_user_agent:
            return self.robots_user_agent
        header = request.headers.get(b"User-Agent")
        return header.decode("latin-1") if header else self.default_user_agent

    # -- fetching robots.txt ----------------------------------------------------

    def _fetch(self, origin: str) -> None:
        self.book.started(origin)
        if self.sharing is not None:
            answer = self.sharing.robots_known(origin)
            if answer is not None:
                self.read_shared(origin, answer)
                return
        request = Request(
            f"{origin}/robots.txt",
            callback=self._on_response,
            errback=self._on_error,
            priority=1000,
            dont_filter=True,
            meta={
                ROBOTS_META: origin,
                "dont_obey_robotstxt": True,
                # A 429 or 503 here is an RFC 9309 outcome, retried by the book.
                "dont_retry": True,
                "redirect_ttl": MAX_REDIRECTS,
                # Not DOWNLOAD_MAXSIZE, whose excess fails the fetch and loses the
                # origin: the download stops at MAX_DOWNLOAD_BYTES, keeping what
                # came (_bytes_received).
                "download_maxsize": 0,
                "download_warnsize": 0,
            },
        )
        slot = self._origin_slots.get(origin)
        if slot is not None:
            request.meta["download_slot"] = slot
        self.stats.inc_value("aimd/robots/requests")
        self.stats.inc_value("robotstxt/request_count")
        # Not from inside the caller's scheduling call: the engine may be in it.
        call_later(0, self._crawl if self.listener is not None else self._download, request)

    def _crawl(self, request: Request) -> None:
        engine = self.crawler.engine
        if engine is not None and engine.spider is not None:
            engine.crawl(request)

    def _download(self, request: Request) -> None:
        """Without AimdScheduler, robots.txt is downloaded at once, as Scrapy's own
        middleware does: the requests held for it wait inside the downloader, each
        counted against ``CONCURRENT_REQUESTS``, and once they fill it the engine
        asks Scrapy's scheduler for nothing more, this fetch included."""
        engine = self.crawler.engine
        if engine is None or engine.spider is None:
            return

        async def download() -> None:
            try:
                response = await engine.download_async(request)
            except Exception as exc:
                self._on_exception(request, exc)
            else:
                self._on_response(response)

        deferred_from_coro(download())

    def _bytes_received(self, data: bytes, request: Request, spider: object = None) -> None:
        """Stop a robots.txt download at :data:`MAX_DOWNLOAD_BYTES`, keeping what
        came: twice what is parsed, so that a compressed body holds it too."""
        if ROBOTS_META not in request.meta:
            return
        received = self._received.get(request, 0) + len(data)
        self._received[request] = received
        if received >= MAX_DOWNLOAD_BYTES:
            raise StopDownload(fail=False)

    def _response_downloaded(
        self, response: Response, request: Request, spider: object = None
    ) -> None:
        """Keep a robots.txt answer as it came, until its callback or errback; and
        bound the decoding of its body by Scrapy's HttpCompressionMiddleware (which
        decodes it when no feedback middleware did first): past the bound it
        ignores the answer, which the errback then reads itself."""
        if ROBOTS_META not in request.meta:
            return
        self._received.pop(request, None)
        self._answers[request] = response.replace()  # not the one that gets .request
        request.meta["download_maxsize"] = MAX_DOWNLOAD_BYTES

    def _on_response(self, response: Response) -> None:
        origin = response.meta[ROBOTS_META]
        if response.request is not None:
            self._answers.pop(response.request, None)
        try:
            self._read(origin, response, response.request)
        except Exception:
            self._recover(origin)

    def _recover(self, origin: str) -> None:
        """Any error in handling a robots.txt answer still settles its origin:
        its requests must not wait for ever."""
        self.stats.inc_value("aimd/robots/callback_errors")
        logger.exception(
            "Could not handle %s/robots.txt; the origin's requests go on with what is known",
            origin,
        )
        self.book.settle_anyway(origin, self.clock())
        self._count_memory()
        self._settled(origin, FetchResult(RobotsOutcome.ALLOW_ALL, settled=True))

    def _read(self, origin: str, response: Response, request: Request | None) -> None:
        status = response.status
        self.stats.inc_value(f"aimd/robots/status/{status}")
        self.stats.inc_value("robotstxt/response_count")
        self.stats.inc_value(f"robotstxt/response_status_count/{status}")
        self._network_errors.pop(origin, None)
        if 200 <= status < 300 and UNDECODABLE in response.flags:
            self.stats.inc_value("aimd/robots/undecodable")
            logger.warning(
                "%s/robots.txt cannot be decoded (a broken or unknown Content-Encoding): "
                "allowing all, as for a file without rules",
                origin,
            )
        elif 300 <= status < 400 and b"Location" in response.headers:
            self._check_redirect(origin, response)
        result = self.book.fetched(
            origin,
            self.clock(),
            status,
            response.body,
            self.user_agent(request) if request else self.default_user_agent,
        )
        self._after(origin, result, f"status {status}", status)
        self._share(origin, result, status, response.body)

    def _check_redirect(self, origin: str, response: Response) -> None:
        """A redirect that was not followed: counted and logged when its Location
        is no http or https URL (RFC 9309: the file is unavailable, allow all)."""
        location = (response.headers.get(b"Location") or b"").decode("latin-1")
        if http_url(response.url, location) is not None:
            return  # followed no further for another reason (REDIRECT_ENABLED ...)
        self.stats.inc_value("aimd/robots/redirect_invalid")
        logger.warning(
            "%s/robots.txt redirects to %r, which is no http or https URL: allowing all, "
            "as for a file that is unavailable",
            origin,
            location,
        )

    def read_shared(self, origin: str, answer: RobotsAnswer) -> None:
        """Read an answer that another process of the crawl fetched (see
        :class:`RobotsSharing`) as one fetched here: the rules, the Crawl-delay,
        the held requests released; stale when the fetched one is."""
        try:
            now = self.clock() - max(0.0, answer.age)
            user_agent = self.robots_user_agent or self.default_user_agent
            if answer.gave_up:  # the rules it knew stay, or the origin is skipped
                result = self.book.retries_spent(origin, now, answer.status, user_agent)
            else:
                result = self.book.fetched(origin, now, answer.status, answer.body, user_agent)
                if answer.truncated:
                    result = replace(result, truncated=True)
            self._after(
                origin, result, f"status {answer.status}, shared", answer.status, shared=True
            )
        except Exception:
            self._recover(origin)

    def _share(self, origin: str, result: FetchResult, status: int | None, body: bytes) -> None:
        """A fetched answer to the listener that shares them (see :class:`RobotsSharing`)."""
        if self.sharing is None:
            return
        if result.settled:
            rules = result.outcome is RobotsOutcome.RULES
            answer = RobotsAnswer(
                status,
                body[: self.book.config.max_bytes] if rules else b"",
                truncated=result.truncated,
                gave_up=result.outcome is RobotsOutcome.UNREACHABLE,
            )
            self.sharing.robots_share(origin, answer, self.book.config.max_age)
        elif result.retry_at is not None:
            self.sharing.robots_retrying(origin, max(0.0, result.retry_at - self.clock()))

    def _on_error(self, failure: Failure) -> None:
        """The errback: a non-2xx status (through HttpError, after redirects) or a failure."""
        request: Request | None = getattr(failure, "request", None)
        if request is None or failure.value is None:  # pragma: no cover - Scrapy attaches it
            return
        self._on_exception(request, failure.value)

    def _on_exception(self, request: Request, exc: BaseException) -> None:
        if isinstance(exc, HttpError):
            self._on_response(exc.response)
            return
        origin = request.meta.get(ROBOTS_META)
        if origin is None:  # pragma: no cover - every robots.txt request has it
            return
        answer = self._answers.pop(request, None)
        try:
            if answer is not None and self._answer_failed(exc, answer):
                # An answer came, and a middleware failed on it: Scrapy's
                # HttpCompressionMiddleware on a body it cannot decode or that
                # inflates past its bound, RedirectMiddleware on a Location that
                # is no URL. Read here as it came, not as a network failure.
                self._read(origin, bounded_robots_response(answer), request)
            else:
                self._failed(origin, exc)
        except Exception:
            self._recover(origin)

    @staticmethod
    def _answer_failed(exc: BaseException, answer: Response) -> bool:
        """The errback came from a middleware that failed on ``answer``, not from
        one that chose to drop it (``IgnoreRequest``: too many redirects, a
        middleware of the user's), unless it was Scrapy's HttpCompressionMiddleware
        refusing a compressed body past its bound."""
        if not isinstance(exc, IgnoreRequest):
            return True
        return 200 <= answer.status < 300 and b"Content-Encoding" in answer.headers

    def _failed(self, origin: str, exc: BaseException) -> None:
        status: int | None = None
        if isinstance(exc, IgnoreRequest):
            # Not fetched, and not for a network failure: more than the five
            # redirects RFC 9309 §2.3.1.2 asks for, a redirect loop (Scrapy's
            # "max redirections reached"), or a middleware that dropped it. The
            # file is unavailable, a final 3xx: allow all.
            status = 300
            redirects = "redirections" in str(exc)
            self.stats.inc_value(
                "aimd/robots/redirects_exhausted" if redirects else "aimd/robots/ignored"
            )
        else:
            self.stats.inc_value("aimd/robots/errors")
            self.stats.inc_value(f"robotstxt/exception_count/{type(exc)}")  # as Scrapy names it
            if isinstance(exc, Exception):
                self._network_errors[origin] = exc
        result = self.book.fetched(origin, self.clock(), status, b"", self.default_user_agent)
        self._after(origin, result, str(exc) or type(exc).__name__, None)
        self._share(origin, result, status, b"")

    def _after(
        self,
        origin: str,
        result: FetchResult,
        what: str,
        status: int | None,
        *,
        shared: bool = False,
    ) -> None:
        self._count_memory()
        if self.listener is not None:
            self.listener.reporter.robots(
                self.clock(),
                origin,
                status,
                result.outcome.value,
                result.crawl_delay,
                shared=shared,
            )
        if result.crawl_delay_invalid is not None:
            self.stats.inc_value("aimd/robots/crawl_delay_invalid")
            logger.warning(
                "%s/robots.txt asks for Crawl-delay %r, which is no delay; ignored",
                origin,
                result.crawl_delay_invalid,
            )
        if result.truncated:
            self.stats.inc_value("aimd/robots/truncated")
            logger.info(
                "%s/robots.txt is over %d bytes; parsed the start",
                origin,
                self.book.config.max_bytes,
            )
        if result.crawl_delay is not None:
            self._apply_crawl_delay(origin, result)
        if result.outcome is RobotsOutcome.UNREACHABLE:
            self._unreachable(origin, result, what)
        if result.settled:
            self._settled(origin, result)

    def _apply_crawl_delay(self, origin: str, result: FetchResult) -> None:
        assert result.crawl_delay is not None
        host = origin_host(origin)
        if result.crawl_delay_capped:
            self.stats.inc_value("aimd/robots/crawl_delay_capped")
            logger.warning(
                "%s/robots.txt asks for a Crawl-delay above AIMD_MAX_CRAWL_DELAY; using %.1fs",
                origin,
                result.crawl_delay,
            )
        # http and https of a host share one controller: the larger delay wins.
        delay = max(result.crawl_delay, self._crawl_delays.get(host, 0.0))
        self._crawl_delays[host] = delay
        if self.listener is not None:
            self.listener.set_crawl_delay(host, delay, crawl_delay_floor(delay))
        logger.info("Crawl-delay of %s: %.2fs", host, delay)

    def slot_crawl_delay(self, slot: str, request: Request) -> None:
        """A request allowed into a user's ``download_slot`` (checked here), before it
        is queued: the slot's controller is the only one of every host in it, so
        its floor is the largest of their Crawl-delays, told to the listener
        before the request can start. The one place for it, in every mode."""
        host = origin_host(request_origin(request))
        delay = self._crawl_delays.get(host)
        if slot == host or delay is None or delay <= self._slot_delays.get(slot, 0.0):
            return
        if self.verdict(request) is not Verdict.ALLOW:
            return  # never sent (a held one is checked again once allowed)
        self._slot_delays[slot] = delay
        logger.info("Crawl-delay of slot %s: %.2fs (robots.txt of %s)", slot, delay, host)
        if self.listener is not None:
            self.listener.set_crawl_delay(slot, delay, crawl_delay_floor(delay))

    def _unreachable(self, origin: str, result: FetchResult, what: str) -> None:
        self.stats.inc_value("aimd/robots/fetch_unreachable")
        if result.retry_at is not None:
            wait = max(0.0, result.retry_at - self.clock())
            logger.info("%s/robots.txt unreachable (%s); again in %.1fs", origin, what, wait)
            call_later(wait, self._retry, origin)
        elif self.book.state(origin).denied:
            self.stats.inc_value("aimd/robots/origins_skipped")
            logger.warning(
                "%s/robots.txt unreachable after %d retries (%s): skipping the origin's "
                "requests (RFC 9309 §2.3.1.4)",
                origin,
                self.book.config.retries,
                what,
            )

    def _retry(self, origin: str) -> None:
        if self.book.needs_fetch(origin, self.clock()):
            self._fetch(origin)

    def _settled(self, origin: str, result: FetchResult) -> None:
        held = self._held.pop(origin, [])
        self.held -= len(held)
        for request, resume in held:
            try:
                resume(request)
            except Exception:  # one request's trouble; the others go on
                self.stats.inc_value("aimd/robots/callback_errors")
                logger.exception("Could not release %s after its robots.txt", request)
        if self.listener is not None:
            self.listener.robots_settled(origin, len(held))
        if self.sitemaps and result.outcome is RobotsOutcome.RULES:
            self._queue_sitemaps(origin)

    def _queue_sitemaps(self, origin: str) -> None:
        spider = self.crawler.spider
        callback: Any = getattr(spider, "sitemap", None)
        if not callable(callback):
            return
        urls, invalid = resolve_sitemaps(origin, self.book.sitemaps(origin))
        for url in urls:
            try:
                request = Request(url, callback=callback)
            except ValueError:
                invalid.append(url)
                continue
            self.stats.inc_value("aimd/robots/sitemaps")
            self._crawl(request)
        if invalid:
            self.stats.inc_value("aimd/robots/sitemaps_invalid", len(invalid))
            logger.info(
                "%s/robots.txt lists %d sitemaps that are no http or https URL, skipped: %s",
                origin,
                len(invalid),
                ", ".join(repr(value) for value in invalid[:5]),
            )


def _wake(waiter: Deferred[None], _: Request) -> None:
    """Resume a request that waited in ``process_request`` for its robots.txt."""
    waiter.callback(None)
