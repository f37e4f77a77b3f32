"""Run by hand: every data file of fms-hf-tuning's own tests (tests/artifacts/testdata, images
excepted) through our trainer, with the job fms's tests give it, and say which train and which
are refused and why; with --fms-python, fms-hf-tuning 3.2.2 itself on the same jobs beside it.

    git clone https://github.com/foundation-model-stack/fms-hf-tuning   # (any copy of it)
    PYTHONPATH=tests .venv/bin/python -m support.fms_testdata \\
        --artifacts fms-hf-tuning/tests/artifacts \\
        [--fms-python /path/to/venv-with-fms-hf-tuning-3.2.2/bin/python] [--out DIR]

Models, built offline: the tiny model (tuning.container.tiny_model) for text records; for the
records pre-tokenized with Maykeye/TinyLLama-v0 and for chat, a tiny random Llama with that model's
32,000 embedding rows beside fms's own tinyllama_tokenizer_special_tokens (32,004 tokens: its chat
tokens and <pad> past the rows, resized as fms resizes them). Each run: 2 steps, one process, CPU.
Prints a Markdown table (and writes it to OUT/report.md). Not a test: CI has no copy of fms's
repository (tests/engine/trainers/test_fms_parity_tokens.py generates files of the same shapes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from support.paths import ROOT
from support.tokenizer_models import CHAT_TEMPLATE, portable

TWEET = {
    "data_formatter_template": "### Text: {{element['Tweet text']}} \\n\\n### Label:"
    " {{text_label}}",
    "response_template": "\\n### Label:",
}
CHAT = {
    "chat_template": CHAT_TEMPLATE,
    "instruction_template": "<|user|>",
    "response_template": "<|assistant|>",
}
GRANITE = {
    "instruction_template": "<|start_of_role|>user<|end_of_role|>",
    "response_template": "<|start_of_role|>assistant<|end_of_role|>",
}
T, J, L, A, P = "json", "jsonl", "arrow", "parquet", "tokenized_with_maykeye_tinyllama_v0"
# (path under testdata, job, model): every data file but jsonl/image_dataset.jsonl
RUNS = [
    *[(f"{f}/twitter_complaints_small.{f}", TWEET, "tiny") for f in (T, J, L, A)],
    *[(f"{f}/twitter_complaints_input_output.{f}", {}, "tiny") for f in (T, J, L, A)],
    ("datafolder", {}, "tiny"),
    ("jsonl/nestful_100_samples_input_output.jsonl", {}, "tiny"),
    *[(f"{f}/twitter_complaints_{P}.{f}", {}, "maykeye") for f in (T, J, L, A)],
    (
        "json/twitter_complaints_tokenized_with_maykeye_tinyllama_v0_only_input_ids.json",
        {},
        "maykeye",
    ),
    ("parquet/chat_dataset_tokenized_largelist.parquet", {}, "maykeye"),
    ("parquet/chat_dataset_tokenized_sequence.parquet", {}, "maykeye"),
    ("jsonl/single_turn_chat.jsonl", CHAT, "maykeye"),  # no dataset_conversation_field
    ("jsonl/single_turn_chat.jsonl", {**CHAT, "dataset_conversation_field": "messages"}, "maykeye"),
    ("jsonl/multi_turn_chat.jsonl", {**CHAT, "dataset_conversation_field": "messages"}, "maykeye"),
    (
        "jsonl/multi_turn_chat_conversations.jsonl",
        {**CHAT, "dataset_conversation_field": "conversations"},
        "maykeye",
    ),
    (
        "jsonl/multi_turn_chat_granite_instruct.jsonl",
        {**GRANITE, "chat_template": "granite", "dataset_conversation_field": "messages"},
        "maykeye",
    ),
    ("json/empty_data.json", {}, "tiny"),
    ("json/malformatted_data.json", {}, "tiny"),
]
COMMON = {
    "max_steps": 2,
    "per_device_train_batch_size": 2,
    "save_strategy": "no",
    "logging_strategy": "steps",
    "logging_steps": 1,
    "learning_rate": 1e-4,
    "seed": 42,
    "data_seed": 42,
    "torch_dtype": "float32",
    "use_flash_attn": False,
}
LENGTH = {"tiny": 512, "maykeye": 2048}  # max_seq_length: each model's positions
# fms's sft_trainer with our batch dump installed first (as the harness's rank recorder does)
FMS_ENTRY = (
    "import runpy, sys, harness_batch_dump; harness_batch_dump.install();"
    " sys.argv = ['sft_trainer']; runpy.run_module('tuning.sft_trainer',"
    " run_name='__main__')"
)


def build_models(artifacts: Path, root: Path) -> dict[str, Path]:
    """tiny: tuning.container.tiny_model; maykeye: a tiny random Llama with 32,000 rows (Maykeye/
    TinyLLama-v0's) beside fms's tinyllama_tokenizer_special_tokens."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from tuning.container.tiny_model import build

    tiny = portable(build(root / "tiny"))
    maykeye = root / "maykeye"
    shutil.copytree(artifacts / "testdata/tinyllama_tokenizer_special_tokens", maykeye)
    config = AutoConfig.for_model(
        "llama",
        vocab_size=32000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(maykeye)
    for f in maykeye.iterdir():  # a container's user reads it (test_fms_parity_tokens.py)
        f.chmod(0o644)
    return {"tiny": tiny, "maykeye": maykeye}


def _job(path: Path, job: dict, artifacts: Path, data: Path, model: Path, out: Path) -> Path:
    job = dict(job)
    if job.get("chat_template") == "granite":
        text = (artifacts / "predefined_data_configs/granite_3_1b_chat_template.txt").read_text()
        job["chat_template"] = text.replace("\\", "\\\\")  # unescaped again by both trainers
    full = {
        **COMMON,
        "max_seq_length": LENGTH[model.name],
        **job,
        "output_dir": str(out),
        "model_name_or_path": str(model),
        "training_data_path": str(data),
    }
    path.write_text(json.dumps(full))
    return path


def _why(text: str) -> str:
    lines = [x for x in text.splitlines() if x.strip()]
    picked = [x for x in lines if "error" in x.lower() or "Error" in x] or lines or ["?"]
    return picked[-1].strip()[:300]


def ours(job: Path, out: Path) -> str:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        "HARNESS_DUMP_BATCHES": str(out / "batches"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tuning.sft_trainer", "--config", str(job)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode == 0:
        summary = json.loads((out / "train_summary.json").read_text())
        return f"trains: {summary['steps']} steps, step-1 loss {summary['first_loss']:.4f}"
    kind = "refused" if proc.returncode == 2 else f"fails (exit {proc.returncode})"
    return f"{kind}: {_why(proc.stderr)}"


def fms(python: str, job: Path, out: Path) -> str:
    entry = out.parent / "entry"
    entry.mkdir()
    shutil.copy(ROOT / "tuning/container/rank/batch_dump.py", entry / "harness_batch_dump.py")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "SFT_TRAINER_CONFIG_JSON_PATH": str(job),
        "TERMINATION_LOG_FILE": str(out / "termination.log"),
        "PYTHONPATH": str(entry),
        "HARNESS_DUMP_BATCHES": str(out / "batches"),
    }
    proc = subprocess.run(
        [python, "-c", FMS_ENTRY], cwd=out.parent, env=env, capture_output=True, text=True
    )
    if proc.returncode == 0:
        logs = [json.loads(x) for x in (out / "training_logs.jsonl").read_text().splitlines()]
        losses = [x["data"]["value"] for x in logs if x["name"] == "training_loss"]
        return f"trains: {len(losses)} steps, step-1 loss {losses[0]:.4f}"
    log = out / "termination.log"
    why = log.read_text() if log.is_file() else proc.stderr
    return f"fails (exit {proc.returncode}): {_why(why)}"


def same_batches(a: Path, b: Path) -> str:
    """Whether both runs fed the model the same batches (input_ids, labels, attention_mask)."""
    dumps = [p / "batches" / "rank0.jsonl" for p in (a, b)]
    if not all(p.is_file() for p in dumps):
        return "-"
    ours, theirs = ([json.loads(x) for x in p.read_text().splitlines()] for p in dumps)
    for x, y in zip(ours, theirs, strict=False):
        for key in ("input_ids", "labels", "attention_mask"):
            if x[key] != y[key]:
                return f"no: step {x['step']} {key}"
    tokens = sum(sum(map(sum, x["attention_mask"])) for x in ours)
    pairs = [
        (x["num_items_in_batch"], y["num_items_in_batch"])
        for x, y in zip(ours, theirs, strict=False)
    ]
    counts = "".join(
        f"; step {k + 1} num_items_in_batch {a:g} (fms {b:g})"
        for k, (a, b) in enumerate(pairs)
        if a != b
    )
    return f"yes ({len(ours)} steps, {tokens} tokens){counts}" if len(ours) == len(theirs) else "no"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifacts", required=True, help="fms-hf-tuning's tests/artifacts")
    parser.add_argument("--fms-python", help="a Python with fms-hf-tuning 3.2.2 installed")
    parser.add_argument("--out", help="where runs and report.md go (default: a temp dir)")
    args = parser.parse_args(argv)
    artifacts = Path(args.artifacts).resolve()
    root = Path(args.out or tempfile.mkdtemp(prefix="fms-testdata-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    models = build_models(artifacts, root / "models")
    rows = [
        "| file | job (model) | our trainer | fms 3.2.2 | same batches |",
        "| --- | --- | --- | --- | --- |",
    ]
    for i, (name, job, model) in enumerate(RUNS):
        data = artifacts / "testdata" / name
        keys = ", ".join(k for k in job if k != "chat_template") + (
            ", chat_template" if "chat_template" in job else ""
        )
        cells, outs = [], []
        for who in ("ours", "fms") if args.fms_python else ("ours",):
            out = root / f"run{i}-{who}" / "output"
            out.mkdir(parents=True)
            path = _job(out.parent / "job.json", job, artifacts, data, models[model], out)
            cells.append(ours(path, out) if who == "ours" else fms(args.fms_python, path, out))
            outs.append(out)
        cells += [same_batches(*outs)] if args.fms_python else ["not run", "-"]
        rows.append(f"| {name} | {keys or 'input/output'} ({model}) | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    report = "\n".join(rows) + "\n"
    (root / "report.md").write_text(report)
    print(f"\n{report}\nwritten to {root / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
