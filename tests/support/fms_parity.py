"""Parity with fms-hf-tuning 3.2.2, taken from fms's own run (test_fms_batches.py,
test_fms_parity_tokens.py): the same job trained by `TRAINER=fms` and by our trainer through the
harness (single, 2 CPU ranks, a few steps) with HARNESS_DUMP_BATCHES=1, and the two dumps
compared token for token, rank by rank, step by step, with step 1's loss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.harness import harness
from tuning.container.demo_data import write as write_demo
from tuning.container.sft.chat import IGNORE_INDEX

STEPS = 3
# data_seed: fms 3.2.2 seeds each rank with seed + rank (accelerate's set_seed(device_specific=
# True) in its train()), so without it fms's ranks shuffle apart; ours share one shuffle.
JOB = {
    "data_seed": 42,
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "learning_rate": 0.003,
    "lr_scheduler_type": "constant",
    "max_seq_length": 64,
    "torch_dtype": "float32",
    "use_flash_attn": False,
    "logging_steps": 1,
    "logging_strategy": "steps",
    "save_strategy": "no",
    "trackers": ["file_logger"],
}


def demo_rows(tmp_path: Path, n: int = 16) -> list[dict]:
    path = write_demo(tmp_path / "demo-source.jsonl", n=n, seed=0)
    return [json.loads(line) for line in path.read_text().splitlines()]


def start(trainer: str, case: str, data: Path, model: Path, job: dict, tmp_path: Path):
    """One harness run with the batch dump on: (the harness process, the run's directory)."""
    job_file = tmp_path / f"{trainer}-job.json"
    job_file.write_text(json.dumps({**JOB, **job}))
    runs = tmp_path / f"runs-{trainer}"
    run_id = f"parity-{case.replace('_', '-')}-{trainer}"[:32]
    out = harness(
        "up",
        "--trainer",
        trainer,
        "--layout",
        "single",
        "--gpus",
        "0",
        "--nproc",
        "2",
        "--steps",
        str(STEPS),
        "--seed",
        "42",
        "--model",
        str(model),
        "--data",
        str(data),
        "--job",
        str(job_file),
        "--run-id",
        run_id,
        runs=runs,
        env={"HARNESS_DUMP_BATCHES": "1"},
    )
    return out, runs / run_id


def train(trainer: str, case: str, data: Path, model: Path, job: dict, tmp_path: Path) -> Path:
    """A run that must succeed; returns its output directory."""
    out, run = start(trainer, case, data, model, job, tmp_path)
    assert out.returncode == 0, (
        f"{trainer} on {case}: exit {out.returncode}\n{out.stdout}{out.stderr}"
    )
    return run / "output"


def batches(output: Path, rank: int) -> list[dict]:
    path = output / "batches" / f"rank{rank}.jsonl"
    assert path.is_file(), f"{path}: no batch dump (HARNESS_DUMP_BATCHES did not reach rank {rank})"
    return [json.loads(line) for line in path.read_text().splitlines()]


def first_loss(output: Path) -> float:
    lines = [json.loads(x) for x in (output / "training_logs.jsonl").read_text().splitlines()]
    return next(x["data"]["value"] for x in lines if x["name"] == "training_loss")


def compare(theirs_out: Path, ours_out: Path, case: str, loss_tol: float = 1e-5) -> int:
    """Both runs' batches equal token for token, rank by rank, step by step, and step 1's loss
    (to `loss_tol`): the number of tokens compared."""
    tokens = 0
    for rank in (0, 1):
        theirs, ours = batches(theirs_out, rank), batches(ours_out, rank)
        assert [(b["step"], b["micro"]) for b in theirs] == [(s, 0) for s in range(1, STEPS + 1)]
        assert [(b["step"], b["micro"]) for b in ours] == [(s, 0) for s in range(1, STEPS + 1)]
        for a, b in zip(ours, theirs, strict=True):
            where = f"{case}, rank {rank}, step {a['step']}"
            assert a["keys"] == b["keys"], f"{where}: batch keys, ours {a['keys']} fms {b['keys']}"
            for key in ("input_ids", "labels", "attention_mask"):
                assert a[key] == b[key], f"{where}: {key} differ\nours {a[key]}\nfms  {b[key]}"
            assert any(x != IGNORE_INDEX for row in a["labels"] for x in row), (
                f"{where}: all masked"
            )
            tokens += sum(map(sum, a["attention_mask"]))
    # the ranks saw different records (the loader shards), so the comparison covers both
    assert batches(ours_out, 0)[0]["input_ids"] != batches(ours_out, 1)[0]["input_ids"]
    # Step 1, same weights and same batches: the same loss, as each rank's training_step
    # returned it (full precision) and as logged (fms's log rounds to 4 places).
    for rank in (0, 1):
        a, b = batches(ours_out, rank)[0], batches(theirs_out, rank)[0]
        assert a["num_items_in_batch"] == b["num_items_in_batch"], f"{case}, rank {rank}"
        assert a["loss"] == pytest.approx(b["loss"], abs=loss_tol), f"{case}, rank {rank}: loss"
    logged_ours, logged_fms = first_loss(ours_out), first_loss(theirs_out)
    print(f"{case}: {tokens} tokens identical; step-1 loss ours {logged_ours} fms {logged_fms}")
    assert abs(round(logged_ours, 4) - logged_fms) <= loss_tol, f"{case}: logged step-1 losses"
    return tokens
