"""The layout model with a Kubeflow job's shape (kube.py renders it): `replicas` pods, each
an `accelerate launch` of `per_pod` ranks, on the operator's rendezvous port."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from tuning.harness.spec.layout import JOB_KINDS, Layout, LayoutError, Node

JOB_KIND = JOB_KINDS[0]  # a JobLayout's kind, for a PyTorchJob and a TrainJob alike
OPERATOR_PORT = 23456  # the Training Operator's default for the port named pytorchjob-port
NAME_RE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
NAME_MAX = 40  # "<name>-worker-NNN" must stay a 63-character DNS label (a Service per pod)


@dataclass(frozen=True)
class JobLayout(Layout):
    """A PyTorchJob on the layout model: `replicas` pods (Master + Workers), `per_pod` ranks
    in each. `gpus` and `nproc` keep their meaning (GPUs in all; CPU ranks in all), so
    world size, device and the job paths come from `Layout`. `pods` are the nodes as the
    operator makes them (`operator_pods`); empty until the job is rendered."""

    kind: str = JOB_KIND
    port: int = OPERATOR_PORT
    name: str = "sft"
    replicas: int = 1
    pods: tuple[Node, ...] = ()

    def __post_init__(self) -> None:
        # The layout model's own checks, on the fields it knows; then the job's.
        Layout(**{f.name: getattr(self, f.name) for f in fields(Layout)} | {"kind": "single"})
        if self.kind != JOB_KIND:
            raise LayoutError(f"a JobLayout is kind {JOB_KIND!r}, not {self.kind!r}")
        if not (len(self.name) <= NAME_MAX and NAME_RE.fullmatch(self.name)):
            raise LayoutError(
                f"NAME={self.name!r}: a PyTorchJob name here is lower-case letters, digits and "
                f"'-', starts with a letter, at most {NAME_MAX} characters; e.g. NAME=sft-demo"
            )
        if self.replicas < 1:
            raise LayoutError(f"NODES={self.replicas} must be at least 1")
        if self.world_size % self.replicas:
            raise LayoutError(f"{self.world_size} ranks do not split over {self.replicas} pods")

    @property
    def per_pod(self) -> int:
        return self.world_size // self.replicas

    @property
    def gpus_per_pod(self) -> int:
        return self.gpus // self.replicas

    def nodes(self) -> list[Node]:
        return list(self.pods)
