"""`make kube REHEARSE=1`: the pods an operator makes of the rendered objects, run here as
Compose services (one per pod, named and reachable as the pod, with exactly the environment
the operator injects and the ConfigMap's files at /job), followed to the end by `run.start`
as `up` is."""

from __future__ import annotations

from pathlib import Path

import yaml

from . import engine, kube, kube_trainjob, options, run
from .engine import HarnessError
from .layout import JobLayout


def pods_of(objects: tuple) -> tuple[str, str, list, str]:
    """(kind, image, pods, manifest name) for a rendered (ConfigMap, PyTorchJob) or
    (ConfigMap, TrainingRuntime, TrainJob)."""
    job = objects[-1]
    if job.kind == "TrainJob":
        runtime = objects[1]
        return ("TrainJob", job.spec.trainer.image, kube_trainjob.trainer_pods(runtime, job),
                kube_trainjob.MANIFEST)  # fmt: skip
    image = next(
        c.image for c in job.spec.pytorch_replica_specs["Master"].template.spec.containers
        if c.name == kube.CONTAINER
    )  # fmt: skip
    return "PyTorchJob", image, kube.operator_pods(job), kube.MANIFEST


def rehearse(layout: JobLayout, run_dir: Path, objects: tuple, grace: float,
             accelerate_config: Path) -> dict:  # fmt: skip
    """Run the operator's pods of `objects` and follow them to the end. `run_dir` exists;
    returns the summary."""
    kind, image, pods, manifest = pods_of(objects)
    layout = layout.with_(image=image, pods=tuple(pods))
    if layout.gpus and engine.gpu_count() < layout.gpus:
        raise HarnessError(
            f"a rehearsal of {layout.replicas} pod(s) x {layout.gpus_per_pod} GPU(s) needs "
            f"{layout.gpus} GPUs here; rehearse with GPUS=0 (CPU ranks, NPROC per pod)"
        )
    files = dict(objects[0].data or {})
    names = ", ".join(p.name for p in pods)
    banner = (f"harness: rehearsing {kind} {layout.name}: pods {names}; "
              f"{layout.world_size} rank(s); {run_dir}")  # fmt: skip
    record = {kind.lower(): {"name": layout.name, "manifest": str(run_dir / manifest),
                             "pods": [p.name for p in pods]}}  # fmt: skip
    spec = options.Spec(layout, yaml.safe_load(files["job.yaml"]), accelerate_config,
                        run_dir.parent, grace, run_dir_made=True, job_files=files,
                        banner=banner, title="rehearsal ", summary_extra=record,
                        explain=False)  # fmt: skip
    return run.start(spec)
