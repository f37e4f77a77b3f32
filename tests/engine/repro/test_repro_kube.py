"""From a rehearsed cluster job's logs back to its culprit (issue 39): `make kube REHEARSE=1
KILL=i` kills a rank's pod (every rank in it) as a cluster would lose it, under each
operator's rules; the pods' logs and statuses are collected the way kubectl gives them (one
log a pod; the Pods as the Kubernetes API's objects, validated against its schema); `make
repro FROM=... RUN=1` names the killed pod's ranks and the class, and its replay here gives the
same verdict. World sizes 2, 4, 8."""

from __future__ import annotations

import json

import pytest
import yaml

from support.engine import leftovers
from support.harness import make
from tuning.harness.clusterlogs import collect

kv = pytest.importorskip("kubernetes_validate")

# (kind, pods, ranks a pod, the rank whose pod is killed)
CASES = [("pytorchjob", 2, 1, 1), ("trainjob", 2, 2, 2), ("pytorchjob", 4, 2, 0)]


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "pods", "nproc", "killed"), CASES, ids=[f"{k}-{p}x{n}-kill{r}" for k, p, n, r in CASES]
)
def test_a_killed_pod_is_read_back_from_its_logs_and_replayed(
    kind, pods, nproc, killed, tmp_path, harness_image
):
    runs, run_id = tmp_path / "runs", f"rk-{kind[:5]}-{pods * nproc}"
    out = make(
        "kube",
        "REHEARSE=1",
        f"KIND={kind}",
        "GPUS=0",
        f"NODES={pods}",
        f"NPROC={nproc}",
        f"KILL={killed}",
        "AT_STEP=6",
        "STEPS=20",
        "TIMEOUT=20",
        "RDZV_TIMEOUT=20",
        f"RUN_ID={run_id}",
        runs=runs,
        timeout=900,
    )
    assert (runs / run_id / "restarts.json").is_file(), out.stdout[-3000:] + out.stderr[-3000:]
    cluster = collect.kubectl_view(runs / run_id, tmp_path / "kubectl")
    listed = yaml.safe_load((cluster / "pods.yaml").read_text())
    assert len(listed["items"]) == pods and len(list(cluster.glob("*.log"))) == pods
    for pod in listed["items"]:  # what `kubectl get pods -o yaml` would hold
        kv.validate(pod, "1.29.0", strict=True)
    got = make("repro", f"FROM={cluster}", "RUN=1", "NPROC=2", runs=runs, timeout=900)
    said = got.stdout[-4000:] + got.stderr[-4000:]
    assert got.returncode == 0 and "Traceback" not in said, said
    rec = json.loads(next(p for p in runs.glob("*/repro.json")).read_text())
    v = rec["verdict"]
    pod = killed // nproc  # KILL kills the rank's pod: every rank in it dies with it
    assert (v["class"], v["culprits"]) == ("died", list(range(pod * nproc, (pod + 1) * nproc))), v
    assert "SIGKILL" in v["evidence"] and rec["read"]["world_size"] == pods * nproc
    assert rec["replay"]["kind"] == "kill" and rec["replay"]["rank"] == (0 if killed == 0 else 1)
    assert rec["read"]["step"] and rec["read"]["step"] >= 5  # our trainer's step lines
    assert rec["run"]["matches"], rec["run"]
    assert leftovers(run_id, runs) == [] and leftovers(rec["run"]["run_id"], runs) == []
