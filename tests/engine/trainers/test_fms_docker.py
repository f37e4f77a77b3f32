"""fms-hf-tuning 3.2.2 itself in containers (TRAINER=fms), and foreign images in general: both
layouts train fms on 2 CPU ranks from `make up`, a fault run on it is recorded, a user's own
image and entry run without the preset, and a missing own image is refused before anything
starts (the static tests: unit/trainers/test_fms.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.engine import leftovers
from support.paths import ROOT
from tuning.harness.flags import trainers

STEPS = 12
FMS_JOB = ROOT / "configs/jobs/fms-demo.json"


def make(target: str, runs_dir: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            target,
            "TRAINER=fms",
            "GPUS=0",
            "NPROC=2",
            f"RUNS={runs_dir}",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return out, (runs_dir / "latest").resolve()


@pytest.fixture(scope="module")
def fms_runs(fms_image, tmp_path_factory) -> dict[str, tuple]:
    return {
        layout: make(
            "up", tmp_path_factory.mktemp(f"fms-{layout}"), f"LAYOUT={layout}", f"STEPS={STEPS}"
        )
        for layout in ("single", "per-rank")
    }


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["single", "per-rank"])
def test_make_up_trains_fms_itself(fms_runs, layout):
    out, run = fms_runs[layout]
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["layout"] == layout
    assert summary["trainer"] == {"image": trainers.FMS_IMAGE, "entry": "tuning.sft_trainer"}
    # Each rank joined a process group of 2 (the recorder, from init_process_group): a silent
    # single-process run would show 1 here, or no line at all.
    assert [r["world_size_seen"] for r in summary["ranks"]] == [2, 2]
    assert [r["exit_code"] for r in summary["ranks"]] == [0, 0]
    # What the config asked for and what accelerate really set up in each rank: FSDP on the
    # CPU ranks too, through the mounted fsdp_gloo shim (accelerate alone would give MULTI_CPU).
    assert summary["distributed_type_asked"] == "FSDP"
    assert summary["distributed_type_seen"] == {"0": "FSDP", "1": "FSDP"}
    for rank in (0, 1):
        lines = [json.loads(x) for x in (run / f"output/metrics/rank{rank}.jsonl").open()]
        rdzv = [x for x in lines if x.get("name") == "rendezvous"]
        assert rdzv and rdzv[0]["backend"] == "gloo" and rdzv[0]["world_size"] == 2
        assert lines[-1]["event"] == "end" and lines[-1]["status"] == "completed"
        assert not any(x["event"] == "step" for x in lines)  # no step figures of our own
    # The losses are fms's: exactly its training_logs.jsonl, one line per step.
    fms = [json.loads(x) for x in (run / "output/training_logs.jsonl").open()]
    logged = [[x["data"]["step"], x["data"]["value"]] for x in fms if x["name"] == "training_loss"]
    assert summary["losses"] == logged and len(logged) == STEPS
    assert summary["final_loss"] < summary["first_loss"]
    assert summary["tokens_per_s"] > 0 and "num_tokens" in summary["tokens_per_s_source"]
    job = json.loads((run / "job/job.json").read_text())
    assert job["max_steps"] == STEPS and job["training_data_path"].startswith("/opt/harness")
    log = (run / f"logs/{summary['ranks'][0]['node']}.log").read_text()
    assert "-m harness_rank" in log  # our launcher, in fms's image
    assert f"rank0 step {STEPS}/{STEPS}" in out.stdout
    assert not leftovers(summary["run_id"])


@pytest.mark.docker
@pytest.mark.slow
def test_fault_on_fms_is_recorded(fms_image, tmp_path):
    out, run = make(
        "fault", tmp_path, "FAULT=kill", "LAYOUT=per-rank", "RANK=1", "AT_STEP=3", "STEPS=200"
    )
    assert (run / "fault.json").is_file(), f"exit {out.returncode}:\n{out.stdout}{out.stderr}"
    record = json.loads((run / "fault.json").read_text())
    assert record["status"] == "done", out.stdout + out.stderr
    assert record["trainer"]["entry"] == "tuning.sft_trainer" and "rank 0" in record["steps_note"]
    assert record["injected_step"] >= 3 and "docker kill" in record["how"]
    ranks = {r["rank"]: r for r in record["ranks"]}
    assert ranks[1]["exit_code"] == 137
    assert ranks[0]["exit_code"] not in (None, 0)  # the survivor failed, it did not hang
    assert (run / "fault.md").is_file()
    assert not leftovers(record["run_id"])


@pytest.mark.docker
@pytest.mark.slow
def test_own_image_and_entry_without_the_preset(fms_image, tmp_path):
    """IMAGE=... ENTRY=... (the general path; fms's image stands in for a user's image)."""
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "up",
            f"IMAGE={fms_image}",
            "ENTRY=tuning.sft_trainer",
            f"JOB={FMS_JOB}",
            "LAYOUT=per-rank",
            "GPUS=0",
            "NPROC=2",
            "STEPS=4",
            f"RUNS={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((tmp_path / "latest/summary.json").read_text())
    assert summary["trainer"]["image"] == fms_image and summary["steps"] == 4
    assert [r["world_size_seen"] for r in summary["ranks"]] == [2, 2]


@pytest.mark.docker
def test_a_missing_own_image_is_refused_before_anything_starts(tmp_path):
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "up",
            "IMAGE=no-such-image:1",
            "ENTRY=my.trainer",
            f"JOB={FMS_JOB}",
            "GPUS=0",
            f"RUNS={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "IMAGE=no-such-image:1 is not on this engine and nothing is pulled" in out.stderr
    assert not list(tmp_path.iterdir())  # no run was created: nothing started
