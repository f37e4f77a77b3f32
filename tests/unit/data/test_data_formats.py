"""The data formats fms 3.2.2 reads (through datasets: JSON, JSONL, Parquet, Arrow, text,
directories, pretokenized records) and the errors for what matches no shape."""

from __future__ import annotations

import json

import pytest

from support.data_files import write_jsonl, write_table
from tuning.container.sft.data import (
    load_examples,
    tokenize_example,
)
from tuning.container.sft.files import DataError

# --- Formats fms 3.2.2 reads (through datasets), and the errors for what matches no shape ----

IO_ROWS = [
    {"input": "### Input: cat dog\n\n## Label:", "output": " red"},
    {"input": "### Input: owl", "output": "gold"},
]


def _pieces(examples) -> list[tuple]:
    return [(e.index, e.prompt, e.response) for e in examples]


EXPECTED = [(0, "### Input: cat dog\n\n## Label:", " red"), (1, "### Input: owl", "gold")]


@pytest.mark.parametrize("name", ["d.parquet", "d.arrow"])
def test_parquet_and_arrow_read_as_json_is(tmp_path, name):
    path = write_table(tmp_path / name, IO_ROWS)
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
    write_jsonl(folder, IO_ROWS[1:], "b.jsonl")
    write_jsonl(folder, IO_ROWS[:1], "a.jsonl")
    assert _pieces(load_examples(folder)) == EXPECTED
    tables = tmp_path / "tables"
    tables.mkdir()
    write_table(tables / "1.parquet", IO_ROWS[:1])
    write_table(tables / "2.parquet", IO_ROWS[1:])
    assert _pieces(load_examples(tables)) == EXPECTED


def test_directory_with_train_and_test_files_refused(tmp_path):
    write_jsonl(tmp_path, IO_ROWS, "train.jsonl")
    write_jsonl(tmp_path, IO_ROWS, "test.jsonl")
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
    for path in (write_jsonl(tmp_path, rows), write_table(tmp_path / "p.parquet", rows)):
        (example,) = load_examples(path)
        row = tokenize_example(example, tokenizer, 64)
        assert row == {"input_ids": [5, 6, 7, 8], "labels": [-100, -100, 7, 8], "index": 0}
        row = tokenize_example(example, tokenizer, 3)
        assert row["input_ids"] == [5, 6, 7] and row["labels"] == [-100, -100, 7]


@pytest.mark.parametrize(
    "rows, kwargs, message",
    [
        ([{"input_ids": [1, 2]}], {}, r"d.jsonl:1: 'input_ids' without 'labels'.*Add 'labels'"),
        (
            [{"input_ids": [1], "labels": [1]}],
            {"dataset_text_field": "text"},
            r"take no dataset_text_field \(fms refuses them too\)",
        ),
        ([{"input_ids": [1, 2], "labels": [1]}], {}, r"d.jsonl:1: 2 input_ids but 1 labels"),
        (
            [{"input_ids": [1], "labels": [1]}, {"input_ids": ["a"], "labels": [1]}],
            {},
            r"d.jsonl:2: 'input_ids' must be a list of token ids",
        ),
    ],
)
def test_pretokenized_refusals(tmp_path, rows, kwargs, message):
    with pytest.raises(DataError, match=message):
        load_examples(write_jsonl(tmp_path, rows), **kwargs)


def test_chat_records_refused_with_what_they_need(tmp_path):
    rows = [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    ]
    for path in (write_jsonl(tmp_path, rows), write_table(tmp_path / "c.parquet", rows)):
        with pytest.raises(DataError) as err:
            load_examples(path)
        message = str(err.value)
        assert "record has ['messages']" in message and "chat_template" in message
        assert "instruction_template and response_template" in message
        assert "missing field 'input'" not in message


def test_record_of_no_shape_names_its_keys_format_and_the_shapes(tmp_path):
    path = write_table(tmp_path / "q.parquet", [{"question": "a", "answer": "b"}])
    with pytest.raises(DataError) as err:
        load_examples(path)
    assert str(err.value) == (
        f"{path} row 1: the record matches no shape we train on (a Parquet file; record has"
        " ['answer', 'question']). Accepted: 'input' and 'output' fields (the default); a text"
        " field named by dataset_text_field, with response_template; data_formatter_template"
        " over the record's fields; 'input_ids' and 'labels' (pre-tokenized); chat turns"
        " ('messages', or dataset_conversation_field) with instruction_template and"
        " response_template"
    )


def test_file_in_no_format_we_read(tmp_path):
    csv = tmp_path / "d.csv"
    csv.write_text("input,output\na,b\n")
    with pytest.raises(
        DataError,
        match=r"d.csv: not a data file we read \(suffix '.csv', "
        r"content starting b'input,output'\); accepted: .json/.jsonl",
    ):
        load_examples(csv)
    misnamed = write_table(tmp_path / "x.parquet", IO_ROWS).rename(tmp_path / "x.jsonl")
    with pytest.raises(DataError, match=r"x.jsonl: not a data file.*a Parquet file \(name it"):
        load_examples(misnamed)
    broken = tmp_path / "b.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"b.parquet: cannot read as parquet"):
        load_examples(broken)


def test_host_check_of_columns_without_rows(tmp_path):
    """What preflight does where datasets is absent: the schema's columns make a shape."""
    from tuning.container.sft.records import table_columns
    from tuning.container.sft.shapes import check_columns

    path = write_table(tmp_path / "s.arrow", [{"text": "## Label: x", "n": 1}])
    assert table_columns(path) == ["text", "n"]
    check_columns(path, ["text", "n"], dataset_text_field="text", response_template="## Label:")
    with pytest.raises(DataError, match=r"s.arrow \(columns\): missing field 'output'"):
        check_columns(path, ["input", "n"])
    with pytest.raises(DataError, match=r"missing field 'body'"):
        check_columns(path, ["text"], dataset_text_field="body")
