"""slow: the rank gets a sliver of a CPU (per-rank: `docker update --cpus`; single: its worker
stopped and continued on a 100 ms cycle, since the container's cgroup holds every rank). The
job is expected to go on at the slow rank's pace: the record compares step times before and
after the fault, per rank."""

from __future__ import annotations

import statistics

from tuning.harness.faults.fault_json import FaultRecord
from tuning.harness.faults.kinds.kind import GOES_ON, SINCE_STEP, Kind
from tuning.harness.faults.kinds.tools import sh
from tuning.harness.run_files import metric_lines

SLOW_CPUS = 0.05  # the target's share of a CPU
STEP_SLEEP_S = 0.05  # less padding than other kinds, so the throttled compute shows in step times


def slow(inj, nodes, ctr, pid) -> str:
    if inj.per_rank:
        ctr.update(cpu_period=100_000, cpu_quota=int(100_000 * SLOW_CPUS))
        return f"docker update --cpus {SLOW_CPUS} {ctr.name}"
    # one cgroup holds every rank: duty-cycle the one process with STOP/CONT
    on = SLOW_CPUS * 0.1
    loop = (
        f"while kill -STOP {pid} 2>/dev/null; do sleep {0.1 - on:.3f}; "
        f"kill -CONT {pid}; sleep {on:.3f}; done"
    )
    sh(ctr, loop, detach=True)
    inj.heals.append(lambda: sh(ctr, f"kill -CONT {pid}"))
    return (
        f"rank {inj.rank}'s worker (pid {pid}) stopped/continued on a 100 ms "
        f"cycle, running {SLOW_CPUS:.0%} of it"
    )


def slowdown(metrics, fault_at) -> dict:
    """Median step time per rank before and after the fault, and their ratio."""
    out = {}
    for r, lines in metrics.items():
        st = metric_lines.steps(lines)
        before = [x["step_s"] for x in st if fault_at and x["time"] < fault_at and x["step"] > 2]
        after = [x["step_s"] for x in st if fault_at and x["time"] > fault_at + 1]
        b = statistics.median(before) if before else None
        a = statistics.median(after) if after else None
        out[str(r)] = {
            "step_s_before": b,
            "step_s_after": a,
            "ratio": round(a / b, 2) if a and b else None,
        }
    return out


def table(rec: FaultRecord) -> list[str]:
    """fault.md's table of step times before and after, per rank."""
    if not rec.own.get("slowdown"):
        return []
    lines = ["", "| rank | step s before | step s after | ratio |", "| --- | --- | --- | --- |"]
    for r, s in rec.own["slowdown"].items():
        lines.append(f"| {r} | {s['step_s_before']} | {s['step_s_after']} | {s['ratio']} |")
    return lines


KINDS = (
    Kind(
        "slow",
        120,
        inject=slow,
        step_sleep_s=STEP_SLEEP_S,
        expect=GOES_ON,
        judged="slow",
        pool_place=6,
        # the run goes on, only slower: its deadline runs from its newest step, so a throttled
        # rank's pace (1-4 s a step here, by load) never cuts it short; a throttled launcher
        # is slow to exit, not stuck
        deadline=SINCE_STEP,
        slow_exit=True,
        cluster="no timeout is involved: every rank runs at the pace of the slowest",
        facts=lambda follow, seen: {"slowdown": slowdown(seen.metrics, follow.injected_at)},
        table=table,
    ),
)
