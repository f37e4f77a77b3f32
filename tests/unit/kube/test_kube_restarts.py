"""`make kube REHEARSE=1 KILL=i` without an engine: each operator's restart rules
(rehearsal/kube_operator.py) acting on its pods' ends, the rehearsal's knobs, and restarts.md (the
rehearsals: engine/kube/test_kube_restarts_docker.py)."""

from __future__ import annotations

import pytest

from support.harness import harness
from tuning.harness.backends import kube_restarts
from tuning.harness.layout.layout import Node
from tuning.harness.rehearsal import kube_operator

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
    op = kube_operator.Operator(kind, rules, pods, 1, 12, "r1", 60)
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
    op = kube_operator.Operator(kind, rules, nodes, 1, 12, "r1", 60, pods, renewed.append)
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
    (pod,) = kube_operator.rehearsal_env(pods, 20, 15)
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
    text = kube_operator.markdown(rec)
    assert "- **outcome: succeeded** (every pod ended); kill to end 40.0 s; restarts 1 of 1" in text
    assert "| 31.0 | kr-node-0-1 | 137 | recreate every pod |" in text
    assert "- output: claim out; checkpoints saved: 10, 14; lost with their pods: none;" in text
    assert "| 1 | kr-node-0-1 | 2 | 14 | [11] | completed | None |" in text
