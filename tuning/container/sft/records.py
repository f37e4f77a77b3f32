"""A data path read into records, as fms-hf-tuning 3.2.2 reads it (its tuning/data/
data_processors.py ``_try_load_dataset`` and utils.py ``get_loader_for_filepath``), in time
linear in the file:

- ``.json``/``.jsonl``: JSON Lines or a JSON array of objects. Read here (json_records.py), so a
  malformed file is refused with its line and column; the records are those datasets' json
  builder gives fms. JSON Lines are split on ``\\n`` only (``\\r\\n`` too), as datasets
  (pyarrow) splits them: U+2028, U+2029 and U+0085 inside a string are text. Each line is parsed
  once by ``json``; a JSON array is parsed once, element after element (``raw_decode``), the
  record's line counted on as it goes. A UTF-8 byte-order mark is accepted, as datasets accepts
  it. Any other suffix that holds JSON is read the same way (fms would refuse the suffix).
- ``.parquet``, ``.arrow``: pyarrow's own readers, batch by batch, rows as datasets gives them
  (its parquet and arrow builders read them with pyarrow; ``to_list`` is pyarrow's
  ``to_pylist``). The host reads them too: pyarrow is a host dependency, datasets is not.
- ``.txt``/``.md`` (one ``text`` record a line): through datasets' text builder, as fms.
- a directory: datasets.load_dataset_builder picks its files and format, as fms's
  ``load_dataset(directory)`` does; its ``train`` split is read, file by file, as above.

Each record comes with ``where`` (``file:line`` for JSON, ``file row N`` for tables), for errors.
``datasets`` is imported only for what needs it (text files and directories).
"""

from __future__ import annotations

import gc
import importlib.util
import tempfile
from contextlib import contextmanager
from pathlib import Path

from tuning.container.sft.files import DataError, Record
from tuning.container.sft.json_records import ACCEPTED, read_json

BUILDERS = {".parquet": "parquet", ".arrow": "arrow", ".txt": "text", ".md": "text"}
BATCH_ROWS = 65536  # table rows turned into Python at a time


@contextmanager
def gc_paused():
    """Python's cyclic collector off while records are built: they hold no cycles, and its
    full passes over every live record, run as their number grows, cost 1.5x per record at a
    million records. Back on (if it was) afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


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


def _table_rows(path: Path, builder: str):
    """A Parquet or Arrow file's rows, batch by batch, read as datasets' builders read them
    (an Arrow stream, else the Arrow IPC file format)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if builder == "parquet":
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
            yield from batch.to_pylist()
        return
    with pa.memory_map(str(path)) as source:
        try:
            batches = pa.ipc.open_stream(source)
        except pa.ArrowInvalid:  # not a stream: the IPC file format
            reader = pa.ipc.open_file(source)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        for batch in batches:
            batch.validate(full=True)  # mapped, not decoded: checked as datasets checks it
            yield from batch.to_pylist()


def _text_rows(path: Path) -> list[dict]:
    """A text file through datasets' own builder (its way of splitting lines), as fms."""
    datasets = _datasets(path)
    with tempfile.TemporaryDirectory(prefix="tuning-data-") as cache:
        ds = datasets.load_dataset("text", data_files=[str(path)], split="train", cache_dir=cache)
        return ds.to_list()


def read_table(path: Path, builder: str) -> list[Record]:
    """A Parquet, Arrow or text file, its rows as datasets gives them to fms."""
    try:
        rows = _text_rows(path) if builder == "text" else _table_rows(path, builder)
        return [Record(f"{path} row {n}", n, row) for n, row in enumerate(rows, start=1)]
    except DataError:
        raise
    except Exception as exc:  # pyarrow's reasons, and datasets' wrapping of them
        reason = f"{exc}; {exc.__cause__}" if exc.__cause__ else str(exc)
        raise DataError(f"{path}: cannot read as {builder}: {reason}") from None


def directory_files(path: Path) -> tuple[str, list[Path]]:
    """The builder and the files of a directory's train split, as datasets resolves them for
    fms's load_dataset(directory): by file names (train*, test*, ...) and the commonest format."""
    datasets = _datasets(path)
    with tempfile.TemporaryDirectory(prefix="tuning-data-") as cache:
        try:
            builder = datasets.load_dataset_builder(str(path), cache_dir=cache)
        except Exception as exc:
            raise DataError(
                f"{path}: no data files datasets reads here ({exc}); accepted: {ACCEPTED}"
            ) from None
    splits = dict(builder.config.data_files or {})
    if set(splits) != {"train"}:
        raise DataError(
            f"{path}: datasets splits this directory by file name into"
            f" {sorted(map(str, splits))}; fms would train on 'train' and evaluate on 'test'."
            " Give one split here (a directory of training files only) and validation files as"
            " validation_data_path"
        )
    return builder.name, [Path(f) for f in splits["train"]]


def reader_missing(path: str | Path) -> str | None:
    """The package reading this path takes that this environment lacks (the host has no
    datasets: text files and directories), else None."""
    path = Path(path)
    builder = BUILDERS.get(path.suffix.lower())
    if path.is_dir() or builder == "text":
        needed = "datasets"
    elif builder:
        needed = "pyarrow"
    else:
        return None
    return needed if importlib.util.find_spec(needed) is None else None


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
