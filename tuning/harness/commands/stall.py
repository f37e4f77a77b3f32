"""`make up`'s stall watch: when no rank has made progress for the stall time, print every live
rank's stack summary (run/dumps.py) and the verdict across ranks (verdict/rules.py: the culprit,
the class, the evidence), and keep both in the run (output/stacks/, and summary.json's "stall"
and "verdict").

Progress is a new line in any rank's metrics (a step, a replayed step after a restart, a
phase before the first step); a node's log output is not (c10d prints rendezvous retries while
a peer is missing). Exited nodes are past watching; the live ones stay watched. The run goes
on after the dump: a step can be slow and still healthy (a big save, an evaluation, a long
first step), and the dump then names that phase from the ranks' stacks; a truly stuck
collective ends by its own timeout (ddp_timeout) or by Ctrl-C, as it would without the watch.
"""

from __future__ import annotations

import statistics
import time

from tuning.harness.run import dumps, stack_text
from tuning.harness.run_files import metric_lines
from tuning.harness.verdict import live

FLOOR_S = 60.0  # the default stall time is never below this
STEPS_PER_STALL = 10  # ... nor below this many median gaps between logged steps


def default_limit(step_times: list[float]) -> float:
    """max(FLOOR_S, STEPS_PER_STALL x the median of `step_times`: the wall time between two
    logged steps, which is N steps' time for a trainer that logs every N steps)."""
    return max(FLOOR_S, STEPS_PER_STALL * statistics.median(step_times)) if step_times else FLOOR_S


def step_gaps(metrics) -> list[float]:
    """Seconds between successive step lines of each rank (a trainer logging every N steps,
    fms's logging_steps, shows N steps' time between its lines)."""
    gaps = []
    for lines in metrics.values():
        times = [s["time"] for s in metric_lines.steps(lines) if s.get("time") is not None]
        gaps += [b - a for a, b in zip(times, times[1:], strict=False) if b > a]
    return gaps


class StallWatch:
    """lifecycle's on_tick for `up`: never stops the run; `summary_extra` gets "stall"."""

    def __init__(self, limit_s: float | None, summary_extra: dict, clock=time.monotonic):
        self.limit_s, self.extra = limit_s, summary_extra  # limit None: the default
        self.clock = clock
        self.mark: tuple | None = None  # what progress looked like last
        self.last = clock()  # when it last changed
        self.dumped = False  # one dump per quiet spell

    def limit(self, metrics) -> float:
        return self.limit_s if self.limit_s is not None else default_limit(step_gaps(metrics))

    def progressed(self, metrics) -> bool:
        """Progress is a new line in any rank's metrics: a step (a step replayed after a
        restart counts: it is new work), or before the first step a phase (imports,
        rendezvous, model loaded, data ready). A node's log output is not: c10d prints its
        rendezvous retries for as long as a peer is missing. Until a rank has written its
        first line the nodes are starting (containers, the launcher), not yet watched."""
        mark = tuple(sorted((r, len(lines)) for r, lines in metrics.items()))
        moved = mark != self.mark or not any(n for _, n in mark)
        self.mark = mark
        return moved

    def due(self, metrics, state) -> float | None:
        """The quiet time when a dump is due now (None: not yet). Exited nodes are past
        watching; the live ones are watched still."""
        now = self.clock()
        live = [n for n, code in state.items() if code is None]
        if self.progressed(metrics) or not live:
            self.last, self.dumped = now, False
            return None
        quiet = now - self.last
        if self.dumped or quiet < self.limit(metrics):
            return None
        self.dumped = True
        return quiet

    def __call__(self, metrics, state, nodes):
        quiet = self.due(metrics, state)
        if quiet is None:
            return None
        limit = self.limit(metrics)
        how = (
            "set by STALL"
            if self.limit_s is not None
            else (f"max({FLOOR_S:.0f} s, {STEPS_PER_STALL} x the median time between logged steps)")
        )
        print(
            f"harness: no rank has logged progress for {quiet:.0f} s (stall time {limit:.0f} s, "
            f"{how}); the ranks' stacks follow. The run goes on: the collective timeout "
            "ends a stuck one, Ctrl-C stops it."
        )
        taken = dumps.take(nodes, f"no progress for {quiet:.0f} s")
        if taken is None:
            return None
        busy = stack_text.slow_phases(taken)
        if busy:
            print(f"harness: a slow phase, not necessarily a hang: {busy}")
        first = self.extra.get("stall")  # kept before judging: a Ctrl-C may come meanwhile
        self.extra["stall"] = first or {
            "quiet_s": round(quiet, 1),
            "stall_s": round(limit, 1),
            "set_by": how,
            "time": taken["time"],
            "dump_s": taken["dump_s"],
            "summaries": taken["summaries"],
            "phases": busy,
            "stacks_dir": "output/stacks",
            "verdict": None,
        }
        self.extra["stall"]["spells"] = self.extra["stall"].get("spells", 0) + 1
        found = live.judge_live(nodes, metrics, taken)  # may take a while (fr_check)
        if first is None:
            self.extra["stall"]["verdict"] = found
        self.extra.setdefault("verdict", found)  # summary.json's: the first spell's
        print("\n".join(live.said(found)))
        return None
