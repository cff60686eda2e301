"""The state record of one host: typed, versioned, one codec for JOBDIR and Redis.

:func:`encode` writes plain JSON data (times on the controller's clock,
infinities as None); :func:`decode` reads it back, checking every field, and
reads a state of an older version by its limits alone (what it learnt of the
host; the bookkeeping of the older rules is dropped). A state of a newer
version, or one that is not a state, is refused with an error that says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .estimators import AcceptedRate, Capacity, Latency, Outage, Phase

__all__ = ["VERSION", "HostState", "Phase", "decode", "encode", "shift_state"]

VERSION = 4
"""Versions 1 to 3 are the older rules' states: read by their limits alone."""

SNAP = 0.001
"""A gap within a millisecond of its floor is at it (below a reactor's jitter)."""

PHASES: tuple[str, ...] = ("startup", "steady", "backing_off", "outage", "blocked")


@dataclass(slots=True)
class HostState:
    """Everything the controller knows of a host."""

    gap: float
    limit: int
    pause: float = -math.inf
    crawl_delay: float = 0.0
    phase: Phase = "startup"
    round: int = 0
    """Decreases made: a ticket of an older round is not acted on again."""
    level_since: float = -math.inf
    """When the limit last changed."""
    level_good: int = 0
    """Good page answers of requests started since."""
    level_full: bool = False
    """In flight reached the limit since."""
    probe_at: float = -math.inf
    """In steady, when the gap next narrows."""
    probes: int = 0
    """Steps the gap narrowed since the last refusal (each a step longer)."""
    hold: float = 0.0
    """The spacing the host last refused at the gap (0: none) ..."""
    hold_until: float = -math.inf
    """... which the gap stays a margin above until then."""
    taken: float = 0.0
    """The gap last taken for a stretch (0: none): with ``hold``, the gap's bracket."""
    stretch: int = 0
    """``since_refusal`` at which the gap next halves its way towards ``hold``."""
    halved: bool = False
    """The last decrease halved the limit (an overload, not a gap)."""
    over: int = 0
    """The least limit the host refused for overload (0: none)."""
    since_refusal: int = 0
    answered_well: bool = False
    run: int = 0
    """Block statuses in a row: no other answer between of a page sent after the first's."""
    run_since: float = -math.inf
    wait: float = 0.0
    """While blocked, the wait before the next probe; after, the last one's."""
    told: float = 0.0
    """The gap at which the quota the host last told lasts until its earliest reset (0: none)."""
    told_most: int = 0
    """What the quota the host last told remains: the most in flight (0: none, or spent)."""
    queue_probe: int = 0
    """``since_refusal`` before which the limit stays at the workers a queue showed."""
    cut: tuple[float, float] | None = None
    """After a limit was cut for a queue: the median that made it, the limit before."""
    last_start: float = -math.inf
    previous_start: float = -math.inf
    last_serial: int = 0
    in_flight: dict[int, float] = field(default_factory=dict)
    """Requests in flight: serial -> seconds after the start before it (-1: none)."""
    latency: Latency = field(default_factory=Latency)
    capacity: Capacity = field(default_factory=Capacity)
    rate: AcceptedRate = field(default_factory=AcceptedRate)
    outage: Outage = field(default_factory=Outage)

    def floor(self, min_delay: float) -> float:
        """The narrowest gap allowed: ``max(min_delay, Crawl-delay)``."""
        return max(min_delay, self.crawl_delay)

    def set_gap(self, gap: float, min_delay: float, max_delay: float) -> None:
        """The gap within its floor and ``max_delay`` (the floor wins), snapped to the floor."""
        low = self.floor(min_delay)
        gap = max(low, min(max(max_delay, low), gap))
        self.gap = low if gap - low < SNAP else gap


_PARTS = {"latency": Latency, "capacity": Capacity, "rate": AcceptedRate, "outage": Outage}
#: Fields that are times on the controller's clock (moved by :func:`shift_state`).
_TIMES = {"level_since", "probe_at", "hold_until", "last_start", "previous_start", "run_since"}
#: Fields read apart: under their earlier names (gap, limit, pause), or by shape.
_SCALARS = {"gap", "limit", "pause", "crawl_delay", "phase", "cut", "in_flight"}
_PART_TIMES = {"rate": ("run_start", "refused_since"), "outage": ("since",)}


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return list(value) if isinstance(value, tuple) else value


def encode(s: HostState) -> dict[str, Any]:
    """The record as plain JSON data. ``delay``, ``concurrency`` and
    ``paused_until`` are named as the earlier versions named them."""
    out: dict[str, Any] = {"version": VERSION}
    for f in fields(s):
        value = getattr(s, f.name)
        if f.name in _PARTS:
            out[f.name] = {g.name: _plain(getattr(value, g.name)) for g in fields(value)}
        elif f.name == "in_flight":
            out[f.name] = [[serial, at] for serial, at in value.items()]
        else:
            out[f.name] = _plain(value)
    for old, new in (("delay", "gap"), ("concurrency", "limit"), ("paused_until", "pause")):
        out[old] = out.pop(new)
    out["best_latency"] = s.latency.baseline
    return out


def decode(data: Mapping[str, Any]) -> HostState:
    """A record from :func:`encode`'s data. Raises ValueError naming what is wrong."""
    if not isinstance(data, Mapping):
        raise ValueError(f"controller state {data!r}: expected a mapping")
    version = _whole(data, "version", 1, 1)
    if version > VERSION:
        raise ValueError(
            f"controller state of version {version}: this release reads versions up to {VERSION}"
        )
    s = HostState(gap=_number(data, "delay", 0.0), limit=_whole(data, "concurrency", 1, 1))
    s.crawl_delay = _number(data, "crawl_delay", 0.0)
    s.pause = _number(data, "paused_until", -math.inf, negative=True)
    latencies = data.get("latencies") if version < VERSION else None
    if latencies is not None:
        s.latency.values = _floats(latencies, "latencies")[-20:]
    if version < VERSION:
        memory = data.get("memory")
        if memory is not None and not isinstance(memory, Mapping):
            raise ValueError(
                f"controller state memory of {type(memory).__name__}: expected a mapping"
            )
        s.phase = "startup" if data.get("slow_start") is True else "steady"
        s.answered_well = bool(s.latency.values)
        return s
    _fields(s, data)
    return s


def _fields(s: HostState, data: Mapping[str, Any]) -> None:
    """The version's own fields, each checked against its default's type."""
    phase = data.get("phase")
    if phase not in PHASES:
        raise ValueError(f"controller state phase={phase!r}: expected one of {PHASES}")
    s.phase = phase
    for f in fields(s):
        default = getattr(s, f.name)
        if f.name in _SCALARS or f.name in _PARTS or f.name not in data:
            continue
        if f.name in _TIMES:
            setattr(s, f.name, _number(data, f.name, -math.inf, negative=True))
        elif isinstance(default, bool):
            setattr(s, f.name, _flag(data, f.name))
        elif isinstance(default, int):
            setattr(s, f.name, _whole(data, f.name, 0, 0))
        elif isinstance(default, float):
            setattr(s, f.name, _number(data, f.name, 0.0))
    cut = data.get("cut")
    if cut is not None:
        pair = _floats(cut, "cut")
        if len(pair) != 2:
            raise ValueError(f"controller state cut={cut!r}: expected a pair")
        s.cut = (pair[0], pair[1])
    live = data.get("in_flight", [])
    if not isinstance(live, list):
        raise ValueError(f"controller state in_flight={live!r}: expected a list")
    for entry in live:
        if not (isinstance(entry, list) and len(entry) == 2):
            raise ValueError(f"controller state in_flight entry {entry!r}: expected a pair")
        serial = _whole({"serial": entry[0]}, "serial", 0, 1)
        s.in_flight[serial] = _number({"in_flight": entry[1]}, "in_flight", 0.0, negative=True)
    for name, kind in _PARTS.items():
        part = data.get(name, {})
        if not isinstance(part, Mapping):
            raise ValueError(f"controller state {name}={part!r}: expected a mapping")
        setattr(s, name, _part(kind, name, part))


def _part(kind: type, name: str, data: Mapping[str, Any]) -> Any:
    """An estimator from its fields, each checked against its default's type."""
    value = kind()
    for f in fields(value):
        if f.name not in data:
            continue
        raw, default = data[f.name], getattr(value, f.name)
        where = f"{name}.{f.name}"
        if isinstance(default, list):
            raw = _floats(raw, where)
        elif isinstance(default, str):
            if raw not in PHASES:
                raise ValueError(f"controller state {where}={raw!r}: expected a phase")
        elif raw is not None or not (default is None or isinstance(default, float)):
            raw = _value(raw, where, whole=isinstance(default, int) and default is not None)
        setattr(value, f.name, raw)
    return value


def _value(raw: Any, where: str, *, whole: bool) -> float | int:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise ValueError(f"controller state {where}={raw!r}: expected a finite number")
    if whole and not isinstance(raw, int):
        raise ValueError(f"controller state {where}={raw!r}: expected a whole number")
    return raw


def _number(data: Mapping[str, Any], key: str, default: float, *, negative: bool = False) -> float:
    raw = data.get(key)
    if raw is None:
        return default
    value = float(_value(raw, key, whole=False))
    if value < 0 and not negative:
        raise ValueError(f"controller state {key}={raw!r}: expected a number >= 0")
    return value


def _whole(data: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    raw = data.get(key, default)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        raise ValueError(f"controller state {key}={raw!r}: expected a whole number >= {minimum}")
    return raw


def _flag(data: Mapping[str, Any], key: str) -> bool:
    raw = data.get(key, False)
    if not isinstance(raw, bool):
        raise ValueError(f"controller state {key}={raw!r}: expected true or false")
    return raw


def _floats(raw: Any, where: str) -> list[float]:
    if not isinstance(raw, list):
        raise ValueError(f"controller state {where}={raw!r}: expected a list of numbers")
    return [float(_value(v, where, whole=False)) for v in raw]


def shift_state(state: Mapping[str, Any], offset: float) -> dict[str, Any]:
    """A copy of an encoded state with every time moved by ``offset`` seconds:
    from one clock to another (a resumed crawl's, POSIX time)."""

    def move(value: Any) -> Any:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return value + offset if number else value

    moved = dict(state)
    for key in (*_TIMES, "paused_until"):
        if key in moved:
            moved[key] = move(moved[key])
    for part, keys in _PART_TIMES.items():
        inner = moved.get(part)
        if isinstance(inner, Mapping):
            moved[part] = {k: move(v) if k in keys else v for k, v in inner.items()}
    return moved
