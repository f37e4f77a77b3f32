"""Data files written for a test: JSON Lines rows, and tables as Parquet or an Arrow stream."""

from __future__ import annotations

import json
from pathlib import Path


def write_jsonl(tmp_path: Path, rows: list, name: str = "d.jsonl") -> Path:
    """Each row a line: a dict as JSON, a str as it is (a broken line, say)."""
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def write_table(path: Path, rows: list[dict]) -> Path:
    """rows as Parquet, or as an Arrow stream (what datasets' save_to_disk writes), by suffix."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows)
    if path.suffix == ".parquet":
        pq.write_table(table, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    return path
