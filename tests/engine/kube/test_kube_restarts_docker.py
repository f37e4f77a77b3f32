"""`make kube REHEARSE=1 KILL=i` on the engine: a rank's pod SIGKILLed at a step, and each
operator's restart rules acting on it (kube/faults.py), recorded in restarts.json and
restarts.md (the rules without an engine: unit/kube/test_kube_restarts.py)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import yaml

from support.engine import leftovers
from support.harness import harness
from tuning.harness.run_files import folders

IMAGE = os.environ.get("HARNESS_IMAGE", "tuning-harness:latest")


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
