"""The readers at scale (tuning/container/sft/records.py): JSON Lines split as datasets splits them,
a JSON array read once through, tables read by pyarrow as datasets reads them, and errors that still
name the file, the line and the column."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.data_files import write_table
from support.paths import ROOT
from tuning.container.sft import json_records, records
from tuning.container.sft.data import load_examples
from tuning.container.sft.files import DataError
from tuning.container.sft.records import read_path

GOOD = {"input": "a", "output": "b"}


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085"])
def test_json_lines_split_on_newline_only(tmp_path, char):
    """A string may hold U+2028, U+2029 or U+0085 (str.splitlines splits on them; JSON Lines
    and datasets' reader do not)."""
    path = tmp_path / "u.jsonl"
    rows = [{"input": f"one{char}two", "output": "x"}, GOOD]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    assert char in path.read_text()
    got = read_path(path)
    assert [r.data for r in got] == rows and [r.line for r in got] == [1, 2]
    assert load_examples(path)[0].prompt == f"one{char}two"


def test_json_lines_errors_name_line_and_column(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_bytes(
        b'{"input": "a", "output": "b"}\r\n\r\n{"input": "\xe2\x80\xa8", "output": }\r\n'
    )
    with pytest.raises(
        DataError, match=r"e.jsonl:3: malformed JSON: Expecting value \(column 26\)"
    ):
        read_path(path)
    path.write_bytes(b'{"input": "a", "output": "b"}\n{"input": "a"} {"output": "b"}\n')
    with pytest.raises(DataError, match=r"e.jsonl:2: malformed JSON: Extra data \(column 16\)"):
        read_path(path)
    path.write_bytes(b'{"input": "a", "output": "b"}\n{"input": "\xff"}\n')
    with pytest.raises(DataError, match=r"e.jsonl:2: not UTF-8 text \(invalid start byte\)"):
        read_path(path)


def _array(n: int) -> list[dict]:
    return [{"input": f"in {i}", "output": f"out {i}", "n": i} for i in range(n)]


def test_json_array_errors_name_the_records_line(tmp_path):
    rows = _array(300)
    del rows[250]["output"]
    path = tmp_path / "a.json"
    path.write_text(json.dumps(rows, indent=2))
    line = path.read_text().splitlines().index("  {", 250 * 5) + 1  # 5 lines a record
    assert line == 2 + 250 * 5
    with pytest.raises(DataError, match=rf"a.json:{line}: missing field 'output'"):
        load_examples(path)
    text = path.read_text()
    path.write_text(text[: text.index('"n": 7') + 6] + "," + text[text.index('"n": 7') + 6 :])
    with pytest.raises(
        DataError, match=r"a.json:41: malformed JSON: Expecting property name.*\(column 3\)"
    ):
        read_path(path)
    path.write_text('[{"input": "a", "output": "b"}\n\n {"input": "a"}]')
    with pytest.raises(DataError, match=r"a.json:3: malformed JSON array: expected ',' or ']'"):
        read_path(path)
    path.write_text('[{"input": "a", "output": "b"}\n]\n]')
    with pytest.raises(DataError, match=r"a.json:2: text after the end of the JSON array"):
        read_path(path)


class CountingText(str):
    """A text that records the span of every count() asked of it."""

    spans: list

    def count(self, sub, start=0, end=None):
        end = len(self) if end is None else end
        self.spans.append(end - start)
        return super().count(sub, start, end)


def test_a_large_json_array_is_read_once_through(tmp_path, monkeypatch):
    """Linear by structure: each record parsed by one raw_decode call, and the lines counted
    over the text once in all (a count from the start for every record made 50,000 records
    take 51 s)."""
    n = 5000
    text = CountingText(json.dumps(_array(n), indent=2))
    text.spans = []
    calls = []
    raw_decode = json_records.json.JSONDecoder.raw_decode

    def counted(self, s, idx=0):
        calls.append(idx)
        return raw_decode(self, s, idx)

    monkeypatch.setattr(json_records.json.JSONDecoder, "raw_decode", counted)
    got = json_records._read_array(tmp_path / "big.json", text)
    assert [r.data["n"] for r in got] == list(range(n))
    assert [r.line for r in got] == [2 + 5 * i for i in range(n)]
    assert len(calls) == n and calls == sorted(set(calls))  # each record once, in order
    assert sum(text.spans) <= len(text), f"lines counted over {sum(text.spans)} characters"


def test_tables_come_out_as_datasets_gives_them(tmp_path):
    """pyarrow reads Parquet and Arrow here; fms reads them through datasets: the rows must be
    the same Python values (ints stay ints, a struct's missing keys come as datasets gives
    them, nested lists of structs as chat records have them)."""
    datasets = pytest.importorskip("datasets")
    rows = [
        {
            "text": "a\u2028b",
            "n": 1,
            "x": 1.5,
            "ids": [1, 2],
            "flag": True,
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
            "meta": {"k": "v", "m": None},
        },
        {
            "text": None,
            "n": 2,
            "x": 2.0,
            "ids": [],
            "flag": False,
            "messages": [{"role": "user", "content": "q", "name": "u"}],
            "meta": {"k": "w"},
        },
    ]
    for name in ("t.parquet", "t.arrow"):
        path = write_table(tmp_path / name, rows)
        ours = [r.data for r in read_path(path)]
        theirs = datasets.load_dataset(
            path.suffix[1:],
            data_files=[str(path)],
            split="train",
            cache_dir=str(tmp_path / "cache"),
        ).to_list()
        assert ours == theirs
        assert [type(v) for v in ours[1].values()] == [type(v) for v in theirs[1].values()]


def test_tables_read_in_batches_keep_their_row_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "BATCH_ROWS", 3)
    rows = [{"input": f"in {i}", "output": "o"} for i in range(10)]
    rows[7] = {"input": "in 7", "output": None}
    path = write_table(tmp_path / "b.parquet", rows)
    assert [r.data["input"] for r in read_path(path)] == [r["input"] for r in rows]
    with pytest.raises(DataError, match=r"b.parquet row 8: field 'output' must be a string"):
        load_examples(path)


def test_host_check_reads_every_row_of_a_table_without_datasets(tmp_path):
    """The host has pyarrow and no datasets: a Parquet file's rows are checked there too, so a
    bad row stops the run before anything starts."""
    check = (
        "import sys; sys.modules['datasets'] = None  # the host's environment: no datasets\n"
        "from tuning.container.sft.config import SFTConfig\n"
        "from tuning.harness.checks.preflight import check_data\n"
        "check_data(sys.argv[1], SFTConfig()); print('checked')\n"
    )
    good = write_table(tmp_path / "g.parquet", [GOOD, GOOD, {"input": "c", "output": "d"}])
    bad = write_table(tmp_path / "h.parquet", [GOOD, GOOD, {"input": "c", "output": None}])
    for path, said in ((good, "checked"), (bad, "h.parquet row 3: field 'output' must be a")):
        out = subprocess.run(
            [sys.executable, "-c", check, str(path)], cwd=ROOT, text=True, capture_output=True
        )
        assert said in out.stdout + out.stderr and "note:" not in out.stdout, out.stderr[-2000:]


def test_an_arrow_file_with_broken_text_is_refused(tmp_path):
    import pyarrow as pa

    offsets = pa.py_buffer((0).to_bytes(4, "little") + (2).to_bytes(4, "little"))
    text = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(b"\xff\xfe")])
    path = tmp_path / "broken.arrow"
    table = pa.table({"text": text})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    with pytest.raises(DataError, match=r"broken.arrow: cannot read as arrow: .*UTF8"):
        read_path(path)
