"""The layout model with a Kubernetes job's shape (kube/__init__.py renders it): `replicas` pods,
each an `accelerate launch` of `per_pod` ranks, on the operator's rendezvous port; or (KIND=job,
option 2) one pod whose containers each hold one rank. And the claims its pods mount."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tuning.harness.contract.container import CONTAINER_UID, OUTPUT_DIR
from tuning.harness.errors import HarnessError
from tuning.harness.layout import job_paths
from tuning.harness.layout.layout import JOB_KINDS, Layout, LayoutError, Node
from tuning.harness.layout.mounts import Mounts
from tuning.harness.layout.topology import Topology
from tuning.harness.layout.trainer import Trainer
from tuning.harness.machine import devices
from tuning.harness.machine.image_recipes import IMAGE

JOB_KIND = JOB_KINDS[0]  # the default kind: a PyTorchJob
ONE_POD = "job"  # option 2: one pod, a container per rank (a batch/v1 Job)
OPERATOR_PORT = 23456  # the Training Operator's default for the port named pytorchjob-port
NAME_RE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
NAME_MAX = 40  # "<name>-worker-NNN" must stay a 63-character DNS label (a Service per pod)
# A PersistentVolumeClaim's name is a DNS subdomain (RFC 1123), at most 253 characters.
CLAIM_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class ClaimMount:
    """A PersistentVolumeClaim mounted in every training container: `path` inside it ("" for
    the whole claim) at `target`. MODEL and DATA read-only; OUTPUT_CLAIM at /output."""

    claim: str
    path: str
    target: str
    said_by: str  # MODEL, DATA or OUTPUT_CLAIM, for messages
    read_only: bool = True

    def check(self) -> None:
        if not (len(self.claim) <= 253 and CLAIM_RE.fullmatch(self.claim)):
            raise LayoutError(
                f"{self.said_by}: {self.claim!r} is not a claim's name (lower-case letters, "
                "digits, '-' and '.'; as `kubectl get pvc` lists it)"
            )
        if self.path.startswith("/") or ".." in self.path.split("/"):
            raise LayoutError(
                f"{self.said_by}: {self.path!r} must be a path inside claim "
                f"{self.claim}, without '..'"
            )


@dataclass(frozen=True)
class JobLayout(Layout):
    """A Kubernetes job on the layout model: `replicas` pods (PyTorchJob Master + Workers,
    TrainJob nodes), `per_pod` ranks in each; KIND=job: one pod of `per_pod` containers, one
    rank each. The topology's GPUs and `nproc` keep their meaning (GPUs in all; CPU ranks in
    all), so world size, device and the job paths come from `Layout`. `pods` are the nodes as
    the operator makes them (`operator_pods`); empty until the job is rendered."""

    topology: Topology = field(default_factory=lambda: Topology(kind=JOB_KIND, port=OPERATOR_PORT))
    name: str = "sft"
    replicas: int = 1
    pods: tuple[Node, ...] = ()
    claims: tuple[ClaimMount, ...] = ()
    rdzv_timeout: int | None = None  # RDZV_TIMEOUT: the static rendezvous's (None: torchrun's)
    grace_s: int | None = None  # GRACE: terminationGracePeriodSeconds (None: Kubernetes' 30)
    namespace: str | None = None  # NAMESPACE: every object's (None: kubectl's current one)
    uid_auto: bool = False  # KUBE_UID=auto: the platform assigns the pods' uid (OpenShift)

    def __post_init__(self) -> None:
        # The layout model's own checks (its kinds aside); then the job's.
        self.check()
        kind = self.topology.kind
        if kind not in JOB_KINDS:
            raise LayoutError(f"KIND={kind!r} is unknown; use one of {', '.join(JOB_KINDS)}")
        if not (len(self.name) <= NAME_MAX and NAME_RE.fullmatch(self.name)):
            raise LayoutError(
                f"NAME={self.name!r}: a job's name here is lower-case letters, digits and "
                f"'-', starts with a letter, at most {NAME_MAX} characters; e.g. NAME=sft-demo"
            )
        if self.replicas < 1:
            raise LayoutError(f"NODES={self.replicas} must be at least 1")
        if kind == ONE_POD and self.replicas != 1:
            raise LayoutError(
                f"KIND=job is one pod (a container per rank); NODES={self.replicas} pods are "
                "KIND=pytorchjob or KIND=trainjob"
            )
        world = self.topology.world_size
        if world % self.replicas:
            raise LayoutError(f"{world} ranks do not split over {self.replicas} pods")
        for mount in self.claims:
            mount.check()

    @property
    def per_pod(self) -> int:
        return self.topology.world_size // self.replicas

    @property
    def gpus_per_pod(self) -> int:
        return self.topology.gpus // self.replicas

    @property
    def one_pod(self) -> bool:
        """Option 2: the ranks are containers of one pod."""
        return self.topology.kind == ONE_POD

    @property
    def shared_namespaces(self) -> bool:
        return self.one_pod  # a pod's containers share its network and IPC namespaces

    @property
    def output_claim(self) -> str | None:
        return next((m.claim for m in self.claims if m.target == OUTPUT_DIR), None)

    @property
    def writers(self) -> int:
        """Pods that write to /output: several need a ReadWriteMany claim."""
        return 1 if self.one_pod else self.replicas

    def nodes(self) -> list[Node]:
        return list(self.pods)


def job_layout(
    gpus_per_pod: int,
    nproc_per_pod: int,
    nodes: int,
    cuda: str | None = None,
    *,
    run_id: str,
    run_dir: str,
    kind: str = JOB_KINDS[0],
    image: str | None = None,
    user: str = CONTAINER_UID,
    entry: str | None = None,
    src: str | None = None,
    args: tuple[str, ...] | None = None,
    **job,
) -> JobLayout:
    """GPUS and NPROC as `make kube` means them: per pod (a cluster's: no host GPU asked).
    `job`: JobLayout's own fields (name, claims, rdzv_timeout, ...)."""
    per_pod = gpus_per_pod or nproc_per_pod
    plan = devices.for_cluster(gpus_per_pod, image or IMAGE, cuda, pods=nodes)
    try:
        return JobLayout(
            run_id=run_id,
            topology=Topology(kind, plan, per_pod * nodes, OPERATOR_PORT),
            mounts=Mounts(run_dir, src=src),
            trainer=Trainer(entry, args, user=user),
            replicas=nodes,
            **job,
        )
    except LayoutError as e:
        raise HarnessError(str(e)) from None


def claim_mounts(model, data, output_claim: str | None) -> tuple[ClaimMount, ...]:
    """MODEL and DATA on claims, where the job says the ranks find them (job_paths.rank_path:
    /model, /data/<name>), and OUTPUT_CLAIM, the whole claim, at /output."""
    mounts = [
        ClaimMount(src.claim, src.path, job_paths.mount_target(src), src.var)
        for src in (model, data)
        if src.where == "claim"
    ]
    if output_claim:
        mounts.append(ClaimMount(output_claim, "", OUTPUT_DIR, "OUTPUT_CLAIM", read_only=False))
    return tuple(mounts)
