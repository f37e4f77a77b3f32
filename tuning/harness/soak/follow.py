"""The on_tick of a soak (soak/__init__.py): measure the step, draw the plan, hold the next
failure's rank at its step (HARNESS_HOLD_FILE), strike it there through the fault injector,
restart the group whenever it stops, and stop the whole after DURATION. It keeps what happened,
with the times, for the record (soak/record.py): everything else comes from the ranks' metrics."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import docker.errors

from tuning.harness.faults.inject import Injector
from tuning.harness.run_files import metric_lines
from tuning.harness.soak import plan
from tuning.harness.watch import Restarted, Stop

HOLD_FILE = ".soak-hold.json"  # in the run's output dir (/output): the ranks read it
MEASURE_STEPS = 6  # the step time: the median of the first attempt's steps 2..this
START_DEADLINE_S = 300  # the first attempt must begin training by then (from the first tick)
BACK_DEADLINE_S = 300  # after a failure the group must begin training again by then
LINGER_S = 5  # every rank's trainer returned this long ago but a node still runs: restart


def latest(metrics: dict) -> dict[int, list[dict]]:
    """Each rank's lines since its trainer's latest start."""
    return {r: metric_lines.attempts(lines)[-1] for r, lines in metrics.items() if lines}


def phase(lines: list[dict], name: str) -> dict | None:
    return next((x for x in lines if (x.get("event"), x.get("name")) == ("phase", name)), None)


def began(lines: list[dict]) -> tuple[float, int] | None:
    """When an attempt began training and from which step: its training phase (after the
    checkpoint is loaded); a foreign trainer (fms) logs none: its first step line's start."""
    p = phase(lines, "training")
    if p:
        return p["time"], p["step"]
    first = next(iter(metric_lines.steps(lines)), None)
    if first and first.get("source") == metric_lines.FMS_LOGS:
        return first["time"] - (first.get("step_s") or 0), first["step"] - 1
    return None


def step_time(lines: list[dict]) -> float | None:
    """The median step_s of steps after the first (fms's first has none)."""
    xs = [x["step_s"] for x in metric_lines.steps(lines)[1:] if x.get("step_s")]
    return statistics.median(xs) if xs else None


class SoakFollow:
    tick_s = None  # the loop's own tick (watch.TICK_S)

    def __init__(
        self,
        knobs: dict,
        mtbf: plan.Mtbf,
        targets: dict[int, str],
        run_id: str,
        output: Path,
        save_steps: int,
    ):
        self.k, self.mtbf, self.targets, self.run_id = knobs, mtbf, targets, run_id
        self.hold_file, self.save_steps = output / HOLD_FILE, save_steps
        self.t0 = time.time()
        self.plan: plan.Plan | None = None
        self.step_s: float | None = None
        self.started_at: float | None = None  # the first attempt's training phase: ETT's zero
        self.stop_at: float | None = None
        self.stop_reason: str | None = None
        self.stopped_at: float | None = None
        self.failures: list[dict] = []  # struck, in order (soak/record.py reads them)
        self.restarts: list[dict] = []  # the group restarted by the soak
        self.exits: list[dict] = []  # a node's exit, when the follow saw it
        self.resumed = plan.STARTS_AT  # where the group resumed (the plan counts from it)
        self.armed: tuple[plan.Failure, int, Injector] | None = None
        self.injector: Injector | None = None  # the last strike's: undone when the group is back
        self.struck_at = 0.0  # the last strike: the next one waits for an attempt after it
        self.restarted_at = 0.0  # the soak's last restart: older attempts are over
        self.running: dict[str, bool] = {}
        self.ended_since: float | None = None

    def say(self, what: str) -> None:
        print(f"harness: soak t={time.time() - self.t0:7.1f}s {what}")

    def __call__(self, metrics, state, nodes):
        now = time.time()
        nodes.restarts_left = 0  # the soak restarts the group itself, and only once it is drawn
        for name, code in state.items():
            if code is not None and self.running.get(name, True):
                self.exits.append({"node": name, "code": code, "time": round(now, 3)})
            self.running[name] = code is None
        now_lines = self.since_restart(latest(metrics))
        if self.started_at is None:
            begun = [b[0] for xs in now_lines.values() if (b := began(xs))]
            if begun and len(begun) == (1 if self.k["group_steps"] else self.k["world_size"]):
                self.started_at = max(begun)
                self.stop_at = self.started_at + self.k["duration_s"]
                self.say("training began; the soak runs until DURATION is up")
            elif now - self.t0 > START_DEADLINE_S:
                return self.stop(f"the job did not begin training within {START_DEADLINE_S} s")
        if self.stop_at and now >= self.stop_at:
            return self.stop("DURATION reached")
        if self.plan is None and not self.draw(now_lines):
            return None  # a failure before the plan is the job's own: lifecycle ends the run
        ends = metric_lines.ends_seen(now_lines)
        if len(ends) == len(self.targets) and all(
            x.get("status") == "completed" for x in ends.values()
        ):
            return self.stop("the job finished (max_steps) before DURATION")
        if any(code is not None for code in state.values()) or self.lingering(now_lines, now):
            return self.restart(state, nodes)
        if self.struck_at and not self.back(now_lines):
            if now - self.struck_at > BACK_DEADLINE_S:
                return self.stop(f"the group did not train again within {BACK_DEADLINE_S} s")
            return None
        return self.strike(now_lines, nodes, now)

    def since_restart(self, lines: dict) -> dict:
        """The attempts that began after the soak's last restart (an older one is over)."""
        return {r: xs for r, xs in lines.items() if xs[0]["time"] > self.restarted_at}

    # --- the plan ----------------------------------------------------------------------------
    def draw(self, now_lines) -> bool:
        """The step time from the first attempt's first steps, then the plan (MTBF in steps)."""
        rank0 = now_lines.get(0, [])
        if max((x["step"] for x in metric_lines.steps(rank0)), default=0) < MEASURE_STEPS:
            return False
        self.step_s = step_time(rank0)
        steps = self.mtbf.in_steps(self.step_s)
        self.plan = plan.Plan(self.k["fault_seed"], steps, self.k["world_size"], self.k["kinds"])
        again = "" if self.mtbf.steps else f" (MTBF={steps}steps fails another soak at these steps)"
        self.say(
            f"step {self.step_s:.3f} s; MTBF {steps} steps; failures drawn from "
            f"FAULT_SEED={self.k['fault_seed']}{again}"
        )
        self.arm(1)
        return True

    def arm(self, n: int) -> None:
        """Failure n, where the group resumed: its injector, and its rank held at its step."""
        f = self.plan.failure(n)
        at, _ = plan.strike(f, self.resumed, self.save_steps)
        knobs = {**self.k, "rank": f.rank, "at_step": at}
        self.armed = (
            f,
            at,
            Injector(f.kind, self.k["layout"], self.targets[f.rank], knobs, self.run_id),
        )
        if not self.k["group_steps"]:  # a foreign trainer has no hold: it lands when seen
            tmp = self.hold_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(plan.hold(f, at)))
            os.replace(tmp, self.hold_file)  # whole or not at all: the ranks read it each step

    # --- a failure ---------------------------------------------------------------------------
    def strike(self, now_lines, nodes, now: float):
        f, at, inj = self.armed
        back = plan.KINDS[f.kind].undo  # read before the fault changes it
        undo = back(nodes, self.targets[f.rank]) if back else None
        try:
            done = inj.due(now_lines, nodes, now)
        except docker.errors.APIError as e:
            return self.stop(f"failure {f.n} ({f.kind}) could not be injected: {e}")
        if not done:
            return None
        if undo:
            inj.heals.append(undo)
        how, step, when = done[0]
        self.failures.append(
            {
                "n": f.n,
                "kind": f.kind,
                "rank": f.rank,
                "gap": f.gap,
                "from": self.resumed,
                "planned": at,
                "landed": step,
                "time": round(when, 3),
                "how": how,
            }
        )
        self.say(f"failure {f.n}: {f.kind} rank {f.rank} at step {step} (planned {at}): {how}")
        self.struck_at = when
        self.resumed = plan.strike(f, self.resumed, self.save_steps)[1]
        self.injector = inj  # its heals run before the group restarts
        self.arm(f.n + 1)
        return None

    def back(self, now_lines) -> bool:
        """The group came back after the last strike: every rank started again and began
        training, from the step it says (the plan's guess corrected if it differs)."""
        new = {r: xs for r, xs in now_lines.items() if xs[0]["time"] > self.struck_at}
        begun = [b for xs in new.values() if (b := began(xs))]
        if not begun or len(begun) < (1 if self.k["group_steps"] else len(self.targets)):
            return False
        seen = min(step for _, step in begun)
        if seen != self.resumed:
            self.say(f"the group resumed from step {seen}, not {self.resumed} as planned")
            self.failures[-1]["resumed_unplanned"] = seen
            self.resumed = seen
            self.arm(self.armed[0].n)
        self.struck_at = 0.0
        if self.injector:  # its undo (thaw, a memory limit back) once the group is back
            self.injector.release()
        return True

    # --- restarts and the end ----------------------------------------------------------------
    def lingering(self, now_lines, now: float) -> bool:
        """Every rank's trainer returned (term, preempt) but a launcher waits on (torchelastic's
        exit barrier): the group is done."""
        if len(metric_lines.returned_now(now_lines)) < len(self.targets):
            self.ended_since = None
            return False
        self.ended_since = self.ended_since or now
        return now - self.ended_since > LINGER_S

    def restart(self, state, nodes):
        if self.injector:
            self.injector.release()
        exited = {n: c for n, c in state.items() if c is not None}
        why = ", ".join(f"{n} exited {c}" for n, c in exited.items()) or "every trainer returned"
        t = time.time()
        nodes.restart(state, why=f"soak: {why}", left=False)
        self.restarts.append({**nodes.restarts[-1], "time": round(t, 3), "why": why})
        self.restarted_at = time.time()
        self.running = {}
        self.ended_since = None
        return Restarted()

    def stop(self, why: str) -> Stop:
        self.stop_reason = f"soak stopped: {why}"
        self.stopped_at = time.time()
        inj = self.armed[2] if self.armed else None
        if inj:
            inj.release()
        self.hold_file.unlink(missing_ok=True)
        self.say(why)
        return Stop(self.stop_reason)
