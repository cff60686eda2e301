"""``AIMD_EVENTS_FILE``: one JSON line per controller event, for the crawl report.

The first line is ``{"event": "open", "t": 0, "wall": <POSIX time>, ...}``;
every later line has ``t`` (seconds since open), ``event`` and, for host
events, ``host``. :data:`EVENTS` is the schema: each event's name and its
fields (docs/signals.rst shows the same table). A reader ignores fields and
events it does not know. Lines are buffered and flushed about once a second,
so a killed crawl loses at most the last second.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from scrapy_aimd.host_totals import as_integer
from scrapy_aimd.settings import AimdSettingsError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

FLUSH_EVERY = 1.0
#: How many hosts with the most duplicates a close line lists (older files: the same).
CLOSE_HOSTS: Final = 20

#: Every event: its name and the fields that it carries besides ``t``, ``event``
#: and (for host events) ``host``.
EVENTS: Final[Mapping[str, tuple[str, ...]]] = {
    "open": ("wall", "spider"),
    "start": ("in_flight",),
    "response": ("status", "latency", "told"),
    "fail": ("error", "timeout"),
    "throttle": ("reason", "delay", "limit", "decreased"),
    "pause": ("seconds", "until", "reason"),
    "block": (),
    "unblock": ("seconds", "delay"),
    "resume": (),
    "change": ("delay", "limit", "crawl_delay"),
    "cached": ("status",),
    "robots": ("origin", "status", "outcome", "crawl_delay", "shared"),
    "close": (
        "reason",
        "hosts",
        "duplicates",
        "duplicate_hosts",
        "duplicate_hosts_error",
        "duplicate_hosts_others",
        "duplicate_hosts_count",
    ),
}
#: The events about one host (they carry ``host``).
HOST_EVENTS: Final = frozenset(EVENTS) - {"open", "close"}

logger = logging.getLogger(__name__)


def event_record(
    t0: float, event: str, now: float, host: str | None = None, **fields: Any
) -> dict[str, Any]:
    """One line of the events file as a dict: ``t`` is ``now`` on the file's time."""
    record: dict[str, Any] = {"t": round(now - t0, 4), "event": event}
    if host is not None:
        record["host"] = host
    record.update(fields)
    return record


def events_path(template: object, params: Mapping[str, Any]) -> str:
    """``AIMD_EVENTS_FILE`` with ``%(name)s``, ``%(time)s`` and the spider's other
    attributes filled in, as Scrapy fills in ``FEEDS`` URIs (``time`` is the UTC
    time of the call, to the second, with ``-`` for ``:``)."""
    expected = "a file path; it may use %(name)s, %(time)s and the spider's attributes"
    if not isinstance(template, (str, Path)):
        raise AimdSettingsError("AIMD_EVENTS_FILE", template, expected)
    text = str(template)
    if "%" not in text:
        return text
    now = datetime.now(tz=timezone.utc).replace(microsecond=0)
    values = {**params, "time": now.isoformat().replace(":", "-")}
    try:
        return text % values
    except (KeyError, ValueError, TypeError):
        raise AimdSettingsError("AIMD_EVENTS_FILE", template, expected) from None


def spider_params(crawler: Crawler, name: str) -> dict[str, Any]:
    """The spider's attributes and its name, for ``%(...)s`` in AIMD_EVENTS_FILE."""
    spider = crawler.spider
    params: dict[str, Any] = dict(vars(spider)) if spider is not None else {}
    params["name"] = getattr(spider, "name", None) or name
    return params


def check_events_file(template: object, params: Mapping[str, Any]) -> None:
    """Raise :class:`AimdSettingsError` naming ``AIMD_EVENTS_FILE`` and the path when
    the file cannot be written: tried at startup, so that the error is the one
    shown, not an ``OSError`` as the spider opens. What the try creates is removed
    (a ``%(time)s`` in the name would otherwise leave an empty file or directory)."""
    path = Path(events_path(template, params))
    created: list[Path] = []
    try:
        for directory in reversed(path.parents):
            if not directory.exists():
                directory.mkdir()
                created.append(directory)
        existed = path.exists()
        with path.open("a", encoding="utf-8"):
            pass
        if not existed:
            path.unlink()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise AimdSettingsError(
            "AIMD_EVENTS_FILE", template, f"a file that can be written ({path}: {reason})"
        ) from None
    finally:
        for directory in reversed(created):
            with contextlib.suppress(OSError):
                directory.rmdir()


class EventLog:
    """Appends events as JSON lines; the clock is the caller's monotonic clock."""

    def __init__(self, path: str | Path, *, now: float, **header: Any) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("w", encoding="utf-8")
        self.t0 = now
        self._last_flush = now
        self._write({"event": "open", "t": 0.0, "wall": time.time(), **header})

    def emit(self, event: str, now: float, host: str | None = None, **fields: Any) -> None:
        self.write(event_record(self.t0, event, now, host, **fields), now)

    def write(self, record: Mapping[str, Any], now: float) -> None:
        """Append a record made by :func:`event_record` on this file's ``t0``."""
        self._write(record)
        if now - self._last_flush >= FLUSH_EVERY and self._file is not None:
            self._last_flush = now
            self._guard(self._file.flush)

    def close(self, now: float, **fields: Any) -> None:
        if self._file is None:
            return
        self.emit("close", now, **fields)
        if self._file is not None:
            self._guard(self._file.close)
        self._file = None

    def _write(self, record: Mapping[str, Any]) -> None:
        if self._file is not None:
            line = json.dumps(record, separators=(",", ":")) + "\n"
            self._guard(lambda: self._file.write(line) if self._file else None)

    def _guard(self, action: Callable[[], object]) -> None:
        """The events are a picture of the crawl, not the crawl: a disk that fails
        them (full, gone) turns them off with one warning instead of stopping it."""
        try:
            action()
        except OSError as exc:
            logger.warning("Stopped writing AIMD_EVENTS_FILE %s: %s", self.path, exc)
            file, self._file = self._file, None
            if file is not None:
                with contextlib.suppress(OSError):
                    file.close()


@dataclass
class DuplicateHosts:
    """The hosts with the most duplicates, as a close line carries them.

    Past some thousands of hosts they are counted in bounded memory, so a
    count may be too high: ``counts[host]`` is at most ``errors[host]`` above
    the truth (exact where absent), a host not listed had at most ``others``,
    and ``count`` hosts had any (None: not known, a file from before these
    fields; ``count_is_least``: at least that many, a fleet's). Only what
    these bounds prove is said as a fact (:meth:`certain`, :meth:`text`).
    """

    counts: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    others: int = 0
    count: int | None = None
    count_is_least: bool = False

    def least(self, host: str) -> int:
        """The fewest duplicates ``host`` can have had."""
        return self.counts[host] - self.errors.get(host, 0)

    def ranked(self) -> list[tuple[str, int]]:
        """The listed hosts, the most first (ties by name)."""
        return sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))

    def beyond(self, n: int) -> int:
        """The most that a host outside the first ``n`` can have had."""
        ranked = self.ranked()
        return max(self.others, ranked[n][1] if len(ranked) > n else 0)

    def certain(self, n: int) -> list[str]:
        """Of the first ``n``, those provably among the ``n`` with the most: at
        least as many as any host outside them can have had."""
        bound = self.beyond(n)
        return [host for host, _ in self.ranked()[:n] if self.least(host) >= bound]

    def text(self, host: str) -> str:
        """``host``'s count: bare when exact, else as the bounds it is known within."""
        count, error = self.counts[host], self.errors.get(host, 0)
        return f"{count:,}" if not error else f"at most {count:,}, at least {count - error:,}"

    def close_fields(self) -> dict[str, Any]:
        """The close line's fields (``duplicate_hosts`` as before, then the bounds)."""
        fields: dict[str, Any] = {"duplicate_hosts": dict(self.counts)}
        if self.count is not None:
            fields["duplicate_hosts_error"] = dict(self.errors)
            fields["duplicate_hosts_others"] = self.others
            fields["duplicate_hosts_count"] = self.count
        return fields

    @classmethod
    def from_close(cls, record: Mapping[str, Any]) -> DuplicateHosts:
        """From a close line; what is not a count is left out. A line without
        the bounds (an older file) is taken as exact, its hosts not listed at
        most as many as its last listed if it listed :data:`CLOSE_HOSTS`."""
        counts = _counts(record.get("duplicate_hosts"))
        if "duplicate_hosts_count" not in record:
            full = len(counts) >= CLOSE_HOSTS
            return cls(counts, others=min(counts.values()) if full else 0)
        errors = {
            host: min(error, counts[host])
            for host, error in _counts(record.get("duplicate_hosts_error")).items()
            if host in counts and error
        }
        others, count = (_count(record.get(f"duplicate_hosts_{k}")) for k in ("others", "count"))
        return cls(counts, errors, others or 0, count)

    @classmethod
    def combined(cls, parts: Iterable[DuplicateHosts]) -> DuplicateHosts:
        """A fleet's, from its workers' (each counted its own duplicates): a host
        one worker did not list may have had up to that worker's ``others`` there."""
        parts = list(parts)
        hosts = {host for part in parts for host in part.counts}
        counts = {host: sum(part.counts.get(host, part.others) for part in parts) for host in hosts}
        least = {
            host: sum(part.least(host) for part in parts if host in part.counts) for host in hosts
        }
        errors = {host: counts[host] - least[host] for host in hosts if counts[host] > least[host]}
        known = [part.count for part in parts if part.count is not None]
        count = max([*known, len(hosts)]) if known else None
        return cls(
            counts,
            errors,
            sum(part.others for part in parts),
            count,
            count_is_least=len(parts) > 1 or any(p.count_is_least for p in parts),
        )


def _count(value: object) -> int | None:
    """A count (a whole number, not negative), else None."""
    number = as_integer(value)
    return number if number is not None and number >= 0 else None


def _counts(value: object) -> dict[str, int]:
    """Counts by name; what is not a count is left out."""
    if not isinstance(value, dict):
        return {}
    return {str(k): n for k, v in value.items() if (n := _count(v)) is not None}
