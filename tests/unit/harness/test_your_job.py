"""The user's job, in every command (issue 28, part 1): one flag set declared once and passed
only when typed; a flag a command cannot honour refused by name; a job file's own model and
data used, or refused with the reason, never replaced by the demo's; `make kube` renders the
job `make up` runs, key by key."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from support.harness import harness
from support.paths import ROOT
from tuning.harness import cli
from tuning.harness.errors import HarnessError
from tuning.harness.flags import flag_args, flag_table

COMMANDS = ("up", "bench", "fault", "soak", "kube", "down", "ps", "logs", "stacks", "image")


def make_n(*args: str, env: dict | None = None) -> str:
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", *args],
        cwd=ROOT,
        text=True,
        capture_output=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return next(x for x in out.stdout.splitlines() if "-m tuning.harness" in x)


def makefile_list(name: str) -> list[str]:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    return re.search(rf"^{name} := (.*)$", text, re.M).group(1).split()


def test_the_makefile_passes_the_tables_variables():
    assert makefile_list("VALUES") == list(flag_table.VALUES)
    assert makefile_list("SWITCHES") == list(flag_table.SWITCHES)


def test_only_what_is_typed_on_makes_command_line_becomes_a_flag():
    """A known variable in the environment never becomes a flag: make stops and says so (it
    would be ignored otherwise); typed after make, the same name is the flag."""
    env = {**os.environ, "DATA": "/from/env", "SEED": "9"}
    refused = subprocess.run(
        ["make", "-n", "--no-print-directory", "up", "MODEL=/m"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert refused.returncode != 0 and "put it after make" in refused.stderr
    line = make_n("up", "MODEL=/m", "DATA=/typed", env={"DATA": "/from/env"})
    assert "--model '/m'" in line and "--data '/typed'" in line and "--seed" not in line
    assert "--run-id 'x1'" in make_n("logs", "RUN_ID=x1")  # it once read RUN
    assert "--args" not in line and "--args 'a b'" not in make_n("up")


def test_a_value_with_spaces_and_quotes_arrives_whole():
    import shlex

    line = make_n("up", "JOB=my job's.yaml")
    argv = shlex.split(line)
    assert argv[argv.index("--job") + 1] == "my job's.yaml"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_a_command_cannot_honour_is_refused_by_name(command, tmp_path):
    for flag in flag_table.TABLE:
        args = [command, "--runs", str(tmp_path), flag.option, *([] if flag.switch else ["v"])]
        a = cli.parser().parse_args(args)
        if command in flag.commands:
            flag_args.refuse_unused(a, command)  # honoured: no complaint
            continue
        with pytest.raises(
            HarnessError,
            match=rf"^{flag.var}=\S+ does not apply to `make "
            rf"{command}`: .+Drop it",
        ):
            flag_args.refuse_unused(a, command)


def test_a_refused_flag_stops_the_command_before_anything_is_written(tmp_path):
    out = harness(
        "kube", "--gpus", "0", "--layout", "per-rank", "--memory", "8g", runs=tmp_path / "runs"
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "LAYOUT=per-rank does not apply to `make kube`: a Kubeflow job's shape" in out.stderr
    assert "MEMORY=8g does not apply to `make kube`" in out.stderr
    assert not (tmp_path / "runs").exists()


def user_job(tmp_path: Path, model: Path, data: Path) -> Path:
    """A job file of a user's: their model and data, and values that are not the demo's."""
    job = {
        "model_name_or_path": str(model),
        "training_data_path": str(data),
        "learning_rate": 7.0e-4,
        "num_train_epochs": 3,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 2,
        "max_seq_length": 48,
        "seed": 3,
        "save_steps": 5,
        "lr_scheduler_type": "cosine",
        "warmup_steps": 2,
    }
    path = tmp_path / "myjob.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


@pytest.fixture
def users(tmp_path, tiny_model, demo_data) -> tuple[Path, Path, Path]:
    """The user's own model and data under their folder (copies: not the demo's paths)."""
    import shutil

    model, data = tmp_path / "mine/model", tmp_path / "mine/train.jsonl"
    shutil.copytree(tiny_model, model)
    shutil.copy(demo_data, data)
    for f in model.iterdir():  # the ranks run as uid 1000 under root; save_pretrained writes 0600
        f.chmod(0o644)
    return user_job(tmp_path, model, data), model, data


def up_dry_run(*args: str, runs: Path) -> tuple[dict, dict, str]:
    """(Compose file, job.yaml, the job's header line) that `up --dry-run` prints."""
    out = harness("up", "--gpus", "0", "--dry-run", *args, runs=runs)
    assert out.returncode == 0, out.stdout + out.stderr
    compose_text, job_text = out.stdout.split("\n---\n")
    return yaml.safe_load(compose_text), yaml.safe_load(job_text), job_text.splitlines()[0]


def test_a_job_files_own_model_and_data_are_what_trains(users, tmp_path):
    job_file, model, data = users
    compose, job, said = up_dry_run("--job", str(job_file), runs=tmp_path / "runs")
    binds = {v["source"]: v["target"] for v in compose["services"]["trainer"]["volumes"]}
    assert binds[str(model)] == "/model" and binds[str(data)] == "/data/train.jsonl"
    assert (job["model_name_or_path"], job["training_data_path"]) == ("/model", "/data/train.jsonl")
    assert job["learning_rate"] == 7.0e-4 and job["num_train_epochs"] == 3
    assert f"model {model} on this machine (JOB={job_file}'s model_name_or_path)" in said


def test_without_a_model_anywhere_the_demo_is_named(tmp_path):
    job_file = tmp_path / "job.yaml"
    job_file.write_text("learning_rate: 0.001\nmax_steps: 3\n")
    _, job, said = up_dry_run("--job", str(job_file), runs=tmp_path / "runs")
    assert job["model_name_or_path"] == "/opt/harness/assets/tiny-model"
    assert "model the demo's tiny model (the demo: JOB and MODEL name none)" in said


@pytest.mark.parametrize(
    "key, var", [("model_name_or_path", "MODEL"), ("training_data_path", "DATA")]
)
def test_a_job_path_that_is_not_here_is_refused_with_the_fix(key, var, users, tmp_path):
    job_file, _, _ = users
    job = yaml.safe_load(job_file.read_text())
    job[key] = "/nowhere/granite-3b"
    job_file.write_text(yaml.safe_dump(job))
    out = harness("up", "--gpus", "0", "--job", str(job_file), runs=tmp_path / "runs")
    assert out.returncode == 2
    assert (
        f"JOB={job_file}'s {key} is /nowhere/granite-3b, which is not on this machine" in out.stderr
        and f"set {var}=<local path>, or fix {key} in the job file" in out.stderr
    )
    assert not (tmp_path / "runs").exists()


def test_kube_renders_the_job_up_runs_key_by_key(users, tmp_path):
    """Only the paths differ: where the pods find the model and data."""
    job_file, model, data = users
    config = ROOT / "configs/accelerate/ddp.yaml"
    common = (
        "--gpus",
        "0",
        "--job",
        str(job_file),
        "--config",
        str(config),
        "--seed",
        "7",
        "--steps",
        "40",
        "--timeout",
        "123",
    )
    _, up_job, _ = up_dry_run(*common, runs=tmp_path / "up")
    kube = ("kube", *common, "--kind", "trainjob", "--nodes", "2", "--nproc", "1")
    # the job file's own paths are on this machine: a pod cannot see them (one rule with MODEL)
    out = harness(*kube, runs=tmp_path / "kube")
    assert out.returncode == 2
    assert (
        f"JOB={job_file}'s model_name_or_path={model} is a path on this machine" in out.stderr
        and "MODEL=pvc:<claim>/<path>" in out.stderr
    )
    assert not (tmp_path / "kube").exists()
    out = harness(
        *kube,
        "--model",
        "pvc:models/mine",
        "--data",
        f"pvc:data/{data.name}",
        runs=tmp_path / "kube",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    manifest = Path(out.stdout.strip().splitlines()[-1])
    cm = next(d for d in yaml.safe_load_all(manifest.read_text()) if d["kind"] == "ConfigMap")
    kube_job = yaml.safe_load(cm["data"]["job.yaml"])
    paths = {"model_name_or_path", "training_data_path"}
    assert kube_job.keys() == up_job.keys()
    assert {k: v for k, v in kube_job.items() if k not in paths} == {
        k: v for k, v in up_job.items() if k not in paths
    }
    assert (kube_job["seed"], kube_job["max_steps"], kube_job["ddp_timeout"]) == (7, 40, 123)
    assert kube_job["learning_rate"] == 7.0e-4 and kube_job["num_train_epochs"] == 3
    # the claims are mounted where up binds the host paths: /model and /data/<name>
    assert (kube_job["model_name_or_path"], kube_job["training_data_path"]) == (
        up_job["model_name_or_path"],
        up_job["training_data_path"],
    )
    assert cm["data"]["accelerate.yaml"] == config.read_text()
