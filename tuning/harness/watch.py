"""What a run's watcher (lifecycle's `on_tick`: the stall watch, a fault's follow, a soak, the
kube rehearsal's operator) tells the loop after each poll: nothing (go on), `Stop` (end the
follow, and why), or `Restarted` (it restarted the group itself). Typed, so the loop reads no
strings and no attribute it has to guess at."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

TICK_S = 0.5  # how often a run's metrics and containers are read, unless a watcher asks


@dataclass(frozen=True)
class Stop:
    """End the follow now. Where not every rank has returned, `why` is the run's reason."""

    why: str = "stopped by the harness (fault injection)"


@dataclass(frozen=True)
class Restarted:
    """The watcher restarted the group itself (make soak): the loop's clocks start again."""


class Watcher(Protocol):
    # how often it wants to be called; None: TICK_S (a fault waits for an unpaced step faster)
    tick_s: float | None

    def __call__(self, metrics: dict, state: dict, nodes) -> Stop | Restarted | None: ...
