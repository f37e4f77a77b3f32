"""A job's Kubernetes objects, whatever its kind: rendered (the ConfigMaps and the PyTorchJob,
TrainJob or Job, as API models), read back from their YAML, and what runs of them (`pods_of`:
what the object's operator, or the Job controller, starts; the rehearsal runs those)."""

from __future__ import annotations

from dataclasses import dataclass

from tuning.harness.backends import (
    kube_job,
    kube_manifest,
    kube_pod,
    kube_pytorchjob,
    kube_trainjob,
)
from tuning.harness.layout.job_layout import JobLayout
from tuning.harness.layout.layout import Node


def render(
    layout: JobLayout,
    job: dict,
    accelerate_yaml: str,
    max_restarts: int = 0,
    restart_policy: str | None = None,
) -> tuple:
    """The ConfigMap(s) and the object of the layout's kind, as API models."""
    if layout.topology.kind == "trainjob":
        return kube_trainjob.render(layout, job, accelerate_yaml, max_restarts)
    maps = kube_pod.config_maps(layout, job, accelerate_yaml)
    if layout.topology.kind == "job":
        return (*maps, kube_job.render(layout, max_restarts))
    return (*maps, kube_pytorchjob.render(layout, max_restarts, restart_policy))


def load(text: str) -> tuple[object, object]:
    """(the job's ConfigMap, the PyTorchJob or Job) back from `dump`'s YAML, through the
    models."""
    objects = kube_manifest.load(text)
    return kube_manifest.job_config_map(objects), objects[-1]


@dataclass(frozen=True)
class Made:
    """What runs of a rendered object: its kind, image and nodes (a Compose service each in
    the rehearsal: a pod, or KIND=job a container of the one pod), each node's pod, the
    manifest's name, and the object the restart rules are read from."""

    kind: str
    image: str
    nodes: list[Node]
    pod_of: dict[str, str]
    manifest: str
    rules_from: object


def pods_of(objects: tuple) -> Made:
    job = objects[-1]
    if job.kind == "TrainJob":
        runtime = kube_manifest.of_kind(objects, "TrainingRuntime")
        nodes = kube_trainjob.trainer_pods(runtime, job)
        return Made(
            "TrainJob",
            job.spec.trainer.image,
            nodes,
            {n.name: n.name for n in nodes},
            kube_trainjob.MANIFEST,
            runtime,
        )
    if job.kind == "Job":
        nodes = kube_job.containers(job)
        pod = f"{job.metadata.name}-pod"  # the Job's one pod (on a cluster <name>-<5 letters>)
        return Made(
            "Job",
            kube_job.image_of(job),
            nodes,
            {n.name: pod for n in nodes},
            kube_job.MANIFEST,
            job,
        )
    nodes = kube_pytorchjob.operator_pods(job)
    return Made(
        "PyTorchJob",
        kube_pytorchjob.image_of(job),
        nodes,
        {n.name: n.name for n in nodes},
        kube_pytorchjob.MANIFEST,
        job,
    )
