"""`make kube`: the PyTorchJob rendering, read back through the SDK (its local rehearsal:
engine/kube/test_kube_docker.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.harness import harness
from support.kube_objects import check_restricted
from support.paths import ROOT
from tuning.harness.backends import kube_objects
from tuning.harness.commands import kube
from tuning.harness.contract.container import IMAGE_MODEL, contract_env
from tuning.harness.errors import HarnessError

CONTRACT = set(contract_env("m", 1, 1, 1, 0))  # the names the operator injects
FSDP = (ROOT / "configs/accelerate/fsdp.yaml").read_text()
CPU = (ROOT / "configs/accelerate/fsdp-cpu.yaml").read_text()


def rendered(gpus: int, nodes: int, nproc: int = 1, name: str = "tj", **job) -> str:
    layout = kube.job_layout(gpus, nproc, nodes, name=name, run_id="r1", run_dir="/tmp/r1")
    job = {"max_steps": 3, "output_dir": "/output", **job}
    return kube.dump(*kube.render(layout, job, FSDP if gpus else CPU))


def make_kube(tmp_path: Path, *args: str) -> tuple[Path, object, object]:
    """`python -m tuning.harness kube ARGS` as make runs it; (manifest, ConfigMap, job)."""
    out = harness("kube", *args, runs=tmp_path, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    manifest = Path(out.stdout.strip().splitlines()[-1])  # the path is the last line
    assert manifest.is_file() and manifest.parent.parent == tmp_path
    return (manifest, *kube_objects.load(manifest.read_text()))


def only_container(replica):
    (ctr,) = replica.template.spec.containers
    return ctr


def check_pod(replica, config_map, gpus: int, image: str | None = None) -> None:
    image = image or ("tuning-harness:gpu" if gpus else "tuning-harness:latest")  # by device
    spec = replica.template.spec
    ctr = only_container(replica)
    assert ctr.name == "pytorch" and ctr.image == image
    assert ctr.command is None  # the image's own entrypoint (python -m tuning.launch)
    assert ctr.args == ["--config", "/job/job.yaml"]
    assert [(p.name, p.container_port) for p in ctr.ports] == [("pytorchjob-port", 23456)]
    # limits beside requests: the same CPU, the memory and /dev/shm (a memory-backed emptyDir
    # counts against it), GPUs in both as the device plugin takes them
    req, lim = ctr.resources.requests, ctr.resources.limits
    gpu = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    assert set(req) == {"cpu", "memory", *gpu} and req.get("nvidia.com/gpu") == gpu.get(
        "nvidia.com/gpu"
    )
    mounts = {m.mount_path: m for m in ctr.volume_mounts}
    volumes = {v.name: v for v in spec.volumes}
    shm = volumes[mounts["/dev/shm"].name]
    ranks = int(req["cpu"])  # a core a rank
    assert shm.empty_dir.medium == "Memory" and shm.empty_dir.size_limit == f"{ranks}Gi"
    gib = int(req["memory"].removesuffix("Gi"))
    assert lim == {"cpu": req["cpu"], "memory": f"{gib + ranks}Gi", **gpu}
    job_vol = volumes[mounts["/job"].name]
    assert mounts["/job"].read_only and job_vol.config_map.name == config_map.metadata.name
    assert mounts["/output"].name in volumes
    assert ctr.security_context.run_as_user == 1000 and ctr.security_context.run_as_non_root
    assert replica.restart_policy == "Never"


@pytest.mark.parametrize(("gpus", "nodes"), [(4, 2), (0, 1)])
def test_pods_pass_the_restricted_pod_security_standard(gpus, nodes):
    doc = next(
        d for d in yaml.safe_load_all(rendered(gpus, nodes, nproc=2)) if d["kind"] == "PyTorchJob"
    )
    for replica in doc["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        check_restricted(pod)
        (ctr,) = pod["containers"]
        per_pod = gpus or 2  # rendered(): GPUS and NPROC are per pod
        assert ctr["resources"]["requests"]["cpu"] == str(per_pod)
        # the README's promise: 16 GiB host memory per GPU rank, 2 GiB per CPU rank
        want = f"{16 * gpus}Gi" if gpus else "4Gi"
        assert ctr["resources"]["requests"]["memory"] == want, (gpus, ctr["resources"])


def test_gpus4_nodes2_is_a_master_and_a_worker_with_four_gpus_each(tmp_path):
    manifest, config_map, job = make_kube(
        tmp_path, "--gpus", "4", "--nodes", "2", "--name", "ft", "--steps", "7"
    )
    assert type(job).__name__ == "KubeflowOrgV1PyTorchJob"
    assert (job.api_version, job.kind, job.metadata.name) == ("kubeflow.org/v1", "PyTorchJob", "ft")
    specs = job.spec.pytorch_replica_specs
    assert sorted(specs) == ["Master", "Worker"]
    assert (specs["Master"].replicas, specs["Worker"].replicas) == (1, 1)
    assert job.spec.nproc_per_node == "4"
    for replica in specs.values():
        check_pod(replica, config_map, gpus=4)
    # The ConfigMap holds the job as `up` writes it: the image's assets, /output, STEPS.
    assert sorted(config_map.data) == ["accelerate.yaml", "job.yaml"]
    job_yaml = yaml.safe_load(config_map.data["job.yaml"])
    assert job_yaml["max_steps"] == 7 and job_yaml["output_dir"] == "/output"
    assert job_yaml["model_name_or_path"] == IMAGE_MODEL
    assert config_map.data["accelerate.yaml"] == FSDP  # the GPU default, as for `up`
    # Pods on Kube start with the operator's environment, plus what the image cannot find
    # out by itself: its config, a writable HOME, and that its ranks are GPU ranks.
    env = {e.name: e.value for e in only_container(specs["Master"]).env}
    assert (
        env
        == {"ACCELERATE_CONFIG": "/job/accelerate.yaml", "HOME": "/tmp", "HARNESS_DEVICE": "gpu"}
        and manifest.name == "pytorchjob.yaml"
    )
    assert not (manifest.parent / "compose.yaml").exists()  # rendering runs nothing


@pytest.mark.parametrize("gpus", [1, 8])
def test_one_node_is_one_master_with_every_rank(gpus):
    config_map, job = kube_objects.load(rendered(gpus, 1))
    specs = job.spec.pytorch_replica_specs
    assert list(specs) == ["Master"] and specs["Master"].replicas == 1
    assert job.spec.nproc_per_node == str(gpus)
    check_pod(specs["Master"], config_map, gpus=gpus)


def test_cpu_job_has_no_gpu_limit_and_the_cpu_recipe(tmp_path):
    _, config_map, job = make_kube(
        tmp_path,
        "--gpus",
        "0",
        "--nodes",
        "3",
        "--nproc",
        "2",
        "--image",
        "registry.example/tuning:1",
    )
    specs = job.spec.pytorch_replica_specs
    assert (specs["Master"].replicas, specs["Worker"].replicas) == (1, 2)
    assert job.spec.nproc_per_node == "2"
    for replica in specs.values():
        check_pod(replica, config_map, gpus=0, image="registry.example/tuning:1")
    assert config_map.data["accelerate.yaml"] == CPU


@pytest.mark.parametrize(
    ("nodes", "nproc", "pods"),
    [
        (2, 1, ["tj-master-0", "tj-worker-0"]),
        (1, 2, ["tj-master-0"]),
        (3, 2, ["tj-master-0", "tj-worker-0", "tj-worker-1"]),
    ],
)
def test_operator_pods_carry_exactly_the_injected_environment(nodes, nproc, pods):
    _, job = kube_objects.load(rendered(0, nodes, nproc))
    got = kube.operator_pods(job)
    assert [p.name for p in got] == pods
    for rank, pod in enumerate(got):
        assert (pod.node_rank, pod.nproc) == (rank, nproc)
        assert set(pod.env) == CONTRACT | {"ACCELERATE_CONFIG", "HOME", "HARNESS_DEVICE"}
        assert pod.env == {
            "ACCELERATE_CONFIG": "/job/accelerate.yaml",
            "HOME": "/tmp",
            "PYTHONUNBUFFERED": "1",
            "HARNESS_DEVICE": "cpu",
            "MASTER_ADDR": "tj-master-0",
            "PET_MASTER_ADDR": "tj-master-0",
            "MASTER_PORT": "23456",
            "PET_MASTER_PORT": "23456",
            "WORLD_SIZE": str(nodes * nproc),
            "PET_NNODES": str(nodes),
            "PET_NPROC_PER_NODE": str(nproc),
            "RANK": str(rank),
            "PET_NODE_RANK": str(rank),
        }


def test_operator_environment_is_read_from_the_object():
    _, job = kube_objects.load(rendered(2, 2))
    master = job.spec.pytorch_replica_specs["Master"]
    only_container(master).ports[0].container_port = 31000
    job.spec.pytorch_replica_specs["Worker"].replicas = 3
    job.spec.nproc_per_node = "auto"
    pods = kube.operator_pods(job)
    assert len(pods) == 4 and pods[-1].name == "tj-worker-2"
    env = pods[-1].env
    assert (env["MASTER_PORT"], env["PET_NNODES"], env["RANK"]) == ("31000", "4", "3")
    # "auto" goes through verbatim (the launcher counts GPUs); WORLD_SIZE counts it as 1.
    assert (env["PET_NPROC_PER_NODE"], env["WORLD_SIZE"]) == ("auto", "4")
    assert pods[1].gpu_ids == ("2", "3")  # a rehearsal on a GPU host pins each pod's share
    only_container(master).ports[0].name = "http"
    with pytest.raises(HarnessError, match="pytorchjob-port"):
        kube.operator_pods(job)


def test_manifest_is_plain_yaml_for_kubectl():
    docs = list(yaml.safe_load_all(rendered(4, 2)))
    assert [d["kind"] for d in docs] == ["ConfigMap", "PyTorchJob"]
    job = docs[1]
    assert job["spec"]["nprocPerNode"] == "4"  # a string, as the CRD's schema says
    assert job["spec"]["runPolicy"] == {"backoffLimit": 0, "cleanPodPolicy": "Running"}
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {
        "cpu": "4",
        "memory": "68Gi",  # 4 ranks' 16 GiB, and their 4 GiB of /dev/shm
        "nvidia.com/gpu": "4",
    }
    assert pod["volumes"][1] == {
        "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"},
        "name": "dshm",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--name", "Bad_Name"], "NAME='Bad_Name'"),
        (["--nodes", "0"], "NODES=0"),
        (["--gpus", "x"], "GPUS='x'"),
    ],
)
def test_bad_flags_are_refused_with_a_reason(tmp_path, args, message):
    out = harness("kube", "--gpus", "1", *args, runs=tmp_path, timeout=120)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert not any(tmp_path.iterdir())


def test_rendering_does_not_import_torch(tmp_path):
    # The SDKs come in only when `kube` runs; neither they nor it bring torch.
    code = (
        "import sys; from tuning.harness import cli; cli.parser();"
        " assert 'kubeflow' not in sys.modules, 'the CLI imported the SDK up front';"
        " assert cli.main(['kube', '--gpus', '2', '--runs', sys.argv[1]]) == 0;"
        " assert 'kubeflow.training' in sys.modules;"
        " assert 'torch' not in sys.modules, 'kube imported torch'"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
