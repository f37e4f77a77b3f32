"""The pod both Kubeflow operators run: one training container, the restricted Pod Security
Standard, the job's ConfigMap at /job and the volumes the trainer writes to. Built with the
`kubernetes` client models; the PyTorchJob (kube.py) and the TrainJob's runtime
(kube_trainjob.py) take it as it is, under the container name each operator looks for."""

from __future__ import annotations

import yaml

from tuning.harness.errors import HarnessError
from tuning.harness.spec.job_layout import JobLayout
from tuning.harness.spec.layout import JOB_DIR, LABEL, OUTPUT_DIR, TMP_DIR
from tuning.harness.spec.ranks_user import ids

SHM_LIMIT = "2Gi"  # as compose.SHM_SIZE: NCCL needs more than the default 64 MB /dev/shm
# Requests per rank, so the scheduler places a pod where its ranks fit: a core each, and
# host memory for a rank's copy of the model while it loads (the tiny demo needs far less).
CPU_PER_RANK = 1
MEMORY_PER_RANK = {"gpu": 16, "cpu": 2}  # GiB
LAUNCH_ARGS = ["--config", f"{JOB_DIR}/job.yaml"]


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


def config_map(layout: JobLayout, job: dict, accelerate_yaml: str):
    """The job's files, as `up` writes them to runs/<id>/job/."""
    c = k8s()
    return c.V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=c.V1ObjectMeta(name=config_map_name(layout), labels=labels(layout)),
        data={"job.yaml": yaml.safe_dump(job, sort_keys=False), "accelerate.yaml": accelerate_yaml},
    )


def resources(layout: JobLayout):
    c = k8s()
    gpus = layout.gpus_per_pod
    return c.V1ResourceRequirements(
        requests={
            "cpu": str(CPU_PER_RANK * layout.per_pod),
            "memory": f"{MEMORY_PER_RANK[layout.device] * layout.per_pod}Gi",
        },
        limits={"nvidia.com/gpu": str(gpus)} if gpus else None,
    )


def env(layout: JobLayout) -> list:
    c = k8s()
    return [
        c.V1EnvVar(name="ACCELERATE_CONFIG", value=f"{JOB_DIR}/accelerate.yaml"),
        # GPU ranks or not, said: a pod's devices keep the node's names (/dev/nvidia5)
        c.V1EnvVar(name="HARNESS_DEVICE", value=layout.device),
        c.V1EnvVar(name="HOME", value=TMP_DIR),  # caches (~/.cache, ~/.triton) stay writable
    ]


def container(layout: JobLayout, name: str, **kw):
    """The training container. No `command`: the image's ENTRYPOINT (python -m tuning.launch),
    as under Compose, unless the caller sets one."""
    c = k8s()
    uid, gid = ids(layout.user)
    return c.V1Container(
        name=name,
        image=layout.image,
        image_pull_policy="IfNotPresent",
        args=LAUNCH_ARGS,
        env=env(layout),
        resources=resources(layout),
        volume_mounts=[
            c.V1VolumeMount(name="job", mount_path=JOB_DIR, read_only=True),
            c.V1VolumeMount(name="dshm", mount_path="/dev/shm"),
            c.V1VolumeMount(name="output", mount_path=OUTPUT_DIR),
            c.V1VolumeMount(name="tmp", mount_path=TMP_DIR),
        ],
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
        **kw,
    )


def pod_template(layout: JobLayout, ctr, pod_labels: dict | None = None, **spec_kw):
    c = k8s()
    return c.V1PodTemplateSpec(
        metadata=c.V1ObjectMeta(labels=pod_labels or labels(layout)),
        spec=c.V1PodSpec(
            containers=[ctr],
            automount_service_account_token=False,  # training never talks to the API server
            security_context=c.V1PodSecurityContext(
                run_as_non_root=True,
                seccomp_profile=c.V1SeccompProfile(type="RuntimeDefault"),
            ),
            volumes=[
                c.V1Volume(
                    name="job",
                    config_map=c.V1ConfigMapVolumeSource(name=config_map_name(layout)),
                ),
                c.V1Volume(
                    name="dshm",
                    empty_dir=c.V1EmptyDirVolumeSource(medium="Memory", size_limit=SHM_LIMIT),
                ),
                # Checkpoints and metrics; swap for a ReadWriteMany PVC to keep them.
                c.V1Volume(name="output", empty_dir=c.V1EmptyDirVolumeSource()),
                c.V1Volume(name="tmp", empty_dir=c.V1EmptyDirVolumeSource()),
            ],
            **spec_kw,
        ),
    )


def plain(obj) -> dict:
    """A model (the kubernetes client's, the Training SDK's, or the Trainer API's pydantic
    ones) as the dict kubectl would send: camelCase, no nulls."""
    if hasattr(obj, "model_dump"):
        return obj.to_dict()
    return k8s().ApiClient().sanitize_for_serialization(obj)
