"""`make kube KIND=job`: option 2, one pod whose containers each hold one rank (one GPU each,
or one CPU rank each with GPUS=0), sharing the pod's network (the master is 127.0.0.1) and a
memory-backed /dev/shm: the shape `LAYOUT=per-rank NETWORK=shared` runs under Compose.

It is a plain batch/v1 Job, not a PyTorchJob Master with several containers, because of how
each restarts (Training Operator 1.9, pkg/controller.v1/common/pod.go):
- RESTART_POLICY=ExitCode reads the exit code of the container named `pytorch` alone: rank 1's
  container killed (137) and rank 0's `pytorch` failing after it (1, its peer gone) is a
  permanent failure, and the pod is never retried;
- OnFailure restarts the failed container alone, inside the pod: one rank restarted by itself
  cannot rejoin its peers' static rendezvous, nor they it;
- the operator appends MASTER_ADDR=<job>-master-0, RANK=0, PET_NODE_RANK=0, PET_NNODES=1 and
  WORLD_SIZE to every container alike, after each container's own (the last of a name wins).
A batch Job needs no operator, and its pod restarts whole: `restartPolicy: Never`, so the pod
fails once every container has ended and one of them failed, and the Job controller makes a
new pod (after its back-off: 10 s, doubling) up to `backoffLimit` = MAX_RESTARTS times. Every
rank starts again together, with new emptyDirs; an OUTPUT_CLAIM is the same claim.

Each container's node rank is HARNESS_NODE_RANK, a name no operator sets, which the launcher
reads before PET_NODE_RANK and RANK (tuning/container/launch.py); the same for every kind of object.
"""

from __future__ import annotations

from dataclasses import replace

from tuning.harness.backends import kube_pod
from tuning.harness.errors import HarnessError
from tuning.harness.layout.job_layout import JobLayout
from tuning.harness.layout.layout import Node, nccl_env

API_VERSION = "batch/v1"
MANIFEST = "job.yaml"
MASTER = "127.0.0.1"  # the pod's containers share its network namespace
MASTER_PORT = 29500
NODE_RANK = "HARNESS_NODE_RANK"  # tuning/container/launch.py reads it first


def container_name(rank: int) -> str:
    return f"rank{rank}"


def render(layout: JobLayout, max_restarts: int = 0):
    """The batch Job: one pod of `per_pod` containers, each rank `i` in container `rank<i>`."""
    c = kube_pod.k8s()
    n = layout.per_pod
    # What NCCL needs when each container sees one GPU of a shared /dev/shm (layout.nccl_env)
    nccl = nccl_env(replace(layout.topology, kind="per-rank", network="shared"))
    gpus = 1 if layout.topology.device == "gpu" else 0
    containers, tmps = [], []
    for rank in range(n):
        name = container_name(rank)
        own = {
            "PET_MASTER_ADDR": MASTER,
            "PET_MASTER_PORT": str(MASTER_PORT),
            "PET_NNODES": str(n),
            "PET_NPROC_PER_NODE": "1",
            NODE_RANK: str(rank),
            **nccl,
        }
        env = kube_pod.env(layout) + [c.V1EnvVar(name=k, value=v) for k, v in own.items()]
        tmps.append(f"tmp-{name}")  # /tmp (HOME, caches) a container's own, as under Compose
        containers.append(
            kube_pod.container(
                layout,
                name,
                tmp=tmps[-1],
                env=env,
                resources=kube_pod.resources(layout, ranks=1, gpus=gpus),
            )
        )
    template = kube_pod.pod_template(layout, containers, tmps=tuple(tmps), restart_policy="Never")
    return c.V1Job(
        api_version=API_VERSION,
        kind="Job",
        metadata=c.V1ObjectMeta(name=layout.name, labels=kube_pod.labels(layout)),
        spec=c.V1JobSpec(
            backoff_limit=max_restarts, completions=1, parallelism=1, template=template
        ),
    )


def containers(job) -> list[Node]:
    """The Job's pod's containers as nodes, each `accelerate launch` of its own ranks, read
    from the object alone: a batch Job injects nothing, so a container's environment is its
    own `env`; its node rank HARNESS_NODE_RANK, its GPUs its `nvidia.com/gpu` limit (host
    GPUs for a rehearsal, one container after the other)."""
    name = job.metadata.name
    nodes, first = [], 0
    for ctr in job.spec.template.spec.containers:
        env = {e.name: e.value for e in ctr.env or []}
        if NODE_RANK not in env:
            raise HarnessError(
                f"Job {name}: container {ctr.name} has no {NODE_RANK}; "
                "its launcher would not know its rank"
            )
        gpus = int(((ctr.resources and ctr.resources.limits) or {}).get("nvidia.com/gpu", 0))
        ids = tuple(str(first + g) for g in range(gpus))
        first += gpus
        nproc = int(env.get("PET_NPROC_PER_NODE", "1"))
        nodes.append(Node(ctr.name, int(env[NODE_RANK]), nproc, ids, env))
    ranks = sorted(n.node_rank for n in nodes)
    if ranks != list(range(len(nodes))):
        raise HarnessError(f"Job {name}: container node ranks {ranks} are not 0..{len(nodes) - 1}")
    return nodes


def image_of(job) -> str:
    return job.spec.template.spec.containers[0].image
