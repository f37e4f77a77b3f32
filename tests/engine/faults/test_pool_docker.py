"""A small part of the scored pool on the engine (`make pool PICK=...`, commands/pool.py): one
death, one hang and one desync, each a real `make fault` of 4 CPU ranks, its verdict judged from
what the ranks showed and scored against what was injected. One pool run, read by each test."""

from __future__ import annotations

import json
import subprocess

import pytest

from support.paths import ROOT
from tuning.harness.faults import pool_list

pytestmark = [pytest.mark.docker, pytest.mark.fault]

# by number in the fixed pool (make pool DRY_RUN=1): crash rank 0 (single), pause rank 3
# (per-rank), skip-collective rank 0 (single)
PICK = {"died": 3, "stopped or frozen": 10, "desync": 21}


@pytest.fixture(scope="module")
def pool(tmp_path_factory, harness_image):
    runs = tmp_path_factory.mktemp("pool")
    pick = ",".join(str(n) for n in PICK.values())
    out = subprocess.run(
        ["make", "--no-print-directory", "pool", f"PICK={pick}", f"RUNS={runs}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    record = json.loads((runs / "pool" / "pool.json").read_text())
    return out, record, runs


def test_the_picked_runs_are_the_pools_and_each_was_run(pool):
    out, record, _ = pool
    every = pool_list.experiments()
    rows = record["rows"]
    assert [r["n"] for r in rows] == list(PICK.values()), out.stdout + out.stderr
    for row in rows:
        assert (row["kind"], row["rank"]) == (every[row["n"] - 1].kind, every[row["n"] - 1].rank)


@pytest.mark.parametrize("cls", PICK)
def test_each_culprit_is_named_right_and_no_other_rank(pool, cls):
    out, record, runs = pool
    (row,) = [r for r in record["rows"] if r["n"] == PICK[cls]]
    assert row["right"] is True and row["wrong_rank"] is False, (row, out.stdout[-3000:])
    assert row["class"] == cls, row
    said = [
        x
        for x in (runs / row["run_id"] / "fault.md").read_text().splitlines()
        if x.startswith("- **verdict: ")
    ]
    head = said[0].split(" (")[0] if said else ""
    assert head.endswith(f"culprit rank(s): {row['rank']}**"), said


def test_the_pool_exits_0_when_every_culprit_is_right(pool):
    out, record, runs = pool
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert (runs / "pool" / "pool.md").is_file()
