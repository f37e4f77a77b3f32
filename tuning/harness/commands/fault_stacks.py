"""A fault run's stacks (run/stacks.py): every live rank's, taken while the peers still wait
(no step for half of TIMEOUT after the fault, before their collective timeout ends them), or
at the latest when the harness stops a hung run, before any heal (unpause, thaw) or teardown.
fault.json keeps them only for a run that ended in a hang, a timeout or the deadline."""

from __future__ import annotations

from tuning.harness.run import stacks

EARLY = 0.5  # of TIMEOUT without a step after the fault: dump while the peers still wait
HUNG = ("hang detected", "deadline")  # the Follow's stopped_by for a run that hung


class HangStacks:
    def __init__(self, timeout_s: float):
        self.timeout = timeout_s
        self.taken: dict | None = None

    def tick(self, follow, nodes, now: float) -> None:
        if self.taken or follow.injected_at is None or follow.finished_at:
            return
        quiet = now - max(follow.injected_at, follow.last_step_seen[1])
        if quiet > EARLY * self.timeout:
            why = f"no step for {quiet:.0f} s after the fault"
            self.taken = stacks.take(nodes, why)

    def at_stop(self, follow, nodes) -> None:
        if follow.stopped_by in HUNG and not self.taken and nodes is not None:
            self.taken = stacks.take(nodes, f"fault run {follow.stopped_by}")


def record(follow, timed_out: bool) -> dict:
    """fault.json's "stacks", where the run hung, a rank timed out, or it hit the deadline."""
    hung = follow.stopped_by in HUNG or timed_out
    taken = follow.hang_stacks.taken
    return {"stacks": taken} if hung and taken else {}
