"""`make kube KIND=trainjob`: the run as a Kubeflow Trainer v2 TrainJob
(trainer.kubeflow.org/v1alpha1, Trainer 2.3), beside the PyTorchJob of kube/__init__.py.

Three objects, built with the Trainer's own pydantic models (`kubeflow-trainer-api`):
- the ConfigMap with the job files (and ENTRY's launcher: kube_pod.config_maps, as for the
  PyTorchJob);
- a namespaced TrainingRuntime of our own, `<name>`: the JobSet template whose one
  replicatedJob `node` runs the pod of kube_pod (restricted security context, /dev/shm,
  /job, /output, /tmp) and whose failurePolicy.maxRestarts is MAX_RESTARTS. Our own runtime,
  not the stock `torch-distributed` with runtimePatches: the pod's volumes and security
  context are then in one object the namespace owns, and the job does not depend on what a
  cluster admin installed as `torch-distributed` (its image, its fields);
- the TrainJob `<name>`: runtimeRef to it, numNodes = NODES, numProcPerNode, resourcesPerNode,
  image, and the command = our launcher.

`trainer_pods()` is what Trainer v2 and JobSet make of them (kubeflow/trainer
pkg/runtime/framework/plugins/torch/torch.go at v2.3.0): pods `<job>-node-0-<i>` in the
headless Service `<job>`, each with PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (the Job's
completion index), PET_MASTER_ADDR=`<job>-node-0-0.<job>` and PET_MASTER_PORT=29500, and
nothing else of torch's: no MASTER_ADDR, WORLD_SIZE or RANK.
"""

from __future__ import annotations

from tuning.harness.backends import kube_manifest, kube_pod
from tuning.harness.errors import HarnessError
from tuning.harness.layout.job_layout import JobLayout
from tuning.harness.layout.layout import Node

API_VERSION = "trainer.kubeflow.org/v1alpha1"
API_GROUP = "trainer.kubeflow.org"
NODE = "node"  # the replicatedJob and container the torch plugin injects into (constants.Node)
ANCESTOR = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}  # ... in this pod set
MASTER_PORT = 29500  # constants.ContainerTrainerPort
MANIFEST = "trainjob.yaml"


def render(layout: JobLayout, job: dict, accelerate_yaml: str, max_restarts: int = 0):
    """(ConfigMap(s), TrainingRuntime, TrainJob): client models and two Trainer API models."""
    m = kube_manifest.trainer_api()
    meta = {"name": layout.name, "labels": kube_pod.labels(layout)}
    # the TrainJob's resourcesPerNode sets the resources, its command and args the launch
    ctr = kube_pod.container(layout, NODE, resources=None, args=None, command=None)
    pod = kube_pod.pod_template(layout, [ctr], pod_labels={**kube_pod.labels(layout), **ANCESTOR})
    template = kube_pod.plain(pod)
    # One pod failing fails its Job at once; JobSet's failurePolicy then recreates every pod.
    job_spec = {
        "backoffLimit": 0,
        "template": {**template, "spec": {**template["spec"], "restartPolicy": "Never"}},
    }
    runtime = m.TrainerV1alpha1TrainingRuntime.from_dict(
        {
            "apiVersion": API_VERSION,
            "kind": "TrainingRuntime",
            "metadata": {
                **meta,
                "labels": {**meta["labels"], "trainer.kubeflow.org/framework": "torch"},
            },
            "spec": {
                "mlPolicy": {"numNodes": layout.replicas, "torch": {}},
                "template": {
                    "spec": {
                        "failurePolicy": {"maxRestarts": max_restarts},
                        "replicatedJobs": [
                            {
                                "name": NODE,
                                "replicas": 1,
                                "template": {"metadata": {"labels": ANCESTOR}, "spec": job_spec},
                            }
                        ],
                    }
                },
            },
        }
    )
    train_job = m.TrainerV1alpha1TrainJob.from_dict(
        {
            "apiVersion": API_VERSION,
            "kind": "TrainJob",
            "metadata": meta,
            "spec": {
                "runtimeRef": {
                    "apiGroup": API_GROUP,
                    "kind": "TrainingRuntime",
                    "name": layout.name,
                },
                "trainer": {
                    "image": layout.topology.plan.image,
                    "command": kube_pod.launch_command(layout, explicit=True),
                    **({"args": layout.trainer_args} if layout.trainer_args else {}),
                    "env": [kube_pod.plain(e) for e in kube_pod.env(layout)],
                    "numNodes": layout.replicas,
                    "numProcPerNode": layout.per_pod,
                    "resourcesPerNode": kube_pod.plain(kube_pod.resources(layout)),
                },
            },
        }
    )
    return (*kube_pod.config_maps(layout, job, accelerate_yaml), runtime, train_job)


def load(text: str):
    """(ConfigMap, TrainingRuntime, TrainJob) back from the YAML, through the models (the
    job's ConfigMap: ENTRY adds the launcher's)."""
    objects = kube_manifest.load(text)
    kinds = {o.kind for o in objects}
    missing = {"ConfigMap", "TrainingRuntime", "TrainJob"} - kinds
    if missing:
        raise HarnessError(f"the manifest lacks {', '.join(sorted(missing))}")
    runtime, job = (kube_manifest.of_kind(objects, k) for k in ("TrainingRuntime", "TrainJob"))
    return kube_manifest.job_config_map(objects), runtime, job


def node_container(runtime):
    """The runtime's `node` container, where the torch plugin injects."""
    for rjob in runtime.spec.template.spec.replicated_jobs:
        if rjob.name == NODE and (rjob.template.metadata.labels or {}).items() >= ANCESTOR.items():
            for ctr in rjob.template.spec.template.spec.containers:
                if ctr.name == NODE:
                    return ctr
    raise HarnessError(
        f"TrainingRuntime {runtime.metadata.name}: no replicatedJob {NODE!r} labelled "
        f"{ANCESTOR} with a container {NODE!r}; Trainer v2 would inject PET_* nowhere"
    )


def trainer_pods(runtime, train_job) -> list[Node]:
    """The pods Trainer v2 (torch plugin) and JobSet make of the two objects, read from them:
    the container's env, the TrainJob's trainer.env upserted over it, then the PET_* values."""
    name = train_job.metadata.name
    trainer = train_job.spec.trainer
    if train_job.spec.runtime_ref.name != runtime.metadata.name:
        raise HarnessError(
            f"TrainJob {name} refers to runtime {train_job.spec.runtime_ref.name!r},"
            f" not {runtime.metadata.name!r}"
        )
    env = {e.name: e.value for e in node_container(runtime).env or []}
    env.update({e.name: e.value for e in trainer.env or []})
    nnodes = trainer.num_nodes or runtime.spec.ml_policy.num_nodes or 1
    nproc = trainer.num_proc_per_node or 1
    limits = (trainer.resources_per_node and trainer.resources_per_node.limits) or {}
    gpus = limits.get("nvidia.com/gpu")  # a Quantity: a string or a number, one of the two
    gpus = int(gpus.actual_instance) if gpus is not None else 0
    pods = []
    for rank in range(nnodes):
        pet = {
            "PET_NNODES": str(nnodes),
            "PET_NPROC_PER_NODE": str(nproc),
            "PET_NODE_RANK": str(rank),
            "PET_MASTER_ADDR": f"{name}-{NODE}-0-0.{name}",
            "PET_MASTER_PORT": str(MASTER_PORT),
        }
        ids = tuple(str(rank * gpus + g) for g in range(gpus))  # host GPUs, rehearsal only
        pod = f"{name}-{NODE}-0-{rank}"
        pods.append(Node(pod, rank, nproc, ids, {**env, **pet}, aliases=(f"{pod}.{name}",)))
    return pods


def max_restarts(runtime) -> int:
    policy = runtime.spec.template.spec.failure_policy
    return (policy and policy.max_restarts) or 0
