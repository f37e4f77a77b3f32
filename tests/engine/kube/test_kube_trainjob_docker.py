"""`make kube KIND=trainjob REHEARSE=1`: the TrainJob's local rehearsal, trained with Trainer
v2's environment (the TrainJob rendered: unit/kube/test_kube_trainjob.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from support.engine import leftovers
from support.harness import harness
from tuning.harness.backends import kube_trainjob
from tuning.harness.run_files import folders


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize(
    ("nodes", "nproc", "uid"), [(2, 1, None), (1, 2, "auto")], ids=["2x1", "1x2-uid-auto"]
)
def test_trainjob_rehearsal_trains_with_trainer_v2_environment(
    harness_image, tmp_path, nodes, nproc, uid
):
    """1x2 with KUBE_UID=auto: the pods set no uid, and the rehearsal runs them as OpenShift's
    restricted SCC would, an arbitrary uid in group 0: the image trains so."""
    run_id = f"tjob-{nodes}x{nproc}-" + folders.new_run_id()
    out = harness(
        "kube",
        *(("--kube-uid", uid) if uid else ()),
        "--kind",
        "trainjob",
        "--rehearse",
        "--gpus",
        "0",
        "--nodes",
        str(nodes),
        "--nproc",
        str(nproc),
        "--name",
        "tj",
        "--steps",
        "3",
        "--run-id",
        run_id,
        runs=tmp_path,
        timeout=600,
    )
    run_dir = tmp_path / run_id
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        summary = json.loads((run_dir / "summary.json").read_text())
        pods = [f"tj-node-0-{i}" for i in range(nodes)]
        assert summary["status"] == "succeeded" and summary["trainjob"]["pods"] == pods
        assert [(r["rank"], r["node"]) for r in summary["ranks"]] == [
            (rank, pods[rank // nproc]) for rank in range(2)
        ]
        for rank in range(2):
            lines = (run_dir / f"output/metrics/rank{rank}.jsonl").read_text().splitlines()
            assert {json.loads(x)["world_size"] for x in lines} == {2}
        _, runtime, job = kube_trainjob.load((run_dir / "trainjob.yaml").read_text())
        services = yaml.safe_load((run_dir / "compose.yaml").read_text())["services"]
        assert list(services) == pods
        for pod in kube_trainjob.trainer_pods(runtime, job):
            svc = services[pod.name]
            assert svc["hostname"] == pod.name and svc["environment"] == pod.env
            assert not {"MASTER_ADDR", "WORLD_SIZE", "RANK"} & set(svc["environment"])
            assert svc["networks"] == {"train": {"aliases": [f"{pod.name}.tj"]}}
        if uid == "auto":
            assert {svc["user"] for svc in services.values()} == {"1000770000:0"}
            template = runtime.spec.template.spec.replicated_jobs[0].template.spec.template
            (ctr,) = template.spec.containers
            assert ctr.security_context.run_as_user is None
        for pod in pods:  # every pod met the master under its Trainer v2 name
            log = (run_dir / f"logs/{pod}.log").read_text()
            assert "--main_process_ip tj-node-0-0.tj --main_process_port 29500" in log
    finally:
        assert leftovers(run_id) == []
