"""Data shapes, loss masks, padding, and refusal of bad files (file, line, reason)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tuning.data import (
    IGNORE_INDEX,
    Collator,
    DataError,
    load_examples,
    read_jsonl,
    tokenize_example,
    tokenize_examples,
)
from tuning.demo_data import FORMATTER_TEMPLATE, RESPONSE_TEMPLATE, records

ROOT = Path(__file__).resolve().parents[1]
GOOD = {"input": "a", "output": "b"}


def _write(tmp_path: Path, rows: list, name: str = "d.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _decode_labels(tokenizer, row) -> str:
    return tokenizer.decode([t for t in row["labels"] if t != IGNORE_INDEX])


def test_input_output_masks_the_input(tmp_path, tokenizer):
    path = _write(tmp_path, [{"input": "### Input: cat dog\n\n## Label:", "output": " red blue"}])
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
    path = _write(tmp_path, [{"text": "### Input: fox\n\n## Label: green"}, {"text": text}])
    examples = load_examples(path, dataset_text_field="text", response_template=RESPONSE_TEMPLATE)
    row = tokenize_example(examples[1], tokenizer, 64, RESPONSE_TEMPLATE)
    assert row["index"] == 1
    assert _decode_labels(tokenizer, row) == " gold jade</s>"
    masked = [
        t for t, lab in zip(row["input_ids"], row["labels"], strict=True) if lab == IGNORE_INDEX
    ]
    assert tokenizer.decode(masked) == "### Input: owl hen\n\n## Label:"


def test_text_field_without_template_trains_on_everything(tmp_path, tokenizer):
    path = _write(tmp_path, [{"text": "cat dog fox"}])
    (example,) = load_examples(path, dataset_text_field="text")
    row = tokenize_example(example, tokenizer, 64)
    assert IGNORE_INDEX not in row["labels"] and row["labels"] == row["input_ids"]


def test_data_formatter_template(tmp_path, tokenizer):
    path = _write(tmp_path, [{"input": "cat eel", "output": "red rust", "other": 1}])
    (example,) = load_examples(
        path, data_formatter_template=FORMATTER_TEMPLATE, response_template=RESPONSE_TEMPLATE
    )
    assert example.text == "### Input: cat eel\n\n## Label: red rust"
    row = tokenize_example(example, tokenizer, 64, RESPONSE_TEMPLATE)
    assert _decode_labels(tokenizer, row) == " red rust</s>"


def test_truncation(tmp_path, tokenizer):
    path = _write(tmp_path, records(1))
    (example,) = load_examples(path)
    row = tokenize_example(example, tokenizer, 5)
    assert len(row["input_ids"]) == len(row["labels"]) == 5


def test_collator_pads_with_minus_100_and_keeps_indices(tmp_path, tokenizer):
    path = _write(
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
    path = _write(tmp_path, records(2, seed=3))
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
)  # fmt: skip
def test_bad_files_name_file_line_and_reason(tmp_path, lines, line_no, reason):
    path = _write(tmp_path, lines)
    with pytest.raises(DataError) as err:
        load_examples(path)
    message = str(err.value)
    assert f"{path}:{line_no}:" in message and reason in message


def test_empty_file_refused(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n  \n")
    with pytest.raises(DataError, match="empty data file") as err:
        read_jsonl(path)
    assert str(path) in str(err.value)


def test_missing_template_field_and_template_not_found(tmp_path):
    path = _write(tmp_path, [{"input": "a", "output": "b"}, {"input": "a", "answer": "b"}])
    with pytest.raises(DataError, match=r":2: missing field 'output'"):
        load_examples(
            path, data_formatter_template=FORMATTER_TEMPLATE, response_template="## Label:"
        )
    path = _write(tmp_path, [{"text": "## Label: x"}, {"text": "no template here"}], "t.jsonl")
    with pytest.raises(DataError, match=r"t.jsonl:2: response_template"):
        load_examples(path, dataset_text_field="text", response_template="## Label:")
    with pytest.raises(DataError, match=r"t.jsonl:1: missing field 'body'"):
        load_examples(path, dataset_text_field="body")


def test_missing_file_refused(tmp_path):
    with pytest.raises(DataError, match="cannot read"):
        read_jsonl(tmp_path / "nope.jsonl")


def test_cli_refuses_bad_data_before_training(tmp_path, tiny_model):
    path = _write(tmp_path, [{"input": "a", "output": "b"}] * 3 + ["{oops"])
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "tuning.sft_trainer", "--model_name_or_path", str(tiny_model),
         "--training_data_path", str(path), "--output_dir", str(out), "--max_steps", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"{path}:4: malformed JSON" in proc.stderr and "Traceback" not in proc.stderr
    events = [json.loads(x) for x in (out / "metrics" / "rank0.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "end" and events[-1]["status"] == "refused"
    assert not any(e["event"] == "step" for e in events)


def test_demo_data_is_deterministic_and_in_vocab(tmp_path, tokenizer):
    a = _write(tmp_path, records(50, seed=1), "a.jsonl").read_text()
    b = _write(tmp_path, records(50, seed=1), "b.jsonl").read_text()
    assert a == b
    assert a != _write(tmp_path, records(50, seed=2), "c.jsonl").read_text()
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


# --- Formats fms 3.2.2 reads (through datasets), and the errors for what matches no shape ----

IO_ROWS = [{"input": "### Input: cat dog\n\n## Label:", "output": " red"},
           {"input": "### Input: owl", "output": "gold"}]  # fmt: skip


def _table(path: Path, rows: list[dict]) -> Path:
    """rows as Parquet, or as an Arrow stream (what datasets' save_to_disk writes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows)
    if path.suffix == ".parquet":
        pq.write_table(table, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    return path


def _pieces(examples) -> list[tuple]:
    return [(e.index, e.prompt, e.response) for e in examples]


EXPECTED = [(0, "### Input: cat dog\n\n## Label:", " red"), (1, "### Input: owl", "gold")]


@pytest.mark.parametrize("name", ["d.parquet", "d.arrow"])
def test_parquet_and_arrow_read_as_json_is(tmp_path, name):
    path = _table(tmp_path / name, IO_ROWS)
    examples = load_examples(path)
    assert _pieces(examples) == EXPECTED
    assert [e.where for e in examples] == [f"{path} row 1", f"{path} row 2"]


def test_arrow_ipc_file_format_too(tmp_path):
    import pyarrow as pa

    table = pa.Table.from_pylist(IO_ROWS)
    path = tmp_path / "f.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    assert _pieces(load_examples(path)) == EXPECTED


def test_directory_of_files_in_name_order(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    _write(folder, IO_ROWS[1:], "b.jsonl")
    _write(folder, IO_ROWS[:1], "a.jsonl")
    assert _pieces(load_examples(folder)) == EXPECTED
    tables = tmp_path / "tables"
    tables.mkdir()
    _table(tables / "1.parquet", IO_ROWS[:1])
    _table(tables / "2.parquet", IO_ROWS[1:])
    assert _pieces(load_examples(tables)) == EXPECTED


def test_directory_with_train_and_test_files_refused(tmp_path):
    _write(tmp_path, IO_ROWS, "train.jsonl")
    _write(tmp_path, IO_ROWS, "test.jsonl")
    with pytest.raises(DataError, match=r"into \['test', 'train'\].*validation_data_path"):
        load_examples(tmp_path)


def test_byte_order_mark_and_crlf(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(json.dumps(r).encode() for r in IO_ROWS))
    assert _pieces(load_examples(path)) == EXPECTED
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(IO_ROWS, indent=1).replace("\n", "\r\n").encode())
    assert _pieces(load_examples(path)) == EXPECTED
    path.write_bytes(b"\xef\xbb\xbf" + b'{"input": "a", "output": }\r\n')
    with pytest.raises(DataError, match=r"bom.jsonl:1: malformed JSON: .* \(column 26\)"):
        load_examples(path)


def test_text_file_is_one_record_a_line(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("### Input: cat\n\n## Label: red\n")
    examples = load_examples(path, dataset_text_field="text")
    assert [e.text for e in examples] == [
        f"{t}<eos_token>" for t in ("### Input: cat", "", "## Label: red")
    ]


def test_pretokenized_records_pass_through_truncated(tmp_path, tokenizer):
    rows = [{"input_ids": [5, 6, 7, 8], "labels": [-100, -100, 7, 8], "other": "x"}]
    for path in (_write(tmp_path, rows), _table(tmp_path / "p.parquet", rows)):
        (example,) = load_examples(path)
        row = tokenize_example(example, tokenizer, 64)
        assert row == {"input_ids": [5, 6, 7, 8], "labels": [-100, -100, 7, 8], "index": 0}
        row = tokenize_example(example, tokenizer, 3)
        assert row["input_ids"] == [5, 6, 7] and row["labels"] == [-100, -100, 7]


@pytest.mark.parametrize(
    "rows, kwargs, message",
    [
        ([{"input_ids": [1, 2]}], {}, r"d.jsonl:1: 'input_ids' without 'labels'.*Add 'labels'"),
        ([{"input_ids": [1], "labels": [1]}], {"dataset_text_field": "text"},
         r"take no dataset_text_field \(fms refuses them too\)"),
        ([{"input_ids": [1, 2], "labels": [1]}], {}, r"d.jsonl:1: 2 input_ids but 1 labels"),
        ([{"input_ids": [1], "labels": [1]}, {"input_ids": ["a"], "labels": [1]}], {},
         r"d.jsonl:2: 'input_ids' must be a list of token ids"),
    ],
)  # fmt: skip
def test_pretokenized_refusals(tmp_path, rows, kwargs, message):
    with pytest.raises(DataError, match=message):
        load_examples(_write(tmp_path, rows), **kwargs)


def test_chat_records_refused_with_what_they_need(tmp_path):
    rows = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    ]
    for path in (_write(tmp_path, rows), _table(tmp_path / "c.parquet", rows)):
        with pytest.raises(DataError) as err:
            load_examples(path)
        message = str(err.value)
        assert "record has ['messages']" in message and "TRAINER=fms" in message
        assert "instruction_template" in message and "missing field 'input'" not in message


def test_record_of_no_shape_names_its_keys_format_and_the_shapes(tmp_path):
    path = _table(tmp_path / "q.parquet", [{"question": "a", "answer": "b"}])
    with pytest.raises(DataError) as err:
        load_examples(path)
    assert str(err.value) == (
        f"{path} row 1: the record matches no shape we train on (a Parquet file; record has"
        " ['answer', 'question']). Accepted: 'input' and 'output' fields (the default); a text"
        " field named by dataset_text_field, with response_template; data_formatter_template"
        " over the record's fields; 'input_ids' and 'labels' (pre-tokenized)"
    )


def test_file_in_no_format_we_read(tmp_path):
    csv = tmp_path / "d.csv"
    csv.write_text("input,output\na,b\n")
    with pytest.raises(DataError, match=r"d.csv: not a data file we read \(suffix '.csv', "
                       r"content starting b'input,output'\); accepted: .json/.jsonl"):  # fmt: skip
        load_examples(csv)
    misnamed = _table(tmp_path / "x.parquet", IO_ROWS).rename(tmp_path / "x.jsonl")
    with pytest.raises(DataError, match=r"x.jsonl: not a data file.*a Parquet file \(name it"):
        load_examples(misnamed)
    broken = tmp_path / "b.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"b.parquet: cannot read as parquet"):
        load_examples(broken)


def test_host_check_of_columns_without_rows(tmp_path):
    """What preflight does where datasets is absent: the schema's columns make a shape."""
    from tuning.records import table_columns
    from tuning.shapes import check_columns

    path = _table(tmp_path / "s.arrow", [{"text": "## Label: x", "n": 1}])
    assert table_columns(path) == ["text", "n"]
    check_columns(path, ["text", "n"], "text", "## Label:")
    with pytest.raises(DataError, match=r"s.arrow \(columns\): missing field 'output'"):
        check_columns(path, ["input", "n"])
    with pytest.raises(DataError, match=r"missing field 'body'"):
        check_columns(path, ["text"], "body")
