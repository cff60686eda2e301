"""AimdDupeFilter (for ``DUPEFILTER_CLASS``): one fetch per canonical page.

It keeps 64-bit request keys (see :mod:`scrapy_aimd.fingerprint`) in a
:class:`~scrapy_aimd.core.dedup.SeenSet`, about 12 bytes a request at 10 million where Scrapy's
RFPDupeFilter spends about 95.

Two differences from RFPDupeFilter:

* A redirected request whose key equals that of a URL earlier in its redirect
  chain is not filtered (scrapy #1225): with a trailing-slash or tracking
  parameter redirect (``/a/`` to ``/a``) the source's key was spent on a
  response that only pointed elsewhere, and filtering the target would lose
  the page. A URL that the chain already requested is still filtered, so
  redirect loops end.
* With ``JOBDIR``, keys are appended to ``JOBDIR/aimd-seen-keys.bin`` as they
  are added, in checksummed batches written within a second (or every
  4096 keys), so a killed crawl keeps what it had seen. The file names the
  rules its keys were made under: a file from other canonicalization rules,
  or a corrupted one, stops the crawl with an error that names the path.
  A key must not be on disk before its request is: with a ``before_flush``
  hook (set by ``AimdScheduler`` with a JOBDIR, which commits its frontier),
  each batch is written only after the hook, and a full batch is written
  before the next key joins the buffer, since that key's request is not
  stored yet (see :mod:`scrapy_aimd.jobdir`).

Writes are recoverable. Each batch is one append at the end of the last whole
batch; a write that fails (``No space left on device``) is cut off again at
once, and a batch cut short by a crash is cut off when the file is opened, so
the file is always whole batches and a batch is never written twice. (A file
in which a torn batch is followed by the same batch written again, as earlier
versions left it, is read past the torn copy.) After a failed write, or a
``before_flush`` that raised (the frontier could not be committed), the
dupefilter writes nothing more: the keys it holds stay in memory, and their
requests are fetched again after a resume, never lost. It calls ``on_error``
once with a :class:`SeenKeysFileError` that names the file and says when the
disk is full (or with what ``before_flush`` raised): the JOBDIR adapter sets it
to stop the crawl and log why. Without ``on_error`` it logs one ERROR and
closes the spider itself (reason ``jobdir_error``).

Stats: ``dupefilter/filtered`` (as RFPDupeFilter), ``aimd/dupefilter/redirect_same_key``
(redirected requests let through), ``aimd/dupefilter/loaded`` (keys read from
JOBDIR), ``aimd/dupefilter/keys`` (keys held at close), ``aimd/dupefilter/write_errors``.

Each filtered request also counts by kind, as ``aimd/dupefilter/filtered/KIND``
(:func:`kind_stat`): the canonicalizer's stages that changed its URL
(:meth:`~scrapy_aimd.core.canonical.Canonicalizer.changed_stages`), under each of
them, or ``exact`` when its URL needed no change. The kind is what this URL
needed, not how it differs from the first URL of its page: only the keys are
kept. With another fingerprinter the kinds are unknown and only the total is
counted. The hosts with the most duplicates are counted in bounded memory
(:class:`TopCounts`), for the report: never as stats, which a crawl of a
million hosts would fill.
"""

from __future__ import annotations

import errno
import logging
import sys
import zlib
from array import array
from functools import partial
from hashlib import blake2b
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, Protocol

from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.job import job_dir
from scrapy.utils.request import referer_str

from scrapy_aimd._compat import call_later_if_running
from scrapy_aimd.core.canonical import STAGES
from scrapy_aimd.core.dedup import SeenSet
from scrapy_aimd.crawl import request_host
from scrapy_aimd.events import DuplicateHosts
from scrapy_aimd.fingerprint import (
    AimdRequestFingerprinter,
    key_at_url_function,
    redirected_to_same_key,
    request_key_function,
    rules_id_of,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

__all__ = [
    "DUPLICATE_KINDS",
    "EXACT",
    "SEEN_KEYS_FILENAME",
    "AimdDupeFilter",
    "SeenKeysFileError",
    "TopCounts",
    "kind_stat",
]

logger = logging.getLogger(__name__)

SEEN_KEYS_FILENAME: Final = "aimd-seen-keys.bin"
_FORMAT: Final = b"scrapy-aimd seen-keys 1"
_MAGIC: Final = b"scrapy-aimd seen-keys "
#: Keys buffered before a batch is written even if the flush timer has not fired.
BATCH_KEYS: Final = 4096
#: Seconds from the first buffered key to its batch being written.
FLUSH_DELAY: Final = 1.0
_COUNT_BYTES: Final = 4
_CRC_BYTES: Final = 4

#: The kind of a duplicate whose URL needed no change.
EXACT: Final = "exact"
#: Every kind of duplicate: exact, then the canonicalizer's stages in order.
DUPLICATE_KINDS: Final = (EXACT, *STAGES)
#: Hosts whose duplicates are counted exactly; beyond twice as many, see TopCounts.
TOP_HOSTS: Final = 1000


def kind_stat(kind: str) -> str:
    """The stat of the duplicates of one kind: ``aimd/dupefilter/filtered/KIND``."""
    return f"aimd/dupefilter/filtered/{kind}"


class TopCounts:
    """Counts of the keys counted most, in bounded memory (at most 2 x ``keep``).

    Exact while at most 2 x ``keep`` keys are counted. Beyond, the Space-Saving
    scheme (Metwally et al.) in batches: when 2 x ``keep`` keys are held, the
    ``keep`` largest stay, and a key that comes later starts at ``error`` + 1,
    where ``error`` is the largest count dropped so far, and keeps that as its
    own margin (``errors``). So a count is never too low and at most its own
    margin too high (a key held since before the first drop is exact), and a
    key that is not held was counted at most ``error`` times. Amortized
    O(log keep) a new key. How many keys were counted is kept exactly, as a
    64-bit hash each (about 12 bytes a key, in a :class:`SeenSet`).
    """

    def __init__(self, keep: int = TOP_HOSTS) -> None:
        self.keep = keep
        self.counts: dict[str, int] = {}
        #: How much too high each held count may be, where it may (its ``error``
        #: when it came).
        self.errors: dict[str, int] = {}
        #: The most a key that is not held was counted; 0 while the counts are exact.
        self.error = 0
        self._keys = SeenSet()

    def __len__(self) -> int:
        return len(self.counts)

    @property
    def distinct(self) -> int:
        """How many keys were counted (held or not)."""
        return len(self._keys)

    def add(self, key: str) -> None:
        counts = self.counts
        if key in counts:
            counts[key] += 1
            return
        self._keys.add(_key_hash(key))
        if len(counts) >= 2 * self.keep:
            ranked = sorted(counts.items(), key=lambda kv: kv[1], reverse=True)
            self.error = max(self.error, ranked[self.keep][1])
            counts = self.counts = dict(ranked[: self.keep])
            self.errors = {k: e for k, e in self.errors.items() if k in counts}
        counts[key] = self.error + 1
        if self.error:
            self.errors[key] = self.error

    def top(self, n: int) -> list[tuple[str, int]]:
        """The ``n`` largest counts, largest first (ties by key)."""
        return sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    def tops(self, n: int) -> DuplicateHosts:
        """The ``n`` largest, with the bounds they are known within (see
        :class:`~scrapy_aimd.events.DuplicateHosts`)."""
        top = self.top(n + 1)
        counts = dict(top[:n])
        return DuplicateHosts(
            counts,
            {key: self.errors[key] for key in counts if key in self.errors},
            max(self.error, top[n][1] if len(top) > n else 0),
            self.distinct,
        )


def _key_hash(key: str) -> int:
    return int.from_bytes(
        blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little"
    )


class SeenKeysFileError(RuntimeError):
    """The JOBDIR file of seen keys cannot be used as it is."""


class _Cancellable(Protocol):
    def cancel(self) -> None: ...


def _header(rules_id: str) -> bytes:
    digest = blake2b(rules_id.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return b"%s rules=%s\n" % (_FORMAT, digest.encode())


def _little_endian(keys: array[int]) -> bytes:
    """``keys`` as u64 LE, whatever the machine's byte order."""
    if sys.byteorder != "little":
        keys = array("Q", keys)
        keys.byteswap()
    return keys.tobytes()


def _from_little_endian(keys: array[int]) -> array[int]:
    """``keys`` read as u64 LE, put in the machine's byte order (in place)."""
    if sys.byteorder != "little":
        keys.byteswap()
    return keys


def encode_batch(keys: array[int]) -> bytes:
    """count (u32 LE), keys (u64 LE), CRC-32 of both (u32 LE)."""
    body = len(keys).to_bytes(_COUNT_BYTES, "little") + _little_endian(keys)
    return body + zlib.crc32(body).to_bytes(_CRC_BYTES, "little")


def keys_to_hex(keys: array[int]) -> str:
    """``keys`` as text (u64 LE, hex), for a JSON state."""
    return _little_endian(keys).hex()


def keys_from_hex(text: str) -> array[int]:
    """The keys of :func:`keys_to_hex`; ``ValueError`` if ``text`` is not such."""
    data = bytes.fromhex(text)
    if len(data) % 8:
        raise ValueError(f"{len(data)} bytes is not a whole number of keys")
    return _from_little_endian(array("Q", data))


def read_seen_keys(path: Path, rules_id: str) -> tuple[array[int], int]:
    """The keys in ``path`` and the length of its intact part.

    A batch cut short at the end (a crawl killed while writing) is left out, as
    is a header cut short (the disk filled as the file was made: length 0);
    anything else that does not check out raises :class:`SeenKeysFileError`.
    """
    data = path.read_bytes()
    header = _header(rules_id)
    if len(data) < len(header) and header.startswith(data):
        return array("Q"), 0
    if not data.startswith(header):
        first_line = data.split(b"\n", 1)[0]
        if first_line.startswith(_MAGIC):
            raise SeenKeysFileError(
                f"{path} holds request keys made under other rules "
                f"({first_line.decode('ascii', 'replace')!r}, this crawl: "
                f"{header.strip().decode()!r}): the canonicalization settings "
                f"(AIMD_CANONICAL_*, AIMD_STRIP_PARAMS, AIMD_KEEP_PARAMS), the "
                f"fingerprinter or scrapy-aimd's rules changed since it was written. "
                f"Resume with the old settings, or start a new JOBDIR."
            )
        raise SeenKeysFileError(f"{path} is not a scrapy-aimd seen-keys file (corrupted?)")
    keys = array("Q")
    position = len(header)
    while position < len(data):
        count_end = position + _COUNT_BYTES
        count = int.from_bytes(data[position:count_end], "little")
        if count == 0 or count > BATCH_KEYS:
            if count_end > len(data):
                break  # cut short inside the count
            raise SeenKeysFileError(f"{path} is corrupted: bad batch size at byte {position}")
        end = count_end + 8 * count + _CRC_BYTES
        if end > len(data):
            break  # the last batch was cut short
        crc = int.from_bytes(data[end - _CRC_BYTES : end], "little")
        if zlib.crc32(data[position : end - _CRC_BYTES]) != crc:
            again = _written_again(data, position)
            if again is None:
                raise SeenKeysFileError(
                    f"{path} is corrupted: checksum mismatch at byte {position}"
                )
            logger.warning(
                "Skipping %d bytes at byte %d of %s: a batch cut short by a failed write, "
                "written again after it.",
                again - position,
                position,
                path,
            )
            position = again
            continue
        keys.frombytes(data[count_end : end - _CRC_BYTES])
        position = end
    _from_little_endian(keys)
    if position < len(data):
        logger.warning(
            "Ignoring the last %d bytes of %s: a batch cut short (the crawl was killed while "
            "writing it); its requests may be fetched again.",
            len(data) - position,
            path,
        )
    return keys, position


def _written_again(data: bytes, position: int) -> int | None:
    """Where the batch torn at ``position`` starts again, if it does: a write
    that failed part way, then the whole batch appended after it (as earlier
    versions did). The torn bytes are a prefix of the whole batch that
    follows them, and that batch checks out."""
    probe = data[position : position + _COUNT_BYTES]  # the torn copy holds its count
    whole_length = _COUNT_BYTES + 8 * int.from_bytes(probe, "little") + _CRC_BYTES
    start = data.find(probe, position + 1, position + whole_length)
    while start != -1:
        whole = data[start : start + whole_length]
        if (
            len(whole) == whole_length
            and whole.startswith(data[position:start])
            and zlib.crc32(whole[:-_CRC_BYTES]) == int.from_bytes(whole[-_CRC_BYTES:], "little")
        ):
            return start
        start = data.find(probe, start + 1, position + whole_length)
    return None


class AimdDupeFilter:
    """Filters requests whose key was seen; see the module docstring."""

    def __init__(
        self,
        path: str | None = None,
        debug: bool = False,
        *,
        fingerprinter: object | None = None,
        stats: StatsCollector | None = None,
        call_later: Callable[[float, Callable[[], None]], _Cancellable | None] | None = None,
        crawler: Crawler | None = None,
    ) -> None:
        self.fingerprinter = fingerprinter or AimdRequestFingerprinter()
        self._request_key = request_key_function(self.fingerprinter)
        self._key_at = key_at_url_function(self.fingerprinter)
        self.rules_id = rules_id_of(self.fingerprinter)
        self.debug = debug
        self.logdupes = True
        self._stats = stats
        self._call_later = call_later
        self._seen = SeenSet()
        fingerprinter = self.fingerprinter
        #: Which stages changed a URL; None when another fingerprinter makes the keys.
        self._changed_stages = (
            fingerprinter.canonicalizer.changed_stages
            if isinstance(fingerprinter, AimdRequestFingerprinter)
            else None
        )
        #: The duplicates per host (the controllers' host keys), for the report.
        self.hosts = TopCounts()
        self._crawler = crawler
        self._file: IO[bytes] | None = None
        #: The end of the last whole batch: where the next one is written.
        self._end = 0
        self._pending = array("Q")
        self._flush_timer: _Cancellable | None = None
        #: Called before a batch of keys is written: makes their requests durable.
        self.before_flush: Callable[[], None] | None = None
        #: Called once with the exception when keys can no longer be written.
        self.on_error: Callable[[BaseException], None] | None = None
        #: Why nothing more is written, or None.
        self.failure: BaseException | None = None
        self.path = Path(path, SEEN_KEYS_FILENAME) if path else None
        if self.path is not None:
            self._open_file(self.path)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> AimdDupeFilter:
        return cls(
            job_dir(crawler.settings),
            crawler.settings.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=crawler.request_fingerprinter,
            stats=crawler.stats,
            call_later=call_later_if_running,
            crawler=crawler,
        )

    def _open_file(self, path: Path) -> None:
        """Load the keys and cut off a torn tail, so that appends go after whole batches."""
        try:
            if path.exists() and path.stat().st_size:
                keys, intact = read_seen_keys(path, self.rules_id)
                self._seen = SeenSet(expected=len(keys))
                self._seen.update(keys)
                self._file = path.open("r+b", buffering=0)
                self._inc_stat("aimd/dupefilter/loaded", len(self._seen))
            else:
                self._file = path.open("wb", buffering=0)
                intact = 0
            if intact == 0:
                intact = self._append(_header(self.rules_id), at=0)
            self._file.truncate(intact)
        except OSError as exc:
            if self._file is not None:
                self._file.close()
                self._file = None
            raise SeenKeysFileError(f"{path} cannot be written: {exc}") from exc
        self._end = intact

    def _append(self, data: bytes, at: int) -> int:
        """Write ``data`` at ``at`` (each write may be short); the new end."""
        file = self._file
        assert file is not None
        file.seek(at)
        view = memoryview(data)
        while view:
            written = file.write(view)
            if not written:  # pragma: no cover - a raw file raises instead
                raise OSError(f"no progress writing {self.path}")
            view = view[written:]
        return at + len(data)

    def __len__(self) -> int:
        return len(self._seen)

    def open(self) -> None:
        pass

    def request_seen(self, request: Request) -> bool:
        key = self._request_key(request)
        if self._seen.add(key):
            if self._file is not None:
                self._buffer(key)
            return False
        if redirected_to_same_key(request, key, partial(self._key_at, request)):
            self._inc_stat("aimd/dupefilter/redirect_same_key")
            return False
        return True

    @property
    def unwritten(self) -> array[int]:
        """The keys seen and not yet written to the file (do not change it)."""
        return self._pending

    @property
    def unwritten_mark(self) -> tuple[int, int]:
        """Changes whenever ``unwritten`` does: the file's end, and how many wait."""
        return self._end, len(self._pending)

    def restore_unwritten(self, keys: array[int]) -> int:
        """Mark ``keys`` seen, and write those this filter did not know with the
        next batch: keys that a killed crawl had committed with their requests
        (``scrapy_aimd.jobdir``) but not yet written. How many were new."""
        new = 0
        for key in keys:
            if self._seen.add(key):
                new += 1
                if self._file is not None:
                    self._buffer(key)
        return new

    def _buffer(self, key: int) -> None:
        if len(self._pending) >= BATCH_KEYS:
            self.flush()  # before this key: its request is not stored yet
        if self.failure is not None:
            return  # in memory only from now on
        self._pending.append(key)
        if self.before_flush is None and (
            len(self._pending) >= BATCH_KEYS or self._call_later is None
        ):
            self.flush()  # no frontier to wait for
        elif self._flush_timer is None and self._call_later is not None:
            self._flush_timer = self._call_later(FLUSH_DELAY, self._flush_on_timer)
            if self._flush_timer is None:
                self.flush()  # nothing runs timers here (no reactor, no loop): write now

    def flush(self) -> None:
        """Write the buffered keys as one batch, through to the OS, after
        ``before_flush`` has made their requests durable.

        An ``OSError`` while writing, or any exception from ``before_flush``,
        ends the writes for good (see the module docstring): it is reported
        through ``on_error`` and not raised, so that neither the flush timer
        nor ``close()`` dies of it."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if self._file is None or not self._pending or self.failure is not None:
            return
        try:
            if self.before_flush is not None:
                self.before_flush()
            self._end = self._append(encode_batch(self._pending), at=self._end)
        except Exception as exc:
            self._stop_writing(exc)
            return
        del self._pending[:]

    def _flush_on_timer(self) -> None:
        self._flush_timer = None
        self.flush()

    def _stop_writing(self, exc: Exception) -> None:
        """Cut off what the failed write left, write nothing more, report once:
        to ``on_error`` (which logs it), or as an ERROR and a closed spider."""
        unwritten = len(self._pending)
        del self._pending[:]
        if self._file is not None:
            try:
                self._file.truncate(self._end)  # frees space: works on a full disk
            except OSError:
                logger.debug("Cannot truncate %s", self.path, exc_info=True)
        error: Exception = exc
        if isinstance(exc, OSError):
            full = ": the disk is full" if exc.errno == errno.ENOSPC else ""
            error = SeenKeysFileError(
                f"{self.path} cannot be written{full} ({exc}); the {unwritten} keys not "
                f"written stay in memory, and their requests are fetched again after a resume"
            )
            error.__cause__ = exc
        self.failure = error
        self._inc_stat("aimd/dupefilter/write_errors")
        if self.on_error is not None:
            self.on_error(error)
            return
        if error is exc:  # from before_flush: the frontier did not commit
            logger.error(
                "Stopping the crawl: the keys for %s are not written: the frontier did not "
                "commit (%s: %s)",
                self.path,
                type(exc).__name__,
                exc,
            )
        else:
            logger.error("Stopping the crawl: %s", error)
        engine = self._crawler.engine if self._crawler is not None else None
        if engine is not None and engine.spider is not None:
            deferred_from_coro(engine.close_spider_async(reason="jobdir_error"))

    def close(self, reason: str) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._stats is not None:
            self._stats.set_value("aimd/dupefilter/keys", len(self._seen))

    def log(self, request: Request, spider: Spider) -> None:
        """Log a filtered request as RFPDupeFilter does, and count it."""
        if self.debug:
            msg = "Filtered duplicate request: %(request)s (referer: %(referer)s)"
            args: dict[str, Any] = {"request": request, "referer": referer_str(request)}
            logger.debug(msg, args, extra={"spider": spider})
        elif self.logdupes:
            msg = (
                "Filtered duplicate request: %(request)s"
                " - no more duplicates will be shown"
                " (see DUPEFILTER_DEBUG to show all duplicates)"
            )
            logger.debug(msg, {"request": request}, extra={"spider": spider})
            self.logdupes = False
        stats = self._stats or spider.crawler.stats
        if stats is not None:
            stats.inc_value("dupefilter/filtered")
            for kind in self.duplicate_kinds(request):
                stats.inc_value(kind_stat(kind))
        self.hosts.add(request_host(request))

    def duplicate_kinds(self, request: Request) -> tuple[str, ...]:
        """What made ``request`` a duplicate: the stages that changed its URL,
        or ``("exact",)``; () when another fingerprinter makes the keys."""
        if self._changed_stages is None:
            return ()
        if request.meta.get("verbatim_url"):
            return (EXACT,)
        return self._changed_stages(request.url) or (EXACT,)

    def duplicate_hosts(self, n: int) -> DuplicateHosts:
        """The ``n`` hosts with the most duplicates, with the bounds of their counts,
        and how many hosts had any."""
        return self.hosts.tops(n)

    def _inc_stat(self, name: str, count: int = 1) -> None:
        if self._stats is not None:
            self._stats.inc_value(name, count)
