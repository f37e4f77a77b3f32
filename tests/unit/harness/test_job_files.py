"""A user's job files and paths as they type them (issue 38): `make ...` from the checkout, each
bad input refused before anything starts with one clear message and nothing left behind; a job
file's relative paths mean the job file's folder; a Hugging Face cache snapshot as MODEL is
bound so that its links resolve (one trains on the engine: test_job_files_docker.py); a `$`
reaches the ranks as typed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from support.harness import make
from support.hf_cache import hf_snapshot
from support.paths import ROOT
from support.tokenizer_models import CHAT_TEMPLATE


def refused(out: subprocess.CompletedProcess, runs: Path, message: str) -> None:
    """One clear error, no traceback, a non-zero exit, and no run folder written."""
    assert out.returncode != 0, out.stdout + out.stderr
    assert message in out.stderr, out.stderr
    assert out.stderr.count("harness: error:") == 1 and "Traceback" not in out.stderr
    assert not runs.exists() or not any(runs.iterdir()), list(runs.iterdir())


def dry_run(*args: str, runs: Path) -> tuple[dict, dict]:
    """(the Compose file, job/job.yaml or job.json) that `make up DRY_RUN=1` prints."""
    out = make("up", "GPUS=0", "DRY_RUN=1", *args, silent=True, runs=runs)
    assert out.returncode == 0, out.stdout + out.stderr
    compose_text, job_text = out.stdout.split("\n---\n")
    return yaml.safe_load(compose_text), yaml.safe_load(job_text)


def binds(compose: dict, service: str = "trainer") -> dict[str, str]:
    return {v["target"]: v["source"] for v in compose["services"][service]["volumes"]}


def test_a_job_file_with_a_yaml_syntax_error_is_named_with_its_line(tmp_path):
    job = tmp_path / "bad.yaml"
    job.write_text("learning_rate: 1e-4\nmax_steps: [3\nseed: 1\n")
    out = make("up", "GPUS=0", f"JOB={job}", silent=True, runs=tmp_path / "runs")
    refused(out, tmp_path / "runs", f"JOB={job}: not valid YAML at line 3, column 5")
    assert "fix the file and run again" in out.stderr


def test_an_accelerate_config_with_a_syntax_error_is_named_too(tmp_path):
    config = tmp_path / "acc.yaml"
    config.write_text("distributed_type: FSDP\n  num_processes: 2\n")
    out = make("up", "GPUS=0", f"CONFIG={config}", silent=True, runs=tmp_path / "runs")
    refused(out, tmp_path / "runs", f"CONFIG={config}: not valid YAML at line 2")


def test_a_relative_path_in_a_job_file_is_beside_the_job_file(tmp_path, demo_data):
    """`training_data_path: train.jsonl` next to the job means that file, wherever make runs."""
    folder = tmp_path / "myjob"
    folder.mkdir()
    shutil.copy(demo_data, folder / "train.jsonl")
    (folder / "job.yaml").write_text("training_data_path: train.jsonl\nmax_steps: 3\n")
    compose, job = dry_run(f"JOB={folder / 'job.yaml'}", runs=tmp_path / "runs")
    assert binds(compose)["/data/train.jsonl"] == str(folder / "train.jsonl")
    assert job["training_data_path"] == "/data/train.jsonl"
    # not there: named with the folder it was looked for in
    (folder / "job.yaml").write_text("training_data_path: nope.jsonl\n")
    out = make("up", "GPUS=0", f"JOB={folder / 'job.yaml'}", silent=True, runs=tmp_path / "runs2")
    refused(out, tmp_path / "runs2", "training_data_path is nope.jsonl, which is not on this")


def test_a_hugging_face_cache_snapshot_binds_the_folder_its_links_point_into(tmp_path, tiny_model):
    snapshot = hf_snapshot(tiny_model, tmp_path / "cache")
    compose, job = dry_run(f"MODEL={snapshot}", runs=tmp_path / "runs")
    repo = snapshot.parents[1]
    assert binds(compose)["/model"] == str(repo)
    assert job["model_name_or_path"] == f"/model/snapshots/{snapshot.name}"


def test_a_model_whose_links_reach_far_above_it_is_refused_with_the_fix(tmp_path, tiny_model):
    model = tmp_path / "a/b/c/d/model"
    model.mkdir(parents=True)
    for f in tiny_model.iterdir():
        shutil.copy(f, tmp_path / f.name)
        (model / f.name).symlink_to(tmp_path / f.name)
    out = make("up", "GPUS=0", f"MODEL={model}", silent=True, runs=tmp_path / "runs")
    refused(out, tmp_path / "runs", f"MODEL={model}: its files link to")
    assert f"cp -rL {model}" in out.stderr


def test_a_dollar_in_args_reaches_the_ranks_as_typed(tmp_path):
    """Compose interpolates $NAME in every value; the file says $$, and Compose's own reading
    of it (`docker compose config`, the binary the harness runs) gives back the $."""
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    args = "--output_dir /output --run_name a$HOME --note 'x$$y'"
    out = make(
        "up", "GPUS=0", "DRY_RUN=1", f"ENTRY={script}", f"ARGS={args}", silent=True, runs=tmp_path
    )
    assert out.returncode == 0, out.stdout + out.stderr
    compose_file = tmp_path / "compose.yaml"
    compose_file.write_text(out.stdout.split("\n---\n")[0])
    compose_bin = ROOT / ".venv/bin/docker-compose"
    seen = subprocess.run(
        [
            str(compose_bin),
            "-f",
            str(compose_file),
            "config",
            "--format",
            "json",
            "--no-path-resolution",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert seen.returncode == 0, seen.stderr
    # `config` prints a Compose file again, so it writes each $ of a value as $$ once more
    command = [
        w.replace("$$", "$") for w in json.loads(seen.stdout)["services"]["trainer"]["command"]
    ]
    assert command[-4:] == ["--run_name", "a$HOME", "--note", "x$$y"], command


def test_an_absolute_entry_that_is_nowhere_is_refused_in_a_dry_run(tmp_path):
    src = tmp_path / "code"
    src.mkdir()
    out = make(
        "up",
        "GPUS=0",
        "DRY_RUN=1",
        "ENTRY=/abs/missing.py",
        f"SRC={src}",
        silent=True,
        runs=tmp_path / "r",
    )
    refused(out, tmp_path / "r", "ENTRY=/abs/missing.py: no such script on this machine, and")


CHAT = {
    "instruction_template": "<|user|>",
    "response_template": "<|assistant|>",
    "dataset_conversation_field": "messages",
    "max_steps": 2,
}


def test_chat_records_with_a_tokenizer_without_a_chat_template_are_refused_before_start(
    tmp_path, tiny_model
):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    for f in model.iterdir():  # the ranks run as uid 1000 under root; save_pretrained writes 0600
        f.chmod(0o644)
    assert not json.loads((model / "tokenizer_config.json").read_text()).get("chat_template")
    data = tmp_path / "chat.jsonl"
    turns = [{"role": "user", "content": "ant"}, {"role": "assistant", "content": "teal"}]
    data.write_text("".join(json.dumps({"messages": turns, "id": i}) + "\n" for i in range(4)))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(CHAT))
    runs = tmp_path / "runs"
    out = make(
        "up", "GPUS=0", f"JOB={job}", f"MODEL={model}", f"DATA={data}", silent=True, runs=runs
    )
    refused(out, runs, f"chat records need a chat template and the tokenizer at {model} has none")
    # the job's own chat_template, or one saved beside the tokenizer, passes
    job.write_text(yaml.safe_dump({**CHAT, "chat_template": CHAT_TEMPLATE}))
    dry_run(f"JOB={job}", f"MODEL={model}", f"DATA={data}", runs=runs)
    job.write_text(yaml.safe_dump(CHAT))
    (model / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    dry_run(f"JOB={job}", f"MODEL={model}", f"DATA={data}", runs=runs)


def test_a_soak_of_a_script_with_args_saves_as_its_args_say(tmp_path):
    """SAVE_EVERY would reach no rank of a script that reads no job file: refused by name; the
    soak plans around the script's own --save_steps."""
    from tuning.harness.commands.soak import args_save_steps

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    soak = ("soak", "GPUS=0", f"ENTRY={script}", "MTBF=3m", "DURATION=1m")
    args = "ARGS=--output_dir /output --save_steps 50"
    out = make(*soak, args, "SAVE_EVERY=5", silent=True, runs=tmp_path / "runs")
    refused(out, tmp_path / "runs", "SAVE_EVERY=5 would reach no rank: a script that takes ARGS")
    assert "put --save_steps 5 in ARGS" in out.stderr
    out = make(*soak, "ARGS=--output_dir /output", silent=True, runs=tmp_path / "runs")
    refused(out, tmp_path / "runs", "ARGS has no --save_steps: a soak resumes from the script's")
    assert args_save_steps(("--save_steps", "50"), None) == 50
    assert args_save_steps(("--save-steps=7", "--save_strategy", "steps"), None) == 7
