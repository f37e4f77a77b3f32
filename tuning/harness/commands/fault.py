"""`make fault`: start a job, hit one rank at a chosen step, follow every rank to its end,
tear down, and record what happened (runs/<run-id>/fault.json and fault.md).

`python -m tuning.harness fault <run flags> --fault KIND [--rank i] [--at-step k]
[--rdzv-timeout s]`; `--fault all` runs every kind in both layouts and writes one matrix.
The fault lands when the target rank's own metrics show step k (on_tick, not a sleep).
What each kind does in each layout, and why some cannot apply: docs/faults.md.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import docker.errors

from tuning.harness.backends import engine, images
from tuning.harness.commands import fault_record, fault_save
from tuning.harness.commands.fault_inject import NETEM, Injector
from tuning.harness.commands.fault_record import HANG_KINDS, SIGNAL_KINDS, SLACK_S
from tuning.harness.errors import HarnessError
from tuning.harness.run import lifecycle
from tuning.harness.rundirs import runs
from tuning.harness.spec import options
from tuning.harness.spec.flags import RunFlags, int_arg
from tuning.harness.spec.layout import CONTAINER_KINDS, LABEL

KINDS = ("kill", "save-kill", "term", "preempt", "crash", "pause", "no-show", "partition", "oom",
         "slow", "delay", "loss")  # fmt: skip
LAYOUTS = CONTAINER_KINDS
LINGER_S = 5  # every worker ended this long ago but a launcher still runs: stop it
DEFAULTS = {"timeout": 20, "steps": 60, "at_step": 12, "rank": 1}
STEP_SLEEP_S = 0.2  # paces steps (HARNESS_STEP_SLEEP) so a fault lands near its step
SLOW_STEP_SLEEP_S = 0.05  # slow: less padding, so the throttled compute shows in step times
START_DEADLINE_S = 300  # the target must reach its step by then
LONG_DEADLINE_S = 180  # kinds that let the job go on (slow, term, preempt): fault + this

NOT_APPLICABLE = {
    ("partition", "single"): "every rank of a single container talks to the others over "
    "loopback inside one network namespace; there is no link between ranks to cut (cutting "
    "loopback cuts them all). Use LAYOUT=per-rank.",
}
FOREIGN_CRASH = ("crash raises inside this repo's trainer (HARNESS_CRASH_AT_STEP); a foreign "
                 "trainer (ENTRY, TRAINER=fms) has no such hook. Use kill or term.")  # fmt: skip
FOREIGN_STEPS = ("a foreign trainer (fms) logs steps from rank 0 only (training_logs.jsonl): the "
                 "fault lands when rank 0 shows the step (the group steps together), and ranks "
                 "other than 0 have no last step of their own")  # fmt: skip
SHARED_NET = "per-rank with NETWORK=shared puts every rank in rank 0's network namespace; "


def register(sub) -> None:
    p = sub.add_parser("fault", help="reproduce a cluster failure and record it")
    options.add_run_flags(p)
    p.add_argument("--fault", required=True, choices=[*KINDS, "all"])
    p.add_argument("--rank", help=f"the rank to hit (default {DEFAULTS['rank']})")
    p.add_argument("--at-step", help=f"hit it at this step (default {DEFAULTS['at_step']})")
    p.add_argument("--rdzv-timeout", help="rendezvous timeout in seconds (default: TIMEOUT)")
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    if a.fault != "all" and a.layout not in LAYOUTS:
        raise HarnessError(f"fault runs in containers: LAYOUT=single or per-rank, not {a.layout}")
    kinds = KINDS if a.fault == "all" else (a.fault,)
    layouts = LAYOUTS if a.fault == "all" else (a.layout,)
    f = RunFlags.of(a)
    base = options.checked_run_id(f.run_id)
    k = _knobs(a, f)
    # every fault run starts afresh, with the knobs' TIMEOUT and STEPS
    f = replace(f, timeout=k["timeout_s"], steps=k["steps"], resume=False, resume_from=None)
    records = []
    for layout in layouts:
        for kind in kinds:
            run_id = base if len(kinds) == 1 else f"{base}-{kind}-{layout}"
            records.append(run_one(replace(f, layout=layout), k, kind, run_id))
    if len(records) > 1:
        out = fault_record.write_matrix(Path(f.runs).resolve() / f"{base}-fault-matrix", records)
        print(f"harness: fault matrix: {out}")
    return 0 if all(r["goal_met"] is not False for r in records) else 1


def _knobs(a: argparse.Namespace, f: RunFlags) -> dict:
    """TIMEOUT, RDZV_TIMEOUT, RANK, AT_STEP and STEPS, with the fault's defaults."""
    timeout = f.timeout or DEFAULTS["timeout"]
    rank = int_arg("RANK", a.rank, 0)
    return {
        "timeout_s": timeout,
        "rdzv_timeout_s": int_arg("RDZV_TIMEOUT", a.rdzv_timeout, 1) or timeout,
        "rank": DEFAULTS["rank"] if rank is None else rank,
        "at_step": int_arg("AT_STEP", a.at_step, 1) or DEFAULTS["at_step"],
        "steps": f.steps or DEFAULTS["steps"],
    }


def run_one(f: RunFlags, k: dict, kind: str, run_id: str) -> dict:
    layout_kind = f.layout
    env = {
        "HARNESS_STEP_SLEEP": str(SLOW_STEP_SLEEP_S if kind == "slow" else STEP_SLEEP_S),
        "HARNESS_RDZV_TIMEOUT": str(k["rdzv_timeout_s"]),
    }
    if kind == fault_save.KIND:  # our trainer holds each save open this long (atomic_save.py)
        env["HARNESS_SAVE_SLEEP"] = str(fault_save.SAVE_SLEEP_S)
    if kind == "crash":
        env.update(HARNESS_CRASH_AT_STEP=str(k["at_step"]), HARNESS_CRASH_RANK=str(k["rank"]))

    def ranks_env(world: int, _output_dir: str) -> dict[str, str]:
        return {**env, "OMP_NUM_THREADS": str(options.threads_per_rank(world))}

    spec = options.spec_from(f, run_id, ranks_env)
    layout = spec.layout
    if not 0 <= k["rank"] < layout.world_size:
        raise HarnessError(f"RANK={k['rank']} is outside the {layout.world_size} rank(s)")
    sleep = float(env["HARNESS_STEP_SLEEP"])
    base = {"run_id": run_id, "kind": kind, "layout": layout_kind, **k,
            "max_restarts": layout.max_restarts, "world_size": layout.world_size,
            "step_sleep_s": sleep}  # fmt: skip
    reason = NOT_APPLICABLE.get((kind, layout_kind))
    if layout.entry:
        base["trainer"] = {"image": layout.image, "entry": layout.entry}
        base["steps_note"] = FOREIGN_STEPS
        base["step_sleep_s"] = None  # HARNESS_STEP_SLEEP paces this repo's trainer only
        if kind == "crash":
            reason = FOREIGN_CRASH
    if kind == "partition" and layout_kind == "per-rank" and layout.network == "shared":
        reason = SHARED_NET + "there is no link between ranks to cut. Use NETWORK=isolated."
    if reason is None and kind in NETEM:
        reason = _netem_unsupported(layout, kind)
        status = "unsupported"
    else:
        status = "not applicable"
    if reason:
        run_dir = runs.create(spec.runs_root, run_id)
        record = {**base, "status": status, "reason": reason, "outcome": status,
                  "goal_met": None, "leftovers": []}  # fmt: skip
        fault_record.write(run_dir, record)
        print(f"harness: fault {kind} ({layout_kind}): {status}: {reason}")
        return record
    target = next(n.name for n in layout.nodes() if k["rank"] in n.ranks)
    if kind == "no-show" and layout_kind == "per-rank":
        spec.services = [n.name for n in layout.nodes() if n.name != target]
    knobs = {**k, "world_size": layout.world_size, "max_restarts": layout.max_restarts,
             "group_steps": bool(layout.entry)}  # fmt: skip
    follow = Follow(kind, layout_kind, target, knobs, run_id)
    summary = lifecycle.start(spec, on_tick=follow)
    follow.finished_at = follow.finished_at or time.time()
    run_dir = spec.runs_root / run_id
    leftovers = engine.labelled(engine.client(), run_id)
    record = fault_record.build(base, follow, summary, layout, run_dir, leftovers)
    fault_record.write(run_dir, record)
    print(f"harness: fault {kind} ({layout_kind}): {record['outcome']}; "
          f"fault to end {record['fault_to_end_s']} s (bound {record['bound_s']} s); "
          f"{run_dir / 'fault.md'}")  # fmt: skip
    return record


def _netem_unsupported(layout, kind: str) -> str | None:
    """Try netem once in a throwaway helper (same image, NET_ADMIN, no network)."""
    c = engine.client()
    images.ready(c, layout, log=lambda *_: None)
    try:
        c.containers.run(layout.image, ["-c", f"tc qdisc add dev lo root netem {NETEM[kind]}"],
                         entrypoint="sh", user="root", cap_add=["NET_ADMIN"], network_mode="none",
                         labels={LABEL: layout.run_id}, remove=True, stderr=True)  # fmt: skip
        return None
    except docker.errors.ContainerError as e:
        err = (e.stderr or b"").decode(errors="replace").strip() or str(e)
        return f"netem not supported by this kernel: {err}"
    finally:
        engine.remove_labelled(c, layout.run_id)


class Follow:
    """The on_tick of a fault run: waits for the step, injects, watches, decides when to stop."""

    def __init__(self, kind: str, layout_kind: str, target: str, knobs: dict, run_id: str):
        self.kind, self.rank, self.timeout = kind, knobs["rank"], knobs["timeout_s"]
        self.inject = Injector(kind, layout_kind, target, knobs, run_id)
        self.t0 = time.time()
        self.injected_at: float | None = None
        self.inject_step: int | None = None
        self.how = ""
        self.timeline: list[dict] = []
        self.ended: dict[str, float] = {}
        self.stopped_by: str | None = None
        self.finished_at: float | None = None
        self.detected_at: float | None = None
        self.last_step_seen = (0, self.t0)
        self.rank_ended: dict[int, float] = {}
        self.running: dict[str, bool] = {}
        self.world_size = knobs["world_size"]
        self.max_restarts = knobs.get("max_restarts", 0)  # the group may come back this often

    def event(self, what: str, when: float | None = None) -> None:
        when = when or time.time()
        self.timeline.append({"t": round(when - self.t0, 2), "event": what})
        print(f"harness: fault t={when - self.t0:6.1f}s {what}")

    def __call__(self, metrics, state, nodes):
        now = time.time()
        for name, code in state.items():
            if code is not None and (name not in self.ended or self.running.get(name)):
                self.ended[name] = now  # its latest exit (MAX_RESTARTS may start it again)
                self.event(f"{name} exited with {code}", now)
            self.running[name] = code is None
        for rank, lines in metrics.items():
            end = next((x for x in lines if x.get("event") == "end"), None)
            if end and rank not in self.rank_ended:
                self.rank_ended[rank] = end["time"]
                sig = fault_record.signature(end.get("error") or "")
                self.event(f"rank {rank} ended: {end['status']}" + (f" ({sig})" if sig else ""),
                           end["time"])  # fmt: skip
        # None again when the harness restarts the group (per-rank MAX_RESTARTS)
        self.finished_at = now if all(code is not None for code in state.values()) else None
        if self.injected_at is None:
            try:
                for how, step, when in self.inject.due(metrics, nodes, now):
                    self.injected(how, step, when)
            except docker.errors.APIError as e:
                self.event(f"injection failed: {e.explanation or e}")
                self.stopped_by = "injection failed"
                return "stop"
            if self.injected_at is None and now - self.t0 > START_DEADLINE_S:
                self.stopped_by = "never reached the step"
                return "stop"
            return None
        return self.watch(metrics, state, nodes, now)

    def injected(self, how: str, step: int, when: float | None = None) -> None:
        self.injected_at, self.inject_step, self.how = when or time.time(), step, how
        self.event(f"fault injected at step {step}: {how}", self.injected_at)

    # --- after the fault -------------------------------------------------------------------
    def watch(self, metrics, state, nodes, now: float):
        if self.finished_at:
            return None
        newest = max(
            (x["step"] for lines in metrics.values() for x in runs.steps(lines)), default=0
        )
        if newest > self.last_step_seen[0]:
            self.last_step_seen = (newest, now)
        if self.kind == "no-show" and self.inject.heals and self.peer_ended(metrics):
            # The peers gave up; thaw the frozen rank so its launcher can stop it (a frozen
            # process ignores SIGTERM, and torchrun would wait 30 s before SIGKILL).
            self.event("a peer gave up at rendezvous; the frozen rank is released")
            self.inject.release()
        if self.kind in HANG_KINDS and self.detected_at is None:
            why = self.hang(metrics, now)
            if why:
                self.detected_at = now
                self.event(f"hang detected: {why}", now)
                self.stopped_by = "hang detected"
                return self.stop()
        done = self.done_ranks(metrics)
        if (
            self.kind != "slow"  # a throttled launcher is slow to exit, not stuck
            and len(done) == self.world_size
            and now - max(done.values()) > LINGER_S
        ):
            # Every worker is done but a launcher lingers: torchelastic's exit barrier waits
            # (300 s) for an agent that was signalled away.
            self.event(f"every rank ended {LINGER_S} s ago but a launcher still runs; stopping it")
            self.stopped_by = "launcher lingered"
            return self.stop()
        long = self.kind in ("slow", *SIGNAL_KINDS) or self.max_restarts > 0
        # slow: the run is expected to go on, only slower; its deadline runs from its newest
        # step, so a throttled rank's pace (1-4 s a step here, by load) never cuts it short.
        since = (
            max(self.injected_at, self.last_step_seen[1])
            if self.kind == "slow"
            else self.injected_at
        )
        deadline = since + (LONG_DEADLINE_S if long else self.timeout + SLACK_S)
        if now > deadline:
            self.event(f"deadline (fault + {deadline - self.injected_at:.0f} s): stopping")
            self.stopped_by = "deadline"
            return self.stop()
        return None

    def done_ranks(self, metrics) -> dict[int, float]:
        """Ranks whose last line is their end and that will not come back: it completed, or
        its trainer already started more than MAX_RESTARTS times (the group restarts on a
        failure)."""
        out = {}
        for rank, lines in metrics.items():
            if not lines or lines[-1].get("event") != "end":
                continue
            starts = sum(map(runs.is_start, lines))
            if lines[-1].get("status") in ("completed", "preempted") or starts > self.max_restarts:
                out[rank] = lines[-1]["time"]
        return out

    def hang(self, metrics, now: float) -> str | None:
        for rank, lines in metrics.items():
            for x in lines:
                if x.get("event") == "end" and fault_record.is_timeout(x.get("error") or ""):
                    return f"rank {rank} timed out waiting for its peer"
        quiet = now - max(self.last_step_seen[1], self.injected_at)
        if quiet > self.timeout:
            return f"no rank made a step for {quiet:.0f} s"
        return None

    def peer_ended(self, metrics) -> bool:
        return any(x.get("event") == "end" for r, lines in metrics.items() if r != self.rank
                   for x in lines)  # fmt: skip

    def stop(self) -> str:
        self.inject.release()
        self.finished_at = time.time()
        return "stop"
