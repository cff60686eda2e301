"""robots.txt by RFC 9309: what each fetch outcome means, per origin, and for how long.

Pure: no Scrapy, the clock is an argument. The Scrapy side
(``scrapy_aimd.robots_middleware``) fetches the files and asks ``RobotsBook``
what to do; the JOBDIR keeps what the book knows through ``snapshot`` and
``restore``, and nothing else of it.

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
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protego import Protego

MAX_BYTES = 500 * 1024


class RobotsOutcome(enum.Enum):
    RULES = "rules"
    ALLOW_ALL = "allow_all"
    UNREACHABLE = "unreachable"


class Verdict(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"
    WAIT = "wait"


def classify(status: int | None) -> RobotsOutcome:
    """What a robots.txt fetch that ended with ``status`` (None: network failure) means.

    A final 3xx means the redirects were not followed to the end (more than the
    five hops the RFC asks crawlers to follow): the file is unavailable.
    """
    if status is None or status == 429 or status >= 500:
        return RobotsOutcome.UNREACHABLE
    if 200 <= status < 300:
        return RobotsOutcome.RULES
    if 300 <= status < 500:
        return RobotsOutcome.ALLOW_ALL
    return RobotsOutcome.UNREACHABLE


def rules_text(body: bytes, max_bytes: int = MAX_BYTES) -> str:
    """The part of a body that is parsed: its first ``max_bytes``, as text."""
    return body[:max_bytes].decode("utf-8", errors="replace")


def decoded_prefix(body: bytes, encoding: str, max_bytes: int = MAX_BYTES) -> bytes | None:
    """The first ``max_bytes`` + 1 bytes of a body compressed with ``encoding``
    (gzip or deflate): enough to parse and to see that there was more, however
    large it inflates (a gzip bomb). None for another encoding or a broken stream.
    """
    encoding = encoding.strip().lower()
    if encoding in ("gzip", "x-gzip"):
        windows = [16 + zlib.MAX_WBITS]
    elif encoding == "deflate":
        windows = [zlib.MAX_WBITS, -zlib.MAX_WBITS]  # zlib-wrapped, or raw as some send
    else:
        return None
    for wbits in windows:
        try:
            return zlib.decompressobj(wbits).decompress(body, max_bytes + 1)
        except zlib.error:
            continue
    return None


def parse_rules(body: bytes, max_bytes: int = MAX_BYTES) -> Protego:
    """Rules from the first ``max_bytes`` of a body; garbage lines are ignored."""
    return Protego.parse(rules_text(body, max_bytes))


@dataclass(frozen=True)
class RobotsConfig:
    max_age: float = 24 * 3600.0
    retries: int = 3
    #: Seconds before the first refetch of an unreachable file; doubles each time.
    backoff: float = 2.0
    max_crawl_delay: float = 60.0
    max_bytes: int = MAX_BYTES
    #: Keep each origin's rules as text, so that :meth:`RobotsBook.snapshot` can
    #: save them (a JOBDIR); off, only the parsed rules are kept.
    persist: bool = False


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
    #: The parsed text of the rules, with ``RobotsConfig.persist``.
    text: str | None = None


@dataclass(frozen=True)
class FetchResult:
    """What one fetch changed, for the caller to act on."""

    outcome: RobotsOutcome
    #: The origin's requests may now be decided (rules, allow-all or deny-all).
    settled: bool
    crawl_delay: float | None = None
    crawl_delay_capped: bool = False
    #: When to fetch again (an unreachable file with retries left), else None.
    retry_at: float | None = None
    truncated: bool = False
    #: A Crawl-delay that the parser gave but no gap can be (nan, inf, negative):
    #: ignored.
    crawl_delay_invalid: object = None


def usable_crawl_delay(value: object) -> float | None:
    """A Crawl-delay as seconds, or None when there is none or it is no finite
    number >= 0 (older Protego releases return ``nan`` for ``Crawl-delay: nan``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    delay = float(value)
    return delay if math.isfinite(delay) and delay >= 0 else None


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
        if outcome is RobotsOutcome.UNREACHABLE:
            return self._unreachable(state, now)
        state.failures = 0
        state.retry_at = -math.inf
        state.known, state.denied, state.fetched_at = True, False, now
        if outcome is RobotsOutcome.ALLOW_ALL:
            state.rules, state.sitemaps, state.text = None, [], None
            return FetchResult(outcome, settled=True)
        rules = self._set_rules(state, rules_text(body, self.config.max_bytes))
        found = rules.crawl_delay(user_agent)
        delay = usable_crawl_delay(found)
        capped = delay is not None and delay > self.config.max_crawl_delay
        if delay is not None:
            delay = min(delay, self.config.max_crawl_delay)
        return FetchResult(
            outcome,
            settled=True,
            crawl_delay=delay,
            crawl_delay_capped=capped,
            crawl_delay_invalid=found if delay is None and found is not None else None,
            truncated=len(body) > self.config.max_bytes,
        )

    def settle_anyway(self, origin: str, now: float) -> None:
        """End a fetch whose answer could not be handled: rules already taken
        stay; with none known, the origin has no rules (allow all), so that its
        requests never wait for ever."""
        state = self.state(origin)
        state.fetching = False
        if not state.known and not state.denied:
            state.known, state.rules, state.sitemaps, state.text = True, None, [], None
            state.failures, state.retry_at, state.fetched_at = 0, -math.inf, now

    def _set_rules(self, state: OriginRobots, text: str) -> Protego:
        rules = state.rules = Protego.parse(text)
        state.sitemaps = list(rules.sitemaps)
        state.text = text if self.config.persist else None
        return rules

    # -- persistence -------------------------------------------------------------

    def snapshot(self, origin: str) -> dict[str, Any] | None:
        """What is known of ``origin`` as JSON-able data, for :meth:`restore` in a
        later run; None when nothing settled can be saved (rules without their
        text: they are fetched again). ``fetched_at`` is on this book's clock."""
        state = self.origins.get(origin)
        if state is None or not (state.known or state.denied):
            return None
        if state.rules is not None and state.text is None:
            return None
        data: dict[str, Any] = {
            "known": state.known,
            "denied": state.denied,
            "fetched_at": state.fetched_at,
        }
        if state.rules is not None:
            data["rules"] = state.text
        return data

    def restore(self, origin: str, data: Mapping[str, Any], now: float) -> bool:
        """Take what a :meth:`snapshot` saved, its ``fetched_at`` moved onto this
        book's clock by the caller; an age beyond ``now`` counts as fetched now.
        False (nothing changed) for an origin already known here or bad data."""
        if origin in self.origins:
            return False
        fetched_at = data.get("fetched_at")
        if (
            isinstance(fetched_at, bool)
            or not isinstance(fetched_at, (int, float))
            or not math.isfinite(fetched_at)
        ):
            return False
        state = self.state(origin)
        state.known = bool(data.get("known"))
        state.denied = bool(data.get("denied"))
        state.fetched_at = min(float(fetched_at), now)
        rules = data.get("rules")
        if isinstance(rules, str):
            self._set_rules(state, rules_text(rules.encode("utf-8"), self.config.max_bytes))
        return True

    def _unreachable(self, state: OriginRobots, now: float) -> FetchResult:
        state.failures += 1
        if state.failures <= self.config.retries:
            state.retry_at = now + self.config.backoff * 2 ** (state.failures - 1)
            return FetchResult(RobotsOutcome.UNREACHABLE, settled=False, retry_at=state.retry_at)
        # Retries spent. Rules from an earlier fetch stay in force; with none,
        # the origin is skipped until the file can be fetched again.
        state.failures = 0
        state.retry_at = -math.inf
        state.fetched_at = now
        if not state.known:
            state.denied = True
        return FetchResult(RobotsOutcome.UNREACHABLE, settled=True)
