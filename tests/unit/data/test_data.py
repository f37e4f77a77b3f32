"""Data shapes, loss masks, padding, and refusal of bad files (file, line, reason)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from support.data_files import write_jsonl
from support.paths import ROOT
from tuning.container.demo_data import FORMATTER_TEMPLATE, RESPONSE_TEMPLATE, records
from tuning.container.sft.chat import IGNORE_INDEX
from tuning.container.sft.collator import Collator
from tuning.container.sft.data import (
    load_examples,
    read_records,
    tokenize_example,
    tokenize_examples,
)
from tuning.container.sft.files import DataError

GOOD = {"input": "a", "output": "b"}


def _decode_labels(tokenizer, row) -> str:
    return tokenizer.decode([t for t in row["labels"] if t != IGNORE_INDEX])


def test_input_output_masks_the_input(tmp_path, tokenizer):
    path = write_jsonl(
        tmp_path, [{"input": "### Input: cat dog\n\n## Label:", "output": " red blue"}]
    )
    (example,) = load_examples(path)
    row = tokenize_example(example, tokenizer, 64)
    prompt_len = len(tokenizer(example.prompt)["input_ids"])
    assert row["labels"][:prompt_len] == [IGNORE_INDEX] * prompt_len
    assert all(t != IGNORE_INDEX for t in row["labels"][prompt_len:])
    assert row["input_ids"][-1] == tokenizer.eos_token_id == row["labels"][-1]
    assert _decode_labels(tokenizer, row) == " red blue</s>"
    assert row["index"] == 0


def test_text_field_with_response_template(tmp_path, tokenizer):
    text = "### Input: owl hen\n\n## Label: gold jade"
    path = write_jsonl(tmp_path, [{"text": "### Input: fox\n\n## Label: green"}, {"text": text}])
    examples = load_examples(path, dataset_text_field="text", response_template=RESPONSE_TEMPLATE)
    row = tokenize_example(examples[1], tokenizer, 64, RESPONSE_TEMPLATE)
    assert row["index"] == 1
    assert _decode_labels(tokenizer, row) == " gold jade</s>"
    masked = [
        t for t, lab in zip(row["input_ids"], row["labels"], strict=True) if lab == IGNORE_INDEX
    ]
    assert tokenizer.decode(masked) == "### Input: owl hen\n\n## Label:"


def test_text_field_without_template_trains_on_everything(tmp_path, tokenizer):
    path = write_jsonl(tmp_path, [{"text": "cat dog fox"}])
    (example,) = load_examples(path, dataset_text_field="text")
    row = tokenize_example(example, tokenizer, 64)
    assert IGNORE_INDEX not in row["labels"] and row["labels"] == row["input_ids"]


def test_data_formatter_template(tmp_path, tokenizer):
    path = write_jsonl(tmp_path, [{"input": "cat eel", "output": "red rust", "other": 1}])
    (example,) = load_examples(
        path, data_formatter_template=FORMATTER_TEMPLATE, response_template=RESPONSE_TEMPLATE
    )
    assert example.text == "### Input: cat eel\n\n## Label: red rust"
    row = tokenize_example(example, tokenizer, 64, RESPONSE_TEMPLATE)
    assert _decode_labels(tokenizer, row) == " red rust</s>"


def test_truncation(tmp_path, tokenizer):
    path = write_jsonl(tmp_path, records(1))
    (example,) = load_examples(path)
    row = tokenize_example(example, tokenizer, 5)
    assert len(row["input_ids"]) == len(row["labels"]) == 5


def test_collator_pads_with_minus_100_and_keeps_indices(tmp_path, tokenizer):
    path = write_jsonl(
        tmp_path, [{"input": "### Input: cat\n\n## Label:", "output": " red"}, *records(3)]
    )
    ds = tokenize_examples(load_examples(path), tokenizer, 64)
    features = [ds[i] for i in range(len(ds))]
    batch = Collator(tokenizer.pad_token_id)(features)
    assert set(batch) == {"input_ids", "attention_mask", "labels", "sample_index"}
    assert batch["sample_index"].tolist() == [0, 1, 2, 3]
    lengths = [len(f["input_ids"]) for f in features]
    assert batch["input_ids"].shape == (4, max(lengths))
    for row, n in enumerate(lengths):
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (max(lengths) - n)
        assert batch["labels"][row, n:].eq(IGNORE_INDEX).all()
        assert batch["input_ids"][row, n:].eq(tokenizer.pad_token_id).all()
        assert batch["labels"][row, :n].tolist() == features[row]["labels"]
    # every label that is not -100 is a real (attended) response token
    assert (batch["labels"].ne(IGNORE_INDEX) <= batch["attention_mask"].bool()).all()


def test_padding_and_prompt_do_not_change_the_loss(tiny_model, tokenizer, tmp_path):
    """The model's loss on a padded batch equals its loss on the unpadded response tokens alone."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    path = write_jsonl(tmp_path, records(2, seed=3))
    ds = tokenize_examples(load_examples(path), tokenizer, 64)
    batch = Collator(tokenizer.pad_token_id)([ds[0], ds[1]])
    batch.pop("sample_index")
    with torch.no_grad():
        padded = model(**batch).loss
        per_token = []
        for i in range(2):
            ids = torch.tensor([ds[i]["input_ids"]])
            labels = torch.tensor([ds[i]["labels"]])
            logits = model(input_ids=ids).logits[0, :-1]
            target = labels[0, 1:]
            keep = target.ne(IGNORE_INDEX)
            per_token.append(
                torch.nn.functional.cross_entropy(logits[keep], target[keep], reduction="none")
            )
        expected = torch.cat(per_token).mean()
    assert torch.allclose(padded, expected, atol=1e-5)


@pytest.mark.parametrize(
    "lines, line_no, reason",
    [
        ([GOOD, '{"input": "a", "output": ', GOOD], 2, "malformed JSON"),
        ([GOOD, GOOD, "[1, 2]"], 3, "JSON object"),
        ([GOOD, {"input": "a"}], 2, "missing field 'output'"),
        ([{"input": "a", "output": ["b"]}], 1, "must be a string"),
    ],
)
def test_bad_files_name_file_line_and_reason(tmp_path, lines, line_no, reason):
    path = write_jsonl(tmp_path, lines)
    with pytest.raises(DataError) as err:
        load_examples(path)
    message = str(err.value)
    assert f"{path}:{line_no}:" in message and reason in message


def test_empty_file_refused(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n  \n")
    with pytest.raises(DataError, match="empty data file") as err:
        read_records(path)
    assert str(path) in str(err.value)


def test_missing_template_field_and_template_not_found(tmp_path):
    path = write_jsonl(tmp_path, [{"input": "a", "output": "b"}, {"input": "a", "answer": "b"}])
    with pytest.raises(DataError, match=r":2: missing field 'output'"):
        load_examples(
            path, data_formatter_template=FORMATTER_TEMPLATE, response_template="## Label:"
        )
    path = write_jsonl(tmp_path, [{"text": "## Label: x"}, {"text": "no template here"}], "t.jsonl")
    with pytest.raises(DataError, match=r"t.jsonl:2: response_template"):
        load_examples(path, dataset_text_field="text", response_template="## Label:")
    with pytest.raises(DataError, match=r"t.jsonl:1: missing field 'body'"):
        load_examples(path, dataset_text_field="body")


def test_missing_file_refused(tmp_path):
    with pytest.raises(DataError, match="cannot read"):
        read_records(tmp_path / "nope.jsonl")


def test_cli_refuses_bad_data_before_training(tmp_path, tiny_model):
    path = write_jsonl(tmp_path, [{"input": "a", "output": "b"}] * 3 + ["{oops"])
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuning.sft_trainer",
            "--model_name_or_path",
            str(tiny_model),
            "--training_data_path",
            str(path),
            "--output_dir",
            str(out),
            "--max_steps",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"{path}:4: malformed JSON" in proc.stderr and "Traceback" not in proc.stderr
    events = [json.loads(x) for x in (out / "metrics" / "rank0.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "end" and events[-1]["status"] == "refused"
    assert not any(e["event"] == "step" for e in events)


def test_demo_data_is_deterministic_and_in_vocab(tmp_path, tokenizer):
    a = write_jsonl(tmp_path, records(50, seed=1), "a.jsonl").read_text()
    b = write_jsonl(tmp_path, records(50, seed=1), "b.jsonl").read_text()
    assert a == b
    assert a != write_jsonl(tmp_path, records(50, seed=2), "c.jsonl").read_text()
    ids = tokenizer(a)["input_ids"]
    assert tokenizer.unk_token_id not in ids


def test_json_array_and_template_forms(tmp_path, tokenizer):
    rows = [{"Tweet text": "cat dog", "text_label": "red"}, {"Tweet text": "owl", "text_label": 3}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(rows, indent=2))
    legacy = "### Text: {{Tweet text}}\n\n## Label: {{text_label}}"
    jinja = "### Text: {{ element['Tweet text'] }}\n\n## Label: {{text_label}}"
    for template in (legacy, jinja):
        a, b = load_examples(path, None, RESPONSE_TEMPLATE, template)
        assert a.text == "### Text: cat dog\n\n## Label: red" and b.line == 6
        assert b.text == "### Text: owl\n\n## Label: 3"
    path.write_text('[{"input": "a", "output": "b"},\n 7]')
    with pytest.raises(DataError, match=r"t.json:2: expected a JSON object"):
        load_examples(path)
