"""One reading of an answer: what a host's response or failure says.

The controller, the give-up budget and the fleet all ask :func:`read` (or
:func:`is_refusal`): "is this a refusal" is decided in one place."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from .config import ControllerConfig

__all__ = ["Answer", "Kind", "Outcome", "Reaction", "is_refusal", "read", "read_failure"]

Kind = Literal["good", "neutral", "overload", "rate_limit", "block"]
"""``good``: a 2xx or 3xx answer. ``rate_limit``: the host counts requests (429,
or any throttle status with a Retry-After). ``overload``: the host is struggling
(another throttle status, a timeout). ``block``: a block status (403) to a page:
a forbidden page, or a host that bans the crawler, as the policy tells from the
answers around it. ``neutral``: anything else (a 404, a 500, a DNS error),
which says nothing about the host's load."""

Outcome = Literal["good", "neutral", "overload", "rate_limit", "block", "forbidden"]
"""How the controller read an answer (a :class:`Reaction`'s kind): ``block``, the
host blocks the crawler; ``forbidden``, a block status that is not (yet) a block."""


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer as the policy reads it."""

    kind: Kind
    pause: float | None = None
    """Seconds the host asked to wait (Retry-After, capped), if it did."""
    timeout: bool = False
    """No answer came in time."""
    counted: bool = False
    """A 429: the host said it counts requests (the limit never set that pace)."""
    served: bool = False
    """The host took a page request (not robots.txt; any status but a throttle or
    block one): it counts towards the rate the host accepts."""
    page: bool = False
    """One of the host's pages (not robots.txt), answered 2xx or 3xx."""
    measured: bool = False
    """A 2xx page: its latency speaks for the host's pages (not redirects, errors)."""
    again: bool = False
    """A block status from a page marked forbidden: it had one, with no block proven."""

    @property
    def refusal(self) -> bool:
        return self.kind in ("overload", "rate_limit")


def is_refusal(status: int | None, timeout: bool, throttle_codes: Collection[int]) -> bool:
    """A status of ``throttle_codes`` (``cfg.refusal_codes``: blocks too) or a timeout."""
    return timeout or (status is not None and status in throttle_codes)


def read(status: int, retry_after: float | None, *, page: bool, cfg: ControllerConfig) -> Answer:
    """A response. ``page`` is False for what is not one of the host's pages
    (robots.txt): a throttle status still counts, its latency never does."""
    throttle_codes, block_codes = cfg.throttle_codes, cfg.block_codes
    if page and status in block_codes:
        return Answer("block")
    if status in throttle_codes:
        pause = None
        if retry_after is not None and math.isfinite(retry_after) and retry_after >= 0:
            pause = min(retry_after, cfg.max_retry_after)
        kind: Kind = "rate_limit" if status == 429 or pause is not None else "overload"
        return Answer(kind, pause, counted=status == 429)
    if not page:
        return Answer("neutral" if not 200 <= status < 400 else "good")  # says nothing
    if not 200 <= status < 400:
        return Answer("neutral", served=True)
    return Answer("good", served=True, page=True, measured=status < 300)


def read_failure(timeout: bool) -> Answer:
    """A failure without a response: only a timeout speaks of the host's load."""
    return Answer("overload", timeout=True) if timeout else Answer("neutral")


@dataclass(frozen=True, slots=True)
class Reaction:
    """What the controller made of an answer, for stats, signals and retries."""

    kind: Outcome
    decreased: bool
    """True if this answer slowed the host down (once per round)."""
    paused_until: float | None = None
    """The end of the pause this answer asked for, if it carried a Retry-After."""
    refused: bool = False
    """The host asked for later, so the request should be queued again, not
    dropped: a 429, any throttle status with a Retry-After, a block and, from a
    host that has answered a page well, a throttle status without one or a
    timeout (from a host that never answered well those are plain failures). A
    ``forbidden`` page is refused on its first try only: the answers after it
    may prove a block."""

    @property
    def throttled(self) -> bool:
        """The host pushed back: a signal to slow down, whether acted on or not."""
        return self.kind in ("overload", "rate_limit")
