"""A fleet host's politeness, moved on by the one set of rules: ``HostController``.

The fleet keeps each host's ``HostController.state()`` in Redis as JSON, opaque
here. An event (a response, a failure, a Crawl-delay) is applied by loading a
controller with ``from_state``, letting it act, and storing ``state()`` again.
Only what a claim needs to decide alone, on the server, is read out of the
controller: its gap, its limit and the end of its pause. Times are on the
fleet's clock (Redis's).

A worker keeps the controller of each host it touched, with the version of
the state it stands for: while no other worker's feedback moved that version,
events go to that very controller, which keeps its whole memory, so a host fed
by one worker at a time behaves exactly as in a single process. Once the
version moved, the controller is restored from the stored state: exact as far
as ``state()`` carries the controller's memory, as a resumed crawl. A restored
controller has nothing in flight, so the request that the event is about is
started in it again, at its claim time (or at the end of a pause that began
since, the earliest it may start there). No Scrapy or Redis import.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scrapy_aimd.core.controller import ControllerConfig, HostController, Reaction, Ticket

__all__ = ["Applied", "Limits", "applied", "apply", "decode_state", "limits_of", "restore"]

Event = Callable[[HostController, Ticket | None], Reaction | None]


@dataclass(frozen=True, slots=True)
class Limits:
    """What a claim reads of a host's controller (pause: ``-inf`` if none)."""

    gap: float
    limit: int
    pause: float

    def as_args(self) -> tuple[str, str, str]:
        return repr(self.gap), str(self.limit), repr(self.pause)


def limits_of(controller: HostController) -> Limits:
    return Limits(controller.delay, controller.concurrency, controller.paused_until)


@dataclass(frozen=True, slots=True)
class Applied:
    """The host after an event: its controller, new state (JSON text), limits and
    the controller's reaction."""

    controller: HostController
    state: str
    limits: Limits
    reaction: Reaction | None


def applied(controller: HostController, reaction: Reaction | None) -> Applied:
    """The controller after an event, with what is stored of it."""
    text = json.dumps(controller.state(), allow_nan=False, separators=(",", ":"))
    return Applied(controller, text, limits_of(controller), reaction)


def decode_state(raw: bytes | str) -> dict[str, Any] | None:
    """A stored state, or None for a host with none yet. Raises ValueError."""
    if not raw:
        return None
    state = json.loads(raw)
    if not isinstance(state, dict):
        raise ValueError(f"expected a JSON object, got {type(state).__name__}")
    return state


def restore(cfg: ControllerConfig, state: Mapping[str, Any] | None) -> HostController:
    return HostController(cfg) if state is None else HostController.from_state(cfg, state)


def apply(
    cfg: ControllerConfig,
    state: Mapping[str, Any] | None,
    event: Event,
    *,
    started: float | None,
) -> Applied:
    """Restore the host, start the request of ``started`` again (None: the event is
    about no request), apply ``event`` and read the result back."""
    controller = restore(cfg, state)
    ticket = None
    if started is not None:
        at = max(started, controller.ready_at(started))
        if math.isfinite(at):
            ticket = controller.start(at)
    return applied(controller, event(controller, ticket))
