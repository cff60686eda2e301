"""``SqliteQueueStore``: the frontier's queues in an SQLite file, for a crash-safe JOBDIR.

Memory grows with hosts, not with queued items: per host, its id, the key of
its first queued item, a count and the items popped but not done. The items
themselves are rows numbered by arrival, so that new rows go to the end of the
table, with an index on (host, key) that finds a host's first rows in one
seek. (A table clustered by (host, key) writes each new row far from the last
one: pushes were two to three times slower.)

Durability: one connection in WAL mode with ``synchronous=NORMAL``. Every write
goes into an open transaction that ``commit()`` ends. NORMAL does not fsync
at a commit, only when the WAL is copied back into the database: a process
killed with SIGKILL loses nothing it committed, because the written pages are
in the operating system's cache, which outlives the process. A power cut or an
OS crash may lose the last commits but not the database's integrity.

An item popped keeps its row until ``done()``, and an item held with ``keep()``
gets one: a reopened store finds both queued again. An item that ``encode``
cannot serialize (it returns None) stays in memory: it is counted in
``unserializable`` and lost if the process dies. A row that ``decode`` cannot
read is skipped, counted in ``undecodable`` and left on disk.

A failed write or commit (a full disk: SQLite then rolls the transaction back
on its own) fails the store for good: every later write and commit raises
:class:`StoreError` without touching the file, so nothing written after the
failure is durable, not even in autocommit, and the file keeps the last
commit. ``fail()`` does the same on purpose. A crawl resumed from it after
space is freed finds every request it had committed.

The file is stamped (SQLite ``application_id``, the format version, and the
caller's ``stamp``, such as the spider's name). A file of another kind, format
or stamp, a corrupted one, or one in use by another process raises
:class:`StoreError` naming the path, never a silent fresh start. The lock is
exclusive: one crawl per file.

No Scrapy import: the caller gives the codec.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from scrapy_aimd.core.frontier import MemoryQueueStore, SortKey

__all__ = ["FORMAT", "SQLITE_MAGIC", "SqliteQueueStore", "StoreError"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: "AIMD" as the SQLite application_id: marks the file as a scrapy-aimd frontier.
APPLICATION_ID: Final = 0x41494D44
#: The schema version, as SQLite's user_version.
FORMAT: Final = 1
#: The first bytes of every SQLite database file.
SQLITE_MAGIC: Final = b"SQLite format 3\x00"
#: Seconds to wait for a lock another process holds before giving up.
_LOCK_TIMEOUT: Final = 1.0
#: SQLite's result code for "database or disk is full".
_SQLITE_FULL: Final = 13
#: SQLite's page cache, in KiB (its default is 2 MiB): pushes 25 % faster.
_CACHE_KIB: Final = 16 * 1024

_SCHEMA: Final = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE hosts (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE queue (
    k2 INTEGER PRIMARY KEY, host INTEGER NOT NULL, k0 INTEGER NOT NULL, k1 INTEGER NOT NULL,
    item BLOB NOT NULL
);
CREATE INDEX queue_order ON queue (host, k0, k1, k2);
CREATE TABLE kept (
    k2 INTEGER PRIMARY KEY, host INTEGER NOT NULL, k0 INTEGER NOT NULL, k1 INTEGER NOT NULL,
    item BLOB NOT NULL
);
CREATE TABLE states (name TEXT PRIMARY KEY, state TEXT NOT NULL);
"""


class StoreError(RuntimeError):
    """The frontier file cannot be used as it is."""


def _is_new(path: Path) -> bool:
    """True if the file does not exist or is empty; :class:`StoreError` if it is
    not an SQLite file or cannot be read."""
    try:
        if not path.exists() or path.stat().st_size == 0:
            return True
        with path.open("rb") as file:
            magic = file.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise StoreError(f"{path} cannot be read: {exc}") from exc
    if magic != SQLITE_MAGIC:
        raise StoreError(f"{path} is not a scrapy-aimd frontier (not an SQLite file)")
    return False


def _connect(path: Path) -> sqlite3.Connection:
    try:
        return sqlite3.connect(path, isolation_level=None, timeout=_LOCK_TIMEOUT)
    except sqlite3.Error as exc:
        raise StoreError(f"{path} cannot be opened: {exc}") from exc


@contextmanager
def _named_errors(path: Path) -> Iterator[None]:
    """SQLite's errors as :class:`StoreError`, saying what they mean for the file."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise StoreError(f"{path} is in use by another crawl ({exc})") from exc
        raise StoreError(f"{path} cannot be used as a scrapy-aimd frontier: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is corrupted: {exc}") from exc


def _check_kind(conn: sqlite3.Connection, path: Path) -> None:
    """A scrapy-aimd frontier of this format (read from the header: cheap)."""
    application_id = conn.execute("PRAGMA application_id").fetchone()[0]
    if application_id != APPLICATION_ID:
        raise StoreError(
            f"{path} is not a scrapy-aimd frontier "
            f"(an SQLite database with application_id {application_id:#x})"
        )
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version != FORMAT:
        raise StoreError(
            f"{path} is a scrapy-aimd frontier of format {version}; this version "
            f"reads format {FORMAT}. Resume with the scrapy-aimd that wrote it, "
            f"or start a new JOBDIR."
        )


def _check_contents(conn: sqlite3.Connection, path: Path, stamp: dict[str, str]) -> None:
    """Whole, and stamped by the same crawl."""
    problems = conn.execute("PRAGMA quick_check").fetchall()
    if problems != [("ok",)]:
        detail = "; ".join(str(row[0]) for row in problems[:3])
        raise StoreError(f"{path} is corrupted: {detail}")
    meta = dict(conn.execute("SELECT name, value FROM meta"))
    for name, value in stamp.items():
        stored = meta.get(f"stamp:{name}")
        if stored != value:
            raise StoreError(
                f"{path} belongs to another crawl ({name} {stored!r}, this crawl: "
                f"{value!r}). Resume it with the same {name}, or use a new JOBDIR."
            )


@dataclass(slots=True)
class _Queue:
    """What memory holds of one host's queue."""

    id: int
    count: int = 0
    head: SortKey | None = None
    #: Arrival numbers (k2) of rows popped and not done: still in the table.
    taken: set[int] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class _Row:
    """Where a popped or kept item's row is."""

    queue: _Queue
    key: SortKey
    kept: bool


class SqliteQueueStore(Generic[T]):
    """A :class:`~scrapy_aimd.core.frontier.QueueStore` in one SQLite file."""

    def __init__(
        self,
        path: str | Path,
        *,
        encode: Callable[[T], bytes | None],
        decode: Callable[[bytes], T],
        stamp: Mapping[str, str] | None = None,
    ) -> None:
        self.path = Path(path)
        self._encode = encode
        self._decode = decode
        self._queues: dict[str, _Queue] = {}
        self._rows: dict[T, _Row] = {}
        self._memory: MemoryQueueStore[T] = MemoryQueueStore()
        self._size = 0
        self._next_arrival = 0
        self._saved_arrival = 0
        self._in_transaction = False
        #: Why the store stopped writing (see ``fail()``), or None.
        self.failure: str | None = None
        #: Writes since the last commit.
        self.pending_writes = 0
        #: Items kept in memory because ``encode`` could not serialize them.
        self.unserializable = 0
        #: Rows that ``decode`` could not read (left on disk).
        self.undecodable = 0
        #: True if the file did not exist or was empty.
        self.created = False
        #: Items queued when the file was opened (popped or kept ones included).
        self.restored = 0
        self._conn = self._connect()
        self._prepare(dict(stamp or {}))

    # -- opening -------------------------------------------------------------------

    @classmethod
    def check(cls, path: str | Path, *, stamp: Mapping[str, str] | None = None) -> None:
        """Raise :class:`StoreError` where opening ``path`` would (another kind,
        format or stamp, a corrupted file, one in use), so that a caller can
        refuse the file before anything else starts. A missing or empty file is
        fine. No lock is kept and nothing is written but what any SQLite
        connection does as it closes: it folds a write-ahead log that a killed
        crawl left into the file."""
        path = Path(path)
        if _is_new(path):
            return
        conn = _connect(path)
        try:
            with _named_errors(path):
                _check_kind(conn, path)
                _check_contents(conn, path, dict(stamp or {}))
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        self.created = _is_new(self.path)
        return _connect(self.path)

    def _prepare(self, stamp: dict[str, str]) -> None:
        """Check or create the schema, take the lock, load what memory holds."""
        try:
            with _named_errors(self.path):
                self._set_up(self._conn, stamp)
        except BaseException:
            self._conn.close()
            raise

    def _set_up(self, conn: sqlite3.Connection, stamp: dict[str, str]) -> None:
        if not self.created:
            _check_kind(conn, self.path)
        conn.execute("PRAGMA locking_mode=EXCLUSIVE")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
        conn.execute("BEGIN IMMEDIATE")  # takes the exclusive lock now
        self._in_transaction = True
        if self.created:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version={FORMAT}")
            conn.executemany(
                "INSERT INTO meta VALUES (?, ?)",
                [("next_arrival", "0"), *((f"stamp:{k}", v) for k, v in stamp.items())],
            )
        else:
            _check_contents(conn, self.path, stamp)
            self._load(conn)
        self.commit()

    def _load(self, conn: sqlite3.Connection) -> None:
        """Queue the kept rows again, then read every host's count and first key."""
        conn.execute("INSERT INTO queue SELECT k2, host, k0, k1, item FROM kept")
        conn.execute("DELETE FROM kept")
        names = dict(conn.execute("SELECT id, name FROM hosts"))
        for host_id, name in names.items():
            self._queues[name] = _Queue(host_id)
        for host_id, count in conn.execute("SELECT host, count(*) FROM queue GROUP BY host"):
            queue = self._queues[names[host_id]]
            queue.count = count
            queue.head = self._first_key(host_id)
            self._size += count
        row = conn.execute("SELECT value FROM meta WHERE name = 'next_arrival'").fetchone()
        top = conn.execute("SELECT max(k2) FROM queue").fetchone()[0]
        self._next_arrival = max(int(row[0]) if row else 0, top + 1 if top is not None else 0)
        self._saved_arrival = self._next_arrival
        self.restored = self._size

    def _first_key(self, host_id: int) -> SortKey | None:
        row = self._conn.execute(
            "SELECT k0, k1, k2 FROM queue WHERE host = ? ORDER BY k0, k1, k2 LIMIT 1",
            (host_id,),
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    # -- the queues ------------------------------------------------------------------

    def push(self, host: str, key: SortKey, item: T) -> None:
        data = self._encode(item)
        if data is None:
            self.unserializable += 1
            self._memory.push(host, key, item)
            return
        queue = self._queue(host)
        try:
            self._write(
                "INSERT INTO queue VALUES (?, ?, ?, ?, ?)", (key[2], queue.id, key[0], key[1], data)
            )
        except OverflowError:  # a priority or depth beyond 64 bits
            self.unserializable += 1
            self._memory.push(host, key, item)
            return
        self._forget(item)  # its older row, if it had one, now that the new one is written
        queue.count += 1
        self._size += 1
        if queue.head is None or key < queue.head:
            queue.head = key
        if key[2] >= self._next_arrival:
            self._next_arrival = key[2] + 1

    def pop(self, host: str) -> T | None:
        queue = self._queues.get(host)
        memory_head = self._memory.head(host)
        if (
            queue is None
            or queue.head is None
            or (memory_head is not None and memory_head < queue.head)
        ):
            return self._memory.pop(host)
        taken = queue.taken
        while queue.head is not None:
            # Keys first: the rows taken (in flight, or unreadable) are skipped
            # without reading their items.
            rows = self._read(
                "SELECT k0, k1, k2 FROM queue WHERE host = ? ORDER BY k0, k1, k2 LIMIT ?",
                (queue.id, len(taken) + 2),
            )
            found = [row for row in rows if row[2] not in taken]
            if not found:  # pragma: no cover - the count said otherwise
                raise StoreError(f"{self.path}: the queue of {host} is shorter than its count")
            k0, k1, k2 = found[0]
            taken.add(k2)
            queue.count -= 1
            self._size -= 1
            queue.head = (found[1][0], found[1][1], found[1][2]) if len(found) > 1 else None
            ((data,),) = self._read("SELECT item FROM queue WHERE k2 = ?", (k2,))
            try:
                item = self._decode(data)
            except Exception:
                self.undecodable += 1
                logger.exception(
                    "Skipping a request in %s that cannot be read (host %s); it stays on disk",
                    self.path,
                    host,
                )
                continue
            self._rows[item] = _Row(queue, (k0, k1, k2), kept=False)
            return item
        return None

    def keep(self, host: str, key: SortKey, item: T) -> None:
        if item in self._rows:
            return
        data = self._encode(item)
        if data is None:  # the caller holds it; it cannot outlive the process
            return
        queue = self._queue(host)
        try:
            self._write(
                "INSERT INTO kept VALUES (?, ?, ?, ?, ?)", (key[2], queue.id, key[0], key[1], data)
            )
        except OverflowError:
            return
        self._rows[item] = _Row(queue, key, kept=True)
        if key[2] >= self._next_arrival:
            self._next_arrival = key[2] + 1

    def done(self, item: T) -> None:
        self._forget(item)

    def _forget(self, item: T) -> None:
        """Delete the row of a popped or kept item, if it has one."""
        row = self._rows.pop(item, None)
        if row is None:
            return
        if row.kept:
            self._write("DELETE FROM kept WHERE k2 = ?", (row.key[2],))
            return
        self._write("DELETE FROM queue WHERE k2 = ?", (row.key[2],))
        row.queue.taken.discard(row.key[2])

    def head(self, host: str) -> SortKey | None:
        queue = self._queues.get(host)
        mine = queue.head if queue is not None else None
        other = self._memory.head(host)
        if mine is None or (other is not None and other < mine):
            return other
        return mine

    def count(self, host: str) -> int:
        queue = self._queues.get(host)
        return (queue.count if queue is not None else 0) + self._memory.count(host)

    def __len__(self) -> int:
        return self._size + len(self._memory)

    def queued_hosts(self) -> Iterator[str]:
        hosts = {host for host, queue in self._queues.items() if queue.count}
        hosts.update(self._memory.queued_hosts())
        return iter(sorted(hosts))

    def next_arrival(self) -> int:
        return max(self._next_arrival, self._memory.next_arrival())

    @property
    def held(self) -> int:
        """Items popped or kept and not done."""
        return len(self._rows)

    @property
    def left(self) -> int:
        """Items the file keeps for the next run: queued, and popped or kept and
        not done (what a resumed crawl restores; not those held in memory)."""
        return self._size + len(self._rows)

    # -- host bookkeeping ----------------------------------------------------------------

    def save_state(self, name: str, state: Mapping[str, Any]) -> None:
        self._write("INSERT OR REPLACE INTO states VALUES (?, ?)", (name, json.dumps(state)))

    def load_state(self, name: str) -> dict[str, Any] | None:
        rows = self._read("SELECT state FROM states WHERE name = ?", (name,))
        if not rows:
            return None
        try:
            state = json.loads(rows[0][0])
        except ValueError as exc:
            raise StoreError(f"{self.path} is corrupted: the state of {name!r}: {exc}") from exc
        if not isinstance(state, dict):
            raise StoreError(f"{self.path} is corrupted: the state of {name!r} is not a mapping")
        return state

    # -- transactions ---------------------------------------------------------------------

    def commit(self) -> None:
        """Make every write so far durable; :class:`StoreError` if the store failed."""
        self._check_usable()
        if not self._in_transaction:
            return
        try:
            if self._next_arrival != self._saved_arrival:
                self._conn.execute(
                    "UPDATE meta SET value = ? WHERE name = 'next_arrival'",
                    (str(self._next_arrival),),
                )
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._failed("cannot commit", exc) from exc
        self._saved_arrival = self._next_arrival
        self._in_transaction = False
        self.pending_writes = 0

    def fail(self, reason: str = "stopped") -> None:
        """Give up the open transaction and refuse every later write and commit:
        the file keeps what the last commit made durable."""
        if self.failure is not None:
            return
        self.failure = reason
        self._in_transaction = False
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error:  # rolled back by SQLite already, or closed
            logger.debug("ROLLBACK failed in %s", self.path, exc_info=True)

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def close(self) -> None:
        """Commit and close; a failed store only closes (nothing more is written)."""
        try:
            if self.failure is None:
                self.commit()
        finally:
            self._conn.close()

    # -- internals --------------------------------------------------------------------------

    def _queue(self, host: str) -> _Queue:
        queue = self._queues.get(host)
        if queue is None:
            cursor = self._write("INSERT INTO hosts (name) VALUES (?)", (host,))
            host_id = cursor.lastrowid
            assert host_id is not None
            queue = self._queues[host] = _Queue(host_id)
        return queue

    def _write(self, sql: str, parameters: tuple[Any, ...]) -> sqlite3.Cursor:
        self._check_usable()
        try:
            if not self._in_transaction:
                self._conn.execute("BEGIN")
                self._in_transaction = True
            elif not self._conn.in_transaction:
                # Rolled back behind our back: a write now would be durable on its own.
                raise sqlite3.OperationalError("the open transaction was rolled back")
            self.pending_writes += 1
            return self._conn.execute(sql, parameters)
        except sqlite3.Error as exc:
            raise self._failed("cannot write", exc) from exc

    def _read(self, sql: str, parameters: tuple[Any, ...]) -> list[Any]:
        try:
            return self._conn.execute(sql, parameters).fetchall()
        except sqlite3.Error as exc:
            # A read can spill the cache to disk and fail as a write does.
            raise self._failed("cannot read", exc) from exc

    def _failed(self, what: str, exc: sqlite3.Error) -> StoreError:
        """Fail the store after ``exc``; the error to raise, which says so."""
        full = getattr(exc, "sqlite_errorcode", 0) & 0xFF == _SQLITE_FULL
        if full or "disk is full" in str(exc):  # sqlite_errorcode: Python 3.11+
            cause = (
                f"the disk is full ({exc}). Nothing written since the last commit is "
                f"kept; free some space and resume the crawl with the same JOBDIR"
            )
        else:
            cause = str(exc)
        self.fail(f"{what}: {cause}")
        return StoreError(f"{self.path}: {what}: {cause}")

    def _check_usable(self) -> None:
        if self.failure is not None:
            raise StoreError(f"{self.path}: nothing more is written after: {self.failure}")
