"""A script of the user's with its own command line on Kubernetes (issue 38): `make kube
SRC=tests/user_scripts ENTRY=train_sft.py ARGS=...` renders the script's folder as a ConfigMap
mounted read-only at /src (the working dir) and ARGS as the container's args, and the kube
rehearsal trains it: a PyTorchJob of 2 pods x 1 rank and a TrainJob of 1 pod x 2 ranks. What
the ranks ran is read back from the rehearsal's own files, not from what the harness says."""

from __future__ import annotations

import json

import pytest
import yaml

from support.engine import leftovers
from support.harness import harness
from support.paths import USER_SCRIPTS
from tuning.harness.run_files import folders, metric_lines

ARGS = (
    "--model_name_or_path /opt/harness/assets/tiny-model --train_file "
    "/opt/harness/assets/demo.jsonl --output_dir /output --max_steps 4 --save_steps 2 "
    "--logging_steps 1 --per_device_train_batch_size 2 --report_to none --seed 3"
)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "nodes", "nproc"),
    [("pytorchjob", 2, 1), ("trainjob", 1, 2)],
    ids=["pytorchjob-2x1", "trainjob-1x2"],
)
def test_a_script_with_args_trains_in_the_kube_rehearsal(
    harness_image, tmp_path, kind, nodes, nproc
):
    run_id = f"ks-{kind[:5]}-" + folders.new_run_id()[-8:]
    shape = ("--kind", kind, "--gpus", "0", "--nodes", str(nodes), "--nproc", str(nproc))
    script = ("--src", str(USER_SCRIPTS), "--entry", "train_sft.py", f"--args={ARGS}")
    knobs = ("--rdzv-timeout", "77", "--grace", "45", "--run-id", run_id)
    out = harness("kube", "--rehearse", *shape, *script, *knobs, runs=tmp_path, timeout=600)
    run_dir = tmp_path / run_id
    try:
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "succeeded", summary
        manifest = next(run_dir.glob(f"{kind}.yaml"))
        docs = list(yaml.safe_load_all(manifest.read_text()))
        src_map = next(
            d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "sft-src"
        )
        assert sorted(src_map["data"].values()) == sorted(
            p.read_text()
            for p in USER_SCRIPTS.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        )
        # /src in the rehearsal is the ConfigMap laid out as the kubelet lays it out
        assert (run_dir / "src/train_sft.py").read_bytes() == (
            USER_SCRIPTS / "train_sft.py"
        ).read_bytes()
        services = yaml.safe_load((run_dir / "compose.yaml").read_text())["services"]
        for svc in services.values():
            assert svc["command"] == ARGS.split() and svc["working_dir"] == "/src"
            assert svc["environment"]["HARNESS_RDZV_TIMEOUT"] == "77"
        for name in services:  # the launcher took the rendered rendezvous timeout
            assert "--rdzv_conf timeout=77" in (run_dir / f"logs/{name}.log").read_text()
        for rank in range(2):  # each rank saw the whole world and did every step
            lines = metric_lines.read_metrics(run_dir / "output")[rank]
            assert {x["world_size"] for x in lines} == {2}
            assert [x["step"] for x in lines if x["event"] == "step"] == [1, 2, 3, 4]
            assert [x["step"] for x in lines if x["event"] == "checkpoint"] == [2, 4]
    finally:
        assert leftovers(run_id) == []
