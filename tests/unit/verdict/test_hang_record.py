"""docs/stacks.md's table of how soon hangs are named and ended is its record's
(docs/records/hang_times.json, written by benchmarks/hang_times.py), and the record shows what
the page says: every run that hung ended by itself within its job's timeout + 60 s, nothing left
running, its culprit named; the median from stall to verdict at most 15 s."""

from __future__ import annotations

import json
import statistics
import sys

from support.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import hang_times  # noqa: E402

ROWS = json.loads(hang_times.RECORD.read_text())


def test_the_table_is_the_records():
    assert hang_times.docs_section(ROWS) in hang_times.DOCS.read_text()
    assert [r["name"] for r in ROWS] == [name for name, _ in hang_times.RUNS]


def test_the_record_shows_what_the_page_says():
    for r in ROWS:
        if r["command"].startswith("make up"):
            assert r["exit"] != 0, r  # each hang ended, failed, with no one to stop it
        else:  # make fault: the hang detected, or the job failing fast, as each kind expects
            assert r["outcome"] in ("hung (detected)", "failed fast"), r
        if r["timeout_to_end_s"] is not None:
            assert r["timeout_to_end_s"] <= 60, r
        assert "[]" not in r["verdict"] and "None" not in r["verdict"], r
    named = [r["stall_to_verdict_s"] for r in ROWS if r["stall_to_verdict_s"] is not None]
    assert named and statistics.median(named) <= 15, named
