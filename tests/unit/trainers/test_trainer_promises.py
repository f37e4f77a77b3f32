"""The README's promises about our trainer's fms-style arguments and outputs, each checked on a
real one-process CPU run: the HF TrainingArguments reach the Trainer, evaluation runs on the
validation data, resume_from_checkpoint's three forms, training_logs.jsonl in fms's format and
save_model_dir."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.launch import launch_env
from support.metrics import read_metrics
from support.paths import ROOT

pytestmark = pytest.mark.slow


def train(model: Path, data: Path, out: Path, *extra: str, steps: int) -> None:
    args = [
        "--model_name_or_path",
        str(model),
        "--training_data_path",
        str(data),
        "--output_dir",
        str(out),
        "--max_steps",
        str(steps),
        "--learning_rate",
        "1e-3",
        "--max_seq_length",
        "64",
        "--per_device_train_batch_size",
        "2",
        "--seed",
        "3",
        "--save_strategy",
        "steps",
        "--save_steps",
        "3",
        *extra,
    ]
    cmd = [sys.executable, "-m", "tuning.sft_trainer", *args]
    proc = subprocess.run(
        cmd, cwd=ROOT, env=launch_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-5000:])


def steps_run(out: Path) -> list[int]:
    """The steps of the newest start in `out` (a resumed run appends to the same file)."""
    lines = read_metrics(out, 0)
    start = max(i for i, x in enumerate(lines) if x.get("name") == "imports")
    return [x["step"] for x in lines[start:] if x["event"] == "step"]


@pytest.fixture(scope="module")
def hf_run(tiny_model, demo_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hf") / "out"
    train(
        tiny_model,
        demo_data,
        out,
        "--optim",
        "adamw_torch",
        "--adam_beta1",
        "0.8",
        "--adam_beta2",
        "0.95",
        "--adam_epsilon",
        "1e-7",
        "--warmup_steps",
        "2",
        "--lr_scheduler_type",
        "constant_with_warmup",
        "--weight_decay",
        "0.05",
        "--max_grad_norm",
        "0.5",
        "--validation_data_path",
        str(demo_data),
        "--eval_strategy",
        "steps",
        "--eval_steps",
        "2",
        "--per_device_eval_batch_size",
        "8",
        "--logging_strategy",
        "steps",
        "--logging_steps",
        "1",
        "--save_model_dir",
        str(out.parent / "final"),
        steps=4,
    )
    return out


def test_training_arguments_reach_the_trainer(hf_run):
    import torch

    args = torch.load(hf_run / "checkpoint-3/training_args.bin", weights_only=False)
    got = {
        k: getattr(args, k)
        for k in (
            "optim",
            "adam_beta1",
            "adam_beta2",
            "adam_epsilon",
            "warmup_steps",
            "lr_scheduler_type",
            "weight_decay",
            "max_grad_norm",
            "eval_strategy",
            "eval_steps",
            "per_device_eval_batch_size",
            "save_steps",
        )
    }
    # HF's enums are str subclasses: "adamw_torch" == OptimizerNames.ADAMW_TORCH
    assert got == {
        "optim": "adamw_torch",
        "adam_beta1": 0.8,
        "adam_beta2": 0.95,
        "adam_epsilon": 1e-7,
        "warmup_steps": 2,
        "lr_scheduler_type": "constant_with_warmup",
        "weight_decay": 0.05,
        "max_grad_norm": 0.5,
        "eval_strategy": "steps",
        "eval_steps": 2,
        "per_device_eval_batch_size": 8,
        "save_steps": 3,
    }, got


def test_warmup_and_scheduler_shape_the_learning_rate(hf_run):
    lrs = [x["lr"] for x in read_metrics(hf_run, 0) if x["event"] == "step"]
    # constant_with_warmup over 2 steps: 1e-3 * step/2 while warming up, then 1e-3
    assert [round(x, 9) for x in lrs] == [0.0, 0.0005, 0.001, 0.001], lrs


def test_evaluation_runs_on_the_validation_data(hf_run):
    state = json.loads((hf_run / "checkpoint-3/trainer_state.json").read_text())
    evals = [x["step"] for x in state["log_history"] if "eval_loss" in x]
    assert evals == [2], state["log_history"]


def test_evaluations_and_saves_are_timed_in_the_metrics(hf_run):
    """What the timeouts check reads (tuning/harness/checks/timeouts.py): each evaluation's and
    each save's own time, apart from the step's; steps 2 and 4 evaluate, 3 and 4 save."""
    lines = read_metrics(hf_run, 0)
    evals = [(x["step"], x["eval_s"]) for x in lines if x["event"] == "evaluation"]
    saves = [(x["step"], x["save_s"]) for x in lines if x["event"] == "checkpoint"]
    assert [s for s, _ in evals] == [2, 4] and [s for s, _ in saves] == [3, 4], lines
    assert all(t > 0 for _, t in evals + saves)


def test_training_logs_are_in_fms_format(hf_run):
    raw = (hf_run / "training_logs.jsonl").read_text().splitlines()
    lines = [json.loads(x) for x in raw]
    train_steps = [x["data"]["step"] for x in lines if x["name"] == "training_loss"]
    val_steps = [x["data"]["step"] for x in lines if x["name"] == "validation_loss"]
    assert (train_steps, val_steps) == ([1, 2, 3, 4], [2, 4]), lines
    for x in lines:
        assert set(x) == {"name", "data"} and set(x["data"]) == {
            "epoch",
            "step",
            "timestamp",
            "value",
        }, x
        assert isinstance(x["data"]["value"], float) and x["data"]["value"] > 0, x
        assert x["data"]["epoch"] == round(x["data"]["epoch"], 2), f"fms rounds epoch: {x}"
    # fms's tracker writes json.dumps(..., sort_keys=True): "data" before "name"
    assert all(r.startswith('{"data": {"epoch": ') for r in raw), raw


def test_save_model_dir_holds_a_loadable_model_and_tokenizer(hf_run, tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = hf_run.parent / "final"
    model = AutoModelForCausalLM.from_pretrained(final)
    assert AutoTokenizer.from_pretrained(final).vocab_size > 0
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in base.parameters())
    changed = any(
        (a != b).any() for a, b in zip(model.parameters(), base.parameters(), strict=True)
    )
    assert changed, "save_model_dir holds the untrained weights"


@pytest.fixture(scope="module")
def six_steps(tiny_model, demo_data, tmp_path_factory) -> Path:
    """A run that saved checkpoint-3 and checkpoint-6."""
    out = tmp_path_factory.mktemp("resume") / "out"
    train(tiny_model, demo_data, out, steps=6)
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-6"]
    return out


@pytest.mark.parametrize(
    ("flag", "first"),
    [(None, 7), ("false", 1), ("checkpoint-3", 4)],
    ids=["unset-resumes-latest", "false-starts-afresh", "a-path-resumes-from-it"],
)
def test_resume_from_checkpoint(six_steps, tiny_model, demo_data, tmp_path, flag, first):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(six_steps, out)
    extra = []
    if flag:
        extra = ["--resume_from_checkpoint", str(out / flag) if "checkpoint" in flag else flag]
    train(tiny_model, demo_data, out, *extra, steps=8)
    assert steps_run(out) == list(range(first, 9))
