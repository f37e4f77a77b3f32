"""The injection half of a fault run: wait for the target rank's step, then hit it with its
kind's injector (faults/kinds/: a signal, a freeze, a throttle, a cut link, netem, memory), and
undo what must be undone before teardown (`release`). The watching half is faults/follow.py.

It reaches the run's containers only through the backend's accessors (`container`,
`all_containers`, `client`, `issued_at`, `layout`: nodes.py).
"""

from __future__ import annotations

import time

import docker.errors

from tuning.harness.faults.kinds import TABLE
from tuning.harness.faults.kinds.tools import worker_pid
from tuning.harness.run_files import metric_lines


class Injector:
    """One fault of `kind` (a name of kinds.TABLE) on rank `rank` (node `target`) at step
    `at_step`. `due()` is called on every tick until it returns what it did:
    [(how, step, when)]. What the kind keeps of its fault lives in `state`."""

    def __init__(self, kind: str, layout_name: str, target: str, knobs: dict, run_id: str):
        self.kind = TABLE[kind]
        self.per_rank, self.target = layout_name == "per-rank", target
        self.rank, self.at_step, self.run_id = knobs["rank"], knobs["at_step"], run_id
        self.group_steps = knobs.get("group_steps", False)  # only rank 0 logs steps (fms)
        self.heals: list = []  # what undoes the fault (thaw, unpause, remove the helper)
        self.state: dict = self.kind.state(target, knobs) if self.kind.state else {}
        self.when = 0.0  # when the fault took effect (its injector may set it after acting)

    def target_step(self, metrics) -> int:
        rank = 0 if self.group_steps else self.rank  # fms: the group's step, from rank 0
        return max((x["step"] for x in metric_lines.steps(metrics.get(rank, []))), default=0)

    def due(self, metrics, nodes, now: float) -> list[tuple[str, int, float]]:
        """Inject if it is time: [(how, step, when)] once injected, else []."""
        kind = self.kind
        if kind.due:  # it does not wait for the step, or the rank strikes by itself
            return kind.due(self, metrics, nodes, now)
        step = self.target_step(metrics)
        if step < self.at_step or (kind.ready and not kind.ready(self, nodes)):
            return []
        ctr = nodes.container(self.target)
        pid = None
        if kind.pid == "always" or kind.pid == "single" and not self.per_rank:
            pid = worker_pid(ctr, self.rank)
            if pid is None:
                return []  # not visible yet (or already gone); try on the next tick
        self.when = time.time()
        how = kind.inject(self, nodes, ctr, pid)
        return [] if how is None else [(how, step, self.when)]

    def release(self) -> None:
        heals, self.heals = self.heals, []
        for heal in heals:
            try:
                heal()
            except docker.errors.APIError:
                pass
