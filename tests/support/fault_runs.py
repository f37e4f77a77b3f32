"""`make fault` runs on the engine, as the fault tests start them and read their record."""

from __future__ import annotations

import json
from pathlib import Path

from support.engine import leftovers
from support.harness import harness

TIMEOUT = 15  # ddp_timeout and RDZV_TIMEOUT of every fault run here (s)


def run_fault(kind: str, layout: str, runs: Path, *extra: str) -> dict:
    """`fault --fault KIND --layout LAYOUT --timeout TIMEOUT EXTRA` with RUNS `runs`: its
    fault.json, with the harness's output (_out) and fault.md (_md) added; nothing of the run
    left on the engine."""
    out = harness(
        "fault",
        "--fault",
        kind,
        "--layout",
        layout,
        "--timeout",
        str(TIMEOUT),
        *extra,
        runs=runs,
        timeout=400,
    )
    record_file = runs / "latest" / "fault.json"
    # The harness's own output first: a run that died early has no record to read.
    assert record_file.is_file(), f"exit {out.returncode}, no fault.json:\n{out.stdout}{out.stderr}"
    record = json.loads(record_file.read_text())
    record["_out"] = out.stdout + out.stderr
    record["_md"] = (runs / "latest" / "fault.md").read_text()
    assert "Traceback" not in out.stderr, out.stderr
    assert record["leftovers"] == [] and leftovers(record["run_id"]) == []
    return record
