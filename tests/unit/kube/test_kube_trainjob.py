"""`make kube KIND=trainjob`: the TrainJob and its TrainingRuntime, what Trainer v2 makes of
them, and the restart rules of both operators (the TrainJob's local rehearsal:
engine/kube/test_kube_trainjob_docker.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from support.harness import harness
from support.kube_objects import check_restricted
from support.paths import ROOT
from tuning.harness.backends import kube_pod, kube_restarts, kube_trainjob
from tuning.harness.commands import kube
from tuning.harness.errors import HarnessError

CPU = (ROOT / "configs/accelerate/fsdp-cpu.yaml").read_text()
FSDP = (ROOT / "configs/accelerate/fsdp.yaml").read_text()
PET = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}


def rendered(gpus: int, nodes: int, nproc: int = 1, name: str = "tj", max_restarts: int = 0):
    layout = kube.job_layout(gpus, nproc, nodes, name=name, run_id="r1", run_dir="/tmp/r1")
    job = {"max_steps": 3, "output_dir": "/output"}
    objects = kube_trainjob.render(layout, job, FSDP if gpus else CPU, max_restarts)
    return kube_trainjob.load(kube.dump(*objects))  # through the YAML, as kubectl reads it


def test_trainjob_is_our_runtime_and_the_trainer_fields(tmp_path):
    out = harness(
        "kube",
        "--kind",
        "trainjob",
        "--gpus",
        "4",
        "--nodes",
        "2",
        "--name",
        "ft",
        "--steps",
        "7",
        "--max-restarts",
        "2",
        runs=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    manifest = Path(out.stdout.strip().splitlines()[-1])
    assert manifest.name == "trainjob.yaml" and manifest.parent.parent == tmp_path
    docs = list(yaml.safe_load_all(manifest.read_text()))
    assert [d["kind"] for d in docs] == ["ConfigMap", "TrainingRuntime", "TrainJob"]
    config_map, runtime, job = kube_trainjob.load(manifest.read_text())
    assert yaml.safe_load(config_map.data["job.yaml"])["max_steps"] == 7
    assert job.spec.runtime_ref.to_dict() == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
        "name": "ft",
    }
    t = job.spec.trainer
    assert (t.num_nodes, t.num_proc_per_node, t.image) == (2, 4, "tuning-harness:gpu")
    assert (t.command, t.args) == (["python", "-m", "tuning.launch"], ["--config", "/job/job.yaml"])
    assert t.resources_per_node.to_dict() == {
        "limits": {"cpu": "4", "memory": "68Gi", "nvidia.com/gpu": "4"},
        "requests": {"cpu": "4", "memory": "64Gi", "nvidia.com/gpu": "4"},
    }
    assert [(e.name, e.value) for e in t.env] == [
        ("ACCELERATE_CONFIG", "/job/accelerate.yaml"),
        ("HARNESS_DEVICE", "gpu"),
        ("HOME", "/tmp"),
    ]
    spec = runtime.spec
    assert (spec.ml_policy.num_nodes, spec.ml_policy.torch.to_dict()) == (2, {})
    assert spec.template.spec.failure_policy.max_restarts == 2  # MAX_RESTARTS
    (rjob,) = spec.template.spec.replicated_jobs
    assert (rjob.name, rjob.replicas, rjob.template.spec.backoff_limit) == ("node", 1, 0)
    pod = rjob.template.spec.template.spec
    assert pod.restart_policy == "Never" and [c.name for c in pod.containers] == ["node"]
    volumes = {v.name: v for v in pod.volumes}
    assert volumes["job"].config_map.name == "ft-job"
    assert volumes["dshm"].empty_dir.to_dict() == {"medium": "Memory", "sizeLimit": "4Gi"}


@pytest.mark.parametrize("gpus", [4, 0])
def test_trainjob_pods_pass_the_restricted_pod_security_standard(gpus):
    _, runtime, _ = rendered(gpus, 2)
    (rjob,) = kube_pod.plain(runtime)["spec"]["template"]["spec"]["replicatedJobs"]
    check_restricted(rjob["template"]["spec"]["template"]["spec"])


@pytest.mark.parametrize(("nodes", "nproc"), [(2, 1), (1, 2), (3, 2)])
def test_trainer_pods_carry_exactly_what_trainer_v2_injects(nodes, nproc):
    _, runtime, job = rendered(0, nodes, nproc)
    pods = kube_trainjob.trainer_pods(runtime, job)
    assert [p.name for p in pods] == [f"tj-node-0-{i}" for i in range(nodes)]
    for rank, pod in enumerate(pods):
        assert (pod.node_rank, pod.nproc, pod.aliases) == (rank, nproc, (f"tj-node-0-{rank}.tj",))
        assert pod.env == {
            "ACCELERATE_CONFIG": "/job/accelerate.yaml",
            "HARNESS_DEVICE": "cpu",
            "HOME": "/tmp",
            "PET_NNODES": str(nodes),
            "PET_NPROC_PER_NODE": str(nproc),
            "PET_NODE_RANK": str(rank),
            "PET_MASTER_ADDR": "tj-node-0-0.tj",
            "PET_MASTER_PORT": "29500",
        }


def test_trainer_pods_are_read_from_the_objects():
    _, runtime, job = rendered(2, 2)
    job.spec.trainer.num_nodes = 4
    next(e for e in job.spec.trainer.env if e.name == "HOME").value = "/home"
    pods = kube_trainjob.trainer_pods(runtime, job)
    assert [p.env["PET_NNODES"] for p in pods] == ["4"] * 4 and pods[3].env["HOME"] == "/home"
    assert pods[1].gpu_ids == ("2", "3")
    job.spec.runtime_ref.name = "torch-distributed"
    with pytest.raises(HarnessError, match="refers to runtime 'torch-distributed'"):
        kube_trainjob.trainer_pods(runtime, job)
    job.spec.runtime_ref.name = "tj"
    runtime.spec.template.spec.replicated_jobs[0].template.spec.template.spec.containers[
        0
    ].name = "trainer"
    with pytest.raises(HarnessError, match="inject PET_\\* nowhere"):
        kube_trainjob.trainer_pods(runtime, job)


def test_restart_policy_flag_is_refused_for_a_trainjob(tmp_path):
    out = harness(
        "kube",
        "--kind",
        "trainjob",
        "--gpus",
        "0",
        "--restart-policy",
        "OnFailure",
        runs=tmp_path,
        timeout=120,
    )
    assert out.returncode == 2 and "failurePolicy.maxRestarts" in out.stderr, out.stderr


# --- Restart rules --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "code", "restarts", "limit", "action"),
    [
        ("Never", 137, 0, 3, "fail the job"),
        ("OnFailure", 1, 0, 3, "restart the container in place"),
        ("ExitCode", 137, 0, 3, "recreate the pod alone"),
        ("ExitCode", 128, 2, 3, "recreate the pod alone"),
        ("ExitCode", 127, 0, 3, "fail the job"),
        ("ExitCode", 1, 0, 3, "fail the job"),
        ("ExitCode", 143, 3, 3, "fail the job"),
        ("OnFailure", 1, 3, 3, "fail the job"),
    ],
)
def test_v1_restart_rules(policy, code, restarts, limit, action):
    assert kube_restarts.v1_action(policy, code, restarts, limit) == action


@pytest.mark.parametrize(
    ("code", "restarts", "action"),
    [(1, 0, "recreate every pod"), (137, 1, "recreate every pod"), (137, 2, "fail the job")],
)
def test_v2_restart_rules(code, restarts, action):
    assert kube_restarts.v2_action(code, restarts, max_restarts=2) == action


@pytest.mark.parametrize(
    ("code", "restarts", "action"),
    [(1, 0, "recreate every pod"), (137, 1, "recreate every pod"), (137, 2, "fail the job")],
)
def test_batch_job_restart_rules(code, restarts, action):
    assert kube_restarts.job_action(code, restarts, backoff_limit=2) == action


@pytest.mark.parametrize(
    ("given", "restarts", "policy"),
    [(None, 0, "Never"), (None, 2, "ExitCode"), ("OnFailure", 2, "OnFailure")],
)
def test_max_restarts_maps_to_each_objects_own_field(given, restarts, policy):
    layout = kube.job_layout(0, 1, 2, name="tj", run_id="r1", run_dir="/tmp/r1")
    _, job = kube.render(layout, {}, CPU, restarts, given)
    assert kube_restarts.rules("PyTorchJob", job) == {
        "restartPolicy": {"Master": policy, "Worker": policy},
        "backoffLimit": restarts,
    }
    _, runtime, _ = rendered(0, 2, max_restarts=restarts)
    assert kube_restarts.rules("TrainJob", runtime) == {"failurePolicy.maxRestarts": restarts}
