"""Read the quota a server tells in its response headers, and the pace it allows.

Many APIs say how much of their quota is left before it runs out, so a polite
crawler can spread the rest over the time until the window resets instead of
learning the limit by being refused. Three spellings are in use:

- ``X-RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` (GitHub and most APIs).
  ``-Reset`` is epoch seconds at GitHub and delta seconds elsewhere: a value
  larger than a year of seconds is read as epoch time.
- The IETF draft's early ``RateLimit-Limit`` / ``-Remaining`` / ``-Reset``
  (draft-ietf-httpapi-ratelimit-headers up to -06; ``-Limit`` may carry
  ``;w=`` windows: ``10, 10;w=1, 50;w=60``).
- Its current ``RateLimit-Policy`` and ``RateLimit`` structured fields (RFC 8941
  lists, draft -08 on): ``RateLimit-Policy: "burst";q=100;w=60,"daily";q=1000;w=86400``
  names each policy's quota ``q`` and window ``w``; ``RateLimit: "burst";r=50;t=30``
  says what ``r`` remains of it and in ``t`` seconds it resets. Draft -07's
  dictionary ``RateLimit: limit=100, remaining=50, reset=30`` is read too.

Where several quotas are told (several policies, or several spellings), the one
that binds is the one that needs the widest spacing. Nothing here raises: a value
that cannot be read is left out and reported as garbled (the caller counts it),
and a wait longer than ``max_seconds`` is cut to it and reported as capped, as
``Retry-After`` is bounded by ``AIMD_MAX_RETRY_AFTER``.

Most responses carry none of these headers, so :func:`read_quota` first looks
only at the header names' lengths: that costs a fraction of a microsecond.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["RESOLUTION", "Quota", "QuotaPace", "QuotaReading", "quota_pace", "read_quota"]

#: A reset larger than this many seconds is a moment (epoch seconds), not a delay.
EPOCH_AFTER = 365 * 86400
#: Counts above this are as good as unlimited; larger ones are cut to it.
MOST = 2**53

HeaderValue = str | bytes | Sequence[str | bytes]


@dataclass(frozen=True, slots=True)
class Quota:
    """What the server says is left, and when it comes back whole."""

    limit: int | None
    """Requests in the window, when told."""
    remaining: int
    """Requests still allowed before the reset."""
    resets_in: float
    """Seconds from the response until the quota is whole again (0 when already)."""
    window: float | None
    """The window's length in seconds, when told (``w``)."""
    source: str
    """Which field said it: "x-ratelimit", "ratelimit" or "ratelimit-policy"."""


@dataclass(frozen=True, slots=True)
class QuotaReading:
    """What one response's quota headers said."""

    quota: Quota | None
    """The binding quota, or None when nothing readable was told."""
    garbled: bool = False
    """Some quota header could not be read (left out)."""
    capped: bool = False
    """A reset later than ``max_seconds`` was cut to it."""


@dataclass(frozen=True, slots=True)
class QuotaPace:
    """How to spend a quota: no request before ``pause`` seconds, then one per ``gap``."""

    gap: float
    pause: float


#: Resets are told in whole seconds: the true one may come this much before the told
#: one, and a quota told spent waits at least this.
RESOLUTION = 1.0


def quota_pace(quota: Quota, in_flight: int = 0) -> QuotaPace:
    """The spacing at which what remains, less the requests ``in_flight``, lasts
    until the earliest the reset may come (paced to the told reset, a window's last
    quota went unspent; in its last second it may come now: what remains may go at
    once, no more in flight than it), or a pause until the told reset when nothing
    is left. A quota already reset asks for nothing."""
    left, until = quota.remaining - in_flight, quota.resets_in
    if left > 0 or (quota.remaining > 0 and until <= 0.0):
        return QuotaPace(gap=max(0.0, until - RESOLUTION) / max(left, 1), pause=0.0)
    return QuotaPace(gap=0.0, pause=max(until, RESOLUTION))


# -- which headers -------------------------------------------------------------------

_X_LIMIT, _X_REMAINING, _X_RESET = "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"
_LIMIT, _REMAINING, _RESET = "ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"
_POLICY, _STATE = "ratelimit-policy", "ratelimit"
_NAMES = frozenset((_X_LIMIT, _X_REMAINING, _X_RESET, _LIMIT, _REMAINING, _RESET, _POLICY, _STATE))
#: The names' lengths: a header of another length is passed over without a lowercase.
_LENGTHS = frozenset(len(name) for name in _NAMES)


class _Garbled(ValueError):
    """A value that cannot be read."""


def read_quota(
    headers: Mapping[str, HeaderValue] | Mapping[bytes, HeaderValue],
    now: float,
    max_seconds: float,
) -> QuotaReading | None:
    """The quota ``headers`` tell, or None when they carry no quota header at all.

    ``headers`` maps names (any case, str or bytes) to a value or a list of
    values, as Scrapy's ``Headers`` does (bytes keys, lists of bytes). ``now`` is
    the POSIX time of the response, for epoch resets: the server's own (its
    ``Date`` header) where a caller has it, so that a skewed local clock does not
    move the reset.
    """
    found: dict[str, list[str]] | None = None
    for name in headers:
        if len(name) in _LENGTHS:
            key = (name.decode("latin-1") if isinstance(name, bytes) else name).lower()
            if key in _NAMES:
                if found is None:
                    found = {}
                found.setdefault(key, []).extend(_texts(_every_value(headers, name)))
    if found is None:
        return None
    return _reading(found, now, max_seconds)


def _every_value(headers: Mapping[Any, HeaderValue], name: str | bytes) -> HeaderValue:
    """All of a repeated header's values: Scrapy's ``Headers`` (a dict of lists) gives
    only the last one by ``[]``, the stored list by the dict's own lookup."""
    if isinstance(headers, dict):
        return dict.__getitem__(headers, name)  # type: ignore[no-any-return]
    return headers[name]


def _texts(value: HeaderValue) -> list[str]:
    items: Iterable[str | bytes] = [value] if isinstance(value, str | bytes) else value
    return [item.decode("latin-1") if isinstance(item, bytes) else str(item) for item in items]


def _reading(found: dict[str, list[str]], now: float, max_seconds: float) -> QuotaReading:
    bound = max_seconds if max_seconds >= 0 and not math.isnan(max_seconds) else 0.0
    state = _State(now=now, bound=bound)
    quotas: list[Quota] = []
    for reader in (_x_ratelimit, _early_draft, _structured):
        try:
            quotas.extend(reader(found, state))
        except _Garbled:
            state.garbled = True
    return QuotaReading(
        quota=max(quotas, key=_strictness) if quotas else None,
        garbled=state.garbled,
        capped=state.capped,
    )


def _strictness(quota: Quota) -> tuple[float, float]:
    """A quota that pauses binds over one that spaces; then the widest spacing."""
    pace = quota_pace(quota)
    return (pace.pause, pace.gap)


@dataclass
class _State:
    now: float
    bound: float
    garbled: bool = False
    capped: bool = False

    def seconds(self, value: float, *, epoch_allowed: bool) -> float:
        """A reset as seconds from now, within [0, bound]."""
        if epoch_allowed and value > EPOCH_AFTER:
            value = max(0.0, value - self.now)
        if value > self.bound:
            self.capped = True
            return self.bound
        return value


# -- X-RateLimit-* and the early draft's RateLimit-* ----------------------------------


def _x_ratelimit(found: dict[str, list[str]], state: _State) -> list[Quota]:
    return _three(found, state, (_X_LIMIT, _X_REMAINING, _X_RESET), "x-ratelimit")


def _early_draft(found: dict[str, list[str]], state: _State) -> list[Quota]:
    return _three(found, state, (_LIMIT, _REMAINING, _RESET), "ratelimit")


def _three(
    found: dict[str, list[str]], state: _State, names: tuple[str, str, str], source: str
) -> list[Quota]:
    """One quota from a limit, a remaining and a reset header. Without both a
    remaining and a reset there is nothing to pace by (some APIs send only the
    limit and the remaining): no quota, but what is there is still read, so that
    garbage is reported. Repeated values: the strictest."""
    limit_name, remaining_name, reset_name = names
    if remaining_name not in found or reset_name not in found:
        if limit_name in found:
            _limits(found[limit_name])
        for element in _elements(found[remaining_name]) if remaining_name in found else ():
            _count(element)
        for element in _elements(found[reset_name]) if reset_name in found else ():
            _number(element)
        return []
    remaining = min(_count(e) for e in _elements(found[remaining_name]))
    reset = max(_number(e) for e in _elements(found[reset_name]))
    limit, window = _limits(found[limit_name]) if limit_name in found else (None, None)
    if limit is not None and remaining > limit:
        raise _Garbled(source)
    resets_in = state.seconds(reset, epoch_allowed=True)
    return [Quota(limit, remaining, resets_in, window, source)]


def _limits(values: list[str]) -> tuple[int | None, float | None]:
    """The smallest limit told, and its window when the early draft's ``;w=`` names
    one (``10, 10;w=1, 50;w=60``)."""
    best: tuple[int, float | None] | None = None
    for element in _elements(values):
        head, _, params = element.partition(";")
        limit = _count(head)
        window: float | None = None
        for param in params.split(";") if params else ():
            key, _, value = param.strip().partition("=")
            if key == "w":
                window = _number(value)
        if best is None or limit < best[0] or (limit == best[0] and best[1] is None):
            best = (limit, window)
    return best if best is not None else (None, None)


def _elements(values: list[str]) -> list[str]:
    """The comma-separated elements of every value of a header (at least one)."""
    elements = [e.strip() for value in values for e in value.split(",") if e.strip()]
    if not elements:
        raise _Garbled("empty")
    return elements


def _count(text: str) -> int:
    """A count of requests: digits (a whole ``.0`` allowed), huge ones cut to MOST."""
    text = text.strip()
    whole, dot, fraction = text.partition(".")
    if not _digits(whole) or (dot and not (fraction and set(fraction) == {"0"})):
        raise _Garbled(text)
    return MOST if len(whole) > 16 else min(int(whole), MOST)


def _number(text: str) -> float:
    """Non-negative seconds, digits with an optional fraction; never nan or inf."""
    text = text.strip()
    whole, dot, fraction = text.partition(".")
    if not _digits(whole) or (dot and not _digits(fraction)):
        raise _Garbled(text)
    if len(whole) > 300:
        return float(MOST)
    return float(text)


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


# -- RateLimit-Policy and RateLimit (RFC 8941) ---------------------------------------


def _structured(found: dict[str, list[str]], state: _State) -> list[Quota]:
    """A quota per ``RateLimit`` item, with the limit and window of the policy of
    the same name; an item that cannot be read is left out and reported."""
    if _STATE not in found:
        if _POLICY in found:
            _policies(found[_POLICY], state)  # read, so that garbage is reported
        return []
    policies = _policies(found.get(_POLICY, []), state)
    try:
        members = _parse_list(", ".join(found[_STATE]))
    except _Garbled:
        return _draft_seven(found[_STATE], state)
    quotas = []
    for name, params in members:
        try:
            remaining = _param_count(params, "r")
            if remaining is None:
                raise _Garbled("r")
            reset = _param_seconds(params, "t")
            limit, window = policies.get(name, (None, None))
            if reset is None:
                reset = window  # no reset told: at the latest a window from now
            if reset is None:
                raise _Garbled("t")
            if limit is not None and remaining > limit:
                raise _Garbled("r > q")
            resets_in = state.seconds(reset, epoch_allowed=False)
            quotas.append(Quota(limit, remaining, resets_in, window, "ratelimit-policy"))
        except _Garbled:
            state.garbled = True
    return quotas


def _policies(values: list[str], state: _State) -> dict[object, tuple[int | None, float | None]]:
    """Policy name -> (quota ``q``, window ``w``); an unreadable policy is left out."""
    if not values:
        return {}
    try:
        members = _parse_list(", ".join(values))
    except _Garbled:
        state.garbled = True
        return {}
    policies: dict[object, tuple[int | None, float | None]] = {}
    for name, params in members:
        try:
            quota = _param_count(params, "q")
            if quota is None and isinstance(name, int) and not isinstance(name, bool):
                quota = min(name, MOST)  # draft -07: the item is the quota (10;w=1)
            if quota is None:
                raise _Garbled("q")
            policies[name] = (quota, _param_seconds(params, "w"))
        except _Garbled:
            state.garbled = True
    return policies


def _draft_seven(values: list[str], state: _State) -> list[Quota]:
    """Draft -07's dictionary: ``limit=100, remaining=50, reset=30``."""
    members = _parse_dictionary(", ".join(values))
    remaining, reset, limit = (members.get(k) for k in ("remaining", "reset", "limit"))
    if not isinstance(remaining, int) or isinstance(remaining, bool) or remaining < 0:
        raise _Garbled("remaining")
    if not _is_number(reset) or reset < 0:  # type: ignore[operator]
        raise _Garbled("reset")
    remaining_count = min(remaining, MOST)
    limit_count = (
        min(limit, MOST)
        if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0
        else None
    )
    if limit_count is not None and remaining_count > limit_count:
        raise _Garbled("remaining > limit")
    resets_in = state.seconds(float(reset), epoch_allowed=False)  # type: ignore[arg-type]
    return [Quota(limit_count, remaining_count, resets_in, None, "ratelimit")]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _param_count(params: dict[str, object], key: str) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _Garbled(key)
    return min(value, MOST)


def _param_seconds(params: dict[str, object], key: str) -> float | None:
    value = params.get(key)
    if value is None:
        return None
    if not _is_number(value) or value < 0:  # type: ignore[operator]
        raise _Garbled(key)
    return float(value)  # type: ignore[arg-type]


Member = tuple[object, dict[str, object]]


def _parse_list(text: str) -> list[Member]:
    """An RFC 8941 List of Items with their parameters. Inner lists are not used
    by these fields and read as garbled."""
    parser = _Parser(text)
    members: list[Member] = []
    while parser.next_member():
        members.append((parser.bare_item(), parser.params()))
    return members


def _parse_dictionary(text: str) -> dict[str, object]:
    """An RFC 8941 Dictionary's values by key (a key alone is True)."""
    parser = _Parser(text)
    members: dict[str, object] = {}
    while parser.next_member():
        key = parser.key()
        value: object = True
        if parser.peek() == "=":
            parser.index += 1
            value = parser.bare_item()
        parser.params()
        members[key] = value
    return members


_KEY_FIRST = frozenset("abcdefghijklmnopqrstuvwxyz*")
_KEY_REST = _KEY_FIRST | frozenset("0123456789_-.")
_TOKEN_FIRST = _KEY_FIRST | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_TOKEN_REST = _TOKEN_FIRST | frozenset("0123456789!#$%&'+-.^_`|~:/")
_DIGITS = frozenset("0123456789")


class _Parser:
    """RFC 8941, section 4.2, for the bare items these fields use; any error is
    :class:`_Garbled`."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.index = 0
        self.started = False

    def peek(self) -> str:
        return self.text[self.index] if self.index < len(self.text) else ""

    def skip(self, chars: str) -> None:
        while self.index < len(self.text) and self.text[self.index] in chars:
            self.index += 1

    def next_member(self) -> bool:
        """Past the comma before the next member; False at the end."""
        self.skip(" \t")
        if self.index >= len(self.text):
            if self.started and self.text.rstrip(" \t").endswith(","):
                raise _Garbled("trailing comma")
            return False
        if self.started:
            if self.peek() != ",":
                raise _Garbled(self.text)
            self.index += 1
            self.skip(" \t")
            if self.index >= len(self.text):
                raise _Garbled("trailing comma")
        self.started = True
        return True

    def key(self) -> str:
        start = self.index
        if self.peek() not in _KEY_FIRST or not self.peek():
            raise _Garbled(self.text)
        while self.peek() and self.peek() in _KEY_REST:
            self.index += 1
        return self.text[start : self.index]

    def params(self) -> dict[str, object]:
        params: dict[str, object] = {}
        while self.peek() == ";":
            self.index += 1
            self.skip(" ")
            key = self.key()
            value: object = True
            if self.peek() == "=":
                self.index += 1
                value = self.bare_item()
            params[key] = value
        return params

    def bare_item(self) -> object:
        char = self.peek()
        if char == "-" or (char and char in _DIGITS):
            return self.number()
        if char == '"':
            return self.string()
        if char and char in _TOKEN_FIRST:
            start = self.index
            while self.peek() and self.peek() in _TOKEN_REST:
                self.index += 1
            return self.text[start : self.index]
        if char == "?" and self.text[self.index + 1 : self.index + 2] in ("0", "1"):
            self.index += 2
            return self.text[self.index - 1] == "1"
        if char == ":":
            end = self.text.find(":", self.index + 1)
            if end < 0:
                raise _Garbled(self.text)
            data = self.text[self.index : end + 1]
            self.index = end + 1
            return data.encode("latin-1")
        raise _Garbled(self.text)

    def number(self) -> int | float:
        start = self.index
        if self.peek() == "-":
            self.index += 1
        while self.peek() and self.peek() in _DIGITS:
            self.index += 1
        whole = self.text[start : self.index].lstrip("-")
        if not whole or len(whole) > 15:
            raise _Garbled(self.text)
        if self.peek() != ".":
            return int(self.text[start : self.index])
        self.index += 1
        fraction_start = self.index
        while self.peek() and self.peek() in _DIGITS:
            self.index += 1
        fraction = self.text[fraction_start : self.index]
        if not fraction or len(fraction) > 3 or len(whole) > 12:
            raise _Garbled(self.text)
        return float(self.text[start : self.index])

    def string(self) -> str:
        self.index += 1
        out = []
        while self.index < len(self.text):
            char = self.text[self.index]
            self.index += 1
            if char == "\\":
                escaped = self.peek()
                if escaped not in ('"', "\\") or not escaped:
                    raise _Garbled(self.text)
                out.append(escaped)
                self.index += 1
            elif char == '"':
                return "".join(out)
            elif not " " <= char <= "~":
                raise _Garbled(self.text)
            else:
                out.append(char)
        raise _Garbled("unterminated string")
