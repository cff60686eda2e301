"""A fleet host's politeness, moved on by the one set of rules: ``HostController``.

The fleet keeps each host's ``HostController.state()`` in Redis, pickled, with
the tickets of its requests in flight (by lease) and a log of the starts and
cancels that claims and lease expiries made since that state was stored (a
claim is a Lua script: it cannot run the controller). An event (a response, a
failure, a Crawl-delay) is applied by restoring the controller with
``from_state``, replaying the log up to the event's time (each start as
``start``, each cancel as ``cancel``), letting the controller act, and storing
``state()`` again. Since ``state()`` carries the controller's whole memory, a
host shared by any number of workers goes exactly as one controller fed every
start and every answer in order. Only what a claim needs to decide alone, on
the server, is read out of the controller: its limits (gap, limit, end of its
pause), the inputs of the one gate that the claim script applies as the
controller does (tests/test_gate_lua.py). Times are on the fleet's clock
(Redis's). No Scrapy or Redis import.
"""

from __future__ import annotations

import io
import json
import math
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from scrapy_aimd.core.controller import ControllerConfig, HostController, Reaction, Ticket
from scrapy_aimd.core.controller.gate import Limits

__all__ = [
    "Applied",
    "HostData",
    "Limits",
    "Replica",
    "apply",
    "decode_state",
    "limits_of",
    "restore",
]

Event = Callable[[HostController, Ticket | None], Reaction | None]


def limits_of(controller: HostController) -> Limits:
    """What a claim reads of a host's controller: the gate's inputs (gap, limit,
    pause: ``-inf`` if none), which ``gate_ready_at`` in common.lua applies as
    the controller's gate does."""
    return controller.limits


@dataclass(slots=True)
class HostData:
    """A host as the fleet held it in this worker's latest reply about it: the
    version and state, the tickets in flight (both as stored: see :func:`encode`)
    and the log not yet folded in."""

    version: int = 0
    state: bytes = b""
    tickets: bytes = b""
    log: list[str] = field(default_factory=list)


class Applied(NamedTuple):
    """The host after an event: its controller, what to store of it, its limits,
    the controller's reaction, and how much of the log it folded in. A named tuple:
    made for every answer, it costs a third of a frozen dataclass's construction."""

    controller: HostController
    state: bytes
    tickets: bytes
    limits: Limits
    reaction: Reaction | None
    replayed: int
    last_replayed: str
    stray: int
    """Logged starts the controller would not take (it should never happen: the
    claim script checks the same rule)."""
    replica: Replica
    """The host's replica, moved on by the event: reusable once its state is stored."""


def encode(value: dict[str, Any]) -> bytes:
    """A state or tickets as stored: pickled, a third of the CPU of JSON for a
    state of floats (this is per feedback). Read back by :func:`decode`, which
    takes plain values only."""
    return pickle.dumps(value, protocol=5)


class _PlainValues(pickle.Unpickler):
    """Unpickles dicts, lists, numbers, strings and None, and nothing that runs code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not a plain value")


def decode(raw: bytes | str, what: str) -> dict[str, Any] | None:
    """A stored state or tickets (``what``, for errors): pickled as :func:`encode`
    writes them, or JSON (a state written by hand); None when empty. Raises
    ValueError."""
    if not raw:
        return None
    data = raw.encode() if isinstance(raw, str) else raw
    try:
        value = json.loads(data) if data[:1] == b"{" else _PlainValues(io.BytesIO(data)).load()
    except Exception as exc:
        raise ValueError(f"{what}: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected a mapping, got {type(value).__name__}")
    return value


def decode_state(raw: bytes | str) -> dict[str, Any] | None:
    """A stored state, or None for a host with none yet. Raises ValueError."""
    return decode(raw, "state")


def restore(cfg: ControllerConfig, state: Mapping[str, Any] | None) -> HostController:
    """The host's controller, with the requests in flight that the state knew."""
    if state is None:
        return HostController(cfg)
    return HostController.from_state(cfg, state, in_flight=True)


def decode_tickets(raw: bytes | str) -> dict[str, Ticket]:
    """The tickets in flight by lease, as stored. Raises ValueError."""
    data = decode(raw, "tickets")
    if not data:
        return {}
    tickets = {}
    for lease, value in data.items():
        if not (
            isinstance(value, list)
            and len(value) == 3
            and isinstance(value[0], int)
            and isinstance(value[1], (int, float))
            and isinstance(value[2], int)
        ):
            raise ValueError(f"tickets: {lease}={value!r} is not a ticket")
        tickets[lease] = Ticket(value[0], float(value[1]), value[2])
    return tickets


def parse_entry(entry: str) -> tuple[str, str, float]:
    """A log entry as (kind, lease, time). Raises ValueError."""
    parts = entry.split(" ")
    if len(parts) != 3 or parts[0] not in ("s", "c"):
        raise ValueError(f"log entry {entry!r} is not '<s|c> <lease> <time>'")
    return parts[0], parts[1], float(parts[2])


def parse_log(entries: Sequence[str]) -> list[tuple[str, str, float]]:
    """The log's entries as (kind, lease, time). Raises ValueError."""
    return [parse_entry(entry) for entry in entries]


@dataclass(slots=True)
class Replica:
    """A host's controller restored from one stored state, with the log entries
    replayed on it so far, kept between a worker's calls: restoring a controller
    from its stored state costs more than the rest of a feedback, and while no
    other worker stored a newer state, the one in hand is the same controller
    (``state()`` carries the whole memory)."""

    controller: HostController
    tickets: dict[str, Ticket]
    version: int
    state: bytes
    stored_tickets: bytes
    """The tickets as stored with ``state`` (``tickets`` moves on with the replays)."""
    replayed: list[str] = field(default_factory=list)
    latest: float = -math.inf
    """The time of the latest entry replayed."""
    stray: int = 0
    viewed: HostData | None = None
    """The host data whose whole log this replica replayed last (see
    :meth:`up_to_date`): asked again about the same data, it has nothing to do."""

    @classmethod
    def of(cls, cfg: ControllerConfig, data: HostData) -> Replica:
        """Restored from ``data``'s state, nothing replayed. Raises ValueError, for
        whatever stops the restore (a number too large for a float, a list nested
        too deep): a state that cannot be read."""
        try:
            controller = restore(cfg, decode_state(data.state))
            tickets = decode_tickets(data.tickets)
        except ValueError:
            raise
        except Exception as exc:
            raise ValueError(f"state: {type(exc).__name__}: {exc}") from exc
        return cls(controller, tickets, data.version, data.state, data.tickets)

    def fits(self, data: HostData, at: float) -> bool:
        """The same stored state as ``data``, its log replayed no further than ``at``."""
        replayed = self.replayed
        return (
            self.version == data.version
            and self.state == data.state
            and self.latest <= at
            and data.log[: len(replayed)] == replayed
        )

    def up_to_date(self, data: HostData) -> bool:
        """Already moved through all of ``data`` (the same object: host data is
        never changed in place, a reply makes a new one)."""
        return self.viewed is data and len(self.replayed) == len(data.log)

    def replay(self, log: Sequence[str], at: float) -> None:
        """Replay the entries of ``log`` past those replayed, up to ``at`` (each
        start as ``start``, each cancel as ``cancel``). Raises ValueError (every
        new entry is read before any is replayed)."""
        replayed = self.replayed
        done = len(replayed)
        if done >= len(log):
            return  # most calls: nothing new (a reply about the host with no start since)
        new = log[done:]
        controller, tickets, latest = self.controller, self.tickets, self.latest
        for raw, (kind, entry_lease, t) in zip(new, parse_log(new), strict=True):
            if t > at:
                break
            if kind == "s":
                ready = controller.ready_at(t)
                start = t if ready <= t else ready
                if math.isfinite(start):
                    tickets[entry_lease] = controller.start(start)
                else:
                    self.stray += 1
            else:
                ticket = tickets.pop(entry_lease, None)
                if ticket is not None:
                    controller.cancel(ticket)
            replayed.append(raw)
            if t > latest:
                latest = t
            self.latest = latest

    def stored(self, version: int, state: bytes, tickets: bytes) -> None:
        """The state this replica was moved to is stored as ``version`` (with
        ``tickets``), and the log entries it replayed are dropped from the log."""
        self.version, self.state, self.stored_tickets = version, state, tickets
        self.replayed, self.latest, self.stray = [], -math.inf, 0
        self.viewed = None


def apply(
    cfg: ControllerConfig,
    data: HostData,
    event: Event,
    *,
    lease: str,
    at: float,
    replica: Replica | None = None,
) -> Applied:
    """Restore the host (or take ``replica``, if it holds the same state), replay
    its log up to ``at``, apply ``event`` with the ticket of ``lease`` ('' : the
    event is about no request) and read the result back. The replica used is
    moved on by the event: ``Applied.replica``. Raises ValueError on a state,
    tickets or log that cannot be read."""
    if replica is None or not replica.fits(data, at):
        replica = Replica.of(cfg, data)
    replica.replay(data.log, at)
    controller, tickets = replica.controller, replica.tickets
    ticket = tickets.pop(lease, None) if lease else None
    reaction = event(controller, ticket)
    state = encode(controller.state())
    kept = encode({k: list(v) for k, v in tickets.items()})
    replayed = replica.replayed
    return Applied(
        controller,
        state,
        kept,
        limits_of(controller),
        reaction,
        len(replayed),
        replayed[-1] if replayed else "",
        replica.stray,
        replica,
    )
