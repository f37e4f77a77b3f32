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
from tuning.harness.commands import fault_disk, fault_late, fault_record, fault_save, fault_write
from tuning.harness.commands.fault_follow import Follow
from tuning.harness.commands.fault_inject import NETEM
from tuning.harness.errors import HarnessError
from tuning.harness.run import lifecycle
from tuning.harness.rundirs import runs
from tuning.harness.spec import options
from tuning.harness.spec.flags import RunFlags, int_arg
from tuning.harness.spec.layout import CONTAINER_KINDS, RUNS_LABEL

KINDS = ("kill", "save-kill", "disk-full", "term", "preempt", "crash", "pause", "no-show",
         "late-master", "partition", "oom", "slow", "delay", "loss")  # fmt: skip
LAYOUTS = CONTAINER_KINDS
DEFAULTS = {"timeout": 20, "steps": 60, "at_step": 12, "rank": 1}
STEP_SLEEP_S = 0.2  # paces steps (HARNESS_STEP_SLEEP) so a fault lands near its step
SLOW_STEP_SLEEP_S = 0.05  # slow: less padding, so the throttled compute shows in step times

NOT_APPLICABLE = {
    ("partition", "single"): "every rank of a single container talks to the others over "
    "loopback inside one network namespace; there is no link between ranks to cut (cutting "
    "loopback cuts them all). Use LAYOUT=per-rank.",
    (fault_late.KIND, "single"): fault_late.SINGLE,
}
FOREIGN_CRASH = ("crash raises inside this repo's trainer (HARNESS_CRASH_AT_STEP); a foreign "
                 "trainer (ENTRY, TRAINER=fms) has no such hook. Use kill or term.")  # fmt: skip
FOREIGN_STEPS = ("a foreign trainer (fms) logs steps from rank 0 only (training_logs.jsonl): the "
                 "fault lands when rank 0 shows the step (the group steps together), and ranks "
                 "other than 0 have no last step of their own")  # fmt: skip
SHARED_NET = "per-rank with NETWORK=shared puts every rank in rank 0's network namespace; "


def register(sub) -> None:
    # FAULT, RANK, AT_STEP, RDZV_TIMEOUT, LATE: flag_table (defaults: DEFAULTS, LATE_S)
    p = sub.add_parser("fault", help="reproduce a cluster failure and record it")
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    if a.fault not in (*KINDS, "all"):
        said = f"FAULT={a.fault} is unknown" if a.fault else "FAULT is not set"
        raise HarnessError(f"{said}; use one of {', '.join(KINDS)}, or all")
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
        out = fault_write.write_matrix(Path(f.runs).resolve() / f"{base}-fault-matrix", records)
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
        "late_s": int_arg("LATE", a.late, 1) or fault_late.LATE_S,
    }


def run_one(f: RunFlags, k: dict, kind: str, run_id: str) -> dict:
    layout_kind = f.layout
    if kind == fault_late.KIND:
        k = {**k, "rank": 0}  # the master's node starts late (the follow starts it)
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
    if kind == fault_late.KIND and layout_kind == "per-rank" and layout.network == "shared":
        reason = fault_late.SHARED
    if reason is None and kind in NETEM:
        reason = _netem_unsupported(layout, kind)
        status = "unsupported"
    else:
        status = "not applicable"
    if reason:
        run_dir = runs.create(spec.runs_root, run_id)
        record = {**base, "status": status, "reason": reason, "outcome": status,
                  "goal_met": None, "leftovers": []}  # fmt: skip
        fault_write.write(run_dir, record)
        print(f"harness: fault {kind} ({layout_kind}): {status}: {reason}")
        return record
    target = next(n.name for n in layout.nodes() if k["rank"] in n.ranks)
    if kind in ("no-show", fault_late.KIND) and layout_kind == "per-rank":
        spec.services = [n.name for n in layout.nodes() if n.name != target]
    knobs = {**k, "world_size": layout.world_size, "max_restarts": layout.max_restarts,
             "group_steps": bool(layout.entry)}  # fmt: skip
    follow = Follow(kind, layout_kind, target, knobs, run_id)
    volume = fault_disk.Volume(engine.client(), layout) if kind == fault_disk.KIND else None
    if volume:
        spec.layout = replace(layout, output_volume=volume.name)
    try:
        summary = lifecycle.start(spec, on_tick=follow)
    finally:
        if volume:  # the ranks are gone: what they wrote into the run's dir, then the volume
            volume.copy_out(spec.runs_root / run_id / "output")
            volume.remove()
    follow.finished_at = follow.finished_at or time.time()
    run_dir = spec.runs_root / run_id
    leftovers = engine.labelled(engine.client(), run_id, runs=layout.labels[RUNS_LABEL])
    record = fault_record.build(base, follow, summary, layout, run_dir, leftovers)
    fault_write.write(run_dir, record)
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
                         labels=layout.labels, remove=True, stderr=True)  # fmt: skip
        return None
    except docker.errors.ContainerError as e:
        err = (e.stderr or b"").decode(errors="replace").strip() or str(e)
        return f"netem not supported by this kernel: {err}"
    finally:
        engine.remove_labelled(c, layout.run_id, runs=layout.labels[RUNS_LABEL])
