"""Added special tokens past the model's embedding rows, trained
(tuning/container/sft/special_tokens.py): two ranks on the added-tokens model print the set-up once
and record it, pre-tokenized ids past the rows are refused, and FSDP trains the resized model as DDP
does (the set-up itself, as fms-hf-tuning 3.2.2 does it: test_special_tokens.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.launch import launch_env, run_launch
from support.metrics import step_losses
from support.paths import ROOT


def test_trainer_records_and_prints_the_set_up_once(models, tmp_path):
    """Two ranks on the added-tokens model with data that uses the added tokens: trains (no
    IndexError), prints the change once, records it in train_summary.json."""
    data = tmp_path / "chat.jsonl"
    rows = [{"text": f"<|user|> word {i}\n\n## Label: answer {i}<|tool|>"} for i in range(8)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    proc = run_launch(
        [
            "--model_name_or_path",
            str(models["added"]),
            "--training_data_path",
            str(data),
            "--dataset_text_field",
            "text",
            "--response_template",
            "\n\n## Label:",
            "--output_dir",
            str(out),
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "2",
            "--save_strategy",
            "no",
            "--embedding_size_multiple_of",
            "8",
        ]
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert log.count("tokenizer as fms-hf-tuning sets it up") == 1, log[-3000:]
    tokens = json.loads((out / "train_summary.json").read_text())["tokenizer"]
    assert tokens["embedding_rows"] == [352, 360] and tokens["embedding_size_multiple_of"] == 8
    assert tokens["mean_rows"] == [352, 360]


def test_pretokenized_ids_past_the_rows_are_refused(tiny_model, tmp_path):
    """Records tokenized for a bigger vocabulary: named before training, not an IndexError."""
    data = tmp_path / "tok.jsonl"
    rows = [
        {"input_ids": [1, 5, 9], "labels": [1, 5, 9]},
        {"input_ids": [1, 30468], "labels": [1, 2]},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuning.sft_trainer",
            "--model_name_or_path",
            str(tiny_model),
            "--training_data_path",
            str(data),
            "--output_dir",
            str(tmp_path / "o"),
            "--max_steps",
            "1",
        ],
        cwd=ROOT,
        env=launch_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-2000:]
    assert "tok.jsonl:2: token id 30468 has no embedding row (the model has 352" in proc.stderr


def test_fsdp_trains_the_resized_model_as_ddp_does(models, demo_data, tmp_path):
    """FSDP's ranks load the model with cpu_ram_efficient_loading (all but rank 0 on the meta
    device) and resize it each: the same losses as DDP's, step for step."""
    from support.launch import CONFIGS, FSDP_TOLERANCE, launcher

    losses = {}
    for name, config in (("fsdp", CONFIGS / "fsdp-cpu.yaml"), ("ddp", CONFIGS / "cpu.yaml")):
        out = tmp_path / name
        proc = launcher(
            models["no_pad"],
            demo_data,
            out,
            config,
            "--embedding_size_multiple_of",
            "64",
            "--max_steps",
            "4",
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        assert json.loads((out / "train_summary.json").read_text())["tokenizer"][
            "embedding_rows"
        ] == [350, 384]
        losses[name] = step_losses(out, 0)
    assert len(losses["fsdp"]) == 4
    for step, loss in losses["ddp"].items():
        assert losses["fsdp"][step] == pytest.approx(loss, abs=FSDP_TOLERANCE), f"step {step}"
