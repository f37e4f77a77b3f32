"""tuning/container/rank/batch_dump.py, the debug switch the fms parity test (test_fms_batches.py)
rests on: off unless HARNESS_DUMP_BATCHES is set; on, each rank's lines are exactly the batches its
Trainer fed the model; and the harness hands the switch to the ranks, fms's included."""

from __future__ import annotations

import json

import pytest

from support.harness import harness
from support.launch import run_launch
from support.metrics import read_metrics
from tuning.container.rank import batch_dump
from tuning.container.sft.collator import Collator
from tuning.container.sft.data import load_examples, tokenize_examples


def test_off_unless_set():
    from transformers import Trainer

    before = Trainer.training_step
    assert batch_dump.install({}) is None
    assert batch_dump.install({"HARNESS_DUMP_BATCHES": ""}) is None
    assert Trainer.training_step is before  # nothing patched: no cost when off


@pytest.mark.parametrize("trainer", ["harness", "fms"])
def test_the_harness_turns_it_on_for_the_ranks(trainer, tmp_path):
    args = ("up", "--dry-run", "--trainer", trainer, "--gpus", "0", "--layout", "per-rank")
    on = harness(*args, runs=tmp_path, env={"HARNESS_DUMP_BATCHES": "1"}, timeout=120)
    off = harness(*args, runs=tmp_path, env={"HARNESS_DUMP_BATCHES": "0"}, timeout=120)
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    assert on.stdout.count("HARNESS_DUMP_BATCHES: /output/batches") == 2  # rank0 and rank1
    assert "HARNESS_DUMP_BATCHES" not in off.stdout
    # fms loads it from beside the rank recorder; our image has it as
    # tuning.container.rank.batch_dump
    mounted = on.stdout.count("target: /opt/harness-launch/batch_dump.py")
    assert mounted == (2 if trainer == "fms" else 0)


@pytest.mark.slow
def test_each_rank_dumps_the_batches_its_model_got(tiny_model, tokenizer, demo_data, tmp_path):
    """Two real ranks of our trainer: each dumped batch is the collated batch of the records
    that step used (the step's sample indices, from the rank's metrics)."""
    out, dump = tmp_path / "out", tmp_path / "batches"
    args = [
        "--model_name_or_path",
        str(tiny_model),
        "--training_data_path",
        str(demo_data),
        "--output_dir",
        str(out),
        "--max_steps",
        "2",
        "--max_seq_length",
        "64",
        "--per_device_train_batch_size",
        "3",
        "--save_strategy",
        "no",
        "--logging_steps",
        "1",
        "--ddp_timeout",
        "60",
    ]
    proc = run_launch(args, HARNESS_DUMP_BATCHES=dump)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-5000:])
    rows = tokenize_examples(load_examples(str(demo_data), None, None, None), tokenizer, 64).rows
    by_index = {r["index"]: r for r in rows}
    collate = Collator(tokenizer.pad_token_id)
    for rank in (0, 1):
        lines = [json.loads(x) for x in (dump / f"rank{rank}.jsonl").read_text().splitlines()]
        samples = {r["step"]: r["samples"] for r in read_metrics(out, rank) if r["event"] == "step"}
        assert [(x["rank"], x["step"], x["micro"]) for x in lines] == [(rank, 1, 0), (rank, 2, 0)]
        for line in lines:
            where = f"rank {rank}, step {line['step']}"
            assert line["keys"] == ["attention_mask", "input_ids", "labels"], where
            expected = collate([by_index[i] for i in samples[line["step"]]])
            for key in ("input_ids", "labels", "attention_mask"):
                assert line[key] == expected[key].tolist(), f"{where}: {key}"
            assert len(line["input_ids"]) == 3 and line["loss"] > 0, where
