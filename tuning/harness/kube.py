"""`make kube`: the run as a Kubeflow PyTorchJob (kubeflow.org/v1), and a local rehearsal of it.

Three steps, each built on the one before:

1. `JobLayout` (layout.py): the layout model with a PyTorchJob's shape: `replicas` pods of
   `per_pod` ranks each (GPUs per pod, or CPU ranks when GPUS=0), job name and image.
2. `render()`: the PyTorchJob and the ConfigMap holding the job config (job.yaml and
   accelerate.yaml, as `up` writes them), built from the Training Operator's own SDK models
   (`kubeflow-training`) and the `kubernetes` client models, so field names and types are
   theirs. `dump()` writes them as one YAML file for `kubectl apply -f`.
3. `operator_pods()`: what the Training Operator makes of that object (pod names, node ranks
   and the environment it injects), read from the object itself. `rehearse()` runs those pods
   as Compose services with exactly that environment, the image's own entrypoint and the
   ConfigMap's content at /job: a `run.start`, as `up` is.

The SDKs are imported only here, lazily: the rest of the CLI works without the `kube` extra,
and nothing on this side imports torch.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import yaml

from . import compose as compose_mod
from . import devices, nvidia, options, run, runs
from .engine import HarnessError
from .layout import (
    CONTAINER_UID,
    IMAGE,
    JOB_DIR,
    OUTPUT_DIR,
    TMP_DIR,
    JobLayout,
    LayoutError,
    Node,
    contract_env,
)

API_VERSION = "kubeflow.org/v1"
CONTAINER = "pytorch"  # the operator finds the training container by this name
PORT_NAME = "pytorchjob-port"  # ... and the rendezvous port by this one
SHM_LIMIT = "2Gi"  # as compose.SHM_SIZE: NCCL needs more than the default 64 MB /dev/shm
MANIFEST = "pytorchjob.yaml"
# Requests per rank, so the scheduler places a pod where its ranks fit: a core each, and
# host memory for a rank's copy of the model while it loads (the tiny demo needs far less).
CPU_PER_RANK = 1
MEMORY_PER_RANK = {"gpu": 16, "cpu": 2}  # GiB


def job_layout(gpus_per_pod: int, nproc_per_pod: int, nodes: int, cuda: str | None = None,
               **kw) -> JobLayout:  # fmt: skip
    """GPUS and NPROC as `make kube` means them: per pod (a cluster's: no host GPU asked)."""
    per_pod = gpus_per_pod or nproc_per_pod
    kw["image"] = devices.for_cluster(gpus_per_pod, kw.get("image") or IMAGE, cuda).image
    try:
        return JobLayout(gpus=gpus_per_pod * nodes, nproc=per_pod * nodes, replicas=nodes, **kw)
    except LayoutError as e:
        raise HarnessError(str(e)) from None


# --- Rendering ------------------------------------------------------------------------------


def _sdk():
    try:
        import kubeflow.training as kf
        import kubernetes.client as k8s
    except ImportError as e:
        raise HarnessError(
            f"the Kubeflow Training SDK is missing ({e}); install the kube extra: "
            "`.venv/bin/pip install -e '.[kube]'` (kubeflow-training 1.9)"
        ) from None
    return kf, k8s


def config_map_name(layout: JobLayout) -> str:
    return f"{layout.name}-job"


def render(layout: JobLayout, job: dict, accelerate_yaml: str) -> tuple[object, object]:
    """(ConfigMap, PyTorchJob) as SDK model objects."""
    kf, k8s = _sdk()
    labels = {compose_mod.LABEL: layout.run_id, "app.kubernetes.io/name": layout.name}
    config_map = k8s.V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=k8s.V1ObjectMeta(name=config_map_name(layout), labels=labels),
        data={"job.yaml": yaml.safe_dump(job, sort_keys=False), "accelerate.yaml": accelerate_yaml},
    )
    uid, gid = (int(x) for x in layout.user.split(":"))
    gpus = layout.gpus_per_pod
    container = k8s.V1Container(
        name=CONTAINER,
        image=layout.image,
        image_pull_policy="IfNotPresent",
        # No `command`: the image's ENTRYPOINT (python -m tuning.launch), as under Compose.
        args=["--config", f"{JOB_DIR}/job.yaml"],
        env=[
            k8s.V1EnvVar(name="ACCELERATE_CONFIG", value=f"{JOB_DIR}/accelerate.yaml"),
            # GPU ranks or not, said: a pod's devices keep the node's names (/dev/nvidia5)
            k8s.V1EnvVar(name="HARNESS_DEVICE", value=layout.device),
            k8s.V1EnvVar(name="HOME", value=TMP_DIR),  # caches (~/.cache, ~/.triton) stay writable
        ],
        ports=[k8s.V1ContainerPort(name=PORT_NAME, container_port=layout.port, protocol="TCP")],
        resources=k8s.V1ResourceRequirements(
            requests={
                "cpu": str(CPU_PER_RANK * layout.per_pod),
                "memory": f"{MEMORY_PER_RANK[layout.device] * layout.per_pod}Gi",
            },
            limits={"nvidia.com/gpu": str(gpus)} if gpus else None,
        ),  # fmt: skip
        volume_mounts=[
            k8s.V1VolumeMount(name="job", mount_path=JOB_DIR, read_only=True),
            k8s.V1VolumeMount(name="dshm", mount_path="/dev/shm"),
            k8s.V1VolumeMount(name="output", mount_path=OUTPUT_DIR),
            k8s.V1VolumeMount(name="tmp", mount_path=TMP_DIR),
        ],
        # The Pod Security Standard "restricted": the image's non-root user, no capabilities,
        # no privilege escalation, the runtime's seccomp profile, and a read-only root: the
        # trainer writes only to /output, /dev/shm and /tmp, each a volume.
        security_context=k8s.V1SecurityContext(
            run_as_user=uid,
            run_as_group=gid,
            run_as_non_root=True,
            allow_privilege_escalation=False,
            capabilities=k8s.V1Capabilities(drop=["ALL"]),
            seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault"),
            read_only_root_filesystem=True,
        ),
    )
    template = k8s.V1PodTemplateSpec(
        metadata=k8s.V1ObjectMeta(labels=labels),
        spec=k8s.V1PodSpec(
            containers=[container],
            automount_service_account_token=False,  # training never talks to the API server
            security_context=k8s.V1PodSecurityContext(
                run_as_non_root=True,
                seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault"),
            ),
            volumes=[
                k8s.V1Volume(
                    name="job",
                    config_map=k8s.V1ConfigMapVolumeSource(name=config_map_name(layout)),
                ),
                k8s.V1Volume(
                    name="dshm",
                    empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory", size_limit=SHM_LIMIT),
                ),
                # Checkpoints and metrics; swap for a ReadWriteMany PVC to keep them.
                k8s.V1Volume(name="output", empty_dir=k8s.V1EmptyDirVolumeSource()),
                k8s.V1Volume(name="tmp", empty_dir=k8s.V1EmptyDirVolumeSource()),
            ],
        ),
    )
    # Static rendezvous: a pod that restarts alone cannot rejoin its peers, so a failed pod
    # fails the job (as `restart: "no"` under Compose) and the operator removes the rest.
    specs = {"Master": kf.KubeflowOrgV1ReplicaSpec(replicas=1, restart_policy="Never",
                                                   template=template)}  # fmt: skip
    if layout.replicas > 1:
        specs["Worker"] = kf.KubeflowOrgV1ReplicaSpec(
            replicas=layout.replicas - 1, restart_policy="Never", template=template
        )
    job_obj = kf.KubeflowOrgV1PyTorchJob(
        api_version=API_VERSION,
        kind="PyTorchJob",
        metadata=k8s.V1ObjectMeta(name=layout.name, labels=labels),
        spec=kf.KubeflowOrgV1PyTorchJobSpec(
            pytorch_replica_specs=specs,
            nproc_per_node=str(layout.per_pod),
            run_policy=kf.KubeflowOrgV1RunPolicy(clean_pod_policy="Running", backoff_limit=0),
        ),
    )
    return config_map, job_obj


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the ConfigMap's files) as literal blocks, readable in the YAML."""


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(*objects) -> str:
    """The objects as one YAML stream, serialized by the kubernetes client's ApiClient."""
    _, k8s = _sdk()
    api = k8s.ApiClient()
    docs = [api.sanitize_for_serialization(obj) for obj in objects]
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def load(text: str) -> tuple[object, object]:
    """(ConfigMap, PyTorchJob) back from `dump`'s YAML, through the SDK's deserializer."""
    kf, _ = _sdk()
    from kubeflow.training.utils.utils import FakeResponse

    api = kf.ApiClient()
    by_kind = {d["kind"]: d for d in yaml.safe_load_all(text) if d}
    return (
        api.deserialize(FakeResponse(by_kind["ConfigMap"]), "V1ConfigMap"),
        api.deserialize(FakeResponse(by_kind["PyTorchJob"]), "KubeflowOrgV1PyTorchJob"),
    )


# --- What the operator does with it ---------------------------------------------------------


def _int_or(raw: str | None, default: int) -> int:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return default


def operator_pods(job) -> list[Node]:
    """The pods the Training Operator (release-1.9) creates for a PyTorchJob object: names
    `<job>-master-0`, `<job>-worker-<i>`, node rank (master 0, worker i -> i + 1), and each
    pod's `pytorch` container environment: its own `env`, then what the operator appends
    (anchors.md). Everything is read from the object; nothing from the harness."""
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


# --- The rehearsal: the operator's pods as Compose services ---------------------------------


def rehearse(layout: JobLayout, run_dir: Path, config_map, job_obj, grace: float,
             accelerate_config: Path) -> dict:  # fmt: skip
    """Run the pods `operator_pods` makes of `job_obj` as Compose services and follow them
    to the end: a `run.start`, with /job holding the ConfigMap's files. `run_dir` exists;
    returns the summary."""
    image = next(
        c.image for c in job_obj.spec.pytorch_replica_specs["Master"].template.spec.containers
        if c.name == CONTAINER
    )  # fmt: skip
    pods = operator_pods(job_obj)
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
    files = dict(config_map.data or {})
    names = ", ".join(p.name for p in pods)
    banner = (f"harness: rehearsing PyTorchJob {layout.name}: pods {names}; "
              f"{layout.world_size} rank(s); {run_dir}")  # fmt: skip
    record = {"pytorchjob": {"name": layout.name, "manifest": str(run_dir / MANIFEST),
                             "pods": [p.name for p in pods]},
              **({"gpus": plan.record()} if plan else {})}  # fmt: skip
    spec = options.Spec(layout, yaml.safe_load(files["job.yaml"]), accelerate_config,
                        run_dir.parent, grace, run_dir_made=True, job_files=files,
                        banner=banner, title="rehearsal ", summary_extra=record,
                        explain=False, plan=plan)  # fmt: skip
    return run.start(spec)


# --- The command ----------------------------------------------------------------------------


def register(sub) -> None:
    p = sub.add_parser("kube", help="render the run as a Kubeflow PyTorchJob (and rehearse it)")
    p.add_argument("--gpus", help="GPUs per pod (default: all visible here; 0 = CPU ranks)")
    p.add_argument("--cuda", help="the GPU image's CUDA: 13.0 (default) or 12.8")
    p.add_argument("--nodes", help="pods: Master + NODES-1 Workers (default 1)")
    p.add_argument("--nproc", help="CPU ranks per pod when GPUS=0 (default 2 in one pod, else 1)")
    p.add_argument("--name", default="sft", help="the PyTorchJob's name (pods <name>-master-0...)")
    options.add_job_flags(p)
    p.add_argument("--rehearse", action="store_true",
                   help="then run it here as the operator would: Compose services named as its "
                        "pods, with the environment it injects")  # fmt: skip
    p.add_argument("--grace", type=float, default=options.GRACE_S,
                   help="rehearsal: seconds to wait for peers after a pod fails")  # fmt: skip
    p.add_argument("--run-id")
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    nodes = options.int_arg("NODES", a.nodes, 1) or 1
    gpus = options.gpus(a.gpus)  # per pod, on a cluster; unset: as many as this host shows
    gpus = len(nvidia.visible(nvidia.inventory())) if gpus is None else gpus
    nproc = options.int_arg("NPROC", a.nproc, 1) or (2 if nodes == 1 else 1)
    run_id = options.checked_run_id(a.run_id)
    runs_root = Path(a.runs).resolve()
    layout = job_layout(gpus, nproc, nodes, a.cuda, name=a.name, image=a.image, run_id=run_id,
                        run_dir=str(runs_root / run_id), user=CONTAINER_UID)  # fmt: skip
    job = options.job_from(a, layout)
    accelerate_config = options.accelerate_config(a, layout)
    config_map, job_obj = render(layout, job, accelerate_config.read_text())
    text = dump(config_map, job_obj)

    run_dir = Path(layout.run_dir)
    try:
        if a.rehearse:
            runs.create(runs_root, run_id)  # a run starts: `latest` moves, as for `up`
        else:
            run_dir.mkdir(parents=True)
    except FileExistsError:
        raise HarnessError(f"{run_dir} exists; a run never writes over another") from None
    except PermissionError as e:
        raise HarnessError(str(e)) from None
    manifest = run_dir / MANIFEST
    manifest.write_text(text)
    shape = f"Master 1 + Worker {nodes - 1}" if nodes > 1 else "Master 1"
    per_pod = f"{gpus} x nvidia.com/gpu" if gpus else f"{nproc} CPU rank(s), no GPU"
    print(f"harness: PyTorchJob {layout.name}: {shape}; nprocPerNode {layout.per_pod} "
          f"({per_pod} per pod); world size {layout.world_size}; image {layout.image}")  # fmt: skip
    print(f"harness: apply with `kubectl apply -f {manifest}` (a ConfigMap and the PyTorchJob)")
    print(manifest, flush=True)
    if not a.rehearse:
        return 0
    summary = rehearse(layout, run_dir, config_map, job_obj, a.grace, accelerate_config)
    return run.EXIT_CODES.get(summary["status"], 1)
