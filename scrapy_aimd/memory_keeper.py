"""The scheduler's keeper for a crawl without JOBDIR: the frontier in memory,
nothing saved. It answers the same calls as :class:`~scrapy_aimd.jobdir.Jobdir`,
so that the scheduler never asks which keeper it has."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, ClassVar

from scrapy import Request

from scrapy_aimd.core.controller import ControllerConfig, HostController
from scrapy_aimd.core.frontier import MemoryQueueStore

if TYPE_CHECKING:
    from scrapy_aimd.core.frontier import Frontier
    from scrapy_aimd.robots_middleware import RobotsTxtMiddleware

__all__ = ["MemoryKeeper"]

logger = logging.getLogger(__name__)


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
