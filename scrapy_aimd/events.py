"""``AIMD_EVENTS_FILE``: one JSON line per controller event, for the crawl report.

The first line is ``{"event": "open", "t": 0, "wall": <POSIX time>, ...}``;
every later line has ``t`` (seconds since open), ``event`` and, for host
events, ``host``. Events: ``start`` (in_flight), ``response`` (status,
latency), ``fail`` (error, timeout), ``throttle`` (reason, delay, limit),
``pause`` (seconds, until), ``resume``, ``change`` (delay, limit) and a last
``close`` line with the per-host summary. Lines are buffered and flushed about
once a second, so a killed crawl loses at most the last second.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any

FLUSH_EVERY = 1.0


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
        record: dict[str, Any] = {"t": round(now - self.t0, 4), "event": event}
        if host is not None:
            record["host"] = host
        record.update(fields)
        self._write(record)
        if now - self._last_flush >= FLUSH_EVERY and self._file is not None:
            self._file.flush()
            self._last_flush = now

    def close(self, now: float, **fields: Any) -> None:
        if self._file is None:
            return
        self.emit("close", now, **fields)
        self._file.close()
        self._file = None

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
