"""`make kube REHEARSE=1`: the PyTorchJob's local rehearsal, the operator's pods as containers
with its environment, trained through (the rendering: unit/kube/test_kube.py)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from support.engine import leftovers
from support.harness import harness
from tuning.harness.backends import kube_objects
from tuning.harness.commands import kube
from tuning.harness.run_files import folders


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize(("nodes", "nproc"), [(2, 1), (1, 2)], ids=["2x1", "1x2"])
def test_rehearsal_trains_with_the_operator_environment(harness_image, tmp_path, nodes, nproc):
    run_id = f"kube-{nodes}x{nproc}-" + folders.new_run_id()
    out = harness(
        "kube",
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
        assert summary["status"] == "succeeded" and summary["layout"] == "pytorchjob"
        pods = ["tj-master-0"] + [f"tj-worker-{i}" for i in range(nodes - 1)]
        assert summary["pytorchjob"]["pods"] == pods
        # Each rank ran in the pod the operator would have put it in, and saw the whole world.
        assert [(r["rank"], r["node"]) for r in summary["ranks"]] == [
            (rank, pods[rank // nproc]) for rank in range(2)
        ]
        for r in summary["ranks"]:
            assert re.fullmatch(rf"harness-{run_id}-{r['node']}-\d+", r["container"])
            assert r["exit_code"] == 0
        for rank in range(2):
            lines = (run_dir / f"output/metrics/rank{rank}.jsonl").read_text().splitlines()
            seen = {json.loads(x)["world_size"] for x in lines}
            assert seen == {2}, f"rank {rank} saw world sizes {seen}"
        # The services are the operator's pods: its names, exactly its environment.
        _, job = kube_objects.load((run_dir / "pytorchjob.yaml").read_text())
        services = yaml.safe_load((run_dir / "compose.yaml").read_text())["services"]
        assert list(services) == pods
        for pod in kube.operator_pods(job):
            svc = services[pod.name]
            assert svc["hostname"] == pod.name and svc["environment"] == pod.env
            assert svc["labels"]["harness.run"] == run_id
            assert svc["labels"]["harness.node"] == pod.name
        # The ConfigMap's content is what /job held.
        config_map, _ = kube_objects.load((run_dir / "pytorchjob.yaml").read_text())
        for key, text in config_map.data.items():
            assert (run_dir / "job" / key).read_text() == text
        # The image's entrypoint took the CPU FSDP config as it is (no --multi_gpu: that would
        # turn it into DDP) and met the master by its pod name.
        for pod in pods:
            log = (run_dir / f"logs/{pod}.log").read_text()
            assert "--main_process_ip tj-master-0 --main_process_port 23456" in log
            assert "--config_file /job/accelerate.yaml" in log and "--multi_gpu" not in log
    finally:
        assert leftovers(run_id) == []
