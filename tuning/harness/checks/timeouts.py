"""A run's timeouts, checked against each other and against what a run of the job measured:
the collective timeout (ddp_timeout) against the slowest step, save and evaluation; the
rendezvous timeout against how far apart the ranks reached it; the stall watch's time; a
pod's terminationGracePeriodSeconds against the save a preempted pod must finish. Each finding
says what will go wrong and the value to set (NVRx and torchft document such orderings: a
timeout must outlast the slowest healthy wait it guards, by a margin).

`make up` checks before the run and again with what the run measured; `make fault` with what
its run measured before the fault (faults/record.py: fault.json's "timeouts", a line of
fault.md; it has no stall watch to check before); `make kube` with the newest run of the same
job in RUNS (summary.json's "job_file").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from tuning.harness.run_files import folders, metric_lines

HF_DDP_TIMEOUT_S = 1800  # TrainingArguments.ddp_timeout's default
TORCHRUN_RDZV_S = 600  # torchrun's static rendezvous join timeout
K8S_GRACE_S = 30  # a pod's terminationGracePeriodSeconds when unset
MARGIN = 3  # a timeout should outlast the slowest healthy wait this many times


@dataclass(frozen=True)
class Timeouts:
    collective_s: float  # ddp_timeout
    rendezvous_s: float  # static rendezvous join
    stall_s: float | None = None  # up's stall watch (None: not watched)
    grace_period_s: float | None = None  # kube: the pod's terminationGracePeriodSeconds

    @classmethod
    def of(cls, job: dict, rdzv_s: int | None = None, **kw) -> Timeouts:
        collective = job.get("ddp_timeout") or HF_DDP_TIMEOUT_S
        return cls(float(collective), float(rdzv_s or TORCHRUN_RDZV_S), **kw)


@dataclass(frozen=True)
class Measured:
    run_id: str
    median_step_s: float | None
    slowest_step_s: float | None
    save_s: float | None  # the slowest checkpoint save
    eval_s: float | None  # the slowest evaluation
    rendezvous_spread_s: float | None  # first to last rank to join the group

    def slowest(self) -> tuple[str, float] | None:
        named = [("step", self.slowest_step_s), ("save", self.save_s), ("evaluation", self.eval_s)]
        named = [(n, v) for n, v in named if v is not None]
        return max(named, key=lambda x: x[1]) if named else None


def measured(run_dir: Path) -> Measured | None:
    """What a run's metrics say of its slow waits (None: it logged no step)."""
    metrics = metric_lines.read_metrics(run_dir / "output")
    lines = [x for rank in metrics.values() for x in rank]
    steps = [x for x in lines if x.get("event") == "step"]
    if not steps:
        return None
    step_s = [x["step_s"] for x in steps if x.get("step_s") is not None]
    saves = [x["save_s"] for x in lines if x.get("event") == "checkpoint" and "save_s" in x]
    if not saves:  # a trainer that does not time its saves: from its step line to its save
        at = {(x["rank"], x["step"]): x["time"] for x in steps if "rank" in x}
        saves = [
            x["time"] - at[key]
            for x in lines
            if x.get("event") == "checkpoint" and (key := (x.get("rank"), x.get("step"))) in at
        ]
    evals = [x["eval_s"] for x in lines if x.get("event") == "evaluation" and "eval_s" in x]
    joined = [
        x["time"] for x in lines if (x.get("event"), x.get("name")) == ("phase", "rendezvous")
    ]
    median = statistics.median(step_s) if step_s else None
    return Measured(
        run_dir.name,
        median,
        max(step_s, default=None),
        max(saves, default=None),
        max(evals, default=None),
        round(max(joined) - min(joined), 1) if len(joined) > 1 else None,
    )


def _to_set(seconds: float) -> int:
    """A round value at least MARGIN times `seconds` (a minute's multiple past 2 minutes)."""
    want = MARGIN * seconds
    return int(math.ceil(want / 60) * 60) if want > 120 else int(math.ceil(want / 10) * 10)


def check(t: Timeouts, m: Measured | None) -> list[str]:
    """Findings, each a sentence with the value to set; [] when the timeouts fit."""
    out = []
    if t.stall_s and t.stall_s >= t.collective_s:
        half = int(t.collective_s // 2)
        out.append(
            f"the stall watch waits {t.stall_s:.0f} s, the collective timeout only "
            f"{t.collective_s:.0f} s: a stuck collective fails the ranks before the "
            f"watch can say where they are; set STALL={half}"
        )
    if m is None:
        return out
    src = f"(run {m.run_id})"
    slow = m.slowest()
    if slow and MARGIN * slow[1] > t.collective_s:
        what, s = slow
        out.append(
            f"your slowest {what} took {s:.1f} s {src} and the collective timeout is "
            f"{t.collective_s:.0f} s: ranks waiting in the next collective while one "
            f"rank is that slow (a {what} a little slower on a cluster) time out and the "
            f"job fails; set TIMEOUT={_to_set(s)} (ddp_timeout)"
        )
    if slow and t.stall_s and slow[1] >= t.stall_s:
        what, s = slow
        out.append(
            f"your slowest {what} took {s:.1f} s {src}, longer than the stall time "
            f"{t.stall_s:.0f} s: the watch will dump every rank's stack during a healthy "
            f"{what}; set STALL={_to_set(s)}"
        )
    if m.rendezvous_spread_s and MARGIN * m.rendezvous_spread_s > t.rendezvous_s:
        out.append(
            f"the ranks joined {m.rendezvous_spread_s:.1f} s apart {src} and the "
            f"rendezvous waits {t.rendezvous_s:.0f} s: a node that starts that much later "
            f"on a cluster (an image pull, a busy node) fails the start; set "
            f"RDZV_TIMEOUT={_to_set(m.rendezvous_spread_s)}"
        )
    if t.grace_period_s is not None and m.save_s is not None:
        need = m.save_s + (m.slowest_step_s or 0)
        if need > t.grace_period_s:
            out.append(
                f"a preempted pod gets {t.grace_period_s:.0f} s "
                f"(terminationGracePeriodSeconds) and your save took {m.save_s:.1f} s "
                f"after a step of {m.slowest_step_s or 0:.1f} s {src}: it will be killed "
                f"mid-save; set terminationGracePeriodSeconds: {_to_set(need)} in the "
                "pod spec"
            )
    return out


def newest_of_job(runs_root: Path, job_file: str) -> Path | None:
    """The newest run in RUNS of the same job file that logged steps (kube's measurement)."""
    found = []
    for d in Path(runs_root).iterdir() if Path(runs_root).is_dir() else ():
        summary = folders.read_json(d / "summary.json") if d.is_dir() and not d.is_symlink() else {}
        if summary.get("job_file") == job_file and summary.get("steps"):
            found.append((d.stat().st_mtime, d))
    return max(found)[1] if found else None


def say(findings: list[str], when: str) -> None:
    for f in findings:
        print(f"harness: timeouts ({when}): {f}")
