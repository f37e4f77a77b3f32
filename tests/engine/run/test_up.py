"""`make up` on a real engine: both layouts train 2 CPU ranks to the end, in real containers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.engine import leftovers
from support.paths import ROOT

pytestmark = [pytest.mark.docker, pytest.mark.slow]
STEPS = 12


def make_up(runs: Path, layout: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict, Path]:
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "up",
            f"LAYOUT={layout}",
            "GPUS=0",
            "NPROC=2",
            f"STEPS={STEPS}",
            "SEED=7",
            f"RUNS={runs}",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    run = (runs / "latest").resolve()
    # The harness's own words first: a run that died before its summary has only those.
    assert (run / "summary.json").is_file(), f"exit {out.returncode}:\n{out.stdout}{out.stderr}"
    return out, json.loads((run / "summary.json").read_text()), run


@pytest.fixture(scope="module")
def trained(harness_image, tmp_path_factory) -> dict[str, tuple]:
    """One `make up` per layout, shared by the tests below."""
    return {
        layout: make_up(tmp_path_factory.mktemp(layout), layout)
        for layout in ("single", "per-rank")
    }


@pytest.mark.parametrize("layout", ["single", "per-rank"])
def test_make_up_trains_to_the_end(trained, layout):
    out, summary, _ = trained[layout]
    assert out.returncode == 0, out.stdout + out.stderr
    assert summary["status"] == "succeeded" and summary["layout"] == layout
    assert summary["world_size"] == 2 and summary["steps"] == STEPS
    assert [r["world_size_seen"] for r in summary["ranks"]] == [2, 2]
    assert [r["exit_code"] for r in summary["ranks"]] == [0, 0]
    # The default on CPU is the FSDP fixture, really sharded: half the model on each rank.
    for r in summary["ranks"]:
        assert r["distributed_type"] == "FSDP" and 2 * r["params_local"] == r["params_total"]
    assert summary["final_loss"] < summary["first_loss"] - 0.5
    for key in ("time_to_first_step_s", "steady_step_s", "tokens_per_s"):
        assert summary[key] > 0
    # Progress was shown as plain lines (not a terminal), one per rank and step.
    assert f"rank1 step {STEPS}/{STEPS}" in out.stdout
    assert not leftovers(summary["run_id"])


def test_per_rank_really_ran_one_container_per_rank(trained):
    _, per_rank, _ = trained["per-rank"]
    containers = {r["rank"]: r["container"] for r in per_rank["ranks"]}
    assert len(set(containers.values())) == 2
    assert containers[0].endswith("-rank0-1") and containers[1].endswith("-rank1-1")
    _, single, _ = trained["single"]
    assert len({r["container"] for r in single["ranks"]}) == 1


def test_run_directory_records_the_run(trained):
    _, summary, run = trained["per-rank"]
    assert run.name == summary["run_id"]
    for name in (
        "compose.yaml",
        "job/job.yaml",
        "job/accelerate.yaml",
        "summary.json",
        "ranks/rank0.launch.json",
        "ranks/rank1.launch.json",
        "logs/rank0.log",
        "logs/rank1.log",
        "output/metrics/rank0.jsonl",
        "output/metrics/rank1.jsonl",
        "output/train_summary.json",
    ):
        assert (run / name).is_file(), name
    launch = json.loads((run / "ranks/rank1.launch.json").read_text())
    assert "--machine_rank" in launch["argv"] and launch["env"]["PET_NODE_RANK"] == "1"
    assert "harness-launch: accelerate launch" in (run / "logs/rank1.log").read_text()
    assert (run.parent / "latest").resolve() == run.resolve()


def test_layout_changes_the_plumbing_not_the_math(trained):
    single = dict(map(tuple, trained["single"][1]["losses"]))
    per_rank = dict(map(tuple, trained["per-rank"][1]["losses"]))
    assert single.keys() == per_rank.keys() and len(single) == STEPS
    for step in single:
        assert abs(single[step] - per_rank[step]) <= 1e-5, (step, single[step], per_rank[step])
