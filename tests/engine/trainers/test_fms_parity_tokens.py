"""Parity with fms-hf-tuning 3.2.2's own run (as test_fms_batches.py: the same job through
the harness with TRAINER=fms and with ours, 2 CPU ranks, every batch dumped and compared token
for token, and step 1's loss) where the tokenizer or the records are what users bring:

- a tokenizer without a pad token (Llama 3's shape): both add <PAD>, and the EOS appended to a
  text stays in the labels (pad = eos once masked it out);
- a tokenizer with 4 special tokens past the model's embedding rows, the rows rounded up to a
  multiple of 64, and data that uses those tokens;
- chat records, single-turn (``messages``) and multi-turn (``conversations``), named by
  dataset_conversation_field, through a chat template given in the job, with
  instruction_template and response_template.

The chat files are generated here in the shape of fms's tests/artifacts/testdata/jsonl
single_turn_chat.jsonl and multi_turn_chat_conversations.jsonl (a system turn, user and
assistant turns, and the fields group, dataset, metadata beside them; one record with tools),
which CI cannot fetch; tests/support/fms_testdata.py runs fms's own files by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.fms_parity import batches, compare, demo_rows, train
from support.tokenizer_models import CHAT_TEMPLATE, CHAT_TOKENS, build_models
from tuning.container.sft.chat import IGNORE_INDEX

pytestmark = pytest.mark.docker
CHAT_JOB = {
    "chat_template": CHAT_TEMPLATE,
    "instruction_template": "<|user|>",
    "response_template": "<|assistant|>",
    "max_seq_length": 128,
}
SYSTEM = "You are a cautious assistant. You carefully follow instructions."


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    made = build_models(tmp_path_factory)
    if ARTIFACTS:
        from support.fms_testdata import build_models as fms_models

        root = tmp_path_factory.mktemp("fms-models")
        made["maykeye"] = fms_models(Path(ARTIFACTS), root)["maykeye"]
    return made


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _turns(row: dict, n: int) -> list[dict]:
    words, colors = row["input"].split(": ")[1].split("\n")[0], row["output"].strip()
    turns = [{"content": SYSTEM, "role": "system"}]
    for i in range(n):
        turns += [
            {"content": f"Rhyme {words}" + " again" * i, "role": "user"},
            {"content": f"Sure: {colors}", "role": "assistant"},
        ]
    return turns


def no_pad_text(tmp_path):
    rows = [{"text": r["input"] + r["output"]} for r in demo_rows(tmp_path)]
    job = {"dataset_text_field": "text", "response_template": "\n\n## Label:"}
    return _jsonl(tmp_path / "text.jsonl", rows), job, job


def added_tokens_x64(tmp_path):
    rows = [
        {"text": f"{CHAT_TOKENS[1]} {r['input']}{r['output']}{CHAT_TOKENS[3]}"}
        for r in demo_rows(tmp_path)
    ]
    job = {
        "dataset_text_field": "text",
        "response_template": "\n\n## Label:",
        "embedding_size_multiple_of": 64,
    }
    return _jsonl(tmp_path / "added.jsonl", rows), job, job


def chat_single_turn(tmp_path):
    meta = {"group": "lab_extension", "dataset": "base/full-extension"}
    rows = [
        {"messages": _turns(r, 1), **meta, "metadata": '{"num_turns": 1}'}
        for r in demo_rows(tmp_path)
    ]
    job = {**CHAT_JOB, "dataset_conversation_field": "messages"}
    return _jsonl(tmp_path / "single_turn_chat.jsonl", rows), job, job


def chat_multi_turn(tmp_path):
    meta = {"group": "lab_extension", "dataset": "base/full-extension"}
    rows = [
        {"conversations": _turns(r, 2), **meta, "metadata": '{"num_turns": 2}'}
        for r in demo_rows(tmp_path)
    ]
    rows[3]["tools"] = [{"name": "payment", "arguments": {"type": "card"}}]
    job = {**CHAT_JOB, "dataset_conversation_field": "conversations", "max_seq_length": 192}
    return _jsonl(tmp_path / "multi_turn_chat.jsonl", rows), job, job


CASES = [
    (no_pad_text, "no_pad"),
    (added_tokens_x64, "added"),
    (chat_single_turn, "added"),
    (chat_multi_turn, "added"),
]
# fms leaves the rows of tokens a tokenizer already had past the model's rows (the added case)
# to transformers' mean_resizing: the mean plus noise of 1e-9 x the covariance, drawn afresh
# each run. fms's own step-1 loss on the same batch then moves by ~2e-5 (5.920576, 5.920561,
# 5.920559 over three seeds); ours, the mean exactly, sits inside that (5.920564).
LOSS_TOL = {"added_tokens_x64": 1e-4}
# By hand, FMS_ARTIFACTS=<fms-hf-tuning>/tests/artifacts adds fms's own chat files, on a tiny
# model with Maykeye/TinyLLama-v0's 32,000 rows and fms's TinyLlama tokenizer (32,004 tokens,
# a Llama class: fms pads on the left); CI has no copy of them.
ARTIFACTS = os.environ.get("FMS_ARTIFACTS")


def fms_file(name: str):
    def make(tmp_path):
        job = {**CHAT_JOB, "dataset_conversation_field": "messages", "max_seq_length": 1024}
        return Path(ARTIFACTS) / "testdata/jsonl" / name, job, job

    make.__name__ = "fms_" + name.removesuffix(".jsonl")
    return make


if ARTIFACTS:
    CASES += [(fms_file(f"{n}_chat.jsonl"), "maykeye") for n in ("single_turn", "multi_turn")]


@pytest.mark.parametrize("make, model", CASES, ids=[c.__name__ for c, _ in CASES])
def test_fms_and_ours_feed_the_model_the_same_batches(
    make, model, models, harness_image, fms_image, tmp_path
):
    data, fms_job, our_job = make(tmp_path)
    case = make.__name__
    theirs_out = train("fms", case, data, models[model], fms_job, tmp_path)
    ours_out = train("harness", case, data, models[model], our_job, tmp_path)
    compare(theirs_out, ours_out, case, LOSS_TOL.get(case, 1e-5))
    summary = json.loads((ours_out / "train_summary.json").read_text())["tokenizer"]
    last = set()
    for rank in (0, 1):  # every text ends with the EOS, and the EOS is learned (not -100)
        for batch in batches(ours_out, rank):
            for ids, labels, mask in zip(
                batch["input_ids"], batch["labels"], batch["attention_mask"], strict=True
            ):
                n = max(i for i, m in enumerate(mask) if m)  # padded on either side
                assert labels[n] == ids[n] != IGNORE_INDEX, f"{case}: EOS not learned"
                last.add(ids[n])
    assert len(last) == 1 and summary["ids"].get("pad_token") not in last
    if case == "no_pad_text":  # <PAD> and <unk> added, as fms adds them
        assert summary["set"] == {"unk_token": "<unk>", "pad_token": "<PAD>"}
    if case == "added_tokens_x64":
        assert summary["embedding_rows"] == [352, 384]
