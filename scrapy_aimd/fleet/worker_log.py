"""A fleet worker's name, and its reporter: the events file of each worker names
it on every line, so that the files of a fleet's workers can be drawn together."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any

from scrapy_aimd.events import EventLog
from scrapy_aimd.reporter import Reporter

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from scrapy.crawler import Crawler

__all__ = ["FleetReporter", "WorkerEventLog", "worker_name"]


def worker_name() -> str:
    """This worker, as its events and logs name it: host name and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


class WorkerEventLog(EventLog):
    """An events file whose every line names its worker (``worker``)."""

    def __init__(self, path: str | Path, *, now: float, worker: str, **header: Any) -> None:
        self.worker = worker
        super().__init__(path, now=now, worker=worker, **header)

    def write(self, record: Mapping[str, Any], now: float) -> None:
        super().write({**record, "worker": self.worker}, now)


class FleetReporter(Reporter):
    """The reporter, writing a :class:`WorkerEventLog`."""

    def __init__(self, crawler: Crawler, *, events_file: str | None, worker: str) -> None:
        super().__init__(crawler, events_file=events_file)
        self.worker = worker

    def event_log(self, path: str, *, now: float, spider: str) -> EventLog:
        return WorkerEventLog(path, now=now, spider=spider, worker=self.worker)
