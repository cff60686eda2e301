"""robots.txt by RFC 9309: what each fetch outcome means, per origin, and for how long.

Pure: no Scrapy, the clock is an argument. The Scrapy side
(``scrapy_aimd.robots``) fetches the files and asks ``RobotsBook`` what to do.

RFC 9309 §2.3.1: a 2xx gives the rules; a 4xx (other than 429) means there are
none, so everything is allowed; a 5xx, a 429 or a network failure means the
file is unreachable, and the crawler must not assume it may crawl: the origin's
requests wait while the file is fetched again with backoff, and once the
retries are spent they are skipped. Only the first 500 KiB are parsed (§2.5).
Rules are kept for ``max_age`` (§2.4), then fetched again; while a refetch
fails, the old rules stay in force.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from protego import Protego

MAX_BYTES = 500 * 1024


class Outcome(enum.Enum):
    RULES = "rules"
    ALLOW_ALL = "allow_all"
    UNREACHABLE = "unreachable"


class Verdict(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"
    WAIT = "wait"


def classify(status: int | None) -> Outcome:
    """What a robots.txt fetch that ended with ``status`` (None: network failure) means.

    A final 3xx means the redirects were not followed to the end (more than the
    five hops the RFC asks crawlers to follow): the file is unavailable.
    """
    if status is None or status == 429 or status >= 500:
        return Outcome.UNREACHABLE
    if 200 <= status < 300:
        return Outcome.RULES
    if 300 <= status < 500:
        return Outcome.ALLOW_ALL
    return Outcome.UNREACHABLE


def parse_rules(body: bytes, max_bytes: int = MAX_BYTES) -> Protego:
    """Rules from the first ``max_bytes`` of a body; garbage lines are ignored."""
    text = body[:max_bytes].decode("utf-8", errors="replace")
    return Protego.parse(text)


@dataclass(frozen=True)
class RobotsConfig:
    max_age: float = 24 * 3600.0
    retries: int = 3
    #: Seconds before the first refetch of an unreachable file; doubles each time.
    backoff: float = 2.0
    max_crawl_delay: float = 60.0
    max_bytes: int = MAX_BYTES


@dataclass
class OriginRobots:
    """What is known of one origin's robots.txt."""

    #: Parsed rules; None with ``known`` set means "no rules: allow all".
    rules: Protego | None = None
    known: bool = False
    #: Unreachable after every retry: the origin's requests are skipped.
    denied: bool = False
    fetching: bool = False
    failures: int = 0
    fetched_at: float = -math.inf
    retry_at: float = -math.inf
    sitemaps: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FetchResult:
    """What one fetch changed, for the caller to act on."""

    outcome: Outcome
    #: The origin's requests may now be decided (rules, allow-all or deny-all).
    settled: bool
    crawl_delay: float | None = None
    crawl_delay_capped: bool = False
    #: When to fetch again (an unreachable file with retries left), else None.
    retry_at: float | None = None
    truncated: bool = False


class RobotsBook:
    """Per-origin robots.txt state: verdicts for URLs and when to fetch."""

    def __init__(self, config: RobotsConfig | None = None) -> None:
        self.config = config or RobotsConfig()
        self.origins: dict[str, OriginRobots] = {}

    def state(self, origin: str) -> OriginRobots:
        state = self.origins.get(origin)
        if state is None:
            state = self.origins[origin] = OriginRobots()
        return state

    def verdict(self, origin: str, url: str, user_agent: str) -> Verdict:
        state = self.state(origin)
        if state.denied:
            return Verdict.DENY
        if not state.known:
            return Verdict.WAIT
        if state.rules is None or state.rules.can_fetch(url, user_agent):
            return Verdict.ALLOW
        return Verdict.DENY

    def needs_fetch(self, origin: str, now: float) -> bool:
        """True when a fetch should start now: never fetched, stale, or a retry is due."""
        state = self.state(origin)
        if state.fetching or now < state.retry_at:
            return False
        if not state.known and not state.denied:
            return True
        return now - state.fetched_at >= self.config.max_age

    def started(self, origin: str) -> None:
        self.state(origin).fetching = True

    def fetched(
        self, origin: str, now: float, status: int | None, body: bytes, user_agent: str
    ) -> FetchResult:
        """Record a fetch that ended with ``status`` (None: network failure)."""
        state = self.state(origin)
        state.fetching = False
        outcome = classify(status)
        if outcome is Outcome.UNREACHABLE:
            return self._unreachable(state, now)
        state.failures = 0
        state.retry_at = -math.inf
        state.known, state.denied, state.fetched_at = True, False, now
        if outcome is Outcome.ALLOW_ALL:
            state.rules, state.sitemaps = None, []
            return FetchResult(outcome, settled=True)
        state.rules = parse_rules(body, self.config.max_bytes)
        state.sitemaps = list(state.rules.sitemaps)
        delay = state.rules.crawl_delay(user_agent)
        capped = delay is not None and delay > self.config.max_crawl_delay
        if delay is not None:
            delay = min(float(delay), self.config.max_crawl_delay)
        return FetchResult(
            outcome,
            settled=True,
            crawl_delay=delay,
            crawl_delay_capped=capped,
            truncated=len(body) > self.config.max_bytes,
        )

    def _unreachable(self, state: OriginRobots, now: float) -> FetchResult:
        state.failures += 1
        if state.failures <= self.config.retries:
            state.retry_at = now + self.config.backoff * 2 ** (state.failures - 1)
            return FetchResult(Outcome.UNREACHABLE, settled=False, retry_at=state.retry_at)
        # Retries spent. Rules from an earlier fetch stay in force; with none,
        # the origin is skipped until the file can be fetched again.
        state.failures = 0
        state.retry_at = -math.inf
        state.fetched_at = now
        if not state.known:
            state.denied = True
        return FetchResult(Outcome.UNREACHABLE, settled=True)
