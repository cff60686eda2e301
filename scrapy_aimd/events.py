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
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Final

from scrapy_aimd.settings import AimdSettingsError

FLUSH_EVERY = 1.0

#: Every event: its name and the fields that it carries besides ``t``, ``event``
#: and (for host events) ``host``.
EVENTS: Final[Mapping[str, tuple[str, ...]]] = {
    "open": ("wall", "spider"),
    "start": ("in_flight",),
    "response": ("status", "latency"),
    "fail": ("error", "timeout"),
    "throttle": ("reason", "delay", "limit", "decreased"),
    "pause": ("seconds", "until"),
    "resume": (),
    "change": ("delay", "limit", "crawl_delay"),
    "cached": ("status",),
    "robots": ("origin", "status", "outcome", "crawl_delay"),
    "close": ("reason", "hosts", "duplicates", "duplicate_hosts"),
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
