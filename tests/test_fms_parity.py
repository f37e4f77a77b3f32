"""Parity with fms-hf-tuning 3.2.2: the same job through fms's own data preprocessing (in the
fms image, tests/fms_side/preprocess.py) and ours gives the same input_ids and labels, token
for token, on three shapes: the twitter shape (formatter template + response template), input/
output fields, a text field plus a response template; and on every format fms reads: Parquet and
Arrow files, a directory of two files, pre-tokenized records, a byte-order mark with CRLF.
fms's `tuning` package collides with ours, so its side runs in its own interpreter: the image
`make up TRAINER=fms` runs (built from docker/fms.lock if missing), with no network, this test's
files mounted at their paths."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from conftest import write_table

from tuning.config import parse_args
from tuning.data import IGNORE_INDEX, Collator, load_examples, tokenize_example

ROOT = Path(__file__).resolve().parents[1]
FMS_IMAGE = "tuning-harness-fms:latest"
pytestmark = pytest.mark.docker
FMS_SIDE = ROOT / "tests" / "fms_side" / "preprocess.py"

TWEETS = [  # the shape of fms's tests/artifacts/testdata/json/twitter_complaints_small.json
    {"Tweet text": "@HMRCcustomers No this is my first job", "ID": 0, "Label": 2,
     "text_label": "no complaint"},
    {"Tweet text": "If I can't get my 3rd pair of @beatsbydre powerbeats to work today I'm "
     "doneski man. Your next @Bose @BoseService", "ID": 2, "Label": 1, "text_label": "complaint"},
    {"Tweet text": "@EE On Rosneath Arial having good upload and download speeds but terrible "
     "latency 200ms. Why is this.", "ID": 3, "Label": 1, "text_label": "complaint"},
    {"Tweet text": "Couples wallpaper, so cute. :) #BrothersAtHome", "ID": 4, "Label": 2,
     "text_label": "no complaint"},
    {"Tweet text": "@nationalgridus I have no water and the bill is current and paid. Can you "
     "do something about this? ### Label: see", "ID": 7, "Label": 1, "text_label": "complaint"},
]  # fmt: skip
# typed as on a command line: a literal backslash-n, which fms unescapes
JINJA_TEMPLATE = "### Text: {{element['Tweet text']}} \\n\\n### Label: {{text_label}}"
LEGACY_TEMPLATE = "### Text: {{Tweet text}} \\n\\n### Label: {{text_label}}"
RESPONSE = "\\n### Label:"


@pytest.fixture(scope="module")
def fms_python(tmp_path_factory):
    """Runs tests/fms_side/preprocess.py ARGS in the fms image, in `cwd`: the test's temporary
    files (model, data, outputs) are mounted at the same paths, as this process's user."""
    out = subprocess.run([sys.executable, "-m", "tuning.harness", "image", "--trainer", "fms"],
                         cwd=ROOT, capture_output=True, text=True, timeout=3000)  # fmt: skip
    assert out.returncode == 0, f"the fms image is not available:\n{out.stdout}{out.stderr}"
    base = str(tmp_path_factory.getbasetemp())

    def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
        cmd = ["docker", "run", "--rm", "--network", "none", "--user",
               f"{os.getuid()}:{os.getgid()}", "-v", f"{base}:{base}", "-v",
               f"{FMS_SIDE}:{FMS_SIDE}:ro", "-w", str(cwd), "-e", "HOME=/tmp", "-e",
               "HF_HUB_OFFLINE=1", "-e", "HF_DATASETS_OFFLINE=1", "-e",
               f"HF_DATASETS_CACHE={cwd}/hf-datasets", "--entrypoint", "python", FMS_IMAGE,
               str(FMS_SIDE), *args]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600)

    return run


@pytest.fixture(scope="module")
def model_dir(tiny_model, tmp_path_factory) -> Path:
    """The tiny model, its tokenizer_config naming a class transformers 4.55 knows (5.x writes
    "TokenizersBackend"); tokenizer.json, and so every token id, is unchanged."""
    out = tmp_path_factory.mktemp("fms-model") / "model"
    shutil.copytree(tiny_model, out)
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg))
    return out


def fms_side(fms_python, tmp_path, job: dict | None = None, argv: list[str] | None = None):
    out = tmp_path / "fms.json"
    if job is not None:
        path = tmp_path / "job.json"
        path.write_text(json.dumps(job))
        args = [str(out), "--json", str(path)]
    else:
        args = [str(out), "--", *argv]
    proc = fms_python(args, tmp_path)
    assert proc.returncode == 0, f"fms side failed:\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text())


def our_side(tokenizer, argv=None, job=None, tmp_path=None):
    if job is not None:
        path = tmp_path / "our-job.json"
        path.write_text(json.dumps(job))
        argv = ["--config", str(path)]
    cfg = parse_args(argv, environ={})
    examples = load_examples(cfg.training_data_path, cfg.dataset_text_field,
                             cfg.response_template, cfg.data_formatter_template)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = [tokenize_example(e, tokenizer, cfg.max_seq_length, cfg.response_template)
                for e in examples]  # fmt: skip
    collate = Collator(tokenizer.pad_token_id)
    out = []
    for row in rows:  # through our collator too, one record a batch (as the fms side)
        batch = collate([row])
        out.append({k: batch[k][0].tolist() for k in ("input_ids", "labels")})
    return out


def assert_same(ours: list[dict], fms: dict) -> int:
    """Every record's ids and labels equal; returns the number of tokens compared."""
    theirs = fms["rows"]
    assert len(ours) == len(theirs)
    tokens = 0
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a["input_ids"] == b["input_ids"], f"record {i}: input_ids differ"
        assert a["labels"] == b["labels"], f"record {i}: labels differ"
        assert IGNORE_INDEX in a["labels"], f"record {i}: nothing masked"
        tokens += len(a["input_ids"])
    learnable = [any(x != IGNORE_INDEX for x in r["labels"]) for r in ours]
    assert sum(learnable) >= len(ours) - 1, "the comparison must be mostly on learnable records"
    # records whose template fms's collator could not find are the ones with no label left
    assert fms["not_found"] == learnable.count(False)
    return tokens


def _write(path: Path, rows: list[dict], array: bool) -> Path:
    if array:
        path.write_text(json.dumps(rows, indent=4))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_twitter_shape_formatter_template(fms_python, model_dir, tmp_path, tokenizer):
    """JSON array file, {{element['Tweet text']}} (fms 3.2.2's Jinja form) on the command line
    with a literal \\n; ours also fills {{Tweet text}} (the older form) to the same tokens."""
    data = _write(tmp_path / "twitter_complaints_small.json", TWEETS, array=True)
    common = ["--model_name_or_path", str(model_dir), "--training_data_path", str(data),
              "--output_dir", str(tmp_path / "out"), "--response_template", RESPONSE,
              "--max_seq_length", "160", "--use_flash_attn", "false"]  # fmt: skip
    theirs = fms_side(fms_python, tmp_path, argv=common + ["--data_formatter_template",
                                                           JINJA_TEMPLATE])  # fmt: skip
    assert theirs["collator"] == "DataCollatorForCompletionOnlyLM"
    assert theirs["data_formatter_template"].count("\n") == 2  # fms unescaped it
    for template in (JINJA_TEMPLATE, LEGACY_TEMPLATE):
        ours = our_side(tokenizer, common + ["--data_formatter_template", template])
        tokens = assert_same(ours, theirs)
    assert max(len(r["input_ids"]) for r in theirs["rows"]) > 100
    print(f"twitter shape: {len(ours)} records, {tokens} tokens identical")


def test_input_output_shape(fms_python, model_dir, tmp_path, tokenizer):
    rows = [
        {"input": "### Input: cat dog\n\n## Label:", "output": " red blue"},
        {"input": "### Input: owl", "output": "gold"},  # fms joins these with a space
        {"input": "### Input: fox hen\n", "output": "jade"},
        {"input": "@HMRCcustomers No this is my first job", "output": "no complaint"},
    ]
    data = _write(tmp_path / "io.jsonl", rows, array=False)
    job = {"model_name_or_path": str(model_dir), "training_data_path": str(data),
           "output_dir": str(tmp_path / "out"), "max_seq_length": 64, "use_flash_attn": False,
           "packing": False, "include_tokens_per_second": True, "trackers": ["file_logger"],
           "peft_method": "LORA", "target_modules": ["q_proj", "v_proj"]}  # fmt: skip
    theirs = fms_side(fms_python, tmp_path, job=job)
    assert theirs["collator"] == "DataCollatorForSeq2Seq"
    ours = our_side(tokenizer, job=job, tmp_path=tmp_path)
    tokens = assert_same(ours, theirs)
    print(f"input/output shape: {len(ours)} records, {tokens} tokens identical")


def test_text_field_with_response_template(fms_python, model_dir, tmp_path, tokenizer):
    rows = [{"text": f"### Input: {r['Tweet text']}\n\n## Label: {r['text_label']}",
             "other": r["ID"]} for r in TWEETS]  # fmt: skip
    data = _write(tmp_path / "text.json", rows, array=True)
    job = {"model_name_or_path": str(model_dir), "training_data_path": str(data),
           "output_dir": str(tmp_path / "out"), "max_seq_length": 256, "use_flash_attn": False,
           "dataset_text_field": "text", "response_template": "\n\n## Label:"}  # fmt: skip
    theirs = fms_side(fms_python, tmp_path, job=job)
    assert theirs["collator"] == "DataCollatorForCompletionOnlyLM"
    ours = our_side(tokenizer, job=job, tmp_path=tmp_path)
    tokens = assert_same(ours, theirs)
    print(f"text field shape: {len(ours)} records, {tokens} tokens identical")


def test_fms_refuses_the_older_placeholder_form(fms_python, model_dir, tmp_path):
    """fms 3.2.2 renders templates with Jinja, where {{Tweet text}} is a syntax error: it
    refuses the job; ours fills it (test_twitter_shape_formatter_template)."""
    data = _write(tmp_path / "t.json", TWEETS, array=True)
    out = tmp_path / "fms.json"
    proc = fms_python(
        [str(out), "--", "--model_name_or_path", str(model_dir), "--training_data_path",
         str(data), "--output_dir", str(tmp_path / "o"), "--response_template", RESPONSE,
         "--data_formatter_template", LEGACY_TEMPLATE],
        tmp_path,
    )  # fmt: skip
    assert proc.returncode != 0 and "jinja template syntax is invalid" in proc.stderr


# --- Every format fms reads: Parquet, Arrow, a directory, pre-tokenized, a byte-order mark ----

IO_ROWS = [
    {"input": "### Input: cat dog\n\n## Label:", "output": " red blue"},
    {"input": "### Input: owl", "output": "gold"},
    {"input": "@HMRCcustomers No this is my first job", "output": "no complaint"},
]


def _io_job(model_dir: Path, data: Path, tmp_path: Path) -> dict:
    return {"model_name_or_path": str(model_dir), "training_data_path": str(data),
            "output_dir": str(tmp_path / "out"), "max_seq_length": 64,
            "use_flash_attn": False}  # fmt: skip


def _same(fms_python, tmp_path, tokenizer, job: dict, collator: str) -> int:
    theirs = fms_side(fms_python, tmp_path, job=job)
    assert theirs["collator"] == collator
    return assert_same(our_side(tokenizer, job=job, tmp_path=tmp_path), theirs)


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_twitter_shape_aswrite_table(fms_python, model_dir, tmp_path, tokenizer, suffix):
    data = write_table(tmp_path / f"twitter{suffix}", TWEETS)
    job = {**_io_job(model_dir, data, tmp_path), "max_seq_length": 160,
           "response_template": RESPONSE, "data_formatter_template": JINJA_TEMPLATE}  # fmt: skip
    tokens = _same(fms_python, tmp_path, tokenizer, job, "DataCollatorForCompletionOnlyLM")
    print(f"twitter shape, {suffix}: {tokens} tokens identical")


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_input_output_shape_aswrite_table(fms_python, model_dir, tmp_path, tokenizer, suffix):
    data = write_table(tmp_path / f"io{suffix}", IO_ROWS)
    job = _io_job(model_dir, data, tmp_path)
    tokens = _same(fms_python, tmp_path, tokenizer, job, "DataCollatorForSeq2Seq")
    print(f"input/output shape, {suffix}: {tokens} tokens identical")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_directory_of_two_files(fms_python, model_dir, tmp_path, tokenizer, suffix):
    folder = tmp_path / "data"
    folder.mkdir()
    for name, rows in (("part-b", IO_ROWS[2:]), ("part-a", IO_ROWS[:2])):
        path = folder / f"{name}{suffix}"
        write_table(path, rows) if suffix == ".parquet" else _write(path, rows, array=False)
    job = _io_job(model_dir, folder, tmp_path)
    tokens = _same(fms_python, tmp_path, tokenizer, job, "DataCollatorForSeq2Seq")
    print(f"directory of two {suffix} files: {tokens} tokens identical")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_pretokenized_records(fms_python, model_dir, tmp_path, tokenizer, suffix):
    rows = []
    for r in IO_ROWS:  # ids made by the tokenizer, labels masked over the input, as a user would
        ids = tokenizer(r["input"] + " " + r["output"])["input_ids"]
        n = len(tokenizer(r["input"])["input_ids"])
        rows.append({"input_ids": ids, "labels": [IGNORE_INDEX] * n + ids[n:]})
    rows.append(
        {"input_ids": list(range(5, 90)), "labels": [IGNORE_INDEX] * 3 + list(range(8, 90))}
    )
    path = tmp_path / f"tok{suffix}"
    data = write_table(path, rows) if suffix == ".parquet" else _write(path, rows, array=False)
    job = _io_job(model_dir, data, tmp_path)  # max_seq_length 64 truncates the last record
    tokens = _same(fms_python, tmp_path, tokenizer, job, "DataCollatorForSeq2Seq")
    print(f"pre-tokenized, {suffix}: {tokens} tokens identical")


def test_byte_order_mark_and_crlf(fms_python, model_dir, tmp_path, tokenizer):
    data = tmp_path / "bom.jsonl"
    data.write_bytes(b"\xef\xbb\xbf" + b"".join(json.dumps(r).encode() + b"\r\n" for r in IO_ROWS))
    job = _io_job(model_dir, data, tmp_path)
    tokens = _same(fms_python, tmp_path, tokenizer, job, "DataCollatorForSeq2Seq")
    print(f"byte-order mark, CRLF: {tokens} tokens identical")
