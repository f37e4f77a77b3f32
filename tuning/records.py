"""A data path read into records, as fms-hf-tuning 3.2.2 reads it (its tuning/data/
data_processors.py ``_try_load_dataset`` and utils.py ``get_loader_for_filepath``):

- ``.json``/``.jsonl``: JSON Lines or a JSON array of objects. Read here, so a malformed file is
  refused with its line and column; the records are those datasets' json builder gives fms. A
  UTF-8 byte-order mark and Windows line endings are accepted, as datasets accepts them.
  Any other suffix that holds JSON is read the same way (fms would refuse the suffix).
- ``.parquet``, ``.arrow``, ``.txt``/``.md`` (one ``text`` record a line): through datasets'
  own builders, as fms loads them.
- a directory: datasets.load_dataset_builder picks its files and format, as fms's
  ``load_dataset(directory)`` does; its ``train`` split is read, file by file, as above.

Each record comes with ``where`` (``file:line`` for JSON, ``file row N`` for tables), for errors.
``datasets`` is imported only for what needs it: the host (preflight) reads JSON without it.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import NamedTuple

from tuning.files import read_or_refuse

BUILDERS = {".parquet": "parquet", ".arrow": "arrow", ".txt": "text", ".md": "text"}
JSON_SUFFIXES = (".json", ".jsonl")
ACCEPTED = (
    ".json/.jsonl (JSON Lines or a JSON array of objects), .parquet, .arrow, .txt/.md (one text"
    " a line), or a directory of such files"
)
MAGIC = {b"PAR1": "a Parquet file (name it *.parquet)",
         b"ARROW1": "an Arrow file (name it *.arrow)",
         b"\xff\xff\xff\xff": "an Arrow stream (name it *.arrow)"}  # fmt: skip


class DataError(ValueError):
    """A data file the trainer refuses before training; the message names the file and line."""


class Record(NamedTuple):
    where: str  # "file:line" or "file row N"
    line: int  # the line (JSON) or row (tables) it starts on, from 1
    data: dict


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


def _read_array(path: Path, text: str) -> list[Record]:
    """A JSON array of objects, each with the line its object starts on."""
    decoder = json.JSONDecoder()
    records = []

    def skip(p):
        while p < len(text) and text[p] in " \t\r\n":
            p += 1
        return p

    def line_of(p):
        return text.count("\n", 0, p) + 1

    pos = skip(text.index("[") + 1)
    if pos < len(text) and text[pos] == "]":
        return records
    while True:
        record, end = _decode(path, lambda at=pos: decoder.raw_decode(text, at))
        where = f"{path}:{line_of(pos)}"
        _object(where, record, " in the array")
        records.append(Record(where, line_of(pos), record))
        pos = skip(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip(pos + 1)
            continue
        if pos < len(text) and text[pos] == "]":
            if skip(pos + 1) != len(text):
                raise DataError(f"{path}:{line_of(pos)}: text after the end of the JSON array")
            return records
        raise DataError(f"{path}:{line_of(pos)}: malformed JSON array: expected ',' or ']'")


def _not_ours(path: Path, raw: bytes) -> DataError:
    found = next((what for magic, what in MAGIC.items() if raw.startswith(magic)), None)
    found = found or f"content starting {raw.lstrip()[:12]!r}"
    return DataError(
        f"{path}: not a data file we read (suffix {path.suffix!r}, {found}); accepted: {ACCEPTED}"
    )


def read_json(path: Path) -> list[Record]:
    """JSON Lines or a JSON array, refused with the file, line and column of what is wrong."""
    raw = read_or_refuse(path, lambda why: DataError(f"{path}: cannot read data file: {why}"), True)
    try:
        text = raw.decode("utf-8-sig")  # datasets (pyarrow's reader) skips a byte-order mark too
    except UnicodeDecodeError as exc:
        if any(raw.startswith(m) for m in MAGIC):
            raise _not_ours(path, raw) from None
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not UTF-8 text ({exc.reason})") from None
    head = text.lstrip()[:1]
    if head and head not in "[{" and path.suffix.lower() not in JSON_SUFFIXES:
        raise _not_ours(path, raw)
    if head == "[":
        return _read_array(path, text)
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            where = f"{path}:{number}"
            record = _decode(path, lambda line=line: json.loads(line), number)
            _object(where, record)
            records.append(Record(where, number, record))
    return records


def _datasets(path: Path):
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"{path}: reading it needs the `datasets` package (the train extra; the trainer has it)"
        ) from None
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


def read_table(path: Path, builder: str) -> list[Record]:
    """A Parquet, Arrow or text file through datasets' builder of that name, as fms loads it."""
    datasets = _datasets(path)
    with tempfile.TemporaryDirectory(prefix="tuning-data-") as cache:
        try:
            ds = datasets.load_dataset(builder, data_files=[str(path)], split="train",
                                       cache_dir=cache)  # fmt: skip
            rows = ds.to_list()
        except Exception as exc:  # datasets wraps pyarrow's reasons in its own errors
            reason = f"{exc}; {exc.__cause__}" if exc.__cause__ else str(exc)
            raise DataError(f"{path}: cannot read as {builder}: {reason}") from None
    return [Record(f"{path} row {n}", n, row) for n, row in enumerate(rows, start=1)]


def directory_files(path: Path) -> tuple[str, list[Path]]:
    """The builder and the files of a directory's train split, as datasets resolves them for
    fms's load_dataset(directory): by file names (train*, test*, ...) and the commonest format."""
    datasets = _datasets(path)
    with tempfile.TemporaryDirectory(prefix="tuning-data-") as cache:
        try:
            builder = datasets.load_dataset_builder(str(path), cache_dir=cache)
        except Exception as exc:
            raise DataError(f"{path}: no data files datasets reads here ({exc}); accepted: "
                            f"{ACCEPTED}") from None  # fmt: skip
    splits = dict(builder.config.data_files or {})
    if set(splits) != {"train"}:
        raise DataError(
            f"{path}: datasets splits this directory by file name into"
            f" {sorted(map(str, splits))}; fms would train on 'train' and evaluate on 'test'."
            " Give one split here (a directory of training files only) and validation files as"
            " validation_data_path"
        )
    return builder.name, [Path(f) for f in splits["train"]]


def needs_datasets(path: str | Path) -> bool:
    """Whether reading this path takes datasets (all but JSON files)."""
    path = Path(path)
    return path.is_dir() or path.suffix.lower() in BUILDERS


def table_columns(path: str | Path) -> list[str] | None:
    """A Parquet or Arrow file's column names from its schema alone (pyarrow reads no rows);
    a text file's one column; None for a directory, or where pyarrow is not installed."""
    path = Path(path)
    builder = BUILDERS.get(path.suffix.lower())
    if builder == "text":
        return ["text"]
    try:
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        return None
    try:
        if builder == "parquet":
            return list(pyarrow.parquet.read_schema(path).names)
        if builder == "arrow":
            with pyarrow.memory_map(str(path)) as source:
                try:
                    return list(pyarrow.ipc.open_stream(source).schema.names)
                except pyarrow.ArrowInvalid:  # the IPC file format, not a stream
                    return list(pyarrow.ipc.open_file(source).schema.names)
    except (OSError, pyarrow.ArrowException) as exc:
        raise DataError(f"{path}: cannot read as {builder}: {exc}") from None
    return None


def describe(path: str | Path) -> str:
    """What a data path is, in words, for errors."""
    path = Path(path)
    if path.is_dir():
        return "a directory"
    kinds = {"parquet": "a Parquet file", "arrow": "an Arrow file", "text": "a text file"}
    return kinds.get(BUILDERS.get(path.suffix.lower(), ""), "a JSON file")


def read_path(path: str | Path) -> list[Record]:
    """Every record of a data file or directory, in the order fms reads them."""
    path = Path(path)
    if path.is_dir():
        builder, files = directory_files(path)
        if builder == "json":
            return [r for f in files for r in read_json(f)]
        return [r for f in files for r in read_table(f, builder)]
    builder = BUILDERS.get(path.suffix.lower())
    if builder and path.is_file():
        return read_table(path, builder)
    return read_json(path)
