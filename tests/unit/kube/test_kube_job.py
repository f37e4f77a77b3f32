"""`make kube KIND=job`: option 2, one pod whose containers each hold one rank, as a batch/v1
Job; the launcher reading a container's own rank first (its rehearsal, killed and restarted
whole: engine/kube/test_kube_job_docker.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from support.harness import harness
from support.kube_objects import check_restricted
from support.paths import ROOT
from tuning.container import launch
from tuning.harness.backends import kube_job, kube_manifest, kube_restarts
from tuning.harness.commands import kube
from tuning.harness.errors import HarnessError

CPU = (ROOT / "configs/accelerate/fsdp-cpu.yaml").read_text()
FSDP = (ROOT / "configs/accelerate/fsdp.yaml").read_text()


def rendered(gpus: int, nproc: int = 2, max_restarts: int = 0, **kw) -> list:
    layout = kube.job_layout(
        gpus, nproc, 1, kind="job", name="oj", run_id="r1", run_dir="/tmp/r1", **kw
    )
    objects = kube.render(
        layout, {"max_steps": 3, "output_dir": "/output"}, FSDP if gpus else CPU, max_restarts
    )
    return kube_manifest.load(kube.dump(*objects))  # through the YAML, as kubectl reads it


def test_option2_is_one_pod_with_a_container_per_gpu(tmp_path):
    out = harness(
        "kube",
        "--kind",
        "job",
        "--gpus",
        "4",
        "--name",
        "oj",
        "--max-restarts",
        "2",
        runs=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 pod of 4 containers, 1 GPU each" in out.stdout
    assert "a restart recreates the pod: every rank together (backoffLimit 2)" in out.stdout
    manifest = Path(out.stdout.strip().splitlines()[-1])
    assert manifest.name == "job.yaml"
    docs = list(yaml.safe_load_all(manifest.read_text()))
    assert [(d["apiVersion"], d["kind"]) for d in docs] == [
        ("v1", "ConfigMap"),
        ("batch/v1", "Job"),
    ]
    job = docs[1]
    assert (job["spec"]["backoffLimit"], job["spec"]["completions"]) == (2, 1)
    pod = job["spec"]["template"]["spec"]
    check_restricted(pod)
    assert pod["restartPolicy"] == "Never"  # the pod restarts whole, never a container alone
    assert [c["name"] for c in pod["containers"]] == ["rank0", "rank1", "rank2", "rank3"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "4Gi"}
    for rank, ctr in enumerate(pod["containers"]):
        assert ctr["resources"] == {  # each may fill the pod's shared /dev/shm
            "limits": {"cpu": "1", "memory": "20Gi", "nvidia.com/gpu": "1"},
            "requests": {"cpu": "1", "memory": "16Gi", "nvidia.com/gpu": "1"},
        }
        env = {e["name"]: e["value"] for e in ctr["env"]}
        assert env == {
            "ACCELERATE_CONFIG": "/job/accelerate.yaml",
            "HARNESS_DEVICE": "gpu",
            "HOME": "/tmp",
            "PET_MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_PORT": "29500",
            "PET_NNODES": "4",
            "PET_NPROC_PER_NODE": "1",
            "HARNESS_NODE_RANK": str(rank),
            "NCCL_P2P_DISABLE": "1",
        }
        mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
        # one /dev/shm and one /output for the pod; /tmp each container's own
        assert (mounts["/dev/shm"], mounts["/output"]) == ("dshm", "output")
        assert mounts["/tmp"] == f"tmp-rank{rank}" and f"tmp-rank{rank}" in volumes
        assert "ports" not in ctr  # the rendezvous is on the pod's loopback


def test_option2_nodes_are_read_from_the_object():
    job = rendered(0, nproc=3)[-1]
    nodes = kube_job.containers(job)
    assert [(n.name, n.node_rank, n.nproc, n.gpu_ids) for n in nodes] == [
        ("rank0", 0, 1, ()),
        ("rank1", 1, 1, ()),
        ("rank2", 2, 1, ()),
    ]
    assert nodes[2].env["HARNESS_NODE_RANK"] == "2" and nodes[2].env["PET_NNODES"] == "3"
    gpu = kube_job.containers(rendered(2)[-1])
    assert [n.gpu_ids for n in gpu] == [("0",), ("1",)]  # host GPUs, one each, for a rehearsal
    del job.spec.template.spec.containers[1].env[-1]  # HARNESS_NODE_RANK
    with pytest.raises(HarnessError, match="rank1 has no HARNESS_NODE_RANK"):
        kube_job.containers(job)
    made = kube.pods_of(tuple(rendered(0)))
    assert made.kind == "Job" and set(made.pod_of.values()) == {"oj-pod"}
    assert kube_restarts.rules("Job", made.rules_from) == {
        "restartPolicy": "Never",
        "backoffLimit": 0,
    }


def test_the_launcher_takes_a_containers_own_rank_before_what_an_operator_appends():
    # What a PyTorchJob operator would append to every container alike comes last and wins
    # for RANK and PET_NODE_RANK; HARNESS_NODE_RANK is read first.
    env = {
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "1",
        "PET_MASTER_ADDR": "127.0.0.1",
        "HARNESS_DEVICE": "cpu",
        "HARNESS_NODE_RANK": "1",
        "PET_NODE_RANK": "0",
        "RANK": "0",
    }
    argv, _ = launch.command(env, [], str(ROOT / "configs/accelerate/fsdp-cpu.yaml"))
    assert argv[argv.index("--machine_rank") + 1] == "1"
    del env["HARNESS_NODE_RANK"]
    argv, _ = launch.command(env, [], str(ROOT / "configs/accelerate/fsdp-cpu.yaml"))
    assert argv[argv.index("--machine_rank") + 1] == "0"
    with pytest.raises(SystemExit, match="HARNESS_NODE_RANK='x' is not an integer"):
        launch.command({**env, "HARNESS_NODE_RANK": "x"}, [])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "2"], "KIND=job is one pod (a container per rank); NODES=2 pods are"),
        (["--restart-policy", "OnFailure"], "a Job's pod restarts whole, every container"),
    ],
)
def test_option2_refuses_what_it_cannot_be(tmp_path, args, message):
    out = harness("kube", "--kind", "job", "--gpus", "0", *args, runs=tmp_path, timeout=120)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
