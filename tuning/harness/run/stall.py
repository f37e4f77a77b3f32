"""`make up`'s stall watch: when no rank has made progress for the stall time, print every live
rank's stack summary (run/stacks.py) and keep the dump in the run (output/stacks/, and
summary.json's "stall").

Progress is a new step in the metrics; before a trainer's first step (or for one that logs
none), any new line in the metrics or any new output in the nodes' logs. The run goes on
after the dump: a step can be slow and still healthy (a big save, an evaluation), and a truly
stuck collective ends by its own timeout (ddp_timeout) or by Ctrl-C, as it would without
the watch; the dump only says where each rank is.
"""

from __future__ import annotations

import statistics
import time

from tuning.harness.run import stacks
from tuning.harness.rundirs import runs

FLOOR_S = 60.0  # the default stall time is never below this
STEPS_PER_STALL = 10  # ... nor below this many median steps
LOG_EVERY_S = 5.0  # how often the nodes' logs are asked for new output


def default_limit(step_times: list[float]) -> float:
    """max(FLOOR_S, STEPS_PER_STALL x the median step time measured so far)."""
    return max(FLOOR_S, STEPS_PER_STALL * statistics.median(step_times)) if step_times else FLOOR_S


class StallWatch:
    """lifecycle's on_tick for `up`: never stops the run; `summary_extra` gets "stall"."""

    def __init__(self, limit_s: float | None, summary_extra: dict):
        self.limit_s, self.extra = limit_s, summary_extra  # limit None: the default
        self.mark: tuple | None = None  # what progress looked like last
        self.last = time.monotonic()  # when it last changed
        self.logs_at = time.time()  # output newer than this is progress
        self.logs_checked = 0.0
        self.dumped = False  # one dump per quiet spell

    def limit(self, metrics) -> float:
        if self.limit_s is not None:
            return self.limit_s
        times = [s["step_s"] for lines in metrics.values() for s in runs.steps(lines)
                 if s.get("step_s") is not None]  # fmt: skip
        return default_limit(times)

    def progressed(self, metrics, nodes) -> bool:
        steps = {r: max((s["step"] for s in runs.steps(x)), default=0) for r, x in metrics.items()}
        lines = sum(map(len, metrics.values()))
        mark = (steps,) if any(steps.values()) else (steps, lines)
        moved = mark != self.mark
        self.mark = mark
        if not moved and not any(steps.values()) and self._new_output(nodes):
            moved = True
        return moved

    def _new_output(self, nodes) -> bool:
        now = time.time()
        if now - self.logs_checked < LOG_EVERY_S:
            return False
        since, self.logs_checked, self.logs_at = self.logs_at, now, now
        if hasattr(nodes, "all_containers"):
            return any(c.logs(since=since) for c in nodes.all_containers())
        log = nodes.run_dir / "logs/host.log"
        return log.is_file() and log.stat().st_mtime > since

    def __call__(self, metrics, state, nodes):
        now = time.monotonic()
        if self.progressed(metrics, nodes) or any(c is not None for c in state.values()):
            self.last, self.dumped = now, False  # moving, or ending / restarting: not a stall
            return None
        quiet, limit = now - self.last, self.limit(metrics)
        if self.dumped or quiet < limit:
            return None
        self.dumped = True
        how = "set by --stall" if self.limit_s is not None else (
            f"max({FLOOR_S:.0f} s, {STEPS_PER_STALL} x the median step time)")  # fmt: skip
        print(f"harness: no rank has made progress for {quiet:.0f} s (stall time {limit:.0f} s, "
              f"{how}); the ranks' stacks follow. The run goes on: the collective timeout "
              "ends a stuck one, Ctrl-C stops it.")  # fmt: skip
        taken = stacks.take(nodes, f"stalled {quiet:.0f} s")
        if taken is None:
            return None
        first = self.extra.get("stall")
        self.extra["stall"] = first or {
            "quiet_s": round(quiet, 1), "stall_s": round(limit, 1), "set_by": how,
            "time": taken["time"], "dump_s": taken["dump_s"], "summaries": taken["summaries"],
            "stacks_dir": "output/stacks",
        }  # fmt: skip
        self.extra["stall"]["spells"] = self.extra["stall"].get("spells", 0) + 1
        return None
