"""Tokens/s of tuning.sft_trainer against a bare transformers.Trainer on the same work.

    .venv/bin/python benchmarks/trainer_overhead.py [--pairs 3] [--steps 60] [--batch 8]

Both sides train the same tiny model on the same tokenized demo data with the same batch,
steps, seed and logging, each in a fresh single-process run, alternating which goes first in
each pair. tokens/s = non-padding tokens / summed step time over the steps after 2 warm-up
steps, measured the same way on both sides (time between consecutive optimizer-step ends).
Prints every run and the median ratio sft_trainer / bare (goal >= 0.97).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 2


def common(args) -> dict:
    return dict(
        max_steps=args.steps, batch=args.batch, lr=3e-3, seq=args.seq, seed=7, logging_steps=10
    )


def rates(steps: list[tuple[int, float]]) -> dict:
    """(tokens, seconds) per step after warm-up -> tokens/s as sum/sum and as a per-step median."""
    steps = steps[WARMUP:]
    return {
        "mean": sum(t for t, _ in steps) / sum(s for _, s in steps),
        "median": statistics.median(t / s for t, s in steps),
    }


def run_sft(model: Path, data: Path, out: Path, c: dict) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "tuning.sft_trainer",
        "--model_name_or_path",
        str(model),
        "--training_data_path",
        str(data),
        "--output_dir",
        str(out),
        "--max_steps",
        str(c["max_steps"]),
        "--per_device_train_batch_size",
        str(c["batch"]),
        "--learning_rate",
        str(c["lr"]),
        "--max_seq_length",
        str(c["seq"]),
        "--seed",
        str(c["seed"]),
        "--logging_steps",
        str(c["logging_steps"]),
        "--save_strategy",
        "no",
    ]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, env=_env())
    lines = [json.loads(x) for x in (out / "metrics" / "rank0.jsonl").read_text().splitlines()]
    summary = json.loads((out / "train_summary.json").read_text())["tokens_per_s"]
    got = rates([(r["tokens"], r["step_s"]) for r in lines if r["event"] == "step"])
    assert abs(got["mean"] - summary) < 1e-6 * summary  # the trainer's own summary agrees
    return got


def run_bare(model: Path, data: Path, out: Path, c: dict) -> dict:
    cmd = [sys.executable, __file__, "--bare", str(model), str(data), str(out), json.dumps(c)]
    proc = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True, env=_env())
    return rates(json.loads(proc.stdout.strip().splitlines()[-1]))


def _env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def bare(model_dir: str, data: str, out: str, c: dict) -> None:
    """A plain Trainer: stock collator, no callbacks of ours, nothing logged per step."""
    import time

    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForSeq2Seq,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from tuning.container.sft.data import load_examples, tokenize_examples

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    rows = tokenize_examples(load_examples(data), tok, c["seq"]).rows
    dataset = [{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows]
    stock = DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100)
    batch_tokens: list[int] = []

    def collate(features):
        batch = stock(features)
        batch_tokens.append(int(batch["attention_mask"].sum()))  # in batch order, not time order
        return batch

    step_times: list[float] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, *a, **k):
            step_times.append(time.perf_counter())

        def on_step_end(self, *a, **k):
            step_times.append(time.perf_counter())

    args = TrainingArguments(
        output_dir=out,
        max_steps=c["max_steps"],
        per_device_train_batch_size=c["batch"],
        learning_rate=c["lr"],
        seed=c["seed"],
        logging_steps=c["logging_steps"],
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        ddp_find_unused_parameters=False,
    )
    Trainer(
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=collate,
        processing_class=tok,
        callbacks=[Clock()],
    ).train()
    durations = [b - a for a, b in zip(step_times, step_times[1:], strict=False)]
    print(json.dumps(list(zip(batch_tokens, durations, strict=False))))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--bare":
        bare(sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--arch", default="llama")
    parser.add_argument("--out", type=Path, help="write the pairs here as a record (JSON)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tuning.container.demo_data import write
    from tuning.container.tiny_model import build

    c = common(args)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = build(tmp / "model", arch=args.arch)
        data = write(tmp / "demo.jsonl", n=max(512, args.steps * args.batch))
        print(f"config: {json.dumps(c)} arch={args.arch} threads={os.cpu_count()} cpus")
        ratios: dict[str, list[float]] = {"mean": [], "median": []}
        pairs = []
        for i in range(args.pairs):
            order = ["sft", "bare"] if i % 2 == 0 else ["bare", "sft"]
            got = {}
            for side in order:
                out = tmp / f"{side}{i}"
                got[side] = (run_sft if side == "sft" else run_bare)(model, data, out, c)
            for k in ratios:
                ratios[k].append(got["sft"][k] / got["bare"][k])
            pairs.append(
                {
                    "order": order,
                    **got,
                    "ratio_mean": ratios["mean"][-1],
                    "ratio_median": ratios["median"][-1],
                }
            )
            print(
                f"pair {i + 1} ({' then '.join(order)}): tokens/s sum/sum: sft_trainer "
                f"{got['sft']['mean']:.0f}, bare {got['bare']['mean']:.0f}, "
                f"ratio {ratios['mean'][-1]:.3f} | per-step median: sft_trainer "
                f"{got['sft']['median']:.0f}, bare {got['bare']['median']:.0f}, "
                f"ratio {ratios['median'][-1]:.3f}",
                flush=True,
            )
        for k, label in (("mean", "sum/sum"), ("median", "per-step median")):
            print(
                f"median ratio sft_trainer/bare ({label}): {statistics.median(ratios[k]):.3f} "
                "(goal >= 0.97)"
            )
    if args.out:
        from tuning.harness.run_files.folders import commit

        command = " ".join(["benchmarks/trainer_overhead.py", *sys.argv[1:]])
        command = re.sub(r" --out \S+", "", command)
        record = {"command": command, "code": commit(), "config": c, "pairs": pairs}
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
