"""What a soak cost (soak.json; soak/write.py makes soak.md and soak.png of it).

- ETT, the effective training time (Meta's RSC study): the steps that survive (the newest step
  when DURATION was up: a finished job keeps its last steps) times the median step time, over
  the wall time from the moment the job began training (start-up is a one-off, not a failure's
  cost) to the stop.
- Every failure, cut at moments the ranks and the harness logged (the slowest rank sets each):
  the strike; detected (the first end line or node exit after it); torn down (the last of
  them, or the harness's `compose stop`); the new processes started (/proc: `time - t`); their
  imports; rendezvous; training began (model, data, Trainer and the checkpoint loaded); the
  first step; and the steps lost, recomputed. Restart cost R: strike to the first step, less
  one step (the group computes again). Work lost: from the checkpoint resumed from (or the
  attempt's start) to the strike.
- The save cost C: the median of the saves (each the slowest rank's save_s).
- The model (checks/save_interval.py): Young/Daly's ETT at this save interval with this C, R and
  MTBF, beside the measured ETT and its interval: the ETT this soak would show with the fewest
  and the most failures its count allows (report_stats.poisson_interval, 90 %), each failure
  costing what this soak's cost on average.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from tuning.container.rank import torn
from tuning.harness.bench import report_stats
from tuning.harness.bench.samples import boot_correction
from tuning.harness.checks import save_interval
from tuning.harness.run_files import metric_lines
from tuning.harness.soak.follow import began


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 2)


def step_time(metrics: dict) -> float | None:
    """The median step_s of every rank's steps but each attempt's first (it skips data)."""
    xs = [
        x["step_s"]
        for lines in metrics.values()
        for a in metric_lines.attempts(lines)
        for x in metric_lines.steps(a)[1:]
        if x.get("step_s")
    ]
    return statistics.median(xs) if xs else None


def saves(metrics: dict) -> list[dict]:
    """Each save once: its step and the slowest rank's save_s (every rank waits for it)."""
    by: dict[tuple, dict] = {}
    for lines in metrics.values():
        for i, a in enumerate(metric_lines.attempts(lines)):
            for x in a:
                if x.get("event") == "checkpoint" and x.get("save_s") is not None:
                    key = (i, x["step"])
                    seen = by.setdefault(key, {"step": x["step"], "time": x["time"], "save_s": 0})
                    seen["save_s"] = max(seen["save_s"], x["save_s"])
                    seen["time"] = max(seen["time"], x["time"])
    return sorted(by.values(), key=lambda s: s["time"])


def _around(attempts: dict[int, list[list[dict]]], when: float) -> tuple[dict, dict]:
    """Each rank's attempt running at `when` and the one after it."""
    old, new = {}, {}
    for r, xs in attempts.items():
        before = [a for a in xs if a[0]["time"] <= when]
        after = [a for a in xs if a[0]["time"] > when]
        if before:
            old[r] = before[-1]
        if after:
            new[r] = after[0]
    return old, new


def failure(f: dict, attempts: dict, follow, step_s: float, fix: float, until: float) -> dict:
    """One failure's parts (see the module's docstring); null where the soak ended first."""
    t = f["time"]
    old, new = _around(attempts, t)
    ends = [x["time"] for a in old.values() for x in a if x.get("event") == "end"]
    nxt = min((a[0]["time"] for a in new.values()), default=until)
    exits = [x["time"] for x in follow.exits if t <= x["time"] <= nxt]
    restart = next((x for x in follow.restarts if t <= x["time"] <= nxt), None)
    stopped = [restart["time"] + restart["stopped_s"]] if restart else []
    detected = min([x for x in ends + exits if x >= t], default=None)
    down = max([x for x in ends + exits if x >= t] + stopped, default=None)
    old_steps = [x for a in old.values() for x in metric_lines.steps(a)]
    last = max((x["step"] for x in old_steps), default=None)
    struck_line = next(
        (x for x in metric_lines.steps(old.get(f["rank"], [])) if x["step"] == f["landed"]), None
    )
    b = [began(a) for a in new.values()]
    b = [x for x in b if x]
    resumed = min((s for _, s in b), default=None)
    firsts = [metric_lines.steps(a)[0]["time"] for a in new.values() if metric_lines.steps(a)]
    first = max(firsts) if firsts and len(firsts) == len(b) else None
    process = [a[0]["time"] - a[0]["t"] + fix for a in new.values() if "t" in a[0]]
    lost = None if last is None or resumed is None else max(0, last - resumed)
    redone = None
    if lost:
        again = [
            x["time"] for a in new.values() for x in metric_lines.steps(a) if x["step"] == last
        ]
        redone = _diff(min(again), max(t for t, _ in b)) if again else None
    # work lost: from the checkpoint resumed from (saved in the old attempt), else from when
    # the old attempt began training, to the strike
    saved = [
        x["time"]
        for a in old.values()
        for x in a
        if x.get("event") == "checkpoint" and x["step"] == resumed
    ]
    started = [s[0] for a in old.values() if (s := began(a))]
    since = max(saved) if saved else max(started, default=None)
    return {
        **f,
        "steps_lost": lost,
        "last_step": last,
        "resumed_from": resumed,
        "held_s": _diff(t, struck_line and struck_line["time"]),
        "detect_s": _diff(detected, t),
        "teardown_s": _diff(down, detected),
        "restart_s": _diff(min(process, default=None), down),
        "imports_s": _diff(_latest(new, "imports"), min(process, default=None)),
        "rendezvous_s": _diff(_latest(new, "rendezvous"), _latest(new, "imports")),
        "load_s": _diff(max((t for t, _ in b), default=None), _latest(new, "rendezvous")),
        "first_step_s": _diff(first, max((t for t, _ in b), default=None)),
        "recompute_s": redone,
        "restart_cost_s": _diff(first - step_s, t) if first else None,
        "work_lost_s": _diff(t, since),
        "harness_restart": restart,
    }


def _latest(attempt_of: dict, name: str) -> float | None:
    seen = [
        x["time"]
        for a in attempt_of.values()
        for x in a
        if (x.get("event"), x.get("name")) == ("phase", name)
    ]
    return max(seen) if seen else None


def build(base: dict, follow, run_dir: Path) -> dict:
    """soak.json: the knobs (`base`), the plan, every failure, the saves, ETT and the model."""
    metrics = metric_lines.read_metrics(run_dir / "output")
    attempts = {r: metric_lines.attempts(lines) for r, lines in metrics.items() if lines}
    step_s = step_time(metrics) or follow.step_s
    end = follow.stopped_at or max((x["time"] for xs in metrics.values() for x in xs), default=0)
    fix = boot_correction()
    failures = [failure(f, attempts, follow, step_s, fix, end) for f in follow.failures]
    done = [x for x in saves(metrics) if not follow.started_at or x["time"] >= follow.started_at]
    last = final_step(attempts, follow, run_dir / "output")
    rec = {
        **base,
        "plan": follow.plan.record() if follow.plan else None,
        "step_s": _r(step_s, 4),
        "started_at": follow.started_at,
        "stopped_at": end,
        "stop_reason": follow.stop_reason,
        "failures": failures,
        "saves": {
            "count": len(done),
            "median_s": _r(_median([x["save_s"] for x in done]), 3),
            "total_s": _r(sum(x["save_s"] for x in done)),
            "each": done,
        },
        "restarts_by_harness": follow.restarts,
        "final_step": last,
    }
    if follow.started_at and step_s:
        rec.update(ett(rec, step_s, end - follow.started_at))
    return rec


def final_step(attempts: dict, follow, output: Path) -> int:
    """The steps that survive: the newest step of the attempt running at the stop; when the
    stop came between a strike and the group's return to training, the newest complete
    checkpoint (where it would resume)."""
    struck = follow.failures[-1]["time"] if follow.failures else 0
    now = [xs[-1] for xs in attempts.values() if xs[-1][0]["time"] > struck]
    seen = [x["step"] for a in now for x in metric_lines.steps(a)] or [
        b[1] for a in now if (b := began(a))
    ]
    if seen:
        return max(seen)
    whole = [p for p in torn.checkpoints(output) if torn.missing(p) is None]
    return int(whole[-1].name.rsplit("-", 1)[-1]) if whole else 0


def _median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def ett(rec: dict, step_s: float, wall_s: float) -> dict:
    """The measured ETT with its interval, and the model's for this interval, C, R and M."""
    n, useful = len(rec["failures"]), rec["final_step"] * step_s
    measured = useful / wall_s
    per_failure = (wall_s - useful - rec["saves"]["total_s"]) / n if n else None
    lo_n, hi_n = report_stats.poisson_interval(n)
    interval = None
    if per_failure is not None:
        interval = [
            _r(measured - (hi_n - n) * per_failure / wall_s, 4),
            _r(measured + (n - lo_n) * per_failure / wall_s, 4),
        ]
    c = rec["saves"]["median_s"]
    r = _median([x["restart_cost_s"] for x in rec["failures"]])
    plan = rec["plan"] or {}
    tau = rec["save_steps"] * step_s
    m = plan.get("mtbf_steps", 0) * step_s or None
    model = None
    if c and r is not None and m:
        # The model is computed from the figures it records, as recorded: a reader who checks
        # it from soak.json gets the same ETT (rounded inputs moved it by 0.005 at tau ~0.1 s).
        r, m, tau = _r(r, 3), _r(m, 3), _r(tau, 4)
        best = save_interval.interval_s(c, m)
        model = {
            "save_s": c,
            "restart_s": r,
            "mtbf_s": m,
            "tau_s": tau,
            "ett": _r(save_interval.ett(tau, c, r, m), 4),
            "ett_renewal": _r(renewal(tau, c, r, m), 4),
            "best_tau_s": _r(best),
            "best_save_steps": max(1, round(best / step_s)),
            "best_ett": _r(save_interval.ett(best, c, r, m), 4),
        }
        model["inside"] = bool(interval and interval[0] <= model["ett"] <= interval[1])
        # First order assumes a failure is rare within a save interval and a restart; where a
        # restart is as long as the time between failures (a short soak under load) it comes
        # out at or below 0 and says nothing: the renewal figure is the one to read there.
        model["first_order_holds"] = model["ett"] > 0
    return {
        "wall_s": _r(wall_s, 1),
        "useful_s": _r(useful, 1),
        "ett": _r(measured, 4),
        "ett_interval": interval,
        "interval_level": report_stats.LEVEL,
        "failures_interval": [_r(lo_n), _r(hi_n)],
        "per_failure_s": _r(per_failure),
        "model": model,
    }


def renewal(tau_s: float, save_s: float, restart_s: float, mtbf_s: float) -> float:
    """The ETT of this soak's own failure process, exactly (renewal-reward): from each resume
    the group steps an exponential time X (mean M) before it fails; it keeps tau * floor(X / tau)
    of it, pays a save per interval kept and the restart R. With q = E[floor(X / tau)] =
    1 / (e^(tau/M) - 1): ETT = tau q / (M + R + C q). Young/Daly's is its first order."""
    q = 1 / math.expm1(tau_s / mtbf_s)
    return tau_s * q / (mtbf_s + restart_s + save_s * q)
