"""Crash-safe JOBDIR: the frontier, the hosts' state and the seen keys on disk,
consistent at every moment.

With ``JOBDIR``, :class:`~scrapy_aimd.scheduler.AimdScheduler` keeps its frontier
in ``JOBDIR/aimd-frontier.sqlite`` (:mod:`scrapy_aimd.sqlite_store`), next to the
dupefilter's ``aimd-seen-keys.bin``, and writes both as it goes. A crawl killed
at any moment (SIGKILL, the OOM killer) resumes with every request that it had
accepted and not finished, and one stopped with Ctrl-C resumes in the same way.

The invariant: no request is both forgotten by the frontier and marked seen.
Such a request would never be fetched: nothing queues it again, and a link to
it found later is filtered as a duplicate. The protocol that keeps it:

1. A request that ``enqueue_request`` accepts gets a row in the store's open
   transaction at once: queued for its host, or kept aside while it waits for
   its origin's robots.txt or waits to be handed out as disallowed.
2. Handing a request to the engine does not delete its row (``pop`` only takes
   it out of the queue in memory): a crawl that dies while the request is in
   flight finds it queued again.
3. The row is deleted only once the engine is done with the request: its
   callback or errback has run to the end and every request that it yielded
   has reached the scheduler (so has a row in the same or an earlier
   transaction); or a middleware's redirect, retry or throttled copy has. The
   engine's set of requests in progress tells (``scrapy_aimd._compat``): a
   request handed out and no longer in it is done. The engine adds a request to
   that set in the same call in which it takes it from ``next_request()``, so
   "handed out and not in progress" never means "not started yet". Deleting the
   row when the response arrives would be too early: a crash between that
   commit and the children's would lose the children for good (their keys are
   not seen, but no page links to them again in the resumed crawl). A request
   cancelled by ``AIMD_SHUTDOWN_GRACE`` is never done: it stays queued.
4. A commit makes durable a prefix of these writes, so a done request's delete
   is never durable before the inserts of its children.
5. Seen keys are written only after their requests' rows are committed: the
   dupefilter calls ``before_flush`` (a commit) before it writes a batch, and
   writes a full batch before it adds the next key, whose request is not stored
   yet. So that the keys file may lag the database, each commit also stores the
   keys seen and not yet written (those since the last checkpoint, which writes
   them after its commit; a full batch of ``BATCH_KEYS`` at most), and a resumed
   crawl marks them seen again: a request committed in the moment before its
   key reached the file, or before a write of the file failed, is neither lost
   nor queued a second time when a link to it turns up again.
6. A request that cannot be serialized (a callback that is not a method of the
   spider, such as the robots.txt requests of :mod:`scrapy_aimd.robots_middleware`) stays
   in memory, counted in ``aimd/jobdir/unserializable`` and logged: a crash
   loses it.

Commits come when the engine has finished requests (checked as it asks for
the next one), every 0.25 s, every 2000 writes and at close, so a request done
is forgotten within a moment and a crash refetches little more than what was
in flight.

With the rows, the store keeps each host's controller state (its whole memory:
gap, limit, latencies, pushback, Crawl-delay, the pause, the round, the pace
samples, with every time moved from the crawl's clock to POSIX time) and each
origin's robots.txt (the rules and their age), so that a resumed crawl does not
hammer a host that had asked it to slow down, nor fetch robots.txt again before
it is due.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from scrapy import Request
from scrapy.utils.asyncio import create_looping_call

from scrapy_aimd._compat import requests_in_progress
from scrapy_aimd.core.controller import ControllerConfig, HostController, shift_state
from scrapy_aimd.core.frontier import MemoryQueueStore
from scrapy_aimd.crawl import stop_crawl
from scrapy_aimd.dupefilter import AimdDupeFilter, keys_from_hex, keys_to_hex
from scrapy_aimd.request_codec import RequestCodec
from scrapy_aimd.sqlite_store import SqliteQueueStore, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.dupefilters import BaseDupeFilter
    from scrapy.statscollectors import StatsCollector

    from scrapy_aimd.core.frontier import Frontier
    from scrapy_aimd.inflight import InFlight
    from scrapy_aimd.robots_middleware import RobotsTxtMiddleware

__all__ = [
    "FRONTIER_FILENAME",
    "UNWRITTEN_KEYS",
    "Jobdir",
    "JobdirError",
    "MemoryKeeper",
    "check_frontier",
    "check_jobdir",
    "check_not_stock",
]

logger = logging.getLogger(__name__)

FRONTIER_FILENAME: Final = "aimd-frontier.sqlite"
#: Seconds between checkpoints when nothing else calls for one.
CHECKPOINT_INTERVAL: Final = 0.25
#: Writes in one transaction before a checkpoint.
CHECKPOINT_WRITES: Final = 2000
#: The stored state that holds the seen keys not yet in the keys file.
UNWRITTEN_KEYS: Final = "dupefilter:unwritten"
#: What Scrapy's own scheduler and dupefilter leave in a JOBDIR.
STOCK_QUEUE: Final = "requests.queue"
STOCK_SEEN: Final = "requests.seen"
#: A saved host's ``times``: every time in its controller state is POSIX time.
#: (Without it, the previous format: ``paused_until`` alone is.)
POSIX_TIMES: Final = "posix"


class JobdirError(RuntimeError):
    """The JOBDIR cannot be resumed as it is."""


def check_frontier(frontier: Path, *, spider: str | None = None) -> None:
    """Refuse a frontier database that cannot be opened: corrupted, in use by
    another crawl, of another format or, with ``spider``, of another spider's
    crawl, or no database at all. Called as the engine is made, before anything
    opens a JOBDIR file: refused when the spider opens, the error is buried under
    Scrapy's failures to close a spider that never opened."""
    SqliteQueueStore.check(frontier, stamp=None if spider is None else {"spider": spider})


def check_jobdir(path: Path, frontier: Path, dupefilter: BaseDupeFilter) -> None:
    """Refuse a JOBDIR that would resume wrongly: one of Scrapy's own scheduler,
    or seen requests without the frontier that they go with."""
    check_not_stock(path, frontier)
    if frontier.exists() and frontier.stat().st_size > 0:
        return
    if isinstance(dupefilter, AimdDupeFilter) and len(dupefilter):
        raise JobdirError(
            f"{dupefilter.path} holds {len(dupefilter)} seen request keys but {frontier} "
            f"is missing: the requests that were queued would never be fetched. Restore "
            f"{frontier.name}, or start a new JOBDIR."
        )


def check_not_stock(path: Path, frontier: Path) -> None:
    """Refuse a JOBDIR of Scrapy's own scheduler. Called before the dupefilter
    opens its file too: refused, the JOBDIR is left as it was, for Scrapy."""
    has_frontier = frontier.exists() and frontier.stat().st_size > 0
    stock_queue = path / STOCK_QUEUE
    stock_seen = path / STOCK_SEEN
    # Scrapy's RFPDupeFilter writes requests.seen beside our frontier too.
    for stock in (stock_queue, *(() if has_frontier else (stock_seen,))):
        if stock.exists() and (stock.is_dir() or stock.stat().st_size):
            raise JobdirError(
                f"{stock} was written by Scrapy's own scheduler or dupefilter: "
                f"scrapy-aimd cannot resume that JOBDIR. Resume it without scrapy-aimd, "
                f"or use a new JOBDIR."
            )


class MemoryKeeper:
    """A crawl without JOBDIR: the frontier in memory, nothing saved. The same
    calls as :class:`Jobdir`, so that the scheduler never asks which it has."""

    #: Scrapy's scheduler stats name the queue so (``scheduler/enqueued/memory``).
    where: ClassVar[str] = "memory"
    #: A stopping crawl's cancelled downloads cannot be resumed.
    resumable: ClassVar[bool] = False
    #: Nothing in the frontier came from an earlier run: robots.txt decided.
    recheck_robots: ClassVar[bool] = False
    #: Said after "its N queued requests fail with HostGaveUp".
    gave_up_note: ClassVar[str] = ""
    unserializable: ClassVar[int] = 0

    def queue_store(self) -> MemoryQueueStore[Request]:
        return MemoryQueueStore()

    def start(self, frontier: Frontier[Request]) -> None:
        pass

    def close(self) -> None:
        pass

    def wrote(self) -> None:
        pass

    def tick(self) -> None:
        pass

    def handed_out(self, request: Request) -> None:
        pass

    def host_changed(self, host: str) -> None:
        pass

    def controller(self, host: str, cfg: ControllerConfig) -> HostController | None:
        return None

    def save_robots(self, origin: str, robots: RobotsTxtMiddleware) -> None:
        pass

    def restore_robots(self, origin: str, robots: RobotsTxtMiddleware) -> None:
        pass

    def fail(self, exc: BaseException) -> None:
        """Never called: a memory store raises no ``StoreError``."""
        logger.error("Stopping the crawl: the frontier failed: %s", exc)


class Jobdir:
    """The scheduler's JOBDIR: the store, its checkpoints and the hosts' saved state."""

    where: ClassVar[str] = "disk"
    resumable: ClassVar[bool] = True
    #: Requests stored by an earlier run before their origin's robots.txt was
    #: known: robots.txt decides again as each is popped.
    recheck_robots: ClassVar[bool] = True
    gave_up_note: ClassVar[str] = ", and stay in the JOBDIR for a later run"

    def __init__(
        self,
        path: str | Path,
        crawler: Crawler,
        spider: Spider,
        dupefilter: BaseDupeFilter,
        flights: InFlight[Request],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if requests_in_progress(crawler) is None:
            raise JobdirError(
                "This Scrapy's engine does not show which requests it has finished "
                "(see scrapy_aimd/_compat.py): without that, a JOBDIR cannot be kept "
                "consistent. Crawl without JOBDIR, or use a Scrapy that scrapy-aimd supports."
            )
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.crawler = crawler
        self.stats: StatsCollector = crawler.stats  # type: ignore[assignment]
        self.clock = clock
        self.dupefilter = dupefilter
        check_jobdir(self.path, self.path / FRONTIER_FILENAME, dupefilter)
        self.codec = RequestCodec(spider)
        self.store: SqliteQueueStore[Request] = SqliteQueueStore(
            self.path / FRONTIER_FILENAME,
            encode=self.codec.encode,
            decode=self.codec.decode,
            stamp={"spider": spider.name},
        )
        self.frontier: Frontier[Request] | None = None
        #: The crawl's requests in flight: those handed to the engine are marked
        #: ``stored`` there while their row waits for the engine to be done; one
        #: whose download ``AIMD_SHUTDOWN_GRACE`` cancelled is never done.
        self.flights = flights
        self._dirty_hosts: set[str] = set()
        self._robots_checked: set[str] = set()
        self._timer: Any = None
        self.failed = False
        #: The dupefilter's ``unwritten_mark`` when its unwritten keys were stored.
        self._unwritten_mark: tuple[int, int] | None = None
        if isinstance(dupefilter, AimdDupeFilter):
            dupefilter.before_flush = self.commit
            # A seen-keys file that cannot be written (a full disk) stops the
            # crawl here, as a frontier that cannot is: one ERROR, one reason.
            dupefilter.on_error = self.fail
            self._unwritten_mark = dupefilter.unwritten_mark  # the store holds those
            try:
                self._restore_unwritten(dupefilter)
            except StoreError:
                self.store.close()
                raise
        else:
            logger.warning(
                "DUPEFILTER_CLASS %s does not wait for the frontier before it writes "
                "seen requests to JOBDIR: after a crash, some seen requests may be lost. "
                "Use scrapy_aimd.dupefilter.AimdDupeFilter.",
                type(dupefilter).__name__,
            )
        if self.store.restored:
            logger.info("Resuming %s: %d requests queued", self.store.path, self.store.restored)
        self.stats.set_value("aimd/jobdir/restored", self.store.restored)

    def _restore_unwritten(self, dupefilter: AimdDupeFilter) -> None:
        saved = self.store.load_state(UNWRITTEN_KEYS)
        if saved is None:
            return
        try:
            keys = keys_from_hex(saved["keys"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(
                f"{self.store.path} is corrupted: the state of {UNWRITTEN_KEYS!r}: {exc!r}"
            ) from exc
        if keys:
            self.stats.set_value("aimd/jobdir/seen_restored", dupefilter.restore_unwritten(keys))

    def queue_store(self) -> SqliteQueueStore[Request]:
        return self.store

    @property
    def unserializable(self) -> int:
        """Requests the store could not write (kept in memory only), so far."""
        return self.store.unserializable

    def start(self, frontier: Frontier[Request]) -> None:
        """Use ``frontier`` (over ``self.store``) and start the checkpoint timer."""
        self.frontier = frontier
        self.stats.set_value("aimd/jobdir/hosts_requeued", frontier.restore(self.clock()))
        self._timer = create_looping_call(self._tick)
        self._timer.start(CHECKPOINT_INTERVAL, now=False)

    # -- requests ----------------------------------------------------------------

    def tick(self) -> None:
        """At each ``next_request``: a checkpoint once a request handed out may be
        done (cheap when none may: one length check)."""
        in_progress = requests_in_progress(self.crawler)
        if in_progress is not None and len(in_progress) < self.flights.stored:
            self.checkpoint()

    def handed_out(self, request: Request) -> None:
        """Its row stays until the engine is done with it."""
        self.flights.store(request)

    def wrote(self) -> None:
        """After a write: a checkpoint when the transaction has grown large."""
        if self.store.pending_writes >= CHECKPOINT_WRITES:
            self.checkpoint()

    def _tick(self) -> None:
        try:
            self.checkpoint()
        except StoreError as exc:
            self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        """Stop the crawl: going on without a working JOBDIR, a crash would lose
        requests. ``exc`` is a :class:`StoreError` or the dupefilter's error."""
        if self.failed:
            return
        self.failed = True
        logger.error("Stopping the crawl: the JOBDIR failed: %s", exc)
        self.stats.inc_value("aimd/jobdir/errors")
        stop_crawl(self.crawler, "jobdir_error")

    def checkpoint(self) -> None:
        """Commit, then write the seen keys (the order the protocol needs)."""
        self.commit()
        if isinstance(self.dupefilter, AimdDupeFilter):
            self.dupefilter.flush()

    def commit(self) -> None:
        """Forget the requests the engine is done with, save the hosts that changed,
        commit. The dupefilter calls this before it writes seen keys."""
        self._forget_done()
        self._save_hosts()
        self._save_unwritten()
        self.store.commit()
        self.stats.set_value("aimd/jobdir/unserializable", self.store.unserializable)
        if self.store.undecodable:
            self.stats.set_value("aimd/jobdir/undecodable", self.store.undecodable)

    def _save_unwritten(self) -> None:
        """Store the keys seen and not yet written with the rows of their requests
        (not again while they are the same). After a failed write of the keys
        file, those stored last stay: the failed keys are among them."""
        dupefilter = self.dupefilter
        if not isinstance(dupefilter, AimdDupeFilter) or dupefilter.failure is not None:
            return
        mark = dupefilter.unwritten_mark
        if mark != self._unwritten_mark:
            self.store.save_state(UNWRITTEN_KEYS, {"keys": keys_to_hex(dupefilter.unwritten)})
            self._unwritten_mark = mark

    def _forget_done(self) -> None:
        if not self.flights.stored or self.frontier is None:
            return
        in_progress = requests_in_progress(self.crawler)
        if in_progress is None:
            return
        done = [r for r in self.flights.stored_requests() if r not in in_progress]
        for request in done:
            cancelled = self.flights.cancelled(request)
            self.flights.unstore(request)
            if not cancelled:
                self.frontier.done(request)

    def close(self) -> None:
        if self._timer is not None and self._timer.running:
            self._timer.stop()
        self.commit()
        if isinstance(self.dupefilter, AimdDupeFilter):
            self.dupefilter.before_flush = None
            self.dupefilter.on_error = None
        self.stats.set_value("aimd/jobdir/queued_at_close", self.store.left)
        self.store.close()

    # -- hosts ---------------------------------------------------------------------

    def host_changed(self, host: str) -> None:
        self._dirty_hosts.add(host)

    def _save_hosts(self) -> None:
        if not self._dirty_hosts or self.frontier is None:
            return
        for host in self._dirty_hosts:
            state = shift_state(self.frontier.controller(host).state(), self._wall_offset())
            self.store.save_state(
                f"host:{host}", {"controller": state, "saved": time.time(), "times": POSIX_TIMES}
            )
        self._dirty_hosts.clear()

    def _wall_offset(self) -> float:
        """What moves a time on the crawl's clock to POSIX time, how times are saved
        for a later run (whose clock, monotonic, may have restarted)."""
        return time.time() - self.clock()

    def _wall(self, t: float) -> float:
        """A time on the crawl's clock as POSIX time."""
        return t + self._wall_offset()

    def _from_wall(self, t: float) -> float:
        """A saved POSIX time on this run's clock."""
        return t - self._wall_offset()

    def controller(self, host: str, cfg: ControllerConfig) -> HostController | None:
        """The host's controller as a previous run left it, or None."""
        saved = self.store.load_state(f"host:{host}")
        if saved is None:
            return None
        state = saved.get("controller")
        if not isinstance(state, dict):
            logger.warning("Ignoring the saved state of %s in %s: %r", host, self.store.path, saved)
            return None
        if saved.get("times") == POSIX_TIMES:
            state = shift_state(state, -self._wall_offset())
        else:
            # The previous format: ``paused_until`` alone is POSIX time (from_state
            # moves the memory's times with it), the rest on the saving run's clock.
            until = state.get("paused_until")
            if isinstance(until, (int, float)) and math.isfinite(until):
                state["paused_until"] = self._from_wall(until)
        try:
            controller = HostController.from_state(cfg, state)
        except ValueError as exc:
            logger.warning("Ignoring the saved state of %s in %s: %s", host, self.store.path, exc)
            return None
        self.stats.inc_value("aimd/jobdir/hosts_restored")
        return controller

    # -- robots.txt ------------------------------------------------------------------

    def save_robots(self, origin: str, robots: RobotsTxtMiddleware) -> None:
        """Save what the robots middleware now knows of ``origin``."""
        saved = robots.book.snapshot(origin)
        if saved is None:
            return  # rules without their text: fetched again on resume
        saved["fetched_at"] = self._wall(saved["fetched_at"])
        self.store.save_state(f"robots:{origin}", saved)

    def restore_robots(self, origin: str, robots: RobotsTxtMiddleware) -> None:
        """Give the robots middleware what a previous run knew of ``origin`` (once)."""
        if origin in self._robots_checked:
            return
        self._robots_checked.add(origin)
        saved = self.store.load_state(f"robots:{origin}")
        if saved is None:
            return
        fetched_at = saved.get("fetched_at")
        if isinstance(fetched_at, (int, float)):
            saved["fetched_at"] = self._from_wall(fetched_at)
        if robots.book.restore(origin, saved, self.clock()):
            self.stats.inc_value("aimd/jobdir/robots_restored")
