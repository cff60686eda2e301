"""The live line about the hosts: one INFO line every ``LOGSTATS_INTERVAL``.

Scrapy's LogStats says how many pages a minute the crawl makes; this line says
what holds it back: how many hosts are active, waiting on their gap, at their
limit, paused, or pushed back since the last line, and which few hosts hold
the crawl back most (paused longest, most refused, widest gap), each with its
gap and limit. Pure bookkeeping over the frontier's controllers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from scrapy_aimd.core.controller import HostController

#: How many hosts the line names.
NAMED = 3


class QueuedHosts(Protocol):
    """What the live line needs of the frontier."""

    def hosts(self) -> Iterator[tuple[str, HostController]]: ...

    def queued(self, host: str) -> int: ...


@dataclass
class HostLine:
    """One named host: why it holds the crawl back."""

    host: str
    paused_for: float
    refused: int
    gap: float
    limit: int
    why: str = ""
    """"blocked" or "told quota" when the host's block or told quota holds it."""


@dataclass
class Snapshot:
    """The hosts at one moment, and what they did since the last snapshot."""

    seconds: float
    active: int = 0
    waiting: int = 0
    at_limit: int = 0
    paused: int = 0
    throttled: int = 0
    named: list[HostLine] = field(default_factory=list)


class HostsView:
    """Counts the refusals between two lines, and reads the controllers for a line."""

    def __init__(self, hosts: QueuedHosts, clock: Callable[[], float]) -> None:
        self.hosts = hosts
        self.clock = clock
        self._since = clock()
        #: Refusals (throttle events) per host since the crawl opened.
        self.refused: Counter[str] = Counter()
        self._throttled: set[str] = set()

    def saw(self, record: Mapping[str, Any]) -> None:
        """A host event, as the reporter writes it."""
        if record.get("event") == "throttle":
            host = str(record.get("host"))
            self.refused[host] += 1
            self._throttled.add(host)

    def take(self) -> Snapshot:
        """The hosts now; the throttled count starts again from zero."""
        now = self.clock()
        snap = Snapshot(seconds=now - self._since, throttled=len(self._throttled))
        self._since = now
        self._throttled = set()
        candidates: list[HostLine] = []
        for host, controller in self.hosts.hosts():
            queued = self.hosts.queued(host)
            if not queued and not controller.in_flight:
                continue
            snap.active += 1
            paused_for = max(0.0, controller.paused_until - now)
            if paused_for > 0:
                snap.paused += 1
            elif queued and controller.in_flight >= controller.concurrency:
                snap.at_limit += 1
            elif queued and math.isfinite(ready := controller.ready_at(now)) and ready > now:
                snap.waiting += 1
            line = HostLine(
                host, paused_for, self.refused[host], controller.delay, controller.concurrency
            )
            if controller.phase(now) == "blocked":
                line.why = "blocked"
            elif controller.told_gap > 0:
                line.why = "told quota"
            if paused_for > 0 or line.refused or line.gap > 0:
                candidates.append(line)
        candidates.sort(key=lambda h: (-h.paused_for, -h.refused, -h.gap, h.host))
        snap.named = candidates[:NAMED]
        return snap


def hosts_line(snap: Snapshot) -> str:
    """The line itself, e.g. ``Hosts: 3 active, 1 waiting on their gap, ...``."""
    text = (
        f"Hosts: {snap.active} active, {snap.waiting} waiting on their gap, "
        f"{snap.at_limit} at their limit, {snap.paused} paused, "
        f"{snap.throttled} throttled in the last {snap.seconds:.0f}s"
    )
    if not snap.named:
        return text
    named = "; ".join(_describe(h) for h in snap.named)
    return f"{text}. Holding the crawl back most: {named}"


def _describe(h: HostLine) -> str:
    parts = [h.why] if h.why else []
    if h.paused_for > 0:
        parts.append(f"paused {h.paused_for:.1f}s more")
    if h.refused:
        parts.append(f"{h.refused} refused")
    parts.append(f"gap {h.gap:.2f}s")
    parts.append(f"limit {h.limit}")
    return f"{h.host} ({', '.join(parts)})"
