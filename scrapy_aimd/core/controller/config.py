"""What a user may set for a host's controller, checked once."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["INT_MINIMUMS", "ControllerConfig"]


@dataclass(frozen=True)
class ControllerConfig:
    """The politeness knobs of one host; everything else the controller measures."""

    min_delay: float = 0.0
    """The least gap between two request starts, in seconds."""
    max_delay: float = 60.0
    """The widest gap the controller backs off to (a robots Crawl-delay may exceed it)."""
    max_concurrency: int = 8
    """The most requests in flight at once (the add-on: CONCURRENT_REQUESTS_PER_DOMAIN)."""
    adaptive: bool = True
    """Earn concurrency from 1 (True) or stay at ``max_concurrency`` (False)."""
    fast_latency: float = 0.25
    """A page median at or below this is never read as a queue at the host."""
    latency_factor: float = 2.0
    """Pages this many times slower than unloaded are a queue, whatever the estimate."""
    throttle_codes: frozenset[int] = frozenset({429, 503})
    """Statuses by which a host says "slow down"."""
    max_retry_after: float = 3600.0
    """The longest pause a Retry-After header or a told quota may impose, in seconds."""
    block_codes: frozenset[int] = frozenset({403})
    """Statuses by which a host may say "you are blocked" (after a run of them)."""

    def __post_init__(self) -> None:
        for name in ("throttle_codes", "block_codes"):
            object.__setattr__(self, name, _status_codes(name, getattr(self, name)))
        if both := sorted(self.throttle_codes & self.block_codes):
            raise ValueError(f"block_codes={both}: expected none of throttle_codes")
        for name in ("min_delay", "max_delay", "fast_latency", "max_retry_after"):
            _check(name, getattr(self, name), lambda v: v >= 0, "a finite number >= 0")
        _check("latency_factor", self.latency_factor, lambda v: v >= 1, "a finite number >= 1")
        if self.min_delay > self.max_delay:
            raise ValueError(f"min_delay={self.min_delay!r} is above max_delay={self.max_delay!r}")
        for name, minimum in INT_MINIMUMS.items():
            _check_int(name, getattr(self, name), minimum)
        if not isinstance(self.adaptive, bool):
            raise ValueError(f"adaptive={self.adaptive!r}: expected True or False")

    @property
    def refusal_codes(self) -> frozenset[int]:
        """The statuses that may be a refusal (the give-up budget's trouble)."""
        return self.throttle_codes | self.block_codes


#: The least value of each whole-number field.
INT_MINIMUMS: Final[Mapping[str, int]] = {"max_concurrency": 1}


def _check(name: str, value: Any, ok: Any, expected: str) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (number and math.isfinite(value) and ok(value)):
        raise ValueError(f"{name}={value!r}: expected {expected}")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r}: expected a whole number >= {minimum}")


def _status_codes(name: str, codes: Iterable[int]) -> frozenset[int]:
    result = frozenset(codes)
    for code in result:
        if isinstance(code, bool) or not isinstance(code, int) or not 100 <= code <= 599:
            raise ValueError(f"{name}: {code!r} is not an HTTP status code")
    return result
