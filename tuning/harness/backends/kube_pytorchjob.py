"""`make kube` (KIND=pytorchjob, the default): the job as a Kubeflow PyTorchJob
(kubeflow.org/v1, Training Operator 1.9), built from the Training Operator's own SDK models
(`kubeflow-training`) and the `kubernetes` client models (the pod: kube_pod.py), so field names
and types are theirs; and `operator_pods()`: what the operator makes of that object (pod
names, node ranks and the environment it injects), read from the object itself.

The SDK is imported only here, lazily: the rest of the CLI works without the `kube` extra.
"""

from __future__ import annotations

from tuning.harness.backends import kube_pod, kube_restarts
from tuning.harness.contract.container import contract_env
from tuning.harness.errors import HarnessError
from tuning.harness.layout.job_layout import JobLayout
from tuning.harness.layout.layout import Node

API_VERSION = "kubeflow.org/v1"
CONTAINER = "pytorch"  # the operator finds the training container by this name
PORT_NAME = "pytorchjob-port"  # ... and the rendezvous port by this one
MANIFEST = "pytorchjob.yaml"


def sdk():
    try:
        import kubeflow.training as kf
    except ImportError as e:
        raise HarnessError(
            f"the Kubeflow Training SDK is missing ({e}); install the kube extra: "
            "`.venv/bin/pip install -e '.[kube]'` (kubeflow-training 1.9)"
        ) from None
    return kf


def render(layout: JobLayout, max_restarts: int = 0, restart_policy: str | None = None):
    """The PyTorchJob as an SDK model. MAX_RESTARTS is runPolicy.backoffLimit; the restart
    policy defaults to Never without restarts, ExitCode with them."""
    kf, k8s = sdk(), kube_pod.k8s()
    policy = kube_restarts.v1_policy(restart_policy, max_restarts)
    port = k8s.V1ContainerPort(name=PORT_NAME, container_port=layout.topology.port, protocol="TCP")
    template = kube_pod.pod_template(layout, [kube_pod.container(layout, CONTAINER, ports=[port])])
    specs = {
        "Master": kf.KubeflowOrgV1ReplicaSpec(replicas=1, restart_policy=policy, template=template)
    }
    if layout.replicas > 1:
        specs["Worker"] = kf.KubeflowOrgV1ReplicaSpec(
            replicas=layout.replicas - 1, restart_policy=policy, template=template
        )
    return kf.KubeflowOrgV1PyTorchJob(
        api_version=API_VERSION,
        kind="PyTorchJob",
        metadata=k8s.V1ObjectMeta(name=layout.name, labels=kube_pod.labels(layout)),
        spec=kf.KubeflowOrgV1PyTorchJobSpec(
            pytorch_replica_specs=specs,
            nproc_per_node=str(layout.per_pod),
            run_policy=kf.KubeflowOrgV1RunPolicy(
                clean_pod_policy="Running", backoff_limit=max_restarts
            ),
        ),
    )


def _int_or(raw: str | None, default: int) -> int:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return default


def operator_pods(job) -> list[Node]:
    """The pods the Training Operator (release-1.9) creates for a PyTorchJob object: names
    `<job>-master-0`, `<job>-worker-<i>`, node rank (master 0, worker i -> i + 1), and each
    pod's `pytorch` container environment: its own `env`, then what the operator appends
    (Training Operator pkg/controller.v1/pytorch/envvar.go). Everything is read from the
    object; nothing from the harness."""
    name = job.metadata.name
    specs = job.spec.pytorch_replica_specs or {}
    if "Master" not in specs:
        raise HarnessError(f"PyTorchJob {name} has no Master replica; MASTER_ADDR needs one")
    master = specs["Master"]
    port = None
    for ctr in master.template.spec.containers:
        if ctr.name == CONTAINER:
            port = next((p.container_port for p in ctr.ports or [] if p.name == PORT_NAME), None)
    if port is None:
        raise HarnessError(
            f"PyTorchJob {name}: the Master has no container {CONTAINER!r} with a port named "
            f"{PORT_NAME!r}; the operator refuses it"
        )
    raw_nproc = job.spec.nproc_per_node or "auto"
    nproc = _int_or(raw_nproc, 1)  # "auto" (and anything not a number) counts as 1
    order = [("master", master)] + ([("worker", specs["Worker"])] if "Worker" in specs else [])
    nnodes = sum(spec.replicas if spec.replicas is not None else 1 for _, spec in order)
    master_addr = f"{name}-master-0"
    pods = []
    for rtype, spec in order:
        replicas = spec.replicas if spec.replicas is not None else 1
        ctr = next(c for c in spec.template.spec.containers if c.name == CONTAINER)
        gpus = _int_or(((ctr.resources and ctr.resources.limits) or {}).get("nvidia.com/gpu"), 0)
        for index in range(replicas):
            rank = index + (1 if rtype == "worker" else 0)
            env = {e.name: e.value for e in ctr.env or []}
            env.update(contract_env(master_addr, port, nnodes, nproc, rank))
            env["PET_NPROC_PER_NODE"] = raw_nproc  # verbatim, "auto" included
            ids = tuple(str(rank * gpus + g) for g in range(gpus))  # host GPUs, rehearsal only
            pods.append(Node(f"{name}-{rtype}-{index}", rank, nproc, ids, env))
    return pods


def image_of(job) -> str:
    return next(
        c.image
        for c in job.spec.pytorch_replica_specs["Master"].template.spec.containers
        if c.name == CONTAINER
    )
