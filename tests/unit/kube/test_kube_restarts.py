"""`make kube REHEARSE=1 KILL=i`: a rank's pod SIGKILLed at a step, and each operator's
restart rules acting on it (kube/faults.py), recorded in restarts.json and restarts.md."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import yaml

from support.engine import leftovers
from support.harness import harness
from tuning.harness.backends import kube_restarts
from tuning.harness.commands.kube import faults
from tuning.harness.run_files import folders
from tuning.harness.spec.layout import Node

IMAGE = os.environ.get("HARNESS_IMAGE", "tuning-harness:latest")


# --- What the operator does: policy x exit code x restarts made -> action --------------------


@pytest.mark.parametrize(
    ("kind", "rules", "pod", "code", "made", "action"),
    [
        (
            "PyTorchJob",
            {"restartPolicy": {"Master": "ExitCode", "Worker": "ExitCode"}, "backoffLimit": 1},
            "j-worker-0",
            137,
            0,
            "recreate the pod alone",
        ),
        (
            "PyTorchJob",
            {"restartPolicy": {"Master": "ExitCode", "Worker": "ExitCode"}, "backoffLimit": 1},
            "j-master-0",
            1,
            0,
            "fail the job",
        ),
        (
            "PyTorchJob",
            {"restartPolicy": {"Master": "ExitCode", "Worker": "ExitCode"}, "backoffLimit": 1},
            "j-worker-0",
            137,
            1,
            "fail the job",
        ),
        (
            "PyTorchJob",
            {"restartPolicy": {"Master": "OnFailure", "Worker": "OnFailure"}, "backoffLimit": 2},
            "j-master-0",
            1,
            1,
            "restart the container in place",
        ),
        (
            "PyTorchJob",
            {"restartPolicy": {"Master": "Never", "Worker": "Never"}, "backoffLimit": 0},
            "j-worker-0",
            137,
            0,
            "fail the job",
        ),
        ("TrainJob", {"failurePolicy.maxRestarts": 1}, "j-node-0-1", 137, 0, "recreate every pod"),
        ("TrainJob", {"failurePolicy.maxRestarts": 1}, "j-node-0-0", 1, 1, "fail the job"),
    ],
)
def test_the_operator_decides_from_the_objects_rules(kind, rules, pod, code, made, action):
    pods = [Node("a", 0, 1, ()), Node("b", 1, 1, ())]
    op = faults.Operator(kind, rules, pods, 1, 12, "r1", 60)
    op.actions = [{"action": kube_restarts.RESTART_POD}] * made
    assert op.target == "b"
    assert op.decide(pod, code) == action


class FakeNodes:
    """What the operator's on_tick touches of run.execute's nodes."""

    restarts_left = 0
    file = None


@pytest.mark.parametrize(
    ("kind", "pods", "ticks", "acted_at"),
    [  # KIND=job: one pod of two containers; it fails once both have ended
        (
            "Job",
            {"rank0": "oj-pod", "rank1": "oj-pod"},
            [{"rank0": None, "rank1": 137}, {"rank0": 1, "rank1": 137}],
            1,
        ),
        # a TrainJob: a pod per node; the killed one's exit is its pod's failure at once
        (
            "TrainJob",
            {"tj-node-0-0": "tj-node-0-0", "tj-node-0-1": "tj-node-0-1"},
            [{"tj-node-0-0": None, "tj-node-0-1": 137}],
            0,
        ),
    ],
)
def test_the_operator_acts_on_a_pod_once_all_its_containers_ended(kind, pods, ticks, acted_at):
    nodes = [Node(name, i, 1, ()) for i, name in enumerate(pods)]
    rules = {"restartPolicy": "Never", "backoffLimit": 1, "failurePolicy.maxRestarts": 1}
    renewed = []
    op = faults.Operator(kind, rules, nodes, 1, 12, "r1", 60, pods, renewed.append)
    op.killed_at = op.t0  # the kill is not this test's
    fake = FakeNodes()
    for i, state in enumerate(ticks):
        assert op({}, state, fake) is None
        acted = i >= acted_at
        assert [a["action"] for a in op.actions] == (["recreate every pod"] if acted else [])
        assert fake.restarts_left == (1 if acted else 0)  # run.execute restarts every node
        assert renewed == (list(dict.fromkeys(pods.values())) if acted else [])  # new emptyDirs


def test_rehearsal_knobs_are_added_to_the_pods_environment_only():
    pods = [Node("j-master-0", 0, 1, (), {"PET_NNODES": "2"})]
    (pod,) = faults.rehearsal_env(pods, 20, 15)
    assert pod.env == {"PET_NNODES": "2", "HARNESS_RDZV_TIMEOUT": "15", "HARNESS_STEP_SLEEP": "0.2"}
    assert pods[0].env == {"PET_NNODES": "2"}


def test_a_kill_needs_the_rehearsal(tmp_path):
    out = harness("kube", "--gpus", "0", "--kill", "1", runs=tmp_path, timeout=120)
    assert out.returncode == 2 and "add REHEARSE=1" in out.stderr, out.stderr


def test_the_record_reads_as_markdown():
    rec = {
        "kind": "TrainJob",
        "job": "kr",
        "rules": {"failurePolicy.maxRestarts": 1},
        "killed": {
            "rank": 1,
            "pod": "kr-node-0-1",
            "at_step": 12,
            "step": 12,
            "how": "docker kill (SIGKILL) x",
            "t": 30.5,
        },
        "outcome": "succeeded",
        "ended_by": "every pod ended",
        "kill_to_end_s": 40.0,
        "restarts": {"made": 1, "limit": 1},
        "checkpoints": [10, 14],
        "resumed_from": 10,
        "output": "claim out",
        "checkpoints_kept": {"out": [10, 14]},
        "checkpoints_lost": {},
        "steps_lost": 2,
        "final_loss": 1.5,
        "actions": [
            {"t": 31.0, "pod": "kr-node-0-1", "exit_code": 137, "action": "recreate every pod"}
        ],
        "ranks": [
            {
                "rank": 1,
                "pod": "kr-node-0-1",
                "starts": 2,
                "last_step": 14,
                "resumed_at": [11],
                "end_status": "completed",
                "signature": None,
            }
        ],
        "timeline": [{"t": 30.5, "event": "killed"}],
    }
    text = faults.markdown(rec)
    assert "- **outcome: succeeded** (every pod ended); kill to end 40.0 s; restarts 1 of 1" in text
    assert "| 31.0 | kr-node-0-1 | 137 | recreate every pod |" in text
    assert "- output: claim out; checkpoints saved: 10, 14; lost with their pods: none;" in text
    assert "| 1 | kr-node-0-1 | 2 | 14 | [11] | completed | None |" in text


# --- Rehearsals: 2 pods x 1 CPU rank, rank 1's pod killed at step 11 (checkpoint at 10) -------


def _rehearse(tmp_path, kind: str, *flags: str) -> tuple[dict, dict, str]:
    run_id = f"kr-{kind[:2]}-" + folders.new_run_id()
    out = harness(
        "kube",
        "--kind",
        kind,
        "--rehearse",
        "--gpus",
        "0",
        "--nodes",
        "2",
        "--nproc",
        "1",
        "--name",
        "kr",
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
        IMAGE,
        "--run-id",
        run_id,
        *flags,
        runs=tmp_path,
        timeout=400,
    )
    run_dir = tmp_path / run_id
    assert (run_dir / "restarts.md").is_file(), f"exit {out.returncode}:\n{out.stdout}{out.stderr}"
    assert leftovers(run_id) == []
    rec = json.loads((run_dir / "restarts.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    return rec, summary, out.stdout + out.stderr + f"\nexit {out.returncode}"


@pytest.mark.docker
@pytest.mark.slow
def test_pytorchjob_restarts_the_killed_pod_alone_and_the_job_fails(tmp_path):
    rec, summary, out = _rehearse(tmp_path, "pytorchjob", "--restart-policy", "ExitCode")
    assert out.endswith("exit 1"), out
    assert rec["rules"] == {
        "restartPolicy": {"Master": "ExitCode", "Worker": "ExitCode"},
        "backoffLimit": 1,
    }
    assert rec["killed"]["pod"] == "kr-worker-0" and rec["killed"]["step"] >= 11
    # The killed pod (137) is recreated alone; the survivor's failure (1) is permanent.
    assert rec["actions"][0]["pod"] == "kr-worker-0" and rec["actions"][0]["exit_code"] == 137
    assert rec["actions"][0]["action"] == "recreate the pod alone"
    assert rec["actions"][-1]["action"] == "fail the job"
    assert rec["outcome"] == "failed" and rec["ended_by"] == "the operator failed the job"
    assert rec["restarts"] == {"made": 1, "limit": 1}
    master = next(r for r in rec["ranks"] if r["pod"] == "kr-master-0")
    assert master["starts"] == 1 and master["signature"] is not None  # what the survivor saw
    assert rec["resumed_from"] is None and rec["kill_to_end_s"] is not None


@pytest.mark.docker
@pytest.mark.slow
def test_trainjob_with_an_output_claim_resumes_from_its_newest_checkpoint(
    tmp_path, tiny_model, demo_data
):
    """The gang restart over OUTPUT_CLAIM (one host folder every pod start shares), with the
    model and data on claims too: every pod is made again and resumes from checkpoint-10."""
    claims = tmp_path / ".claims"  # the rehearsal's stand-ins: RUNS/.claims/<claim>
    shutil.copytree(tiny_model, claims / "models/tiny")
    (claims / "sets").mkdir()
    shutil.copy(demo_data, claims / "sets/train.jsonl")
    for path in (claims / "models/tiny", *(claims / "models/tiny").iterdir()):
        path.chmod(path.stat().st_mode | 0o444 | (0o111 if path.is_dir() else 0))  # a+rX
    rec, summary, out = _rehearse(
        tmp_path,
        "trainjob",
        "--output-claim",
        "kr-out",
        "--model",
        "pvc:models/tiny",
        "--data",
        "pvc:sets/train.jsonl",
    )
    assert out.endswith("exit 0"), out
    assert rec["rules"] == {"failurePolicy.maxRestarts": 1}
    assert rec["killed"]["pod"] == "kr-node-0-1"
    assert rec["actions"][0]["exit_code"] == 137
    assert rec["actions"][0]["action"] == "recreate every pod"
    assert rec["restarts"] == {"made": 1, "limit": 1}
    assert rec["outcome"] == "succeeded" and summary["status"] == "succeeded"
    # Every rank started twice and went on from checkpoint-10: steps 11.. again, to 14.
    assert [(r["starts"], r["resumed_at"], r["last_step"]) for r in rec["ranks"]] == [
        (2, [11], 14),
        (2, [11], 14),
    ]
    assert rec["resumed_from"] == 10 and rec["steps_lost"] == rec["killed"]["step"] - 10
    assert rec["output"] == "claim kr-out" and rec["checkpoints_lost"] == {}
    assert 10 in rec["checkpoints_kept"]["kr-out"] and (claims / "kr-out/checkpoint-10").is_dir()
    assert summary["final_loss"] is not None
    # what trained was the claims' model and data, read-only where the job reads them
    run_dir = tmp_path / summary["run_id"]
    job = yaml.safe_load((run_dir / "job/job.yaml").read_text())
    assert job["resume_from_checkpoint"] is True
    assert (job["model_name_or_path"], job["training_data_path"]) == ("/model", "/data/train.jsonl")
    services = yaml.safe_load((run_dir / "compose.yaml").read_text())["services"]
    for svc in services.values():
        binds = {v["target"]: v for v in svc["volumes"]}
        assert binds["/model"]["source"] == str(claims / "models/tiny")
        assert binds["/model"]["read_only"] and binds["/data/train.jsonl"]["read_only"]
        assert binds["/output"]["source"] == str(claims / "kr-out")
