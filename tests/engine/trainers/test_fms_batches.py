"""Parity with fms-hf-tuning 3.2.2, taken from fms's own run: the same job (model, data, seed,
config) trained by `TRAINER=fms` and by our trainer, through the harness in one layout (single,
2 CPU ranks, a few steps), with HARNESS_DUMP_BATCHES=1: every rank dumps each batch its HF
Trainer feeds the model (tuning/rank/batch_dump.py, mounted beside the rank recorder for fms). The
two dumps must be equal token for token: input_ids, labels and attention_mask, rank by rank,
step by step; so must the losses of step 1 (fms's training_logs.jsonl and ours).

One case per data format fms reads and we take: JSON Lines with a byte-order mark and CRLF, a
JSON array (the twitter shape: formatter and response templates), a directory of two Parquet
files (a text field and a response template), an Arrow stream, pre-tokenized records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import harness, write_table
from tokenizer_models import portable, variant

from tuning.demo_data import write as write_demo
from tuning.sft.chat import IGNORE_INDEX

pytestmark = pytest.mark.docker
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


def demo_rows(tmp_path: Path, n: int = 16) -> list[dict]:
    path = write_demo(tmp_path / "demo-source.jsonl", n=n, seed=0)
    return [json.loads(line) for line in path.read_text().splitlines()]


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
