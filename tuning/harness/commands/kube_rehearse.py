"""`make kube REHEARSE=1`: the pods an operator makes of the rendered objects, run here as
Compose services (one per pod, named and reachable as the pod, with exactly the environment
the operator injects and the ConfigMap's files at /job), followed to the end by `lifecycle.start`
as `up` is. With KILL, a rank's pod is killed at a step and the operator's restart rules
act (kube_faults.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from tuning.harness.backends import kube_restarts
from tuning.harness.commands import kube_faults
from tuning.harness.errors import HarnessError
from tuning.harness.run import lifecycle
from tuning.harness.spec import devices, flags, options, ranks_user
from tuning.harness.spec.job_layout import JobLayout


def rehearse(layout: JobLayout, run_dir: Path, objects: tuple, made: tuple, grace: float,
             accelerate_config: Path, on_tick=None) -> dict:  # fmt: skip
    """Run the pods an operator makes of `objects` and follow them to the end. `made` is
    (kind, image, pods, manifest name) as kube.pods_of reads them; `run_dir` exists;
    returns the summary."""
    kind, image, pods, manifest = made
    plan = None
    if layout.gpus:  # the pods' GPUs are free host GPUs here, each pod its share
        try:
            plan = devices.for_host(layout.gpus, image)
        except HarnessError as e:
            raise HarnessError(f"a rehearsal of {layout.replicas} pod(s) x "
                               f"{layout.gpus_per_pod} GPU(s) here: {e}; or rehearse with "
                               "GPUS=0 (CPU ranks, NPROC per pod)") from None  # fmt: skip
        share = layout.gpus_per_pod
        pods = [replace(p, gpu_ids=plan.ids[i * share : (i + 1) * share])
                for i, p in enumerate(pods)]  # fmt: skip
    # the job as the operator made it: its pods (JobLayout.nodes) and the image they run, as
    # the rendered uid 1000 under root; as the user who rehearses it otherwise, who could not
    # give uid 1000 the output folder, nor delete what it wrote there (spec/ranks_user.py)
    layout = replace(layout, image=image, pods=tuple(pods), **ranks_user.for_ranks(layout.kind))
    files = dict(objects[0].data or {})
    names = ", ".join(p.name for p in pods)
    banner = (f"harness: rehearsing {kind} {layout.name}: pods {names}; "
              f"{layout.world_size} rank(s); {run_dir}")  # fmt: skip
    record = {kind.lower(): {"name": layout.name, "manifest": str(run_dir / manifest),
                             "pods": [p.name for p in pods]},
              **({"gpus": plan.record()} if plan else {})}  # fmt: skip
    spec = options.Spec(layout, yaml.safe_load(files["job.yaml"]), accelerate_config,
                        run_dir.parent, grace, run_dir_made=True, job_files=files,
                        banner=banner, title="rehearsal ", summary_extra=record,
                        explain=False, plan=plan)  # fmt: skip
    return lifecycle.start(spec, on_tick)


def rehearse_kill(a, f: flags.RunFlags, layout: JobLayout, run_dir: Path, objects: tuple,
                  made: tuple, accelerate_config: Path, rank: int) -> int:  # fmt: skip
    """The rehearsal with rank `rank`'s pod SIGKILLed at a step; the operator's rules act on
    every pod's exit, and restarts.json / restarts.md record it. The exit code is the job's."""
    kind, image, pods, manifest = made
    if not 0 <= rank < layout.world_size:
        raise HarnessError(f"KILL={rank} is outside the {layout.world_size} rank(s)")
    timeout = f.timeout or int(yaml.safe_load(
        objects[0].data["job.yaml"])["ddp_timeout"])  # fmt: skip
    rdzv = flags.int_arg("RDZV_TIMEOUT", a.rdzv_timeout, 1) or timeout
    at_step = flags.int_arg("AT_STEP", a.at_step, 1) or 12
    pods = kube_faults.rehearsal_env(pods, timeout, rdzv)
    rules = kube_restarts.rules(kind, objects[-1] if kind == "PyTorchJob" else objects[1])
    deadline = timeout + rdzv + kube_faults.SLACK_S
    op = kube_faults.Operator(kind, rules, pods, rank, at_step, layout.run_id, deadline)
    # The operator decides when the job ends; the harness's own grace must not cut it first.
    summary = rehearse(layout, run_dir, objects, (kind, image, pods, manifest),
                       max(f.grace, deadline), accelerate_config, op)  # fmt: skip
    rec = kube_faults.record(op, summary, replace(layout, pods=tuple(pods)), run_dir)
    kube_faults.write(run_dir, rec)
    print(f"harness: {kind} with rank {rank}'s pod killed at step {op.kill_step}: "
          f"{rec['outcome']} ({rec['ended_by']}); kill to end {rec['kill_to_end_s']} s; "
          f"{run_dir / 'restarts.md'}")  # fmt: skip
    return lifecycle.EXIT_CODES.get(summary["status"], 1)
