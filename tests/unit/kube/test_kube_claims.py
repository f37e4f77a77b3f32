"""How the user's job reaches the cluster (issue 28, part 2): MODEL and DATA on claims mounted
read-only where the job reads them, OUTPUT_CLAIM at /output (and what a restart then does),
and a foreign trainer's launcher in a ConfigMap; for each kind of object."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from support.harness import harness
from support.paths import ROOT
from tuning.harness import cli
from tuning.harness.backends import kube_manifest
from tuning.harness.contract.container import launch_files

# A refusal must come before the engine is asked anything: these tests are not docker tests,
# and if the refusal broke they must fail here, never start a rehearsal on the shared engine.
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
KINDS = {"pytorchjob": "pytorchjob.yaml", "trainjob": "trainjob.yaml", "job": "job.yaml"}


def make_kube(tmp_path: Path, kind: str, *args: str) -> tuple[str, list[dict], dict]:
    """(stdout, the manifest's documents, the job as the ConfigMap holds it), from the CLI's
    own main in this process (a subprocess each costs seconds; test_kube.py runs `make kube`'s
    command line as a process)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(
            ["kube", "--kind", kind, "--gpus", "0", "--nproc", "2", *args, "--runs", str(tmp_path)]
        )
    assert code == 0, out.getvalue()
    out = SimpleNamespace(stdout=out.getvalue())
    manifest = Path(out.stdout.strip().splitlines()[-1])
    assert manifest.name == KINDS[kind]
    docs = list(yaml.safe_load_all(manifest.read_text()))
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    key = next(k for k in cm["data"] if k.startswith("job."))
    job = yaml.safe_load(cm["data"][key])  # YAML reads job.json too
    return out.stdout, docs, job


def pods(docs: list[dict]) -> list[dict]:
    """Every pod spec of the manifest."""
    out = []
    for d in docs:
        if d["kind"] == "Job":
            out.append(d["spec"]["template"]["spec"])
        elif d["kind"] == "PyTorchJob":
            out += [r["template"]["spec"] for r in d["spec"]["pytorchReplicaSpecs"].values()]
        elif d["kind"] == "TrainingRuntime":
            out += [
                r["template"]["spec"]["template"]["spec"]
                for r in d["spec"]["template"]["spec"]["replicatedJobs"]
            ]
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_model_and_data_claims_are_mounted_read_only_where_the_job_reads_them(tmp_path, kind):
    said, docs, job = make_kube(
        tmp_path, kind, "--model", "pvc:models/granite-3b", "--data", "pvc:models/sets/train.jsonl"
    )
    assert (job["model_name_or_path"], job["training_data_path"]) == ("/model", "/data/train.jsonl")
    assert "model granite-3b on claim models (MODEL)" in said
    for pod in pods(docs):
        volumes = {v["name"]: v for v in pod["volumes"]}
        # one claim named twice is one volume, read-only: nothing of the pod writes there
        assert volumes["model"]["persistentVolumeClaim"] == {
            "claimName": "models",
            "readOnly": True,
        }
        assert "data" not in volumes and volumes["output"]["emptyDir"] == {}
        for ctr in pod["containers"]:
            mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
            assert mounts["/model"] == {
                "mountPath": "/model",
                "name": "model",
                "readOnly": True,
                "subPath": "granite-3b",
            }
            assert mounts["/data/train.jsonl"] == {
                "mountPath": "/data/train.jsonl",
                "name": "model",
                "readOnly": True,
                "subPath": "sets/train.jsonl",
            }
        assert pod["securityContext"]["fsGroup"] == 1000


@pytest.mark.parametrize("kind", KINDS)
def test_an_output_claim_keeps_checkpoints_and_restarts_resume_from_it(tmp_path, kind):
    nodes = ["--nodes", "2", "--nproc", "1"] if kind != "job" else []
    said, docs, job = make_kube(
        tmp_path, kind, "--output-claim", "ckpt", "--max-restarts", "1", *nodes
    )
    assert job["resume_from_checkpoint"] is True and job["output_dir"] == "/output"
    many = "2 pods write to it: it must be ReadWriteMany"
    one = "one pod writes to it (ReadWriteOnce will do)"
    assert (many if nodes else one) in said
    assert (
        "output: claim ckpt at /output (made beforehand: docs/kubernetes.md), fsGroup 1000" in said
    )
    for pod in pods(docs):
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["output"] == {
            "name": "output",
            "persistentVolumeClaim": {"claimName": "ckpt"},
        }
        assert pod["securityContext"]["fsGroup"] == 1000
        for ctr in pod["containers"]:
            assert {"mountPath": "/output", "name": "output"} in ctr["volumeMounts"]


@pytest.mark.parametrize("kind", KINDS)
def test_restarts_over_an_empty_dir_never_resume_and_say_so(tmp_path, kind):
    said, docs, job = make_kube(tmp_path, kind, "--max-restarts", "2")
    assert "resume_from_checkpoint" not in job
    assert (
        "output: an emptyDir at /output, gone with its pod: each of the MAX_RESTARTS=2 "
        "restart(s) starts from step 0"
    ) in said
    for pod in pods(docs):
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["output"] == {"name": "output", "emptyDir": {}}
        assert "fsGroup" not in pod["securityContext"]  # no claim: nothing to give the group


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--output-claim", "Bad_Claim"], "OUTPUT_CLAIM: 'Bad_Claim' is not a claim's name"),
        (["--model", "pvc:models/../etc"], "MODEL: '../etc' must be a path inside claim models"),
        (["--data", "pvc:data"], "DATA=pvc:data: a claim is pvc:<claim>/<path in it>"),
    ],
)
def test_bad_claims_are_refused_before_anything_is_written(tmp_path, args, message):
    out = harness("kube", "--gpus", "0", *args, runs=tmp_path / "runs", timeout=120)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists()


def test_output_claim_is_a_clusters_flag(tmp_path):
    out = harness("up", "--gpus", "0", "--output-claim", "x", runs=tmp_path / "runs")
    assert out.returncode == 2
    assert "OUTPUT_CLAIM=x does not apply to `make up`: a run here writes to" in out.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_a_foreign_trainer_reaches_the_pods_with_its_launcher_in_a_config_map(tmp_path, kind):
    said, docs, job = make_kube(tmp_path, kind, "--trainer", "fms")
    assert "ENTRY=tuning.sft_trainer of the image, under the harness's launcher" in said
    maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    assert sorted(maps) == ["sft-job", "sft-launch"]
    assert sorted(maps["sft-job"]["data"]) == ["accelerate.yaml", "job.json"]  # fms's format
    files = {name: src.read_text() for name, src in launch_files(ROOT / "tuning/container").items()}
    assert maps["sft-launch"]["data"] == files  # what Compose binds, file for file
    assert job["learning_rate"] == 0.003  # fms-demo.json's
    trainer = next((d["spec"]["trainer"] for d in docs if d["kind"] == "TrainJob"), None)
    for pod in pods(docs):
        assert {"name": "launch", "configMap": {"name": "sft-launch"}} in pod["volumes"]
        for ctr in pod["containers"]:
            assert {"mountPath": "/opt/harness-launch", "name": "launch", "readOnly": True} in ctr[
                "volumeMounts"
            ]
            command, env = (
                (ctr.get("command"), ctr["env"])
                if not trainer
                else (trainer["command"], trainer["env"])
            )
            assert command == ["python3", "/opt/harness-launch/harness_launch.py"]
            env = {e["name"]: e["value"] for e in env}
            assert env["HARNESS_ENTRY"] == "harness_rank"
            assert env["HARNESS_WRAPPED_ENTRY"] == "tuning.sft_trainer"
            assert env["SFT_TRAINER_CONFIG_JSON_PATH"] == "/job/job.json"
            assert env["PYTHONPATH"] == "/opt/harness-launch"
            assert ctr.get("args") is None  # the job is job.json, not trainer arguments
    assert kube_manifest.load(yaml.safe_dump_all(docs))  # every object reads back


def test_a_rehearsal_refuses_a_claim_it_has_no_stand_in_for(tmp_path):
    runs = tmp_path / "runs"
    out = harness(
        "kube",
        "--gpus",
        "0",
        "--model",
        "pvc:models/granite",
        "--rehearse",
        runs=runs,
        timeout=120,
        env=NO_ENGINE,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    folder = runs.resolve() / ".claims/models"
    assert (
        f"the rehearsal stands claim models in by the folder {folder}, and "
        f"{folder}/granite is not there"
    ) in out.stderr
    assert not runs.exists()


def test_a_rehearsal_refuses_a_claims_file_the_ranks_cannot_read(tmp_path):
    runs = tmp_path / "runs"
    model = runs / ".claims/models/granite"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_text("x")
    (model / "model.safetensors").chmod(0o600)  # as transformers saves it, for root here
    out = harness(
        "kube",
        "--gpus",
        "0",
        "--model",
        "pvc:models/granite",
        "--rehearse",
        runs=runs,
        timeout=120,
        env=NO_ENGINE,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert (
        f"{model.resolve()}/model.safetensors in the claim's stand-in is not readable by "
        "the ranks' user (1000:1000)"
    ) in out.stderr
    assert f"`chmod -R a+rX {model.resolve()}`" in out.stderr
    assert sorted(p.name for p in runs.iterdir()) == [".claims"]  # nothing written
