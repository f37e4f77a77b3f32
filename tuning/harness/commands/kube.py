"""`make kube`: the run as a Kubeflow PyTorchJob (kubeflow.org/v1), or with KIND=trainjob a
Trainer v2 TrainJob (kube_trainjob.py), and a local rehearsal of either (kube_rehearse.py).

1. `JobLayout` (job_layout.py): the layout model with a job's shape: `replicas` pods of
   `per_pod` ranks each (GPUs per pod, or CPU ranks when GPUS=0), job name and image.
2. `render()`: the PyTorchJob and the ConfigMap holding the job config (job.yaml and
   accelerate.yaml, as `up` writes them), built from the Training Operator's own SDK models
   (`kubeflow-training`) and the `kubernetes` client models (the pod: kube_pod.py), so field
   names and types are theirs. `dump()` writes them as one YAML file for `kubectl apply -f`.
3. `operator_pods()`: what the Training Operator makes of that object (pod names, node ranks
   and the environment it injects), read from the object itself.

The SDKs are imported only here, lazily: the rest of the CLI works without the `kube` extra,
and nothing on this side imports torch.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from tuning.harness.backends import kube_pod, kube_restarts, kube_trainjob
from tuning.harness.errors import HarnessError
from tuning.harness.run import lifecycle
from tuning.harness.rundirs import runs
from tuning.harness.spec import (
    devices,
    flags,
    job_paths,
    nvidia,
    options,
    preflight,
    save_interval,
    timeouts,
)
from tuning.harness.spec.job_layout import JobLayout
from tuning.harness.spec.layout import (
    CONTAINER_UID,
    IMAGE,
    JOB_KINDS,
    LayoutError,
    Node,
    contract_env,
)

API_VERSION = "kubeflow.org/v1"
CONTAINER = "pytorch"  # the operator finds the training container by this name
PORT_NAME = "pytorchjob-port"  # ... and the rendezvous port by this one
MANIFEST = "pytorchjob.yaml"
KINDS = JOB_KINDS


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
    except ImportError as e:
        raise HarnessError(
            f"the Kubeflow Training SDK is missing ({e}); install the kube extra: "
            "`.venv/bin/pip install -e '.[kube]'` (kubeflow-training 1.9)"
        ) from None
    return kf, kube_pod.k8s()


config_map_name = kube_pod.config_map_name


def render(layout: JobLayout, job: dict, accelerate_yaml: str, max_restarts: int = 0,
           restart_policy: str | None = None) -> tuple[object, object]:  # fmt: skip
    """(ConfigMap, PyTorchJob) as SDK model objects. MAX_RESTARTS is runPolicy.backoffLimit;
    the restart policy defaults to Never without restarts, ExitCode with them."""
    kf, k8s = _sdk()
    policy = kube_restarts.v1_policy(restart_policy, max_restarts)
    port = k8s.V1ContainerPort(name=PORT_NAME, container_port=layout.port, protocol="TCP")
    ctr = kube_pod.container(layout, CONTAINER, ports=[port])
    template = kube_pod.pod_template(layout, ctr)
    specs = {"Master": kf.KubeflowOrgV1ReplicaSpec(replicas=1, restart_policy=policy,
                                                   template=template)}  # fmt: skip
    if layout.replicas > 1:
        specs["Worker"] = kf.KubeflowOrgV1ReplicaSpec(
            replicas=layout.replicas - 1, restart_policy=policy, template=template
        )
    job_obj = kf.KubeflowOrgV1PyTorchJob(
        api_version=API_VERSION,
        kind="PyTorchJob",
        metadata=k8s.V1ObjectMeta(name=layout.name, labels=kube_pod.labels(layout)),
        spec=kf.KubeflowOrgV1PyTorchJobSpec(
            pytorch_replica_specs=specs,
            nproc_per_node=str(layout.per_pod),
            run_policy=kf.KubeflowOrgV1RunPolicy(
                clean_pod_policy="Running", backoff_limit=max_restarts
            ),  # fmt: skip
        ),
    )
    return kube_pod.config_map(layout, job, accelerate_yaml), job_obj


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the ConfigMap's files) as literal blocks, readable in the YAML."""


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(*objects) -> str:
    """The objects as one YAML stream, as kubectl would send them (kube_pod.plain)."""
    docs = [kube_pod.plain(obj) for obj in objects]
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


def pods_of(objects: tuple) -> tuple[str, str, list[Node], str]:
    """(kind, image, pods, manifest name) for a rendered (ConfigMap, PyTorchJob) or
    (ConfigMap, TrainingRuntime, TrainJob): what its operator runs."""
    job = objects[-1]
    if job.kind == "TrainJob":
        pods = kube_trainjob.trainer_pods(objects[1], job)
        return "TrainJob", job.spec.trainer.image, pods, kube_trainjob.MANIFEST
    image = next(
        c.image for c in job.spec.pytorch_replica_specs["Master"].template.spec.containers
        if c.name == CONTAINER
    )  # fmt: skip
    return "PyTorchJob", image, operator_pods(job), MANIFEST


# --- The command ----------------------------------------------------------------------------


def register(sub) -> None:
    p = sub.add_parser("kube", help="render the run as a Kubeflow PyTorchJob or TrainJob "
                                    "(and rehearse it)")  # fmt: skip
    # KIND (default pytorchjob), NODES, NAME (default sft), RESTART_POLICY (PyTorchJob: Never
    # without restarts, ExitCode with MAX_RESTARTS), REHEARSE, KILL and AT_STEP (default 12),
    # RDZV_TIMEOUT (default TIMEOUT), GRACE, and the job's flags: flag_table
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    from tuning.harness.commands import kube_rehearse

    kind = a.kind or JOB_KINDS[0]
    if kind not in KINDS:
        raise HarnessError(f"KIND={kind} is unknown; use one of {', '.join(KINDS)}")
    if a.restart_policy and a.restart_policy not in kube_restarts.V1_POLICIES:
        raise HarnessError(f"RESTART_POLICY={a.restart_policy} is unknown; use one of "
                           f"{', '.join(kube_restarts.V1_POLICIES)}")  # fmt: skip
    f = flags.RunFlags.of(a)
    if f.gpu_names:
        raise HarnessError(f"GPUS=device={','.join(f.gpu_names)} names GPUs of this host; a "
                           "cluster's scheduler picks a pod's GPUs: GPUS=N per pod")  # fmt: skip
    nodes = flags.int_arg("NODES", a.nodes, 1) or 1
    # GPUS per pod, on a cluster; unset: as many as this host shows
    gpus = len(nvidia.visible(nvidia.inventory())) if f.gpus is None else f.gpus
    nproc = f.nproc if a.nproc else (2 if nodes == 1 else 1)  # CPU ranks per pod
    if a.restart_policy and kind == "trainjob":
        raise HarnessError("RESTART_POLICY is a PyTorchJob's; a TrainJob restarts every pod "
                           "(MAX_RESTARTS = JobSet failurePolicy.maxRestarts)")  # fmt: skip
    kill = flags.int_arg("KILL", a.kill, 0)
    if kill is not None and not a.rehearse:
        raise HarnessError("KILL kills a pod of the rehearsal; add REHEARSE=1")
    if f.entry:
        raise HarnessError(
            f"ENTRY={f.entry} (TRAINER={f.trainer}): a foreign trainer is not "
            "rendered for a cluster yet; make kube renders this repo's trainer"
        )
    run_id = options.checked_run_id(f.run_id)
    runs_root = Path(f.runs).resolve()
    layout = job_layout(gpus, nproc, nodes, f.cuda, name=a.name or "sft", image=f.image,
                        run_id=run_id, run_dir=str(runs_root / run_id),
                        user=CONTAINER_UID)  # fmt: skip
    base = options.load_job(Path(f.job), False)
    model, data = (job_paths.for_cluster(v, getattr(f, v.lower()), base, f"JOB={f.job}")
                   for v in ("MODEL", "DATA"))  # fmt: skip
    for src in (model, data):
        if src.where == "claim":
            raise HarnessError(f"{src.var}={getattr(f, src.var.lower())}: claims are not "
                               "rendered yet; name a path inside the image")  # fmt: skip
    # With restarts, every (re)start resumes from the newest checkpoint in /output.
    job = options.job_for(layout, base, model, data, f.steps, f.seed, f.timeout,
                          f.max_restarts > 0)  # fmt: skip
    accelerate_config = options.accelerate_config(f, layout)
    if f.config:
        preflight.check_world_size(accelerate_config, layout.world_size)
    measured_in = timeouts.newest_of_job(runs_root, str(Path(f.job).resolve()))
    rate = save_interval.rate_arg(a.gpu_hours_per_failure)
    job = save_interval.advise(job, layout.gpus or layout.world_size, measured_in, rate,
                               a.save_advised)  # fmt: skip
    if kind == "trainjob":
        objects = kube_trainjob.render(layout, job, accelerate_config.read_text(), f.max_restarts)
        manifest_name = kube_trainjob.MANIFEST
    else:
        objects = render(layout, job, accelerate_config.read_text(), f.max_restarts,
                         a.restart_policy)  # fmt: skip
        manifest_name = MANIFEST
    text = dump(*objects)

    # a rehearsal is a run: `latest` moves, as for `up`
    run_dir = runs.create(runs_root, run_id, starts=bool(a.rehearse))
    manifest = run_dir / manifest_name
    manifest.write_text(text)
    per_pod = f"{gpus} x nvidia.com/gpu" if gpus else f"{nproc} CPU rank(s), no GPU"
    if kind == "trainjob":
        shape = f"numNodes {nodes}; numProcPerNode {layout.per_pod}"
        what = "a ConfigMap, the TrainingRuntime and the TrainJob"
    else:
        pods = f"Master 1 + Worker {nodes - 1}" if nodes > 1 else "Master 1"
        shape = f"{pods}; nprocPerNode {layout.per_pod}"
        what = "a ConfigMap and the PyTorchJob"
    print(f"harness: {objects[-1].kind} {layout.name}: {shape} ({per_pod} per pod); "
          f"world size {layout.world_size}; image {layout.image}")  # fmt: skip
    print(f"harness: model {model.describe()}; data {data.describe()}; accelerate config "
          f"{accelerate_config}")  # fmt: skip
    if measured_in:  # what the job measured here, against the cluster's timeouts
        rdzv = flags.int_arg("RDZV_TIMEOUT", a.rdzv_timeout, 1)
        t = timeouts.Timeouts.of(job, rdzv, grace_period_s=timeouts.K8S_GRACE_S)
        timeouts.say(timeouts.check(t, timeouts.measured(measured_in)), "on the cluster")
    print(f"harness: apply with `kubectl apply -f {manifest}` ({what})")
    print(manifest, flush=True)
    if not a.rehearse:
        return 0
    made = pods_of(objects)
    if kill is None:
        summary = kube_rehearse.rehearse(layout, run_dir, objects, made, f.grace,
                                         accelerate_config)  # fmt: skip
        return lifecycle.EXIT_CODES.get(summary["status"], 1)
    return kube_rehearse.rehearse_kill(a, f, layout, run_dir, objects, made, accelerate_config,
                                       kill)  # fmt: skip
