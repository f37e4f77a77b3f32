"""A fault run's stacks (stacks/dumps.py): every live rank's, taken while the peers still wait
(no step for half of TIMEOUT after the fault, before their collective timeout ends them), or
at the latest when the harness stops a hung run, before any heal (unpause, thaw) or teardown;
or once while the ranks still step, SLOWED_X times slower than before the fault. Each dump is
judged at once (faults/verdicts.py: the verdict, printed). fault.json keeps them only for a run
that ended in a hang, a timeout or the deadline, or that slowed."""

from __future__ import annotations

from tuning.harness.run_files import metric_lines
from tuning.harness.stacks import dumps

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
        slower = metric_lines.slowed(follow.metrics, follow.injected_at)
        if quiet > EARLY * self.timeout:
            self._take(follow, nodes, f"no step for {quiet:.0f} s after the fault")
        elif slower:  # judged as a run that still steps
            why = f"steps {slower:.1f} x slower than before the fault"
            self._take(follow, nodes, why, progressing=True)

    def at_stop(self, follow, nodes) -> None:
        if follow.stopped_by in HUNG and not self.taken and nodes is not None:
            self._take(follow, nodes, f"fault run {follow.stopped_by}")

    def _take(self, follow, nodes, why: str, progressing: bool = False) -> None:
        self.taken = dumps.take(nodes, why)
        if self.taken:
            self.taken["progressing"] = progressing
            follow.verdicts.at_dump(follow, nodes, self.taken, follow.metrics)


def record(follow, timed_out: bool) -> dict:
    """fault.json's "stacks", where the run hung, a rank timed out, or it hit the deadline."""
    taken = follow.hang_stacks.taken
    hung = follow.stopped_by in HUNG or timed_out or bool(taken and taken.get("progressing"))
    return {"stacks": taken} if hung and taken else {}
