"""`make kube KIND=job REHEARSE=1`: option 2's rehearsal (one network and IPC namespace), a
killed rank restarting the whole pod from step 0 over an emptyDir /output (the Job rendered:
unit/kube/test_kube_job.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from support.engine import leftovers
from support.harness import harness
from tuning.harness.backends import kube_job, kube_objects
from tuning.harness.run_files import folders


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
        _, obj = kube_objects.load((run_dir / "job.yaml").read_text())
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
