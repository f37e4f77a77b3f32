"""The pod every kind of job runs: its training container(s), the restricted Pod Security
Standard, the job's ConfigMap at /job, the volumes the trainer writes to, the claims it reads
MODEL and DATA from (and OUTPUT_CLAIM at /output), and for a foreign trainer (ENTRY) the
launcher and rank recorder in a ConfigMap at the launch dir. Built with the `kubernetes`
client models; the PyTorchJob (kube/__init__.py), the TrainJob's runtime (kube_trainjob.py) and the
batch Job (kube_job.py) take it as it is, under the container names each one looks for."""

from __future__ import annotations

from tuning.harness.backends import kube_src
from tuning.harness.contract.container import (
    JOB_DIR,
    LABEL,
    LAUNCH_DIR,
    LAUNCHER,
    OUTPUT_DIR,
    SRC_DIR,
    TMP_DIR,
    launch_files,
)
from tuning.harness.contract.ranks_user import ids
from tuning.harness.errors import ROOT, HarnessError
from tuning.harness.layout.job_layout import JobLayout
from tuning.harness.run_files.folders import job_text

# /dev/shm per rank of a pod: NCCL's shared-memory transport and the data loaders' workers
# need more than the default 64 MB (NCCL's advice: 1 GiB a container). A memory-backed
# emptyDir counts against the pod's memory limit, so the limit holds it too.
SHM_PER_RANK = 1  # GiB
# Requests per rank, so the scheduler places a pod where its ranks fit: a core each, and
# host memory for a rank's copy of the model while it loads (the tiny demo needs far less).
# Limits beside them (the Pod Security "restricted" profile asks none; LimitRanges and quotas
# often do): the same CPU, the memory plus /dev/shm, and GPUs as the device plugin takes them
# (an extended resource's request, where given, must equal its limit).
CPU_PER_RANK = 1
MEMORY_PER_RANK = {"gpu": 16, "cpu": 2}  # GiB
MAX_RANKS_PER_POD = 128  # one core a rank: more than the largest common node has
COMMAND = ["python", "-m", "tuning.launch"]  # the harness image's ENTRYPOINT, said out loud


def k8s():
    try:
        import kubernetes.client as client
    except ImportError as e:
        raise HarnessError(
            f"the Kubernetes client is missing ({e}); install the kube extra: "
            "`.venv/bin/pip install -e '.[kube]'`"
        ) from None
    return client


def labels(layout: JobLayout) -> dict[str, str]:
    return {LABEL: layout.run_id, "app.kubernetes.io/name": layout.name}


def config_map_name(layout: JobLayout) -> str:
    return f"{layout.name}-job"


def launch_map_name(layout: JobLayout) -> str:
    return f"{layout.name}-launch"


def config_map(layout: JobLayout, job: dict, accelerate_yaml: str):
    """The job's files, as `up` writes them to runs/<id>/job/ (a foreign trainer's job.json)."""
    c = k8s()
    return c.V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=c.V1ObjectMeta(name=config_map_name(layout), labels=labels(layout)),
        data={
            layout.trainer.job_file: job_text(job, layout.trainer.job_file),
            "accelerate.yaml": accelerate_yaml,
        },
    )


def launch_config_map(layout: JobLayout):
    """ENTRY: the launcher, the rank recorder and the modules beside it, the files Compose
    binds into a user's image (container.launch_files), mounted at the launch dir. A cluster
    cannot bind this checkout; the files are small (about 45 kB of the 1 MiB a ConfigMap
    holds) and standard library only."""
    c = k8s()
    files = {name: src.read_text() for name, src in launch_files(ROOT / "tuning/container").items()}
    return c.V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=c.V1ObjectMeta(name=launch_map_name(layout), labels=labels(layout)),
        data=files,
    )


def src_map_name(layout: JobLayout) -> str:
    return f"{layout.name}-src"


def src_config_map(layout: JobLayout):
    """SRC: the user's code (kube_src.py), each file under a key of its own, mounted at /src."""
    c = k8s()
    text, binary = kube_src.data(layout.mounts.src)
    return c.V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=c.V1ObjectMeta(name=src_map_name(layout), labels=labels(layout)),
        data=text or None,
        binary_data=binary or None,
    )


def config_maps(layout: JobLayout, job: dict, accelerate_yaml: str) -> tuple:
    """Every ConfigMap the pods mount: the job's, the launcher's for ENTRY, SRC's."""
    maps = [config_map(layout, job, accelerate_yaml)]
    if layout.trainer.entry:
        maps.append(launch_config_map(layout))
    if layout.mounts.src:
        maps.append(src_config_map(layout))
    return tuple(maps)


def resources(layout: JobLayout, ranks: int | None = None, gpus: int | None = None):
    """Requests for `ranks` ranks (default: a pod's) and `gpus` GPUs as a limit."""
    c = k8s()
    ranks = layout.per_pod if ranks is None else ranks
    gpus = layout.gpus_per_pod if gpus is None else gpus
    memory = MEMORY_PER_RANK[layout.topology.device] * ranks
    gpu = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return c.V1ResourceRequirements(
        requests={"cpu": str(CPU_PER_RANK * ranks), "memory": f"{memory}Gi", **gpu},
        limits={
            "cpu": str(CPU_PER_RANK * ranks),
            "memory": f"{memory + shm_gib(layout)}Gi",
            **gpu,
        },
    )


def shm_gib(layout: JobLayout) -> int:
    """/dev/shm of a pod, by its ranks."""
    return SHM_PER_RANK * max(1, layout.per_pod)


def pull_policy(image: str) -> str:
    """Always for a tag that moves (`:latest`, or none: a node's old copy would run), else
    IfNotPresent: Kubernetes' own default, said."""
    last = image.rsplit("/", 1)[-1]
    tag = last.partition("@")[0].partition(":")[2]
    return "IfNotPresent" if "@" in last or (tag and tag != "latest") else "Always"


def local_tag(image: str) -> bool:
    """The image names no registry (`tuning-harness:latest`): the docker engine's local tag,
    which a cluster's nodes cannot pull. A registry is a first component with a '.' or a ':'
    (a host, a port) or `localhost`."""
    first, slash, _ = image.partition("/")
    return not slash or not ("." in first or ":" in first or first == "localhost")


def env(layout: JobLayout) -> list:
    c = k8s()
    values = {
        "ACCELERATE_CONFIG": f"{JOB_DIR}/accelerate.yaml",
        # GPU ranks or not, said: a pod's devices keep the node's names (/dev/nvidia5)
        "HARNESS_DEVICE": layout.topology.device,
        "HOME": TMP_DIR,  # caches (~/.cache, ~/.triton) stay writable
        # ENTRY: the rank recorder runs it; its job is job.json (layout.foreign_env)
        **(layout.foreign_env() if layout.trainer.entry else {}),
        # RDZV_TIMEOUT: how long the static rendezvous waits for every pod
        # (tuning/container/launch.py)
        **({"HARNESS_RDZV_TIMEOUT": str(layout.rdzv_timeout)} if layout.rdzv_timeout else {}),
    }
    return [c.V1EnvVar(name=k, value=v) for k, v in values.items()]


def launch_command(layout: JobLayout, explicit: bool = False) -> list[str] | None:
    """The container's command: the launcher from its ConfigMap for ENTRY; else the image's
    own ENTRYPOINT (None), said out loud where the object needs a command (TrainJob)."""
    if layout.trainer.entry:
        return ["python3", LAUNCHER]
    return list(COMMAND) if explicit else None


def volume_names(layout: JobLayout) -> dict[str, str]:
    """Claim -> the pod's volume for it: `output` for OUTPUT_CLAIM, else `model` or `data` by
    its first use; a claim named twice is one volume."""
    names: dict[str, str] = {}
    for m in sorted(layout.claims, key=lambda m: m.target != OUTPUT_DIR):
        names.setdefault(m.claim, "output" if m.target == OUTPUT_DIR else m.said_by.lower())
    return names


def mounts(layout: JobLayout, tmp: str = "tmp") -> list:
    c = k8s()
    out = [
        c.V1VolumeMount(name="job", mount_path=JOB_DIR, read_only=True),
        c.V1VolumeMount(name="dshm", mount_path="/dev/shm"),
        c.V1VolumeMount(name="output", mount_path=OUTPUT_DIR),
        c.V1VolumeMount(name=tmp, mount_path=TMP_DIR),
    ]
    if layout.trainer.entry:
        out.append(c.V1VolumeMount(name="launch", mount_path=LAUNCH_DIR, read_only=True))
    if layout.mounts.src:
        out.append(c.V1VolumeMount(name="src", mount_path=SRC_DIR, read_only=True))
    names = volume_names(layout)
    for m in layout.claims:
        if m.target != OUTPUT_DIR:  # MODEL and DATA: the path in the claim, read-only
            out.append(
                c.V1VolumeMount(
                    name=names[m.claim],
                    mount_path=m.target,
                    sub_path=m.path or None,
                    read_only=True,
                )
            )
    return out


def container(layout: JobLayout, name: str, tmp: str = "tmp", **kw):
    """A training container: the launcher with the job's arguments (None: the image's own
    ENTRYPOINT, python -m tuning.launch, as under Compose); `kw` replaces any field."""
    c = k8s()
    # KUBE_UID=auto: the platform assigns the uid (OpenShift's restricted SCC, from the
    # namespace's range, in group 0): nothing of it is set here
    uid, gid = (None, None) if layout.uid_auto else ids(layout.trainer.user)
    fields = dict(
        name=name,
        image=layout.topology.plan.image,
        image_pull_policy=pull_policy(layout.topology.plan.image),
        command=launch_command(layout),
        args=layout.trainer_args or None,
        env=env(layout),
        resources=resources(layout),
        volume_mounts=mounts(layout, tmp),
        # relative paths in ARGS mean what they mean in the user's folder, as under Compose
        working_dir=SRC_DIR if layout.mounts.src else None,
        # The Pod Security Standard "restricted": the image's non-root user, no capabilities,
        # no privilege escalation, the runtime's seccomp profile, and a read-only root: the
        # trainer writes only to /output, /dev/shm and /tmp, each a volume.
        security_context=c.V1SecurityContext(
            run_as_user=uid,
            run_as_group=gid,
            run_as_non_root=True,
            allow_privilege_escalation=False,
            capabilities=c.V1Capabilities(drop=["ALL"]),
            seccomp_profile=c.V1SeccompProfile(type="RuntimeDefault"),
            read_only_root_filesystem=True,
        ),
    )
    return c.V1Container(**{**fields, **kw})


def volumes(layout: JobLayout, tmps: tuple[str, ...] = ("tmp",)) -> list:
    c = k8s()
    names = volume_names(layout)
    output = layout.output_claim
    out = [
        c.V1Volume(name="job", config_map=c.V1ConfigMapVolumeSource(name=config_map_name(layout))),
        c.V1Volume(
            name="dshm",
            empty_dir=c.V1EmptyDirVolumeSource(medium="Memory", size_limit=f"{shm_gib(layout)}Gi"),
        ),
        # Checkpoints and metrics: an existing claim (OUTPUT_CLAIM) that outlives the pod, or
        # an emptyDir that goes with it (a restart then starts from step 0: kube/ says so).
        c.V1Volume(
            name="output",
            persistent_volume_claim=c.V1PersistentVolumeClaimVolumeSource(claim_name=output),
        )
        if output
        else c.V1Volume(name="output", empty_dir=c.V1EmptyDirVolumeSource()),
        *(c.V1Volume(name=t, empty_dir=c.V1EmptyDirVolumeSource()) for t in tmps),
    ]
    if layout.trainer.entry:
        out.append(
            c.V1Volume(
                name="launch", config_map=c.V1ConfigMapVolumeSource(name=launch_map_name(layout))
            )
        )
    if layout.mounts.src:  # each key at its path in SRC (a key holds no '/')
        paths = kube_src.items(layout.mounts.src)
        items = [c.V1KeyToPath(key=key, path=path) for key, path in paths]
        source = c.V1ConfigMapVolumeSource(name=src_map_name(layout), items=items)
        out.append(c.V1Volume(name="src", config_map=source))
    for claim, name in names.items():
        if claim != output:  # read-only at the volume too: nothing of the pod writes there
            source = c.V1PersistentVolumeClaimVolumeSource(claim_name=claim, read_only=True)
            out.append(c.V1Volume(name=name, persistent_volume_claim=source))
    return out


def pod_template(
    layout: JobLayout,
    containers: list,
    pod_labels: dict | None = None,
    tmps: tuple[str, ...] = ("tmp",),
    **spec_kw,
):
    c = k8s()
    gid = int(layout.trainer.user.split(":")[1])
    # A claim's files belong to whoever made them: fsGroup makes the kubelet give a claim that
    # supports ownership (most block and CSI volumes; not NFS, whose export must let the gid
    # in) to the group of the image's user, so uid 1000 writes /output and reads MODEL/DATA.
    # KUBE_UID=auto: the platform sets fsGroup as it sets the uid.
    claimed = (
        {"fs_group": gid, "fs_group_change_policy": "OnRootMismatch"}
        if layout.claims and not layout.uid_auto
        else {}
    )
    return c.V1PodTemplateSpec(
        metadata=c.V1ObjectMeta(labels=pod_labels or labels(layout)),
        spec=c.V1PodSpec(
            containers=containers,
            automount_service_account_token=False,  # training never talks to the API server
            security_context=c.V1PodSecurityContext(
                run_as_non_root=True,
                seccomp_profile=c.V1SeccompProfile(type="RuntimeDefault"),
                **claimed,
            ),
            volumes=volumes(layout, tmps),
            # GRACE: how long a deleted or preempted pod has between SIGTERM and SIGKILL
            termination_grace_period_seconds=layout.grace_s,
            **spec_kw,
        ),
    )


def plain(obj) -> dict:
    """A model (the kubernetes client's, the Training SDK's, or the Trainer API's pydantic
    ones) as the dict kubectl would send: camelCase, no nulls."""
    if hasattr(obj, "model_dump"):
        return obj.to_dict()
    return k8s().ApiClient().sanitize_for_serialization(obj)
