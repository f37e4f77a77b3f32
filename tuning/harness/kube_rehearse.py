"""`make kube REHEARSE=1`: the pods an operator makes of the rendered objects, run here as
Compose services (one per pod, named and reachable as the pod, with exactly the environment
the operator injects and the ConfigMap's files at /job), followed to the end by `run.start`
as `up` is."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from . import devices, options, run
from .engine import HarnessError
from .layout import JobLayout


def rehearse(layout: JobLayout, run_dir: Path, objects: tuple, made: tuple, grace: float,
             accelerate_config: Path) -> dict:  # fmt: skip
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
    layout = layout.with_(image=image, pods=tuple(pods))
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
    return run.start(spec)
