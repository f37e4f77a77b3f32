"""Parity with fms-hf-tuning 3.2.2, taken from fms's own run: the same job (model, data, seed,
config) trained by `TRAINER=fms` and by our trainer, through the harness in one layout (single,
2 CPU ranks, a few steps), with HARNESS_DUMP_BATCHES=1: every rank dumps each batch its HF
Trainer feeds the model (tuning/container/rank/batch_dump.py, mounted beside the rank recorder for
fms). The two dumps must be equal token for token: input_ids, labels and attention_mask, rank by
rank, step by step; so must the losses of step 1 (fms's training_logs.jsonl and ours).

One case per data format fms reads and we take: JSON Lines with a byte-order mark and CRLF, a
JSON array (the twitter shape: formatter and response templates), a directory of two Parquet
files (a text field and a response template), an Arrow stream, pre-tokenized records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.data_files import write_table
from support.fms_parity import compare, demo_rows, start, train
from support.tokenizer_models import portable, variant
from tuning.container.sft.chat import IGNORE_INDEX

pytestmark = pytest.mark.docker
TWEETS = [  # the shape of fms's tests/artifacts/testdata/json/twitter_complaints_small.json
    {
        "Tweet text": "@HMRCcustomers No this is my first job",
        "ID": 0,
        "Label": 2,
        "text_label": "no complaint",
    },
    {
        "Tweet text": "If I can't get my 3rd pair of @beatsbydre powerbeats to work today I'm "
        "doneski man. Your next @Bose @BoseService",
        "ID": 2,
        "Label": 1,
        "text_label": "complaint",
    },
    {
        "Tweet text": "@EE On Rosneath Arial having good upload and download speeds but terrible "
        "latency 200ms. Why is this.",
        "ID": 3,
        "Label": 1,
        "text_label": "complaint",
    },
    {
        "Tweet text": "Couples wallpaper, so cute. :) #BrothersAtHome",
        "ID": 4,
        "Label": 2,
        "text_label": "no complaint",
    },
    {
        "Tweet text": "@nationalgridus I have no water and the bill is current and paid. Can you "
        "do something about this? ### Label: see",
        "ID": 7,
        "Label": 1,
        "text_label": "complaint",
    },
]
# typed as on a command line: a literal backslash-n, which both unescape
JINJA_TEMPLATE = "### Text: {{element['Tweet text']}} \\n\\n### Label: {{text_label}}"
LEGACY_TEMPLATE = "### Text: {{Tweet text}} \\n\\n### Label: {{text_label}}"  # ours only


@pytest.fixture(scope="module")
def model_dir(tiny_model, tmp_path_factory) -> Path:
    """The tiny model, its tokenizer_config naming a class fms's transformers 4.55 knows (5.x
    writes "TokenizersBackend"); tokenizer.json, and so every token id, is unchanged."""
    return portable(variant(tiny_model, tmp_path_factory.mktemp("fms-model") / "model"))


def jsonl_bom_crlf(tmp_path, tokenizer):
    data = tmp_path / "train.jsonl"
    lines = b"".join(json.dumps(r).encode() + b"\r\n" for r in demo_rows(tmp_path))
    data.write_bytes(b"\xef\xbb\xbf" + lines)
    return data, {}, {}


def json_twitter(tmp_path, tokenizer):
    data = tmp_path / "twitter_complaints_small.json"
    data.write_text(json.dumps([{**r, "ID": r["ID"] + 10 * i} for i in range(3) for r in TWEETS]))
    job = {"response_template": "\\n### Label:", "max_seq_length": 160}
    return (
        data,
        {**job, "data_formatter_template": JINJA_TEMPLATE},
        {**job, "data_formatter_template": LEGACY_TEMPLATE},
    )


def parquet_directory(tmp_path, tokenizer):
    rows = [
        {"text": f"{r['input']} {r['output']}", "id": i} for i, r in enumerate(demo_rows(tmp_path))
    ]
    folder = tmp_path / "data"
    folder.mkdir()
    write_table(folder / "part-b.parquet", rows[8:])
    write_table(folder / "part-a.parquet", rows[:8])
    job = {"dataset_text_field": "text", "response_template": "\n\n## Label:"}
    return folder, job, job


def arrow_stream(tmp_path, tokenizer):
    return write_table(tmp_path / "train.arrow", demo_rows(tmp_path)), {}, {}


def pretokenized(tmp_path, tokenizer):
    rows = []
    for r in demo_rows(tmp_path, 15):  # ids from the tokenizer, the input masked, as a user would
        ids = tokenizer(r["input"] + " " + r["output"])["input_ids"]
        n = len(tokenizer(r["input"])["input_ids"])
        rows.append({"input_ids": ids, "labels": [IGNORE_INDEX] * n + ids[n:]})
    rows.insert(
        1, {"input_ids": list(range(5, 90)), "labels": [IGNORE_INDEX] * 3 + list(range(8, 90))}
    )  # truncated to max_seq_length
    data = tmp_path / "tokens.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data, {}, {}


CASES = [jsonl_bom_crlf, json_twitter, parquet_directory, arrow_stream, pretokenized]


@pytest.mark.parametrize("make", CASES, ids=[c.__name__ for c in CASES])
def test_fms_and_ours_feed_the_model_the_same_batches(
    make, harness_image, fms_image, model_dir, tokenizer, tmp_path
):
    data, fms_job, our_job = make(tmp_path, tokenizer)
    case = make.__name__
    theirs_out = train("fms", case, data, model_dir, fms_job, tmp_path)
    ours_out = train("harness", case, data, model_dir, our_job, tmp_path)
    compare(theirs_out, ours_out, case)


def test_fms_refuses_the_older_placeholder_form(fms_image, model_dir, tokenizer, tmp_path):
    """fms 3.2.2 renders templates with Jinja, where {{Tweet text}} is a syntax error: it
    refuses the job before any step; ours fills it to fms's tokens (json_twitter above)."""
    data, _, our_job = json_twitter(tmp_path, tokenizer)
    out, run = start("fms", "legacy-template", data, model_dir, our_job, tmp_path)
    assert out.returncode == 1, f"exit {out.returncode}\n{out.stdout}{out.stderr}"
    log = (run / "logs/trainer.log").read_text()
    assert "jinja template syntax is invalid" in log, log[-4000:]
    assert not (run / "output/batches").exists()  # refused before its first batch
