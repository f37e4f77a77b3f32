"""`make fault`: start a job, hit one rank at a chosen step, follow every rank to its end,
tear down, and record what happened (runs/<run-id>/fault.json and fault.md).

`python -m tuning.harness fault <run flags> --fault KIND [--rank i] [--at-step k]
[--rdzv-timeout s]`; `--fault all` runs every kind in both layouts and writes one matrix.
The fault lands when the target rank's own metrics show step k (on_tick, not a sleep).
The kinds, each declared once with its injector, are faults/kinds/; what each does in each
layout, and why some cannot apply: docs/faults.md.
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from tuning.harness.backends import engine
from tuning.harness.contract.container import RUNS_LABEL
from tuning.harness.errors import HarnessError
from tuning.harness.faults import record as fault_record
from tuning.harness.faults import write
from tuning.harness.faults.fault_json import FaultRecord
from tuning.harness.faults.follow import Follow
from tuning.harness.faults.kinds import KNOBS, NAMES, TABLE
from tuning.harness.flags.run_flags import RunFlags, int_arg
from tuning.harness.layout import options
from tuning.harness.layout.layout import CONTAINER_KINDS
from tuning.harness.run import foreign, lifecycle, render
from tuning.harness.run_files import folders

KINDS = NAMES  # the table's order (faults/kinds/): FAULT=all runs them so
LAYOUTS = CONTAINER_KINDS
DEFAULTS = {"timeout": 20, "steps": 60, "at_step": 12, "rank": 1}
FOREIGN_STEPS = (
    "a foreign trainer (fms) logs steps from rank 0 only (training_logs.jsonl): the "
    "fault lands when rank 0 shows the step (the group steps together), and ranks "
    "other than 0 have no last step of their own"
)
ARGS_NOTE = (
    "ARGS is ENTRY's whole command line: its steps, seed and collective timeout are its "
    "own (--max_steps, --seed, --ddp_timeout); steps is the max_steps its Trainer "
    "logged, and timeout_s only how long the harness waits without a step"
)


def register(sub) -> None:
    # FAULT, RANK, AT_STEP, RDZV_TIMEOUT and the kinds' knobs (LATE): flag_table (defaults:
    # DEFAULTS, kinds.KNOBS)
    p = sub.add_parser(
        "fault",
        help="reproduce a cluster failure and record it",
        epilog=f"FAULT is one of: {', '.join(KINDS)}; or all (each kind in each layout). "
        "docs/faults.md says what each does.",
    )
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    if a.fault not in (*KINDS, "all"):
        said = f"FAULT={a.fault} is unknown" if a.fault else "FAULT is not set"
        raise HarnessError(f"{said}; use one of {', '.join(KINDS)}, or all")
    layout = a.layout or RunFlags.layout  # LAYOUT not typed: the default, as for make up
    if a.fault != "all" and layout not in LAYOUTS:
        raise HarnessError(f"fault runs in containers: LAYOUT=single or per-rank, not {layout}")
    kinds = KINDS if a.fault == "all" else (a.fault,)
    layouts = LAYOUTS if a.fault == "all" else (layout,)
    f = RunFlags.of(a)
    base = options.checked_run_id(f.run_id)
    k = _knobs(a, f)
    # every fault run starts afresh, with the knobs' TIMEOUT and STEPS
    f = replace(f, timeout=k["timeout_s"], steps=k["steps"], resume=False, resume_from=None)
    records = []
    for layout in layouts:
        for kind in kinds:
            run_id = base if len(kinds) == 1 else f"{base}-{kind}-{layout}"
            records.append(run_one(replace(f, layout=layout), k, kind, run_id, len(kinds) == 1))
    if len(records) > 1 and not f.dry_run:
        out = write.write_matrix(Path(f.runs).resolve() / f"{base}-fault-matrix", records)
        print(f"harness: fault matrix: {out}")
    return 0 if all(r.goal_met is not False for r in records) else 1


def dry_run(spec, kind, k: dict, run_id: str, reason: str | None) -> FaultRecord:
    """DRY_RUN=1: what the fault run would do (the run, the strike, the timeouts), printed;
    nothing written, nothing started."""
    layout = spec.layout
    where = f"fault {kind.name} ({layout.topology.kind}), run {run_id}"
    if reason:
        print(f"# {where}: would be recorded not applicable: {reason}")
        return FaultRecord(run_id, kind.name)
    target = next(n.name for n in layout.nodes() if k["rank"] in n.ranks)
    print(f"# {where}")
    print(
        f"#   the run: {layout.topology.world_size} rank(s) in {len(layout.nodes())} "
        f"container(s), STEPS={k['steps']}, every step paced {kind.step_sleep_s} s"
    )
    print(
        f"#   the strike: {kind.name} on rank {k['rank']} (container {target}) at step "
        f"{k['at_step']}, as docs/faults.md's `{kind.name}` says"
    )
    print(
        f"#   the timeouts: the ranks' collective timeout TIMEOUT={k['timeout_s']} s, the "
        f"rendezvous' RDZV_TIMEOUT={k['rdzv_timeout_s']} s; the harness stops the run "
        f"{kind.deadline}"
    )
    expected = kind.expect.name if kind.expect else "its own rule"
    print(f"#   expected: {expected}; a verdict of {kind.judged or '(not scored)'}")
    render.dry_run(layout, spec.accelerate_config)
    return FaultRecord(run_id, kind.name)


def _knobs(a: argparse.Namespace, f: RunFlags) -> dict:
    """TIMEOUT, RDZV_TIMEOUT, RANK, AT_STEP, STEPS and every kind's own knobs (all checked before
    any run starts), with the fault's defaults."""
    timeout = f.timeout or DEFAULTS["timeout"]
    rank = int_arg("RANK", a.rank, 0)
    return {
        "timeout_s": timeout,
        "rdzv_timeout_s": int_arg("RDZV_TIMEOUT", a.rdzv_timeout, 1) or timeout,
        "rank": DEFAULTS["rank"] if rank is None else rank,
        "at_step": int_arg("AT_STEP", a.at_step, 1) or DEFAULTS["at_step"],
        "steps": f.steps or DEFAULTS["steps"],
        **{
            k.key: int_arg(k.flag, getattr(a, k.flag.lower()), k.minimum) or k.default
            for k in KNOBS
        },
    }


def run_one(f: RunFlags, k: dict, name: str, run_id: str, alone: bool = True) -> FaultRecord:
    kind, layout_name = TABLE[name], f.layout
    if kind.rank is not None:
        k = {**k, "rank": kind.rank}  # it always hits that rank, whatever RANK
    env = {
        "HARNESS_STEP_SLEEP": str(kind.step_sleep_s),
        "HARNESS_RDZV_TIMEOUT": str(k["rdzv_timeout_s"]),
        **(kind.rank_env(k) if kind.rank_env else {}),  # what acts inside the rank
    }

    def ranks_env(world: int, _output_dir: str) -> dict[str, str]:
        return {**env, "OMP_NUM_THREADS": str(options.threads_per_rank(world))}

    spec = options.spec_from(f, run_id, ranks_env)
    layout = spec.layout
    world = layout.topology.world_size
    if not 0 <= k["rank"] < world:
        raise HarnessError(f"RANK={k['rank']} is outside the {world} rank(s)")
    base = FaultRecord(
        run_id,
        name,
        layout_name,
        timeout_s=k["timeout_s"],
        rdzv_timeout_s=k["rdzv_timeout_s"],
        rank=k["rank"],
        at_step=k["at_step"],
        steps=k["steps"],
        knobs={knob.key: k[knob.key] for knob in KNOBS},
        max_restarts=layout.limits.max_restarts,
        world_size=layout.topology.world_size,
        step_sleep_s=kind.step_sleep_s,
    )
    if layout.trainer.entry:
        base = replace(base, trainer=foreign.trainer_record(layout))
        if not layout.trainer.recorder_steps:  # fms: rank 0's own log, not paced
            # HARNESS_STEP_SLEEP paces the recorder's steps only
            base = replace(base, steps_note=FOREIGN_STEPS, step_sleep_s=None)
        if layout.trainer.args is not None:  # the Trainer's own max_steps, once it logs it
            base = replace(base, steps=None, args_note=ARGS_NOTE)
    reason = kind.why_not(layout_name, layout.topology.network, bool(layout.trainer.entry))
    refused = kind.refuse and kind.refuse(layout, spec.job, k)
    if refused and alone:
        raise HarnessError(f"FAULT={name}: {refused}")
    reason = reason or refused
    if reason is None and kind.check:
        reason = kind.check(layout)  # a probe of this machine (netem)
        status = "unsupported"
    else:
        status = "not applicable"
    if f.dry_run:
        return dry_run(spec, kind, k, run_id, reason)
    if reason:
        run_dir = folders.create(spec.runs_root, run_id)
        record = replace(base, status=status, reason=reason, outcome=status)
        write.write(run_dir, record)
        print(f"harness: fault {name} ({layout_name}): {status}: {reason}")
        return record
    target = next(n.name for n in layout.nodes() if k["rank"] in n.ranks)
    if kind.held_back and layout_name == "per-rank":
        spec.services = [n.name for n in layout.nodes() if n.name != target]
    knobs = {
        **k,
        "world_size": layout.topology.world_size,
        "max_restarts": layout.limits.max_restarts,
        "group_steps": bool(layout.trainer.entry) and not layout.trainer.recorder_steps,
    }
    follow = Follow(name, layout_name, target, knobs, run_id)
    with kind.staged(spec) if kind.staged else nullcontext():  # e.g. a volume of its own
        summary = lifecycle.start(spec, on_tick=follow)
    follow.finished_at = follow.finished_at or time.time()
    run_dir = spec.runs_root / run_id
    leftovers = engine.labelled(engine.client(), run_id, runs=layout.labels[RUNS_LABEL])
    record = fault_record.build(base, follow, summary, layout, run_dir, leftovers)
    write.write(run_dir, record)
    print(
        f"harness: fault {name} ({layout_name}): {record.outcome}; "
        f"fault to end {record.fault_to_end_s} s (bound {record.bound_s} s); "
        f"{run_dir / 'fault.md'}"
    )
    return record
