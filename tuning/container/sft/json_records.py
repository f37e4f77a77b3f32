"""JSON data read as fms-hf-tuning 3.2.2 reads it (datasets' json builder): JSON Lines or a JSON
array of objects, in time linear in the file, each record with its line, and a malformed file
refused with its line and column. JSON Lines split on ``\\n`` only, as datasets (pyarrow) splits
them; a UTF-8 byte-order mark accepted as datasets accepts it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tuning.container.sft.files import DataError, Record, read_or_refuse

ACCEPTED = (
    ".json/.jsonl (JSON Lines or a JSON array of objects), .parquet, .arrow, .txt/.md (one text"
    " a line), or a directory of such files"
)
JSON_SUFFIXES = (".json", ".jsonl")
MAGIC = {
    b"PAR1": "a Parquet file (name it *.parquet)",
    b"ARROW1": "an Arrow file (name it *.arrow)",
    b"\xff\xff\xff\xff": "an Arrow stream (name it *.arrow)",
}
BOM = b"\xef\xbb\xbf"
_WS = re.compile(r"[ \t\r\n]*")  # JSON's whitespace
_WS_BYTES = re.compile(rb"[ \t\r\n\x0b\x0c]*")


def _decode(path: Path, parse, line: int | None = None):
    """parse(), or a DataError naming the file and line (`line`, else the error's own)."""
    try:
        return parse()
    except json.JSONDecodeError as exc:
        where = exc.lineno if line is None else line
        raise DataError(f"{path}:{where}: malformed JSON: {exc.msg} (column {exc.colno})") from None


def _object(where: str, record, inside: str = "") -> None:
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object{inside}, got {type(record).__name__}")


class _Lines:
    """The line an offset of a text is on, for offsets that only grow: each character is
    counted once, however many records ask (a count from the start for every record made
    JSON arrays quadratic)."""

    def __init__(self, text: str):
        self.text, self.pos, self.line = text, 0, 1

    def at(self, pos: int) -> int:
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line


def _read_array(path: Path, text: str) -> list[Record]:
    """A JSON array of objects, each with the line its object starts on."""
    decoder = json.JSONDecoder()
    lines, records = _Lines(text), []
    pos = _WS.match(text, text.index("[") + 1).end()
    if text.startswith("]", pos):
        return records
    while True:
        record, end = _decode(path, lambda at=pos: decoder.raw_decode(text, at))
        line = lines.at(pos)
        where = f"{path}:{line}"
        _object(where, record, " in the array")
        records.append(Record(where, line, record))
        pos = _WS.match(text, end).end()
        if text.startswith(",", pos):
            pos = _WS.match(text, pos + 1).end()
            continue
        if text.startswith("]", pos):
            if _WS.match(text, pos + 1).end() != len(text):
                raise DataError(f"{path}:{lines.at(pos)}: text after the end of the JSON array")
            return records
        raise DataError(f"{path}:{lines.at(pos)}: malformed JSON array: expected ',' or ']'")


def _read_lines(path: Path, text: str) -> list[Record]:
    """JSON Lines, split on "\\n" alone (a "\\r" before it is JSON whitespace), as datasets'
    reader splits them: U+2028, U+2029 and U+0085 are text (str.splitlines split on them).
    Each line parsed on its own, so an error names its line and column."""
    records, number, start, size = [], 1, 0, len(text)
    while start < size:
        end = text.find("\n", start)
        end = size if end < 0 else end
        line = text[start:end]
        if line.strip():
            where = f"{path}:{number}"
            record = _decode(path, lambda line=line: json.loads(line), number)
            _object(where, record)
            records.append(Record(where, number, record))
        start, number = end + 1, number + 1
    return records


def _not_ours(path: Path, raw: bytes) -> DataError:
    found = next((what for magic, what in MAGIC.items() if raw.startswith(magic)), None)
    found = found or f"content starting {raw.lstrip()[:12]!r}"
    return DataError(
        f"{path}: not a data file we read (suffix {path.suffix!r}, {found}); accepted: {ACCEPTED}"
    )


def read_json(path: Path) -> list[Record]:
    """JSON Lines or a JSON array, refused with the file, line and column of what is wrong."""
    raw = read_or_refuse(path, lambda why: DataError(f"{path}: cannot read data file: {why}"), True)
    if any(raw.startswith(m) for m in MAGIC):
        raise _not_ours(path, raw)
    start = len(BOM) if raw.startswith(BOM) else 0  # datasets (pyarrow) skips it too
    first = _WS_BYTES.match(raw, start).end()
    head = raw[first : first + 1]
    if head and head not in b"[{" and path.suffix.lower() not in JSON_SUFFIXES:
        raise _not_ours(path, raw)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataError(f"{path}:{line}: not UTF-8 text ({exc.reason})") from None
    del raw  # the text alone from here: one copy of the file in memory
    return _read_array(path, text) if head == b"[" else _read_lines(path, text)
