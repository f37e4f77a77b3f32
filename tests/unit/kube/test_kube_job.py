"""`make kube KIND=job`: option 2, one pod whose containers each hold one rank, as a batch/v1
Job; the launcher reading a container's own rank first; and its rehearsal (one network and
IPC namespace), killed and restarted whole, over an emptyDir /output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from support.engine import leftovers
from support.harness import harness
from support.kube_objects import check_restricted
from support.paths import ROOT
from tuning import launch
from tuning.harness.backends import kube_job, kube_manifest, kube_restarts
from tuning.harness.commands import kube
from tuning.harness.errors import HarnessError
from tuning.harness.run_files import folders

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
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    for rank, ctr in enumerate(pod["containers"]):
        assert ctr["resources"] == {
            "limits": {"nvidia.com/gpu": "1"},
            "requests": {"cpu": "1", "memory": "16Gi"},
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


# --- The rehearsal: one pod's containers in one namespace, killed, restarted whole -----------


@pytest.mark.docker
@pytest.mark.slow
def test_option2_trains_and_a_killed_rank_restarts_the_whole_pod_from_step_0(
    harness_image, tmp_path
):
    """KIND=job, 2 CPU containers, MAX_RESTARTS=1, no claim: rank 1's container SIGKILLed at
    step 11 (checkpoint-10 saved); the pod fails once rank 0 has ended too, the Job makes a
    new pod, every rank starts again, from step 0: the emptyDir and its checkpoint are gone."""
    run_id = "oj-" + folders.new_run_id()
    out = harness(
        "kube",
        "--kind",
        "job",
        "--rehearse",
        "--gpus",
        "0",
        "--nproc",
        "2",
        "--name",
        "oj",
        "--steps",
        "14",
        "--timeout",
        "20",
        "--rdzv-timeout",
        "20",
        "--kill",
        "1",
        "--at-step",
        "11",
        "--max-restarts",
        "1",
        "--image",
        harness_image,
        "--run-id",
        run_id,
        runs=tmp_path,
        timeout=500,
    )
    run_dir = tmp_path / run_id
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert "restart(s) starts from step 0 (resume_from_checkpoint is not set)" in out.stdout
        rec = json.loads((run_dir / "restarts.json").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
        # the pod, not the container: it failed once both had ended; one new pod, every rank
        assert rec["rules"] == {"restartPolicy": "Never", "backoffLimit": 1}
        assert rec["killed"]["container"] == "rank1" and rec["killed"]["pod"] == "oj-pod"
        assert [(a["pod"], a["action"]) for a in rec["actions"]] == [
            ("oj-pod", "recreate every pod")
        ]
        assert rec["actions"][0]["exit_code"] in (1, 137)  # the first non-zero container's
        assert [(r["starts"], r["resumed_at"], r["last_step"]) for r in rec["ranks"]] == [
            (2, [1], 14),
            (2, [1], 14),
        ]
        assert rec["output"] == "emptyDir" and rec["resumed_from"] == 0
        assert rec["steps_lost"] == rec["killed"]["step"] >= 11
        assert rec["checkpoints_lost"]["oj-pod/emptydir.deleted-1"][0] == 10
        assert summary["status"] == "succeeded" and summary["final_loss"] is not None
        job = yaml.safe_load((run_dir / "job" / "job.yaml").read_text())
        assert "resume_from_checkpoint" not in job
        # the services are the pod's containers: one network and IPC namespace, the object's env
        services = yaml.safe_load((run_dir / "compose.yaml").read_text())["services"]
        _, obj = kube.load((run_dir / "job.yaml").read_text())
        for node in kube_job.containers(obj):
            svc = services[node.name]

            def own(env):  # less the rehearsal's own knobs (its rendezvous timeout, its pacing)
                return {
                    k: v
                    for k, v in env.items()
                    if not k.startswith("HARNESS_R") and k != "HARNESS_STEP_SLEEP"
                }

            assert own(svc["environment"]) == own(node.env)
        assert services["rank1"]["network_mode"] == "service:rank0"
        assert services["rank1"]["ipc"] == "service:rank0"
        outputs = {v["target"]: v["source"] for v in services["rank1"]["volumes"]}
        assert outputs["/output"].endswith("pods/oj-pod/emptydir")  # the pod's one emptyDir
        log = (run_dir / "logs/rank1.log").read_text()
        assert "--machine_rank 1 --main_process_ip 127.0.0.1 --main_process_port 29500" in log
    finally:
        assert leftovers(run_id) == []
