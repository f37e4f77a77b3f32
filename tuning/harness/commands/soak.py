"""`make soak`: train the job for DURATION while it fails as a cluster fails, and record what
that cost: effective training time (ETT), each failure's parts, the save cost, and the model's
prediction beside them (runs/<run-id>/soak.json, soak.md, soak.png); then the save interval
for the job's size on a cluster.

`python -m tuning.harness soak --mtbf 3m --duration 20m [--kinds kill,oom] [--fault-seed n]
[--save-every n] [--gpu-hours-per-failure h] <run flags>`. Failures come from a seeded plan
(soak/plan.py: the same FAULT_SEED fails at the same steps), strike through the fault kinds'
injectors (faults/inject.py) and the group restarts without a limit (torchrun's restarts in
single, the harness's in per-rank and whenever the group stops), resuming from its checkpoints.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from tuning.harness.backends import engine
from tuning.harness.checks import save_interval
from tuning.harness.contract.container import RUNS_LABEL
from tuning.harness.errors import HarnessError
from tuning.harness.faults.kinds.kind import STEP_SLEEP_S
from tuning.harness.flags import own_trainer
from tuning.harness.flags.run_flags import RunFlags, int_arg, time_arg
from tuning.harness.layout import options
from tuning.harness.layout.layout import CONTAINER_KINDS
from tuning.harness.run import lifecycle
from tuning.harness.soak import plan, record, write
from tuning.harness.soak.follow import HOLD_FILE, SoakFollow

RESTARTS = 1_000_000  # torchrun's --max-restarts in single: no limit a soak could reach
MAX_STEPS = 1_000_000  # the job's max_steps unless STEPS: the soak ends at DURATION
KEEP = 2  # save_total_limit unless the job sets one: a soak saves hundreds of times


def register(sub) -> None:
    # MTBF, DURATION, KINDS, FAULT_SEED, SAVE_EVERY, GPU_HOURS_PER_FAILURE: flag_table
    p = sub.add_parser("soak", help="train for DURATION under seeded failures; record ETT")
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    if a.layout and a.layout not in CONTAINER_KINDS:
        raise HarnessError(f"a soak runs in containers: LAYOUT=single or per-rank, not {a.layout}")
    mtbf = plan.mtbf_arg(a.mtbf)
    duration = time_arg("DURATION", a.duration)
    if not duration:
        raise HarnessError("DURATION is not set: how long the soak trains, e.g. DURATION=20m")
    kinds = plan.kinds_arg(a.kinds)
    fault_seed = int_arg("FAULT_SEED", a.fault_seed, 0) or 0
    save_every = int_arg("SAVE_EVERY", a.save_every, 1)
    rate = save_interval.rate_arg(a.gpu_hours_per_failure)
    f = RunFlags.of(a)
    f = replace(
        f, max_restarts=RESTARTS, resume=False, resume_from=None, steps=f.steps or MAX_STEPS
    )

    def ranks_env(world: int, output_dir: str) -> dict[str, str]:
        return {
            "HARNESS_STEP_SLEEP": str(STEP_SLEEP_S),
            "OMP_NUM_THREADS": str(options.threads_per_rank(world)),
            "HARNESS_HOLD_FILE": f"{output_dir}/{HOLD_FILE}",
        }

    spec = options.spec_from(f, None, ranks_env)
    layout, job = spec.layout, spec.job
    words = layout.trainer.args  # ARGS: the script saves as they say; nothing else reaches it
    if words is not None:
        save_steps = args_save_steps(words, save_every)
    else:
        save_steps = save_every or (
            job.get("save_steps") if job.get("save_strategy") == "steps" else 0
        )
        if not save_steps:
            raise HarnessError(
                f"JOB={f.job} does not save every n steps (save_strategy: steps, save_steps: n); "
                "a soak resumes from its saves: set SAVE_EVERY=n"
            )
        job.update(save_strategy="steps", save_steps=save_steps)
        job.setdefault("save_total_limit", KEEP)
    run_id = layout.run_id
    base = {
        "run_id": run_id,
        "layout": layout.topology.kind,
        "trainer": f.trainer,
        "world_size": layout.topology.world_size,
        "mtbf": a.mtbf,
        "duration_s": duration,
        "kinds": list(kinds),
        "fault_seed": fault_seed,
        "save_steps": save_steps,
        "step_sleep_s": STEP_SLEEP_S,
    }
    targets = {r: n.name for n in layout.nodes() for r in n.ranks}
    knobs = {
        "world_size": layout.topology.world_size,
        "layout": layout.topology.kind,
        "duration_s": duration,
        "fault_seed": fault_seed,
        "kinds": kinds,
        "group_steps": bool(layout.trainer.entry),
        "timeout_s": f.timeout or job.get("ddp_timeout"),
        "late_s": 0,
    }
    follow = SoakFollow(
        knobs, mtbf, targets, run_id, spec.runs_root / run_id / "output", save_steps
    )
    print(
        f"harness: soak {run_id}: MTBF {a.mtbf}, DURATION {a.duration}, KINDS "
        f"{','.join(kinds)}, FAULT_SEED={fault_seed}, save every {save_steps} steps"
    )
    lifecycle.start(spec, on_tick=follow)
    run_dir = spec.runs_root / run_id
    left = engine.labelled(engine.client(), run_id, runs=layout.labels[RUNS_LABEL])
    rec = record.build(base, follow, run_dir)
    rec["leftovers"] = [
        f"{kind[:-1]} {getattr(o, 'name', None) or o.id}"
        for kind, objs in left.items()
        for o in objs
    ]
    advice = cluster_advice(rec, layout.topology.gpus or layout.topology.world_size, rate)
    rec["advice"] = (
        advice.sentence(" (measured here; a cluster adds scheduling and image pull)")
        if advice
        else None
    )
    written = write.write(run_dir, rec)
    ok = follow.stop_reason == "soak stopped: DURATION reached" and not rec["leftovers"]
    said = f"ETT {100 * rec['ett']:.1f} %" if rec.get("ett") is not None else "no ETT"
    print(
        f"harness: soak {run_id}: {len(rec['failures'])} failure(s), {said}; "
        f"{follow.stop_reason}; {', '.join(str(p) for p in written)}"
    )
    if advice:
        print(f"harness: save interval: {rec['advice']}")
    return 0 if ok else 1


def cluster_advice(rec: dict, gpus: int, rate: float) -> save_interval.Advice | None:
    """Young/Daly's interval for the job's GPUs on a cluster, from this soak's save, restart
    and step (the soak's pacing left out of the step)."""
    m = rec.get("model") or {}
    if not rec.get("step_s") or not rec["saves"]["median_s"]:
        return None
    step = max(rec["step_s"] - rec["step_sleep_s"], rec["step_s"] / 10)
    restart = m.get("restart_s") or save_interval.RESTART_S
    return save_interval.Advice(gpus, rate, rec["saves"]["median_s"], restart, step)


def args_save_steps(args: tuple[str, ...], save_every: int | None) -> int:
    """The save interval of a script that takes ARGS: its own --save_steps (the HF Trainer's;
    its save_strategy must be steps, the default). SAVE_EVERY would reach no rank: refused."""
    if save_every:
        raise HarnessError(
            f"SAVE_EVERY={save_every} would reach no rank: a script that takes ARGS reads no job "
            f"file; put --save_steps {save_every} in ARGS and drop SAVE_EVERY"
        )
    strategy = own_trainer.value_in(args, "save_strategy")
    raw = own_trainer.value_in(args, "save_steps")
    if strategy not in (None, "steps") or raw is None:
        why = (
            f"--save_strategy {strategy}" if strategy not in (None, "steps") else "no --save_steps"
        )
        raise HarnessError(
            f"ARGS has {why}: a soak resumes from the script's saves every n steps; put "
            "--save_steps n (and no other --save_strategy) in ARGS"
        )
    return int_arg("ARGS' --save_steps", raw, 1)
