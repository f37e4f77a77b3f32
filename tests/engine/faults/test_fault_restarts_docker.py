"""`make fault` with MAX_RESTARTS=1 on the engine: a crash once, and a kill inside a save, and
the group comes back from the newest complete checkpoint and finishes, its losses those of the
same job run uninterrupted (every kind's run: test_fault_docker.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.engine import leftovers
from support.fault_runs import run_fault
from support.harness import harness
from tuning.harness.commands.fault import LAYOUTS
from tuning.harness.faults.kinds import save_kill

# MAX_RESTARTS: crash once, the group comes back from the last checkpoint and finishes.
# HARNESS_IMAGE picks another tag (so a run here does not rebuild an image CI is using).
IMAGE = os.environ.get("HARNESS_IMAGE", "tuning-harness:latest")


def recovered(kind: str, layout: str, tmp_path: Path, steps: int) -> dict:
    """`make fault` with MAX_RESTARTS=1: the group restarted once and finished all its steps."""
    built = harness("image", "--image", IMAGE, runs=tmp_path, timeout=1200)
    assert built.returncode == 0, built.stdout + built.stderr
    rec = run_fault(
        kind,
        layout,
        tmp_path / "fault",
        "--steps",
        str(steps),
        "--max-restarts",
        "1",
        "--image",
        IMAGE,
    )
    assert rec["outcome"] == "recovered" and rec["goal_met"] is True, rec["_out"]
    assert rec["run_status"] == "succeeded" and rec["steps_reached"] == steps
    assert len(rec["restarts"]) == 1, rec["restarts"]
    return rec


@pytest.fixture(scope="module")
def plain_losses(tmp_path_factory):
    """The same job uninterrupted (same seed and steps): (layout, steps) -> {step: loss}. Run
    once per layout and shared by the restart tests below, which all compare with it."""
    done: dict[tuple[str, int], dict[int, float]] = {}

    def losses(layout: str, steps: int) -> dict[int, float]:
        if (layout, steps) not in done:
            runs = tmp_path_factory.mktemp(f"plain-{layout}")
            out = harness(
                "up",
                "--layout",
                layout,
                "--steps",
                str(steps),
                "--image",
                IMAGE,
                runs=runs,
                timeout=400,
            )
            assert out.returncode == 0, out.stdout + out.stderr
            summary = json.loads((runs / "latest" / "summary.json").read_text())
            done[layout, steps] = dict(summary["losses"])
        return done[layout, steps]

    return losses


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.docker
@pytest.mark.fault
@pytest.mark.slow
def test_crash_recovers_with_max_restarts(layout, tmp_path, plain_losses):
    steps = 30  # the demo job saves every 10 steps: checkpoint-10 exists before the crash at 12
    rec = recovered("crash", layout, tmp_path, steps)
    by = "harness" if layout == "per-rank" else "torchrun"
    assert rec["restarts"][0]["by"] == by
    summary = json.loads((tmp_path / "fault" / rec["run_id"] / "summary.json").read_text())
    assert summary["steps"] == steps and len(summary["restarts"]) == 1
    resumed = max(c["step"] for c in rec["checkpoints"] if c["before_fault"] and c["complete"])
    plain = plain_losses(layout, steps)  # the losses after the restart match it
    after = {s: loss for s, loss in summary["losses"] if s > resumed}
    assert len(after) == steps - resumed
    assert all(abs(loss - plain[s]) < 1e-4 for s, loss in after.items()), (after, plain)
    assert leftovers(summary["run_id"]) == []


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.docker
@pytest.mark.fault
@pytest.mark.slow
def test_save_kill_loses_only_the_steps_since_the_newest_complete_checkpoint(
    layout, tmp_path, plain_losses
):
    """Issue 23: a rank SIGKILLed while checkpoint-20 is being written. The restarted group
    (MAX_RESTARTS=1) meets no torn checkpoint: it resumes from checkpoint-10 and follows the
    unfaulted run's losses."""
    steps = 30
    rec = recovered("save-kill", layout, tmp_path, steps)
    save = rec["save"]
    # The kill landed inside the save: weights written, optimizer and trainer state not yet.
    assert (save["checkpoint"], save["step"]) == ("tmp-checkpoint-20", 20), save
    names = {Path(f).name for f in save["files"]}
    assert "model.safetensors" in names and not names & {"trainer_state.json", "optimizer.pt"}
    (moved,) = save["moved_aside"]
    assert moved.startswith("torn-tmp-checkpoint-20-"), moved
    assert (save["resumed_from_step"], save["steps_lost"]) == (10, 10)
    assert [(c["name"], c["complete"]) for c in rec["checkpoints"]] == [
        ("checkpoint-10", True),
        ("checkpoint-20", True),
        ("checkpoint-30", True),
    ]
    md = rec["_md"]
    assert "while `tmp-checkpoint-20` was being written; files there at the kill: " in md
    assert f"- moved aside before the restart: {moved}; resumed from step 10, 10 step(s) lost" in md
    assert f"- on a cluster: {save_kill.CLUSTER}" in md.splitlines()
    summary = json.loads((tmp_path / "fault" / rec["run_id"] / "summary.json").read_text())
    assert summary["torn_checkpoints"] == [moved] and summary["steps"] == steps
    plain = plain_losses(layout, steps)
    after = {s: loss for s, loss in summary["losses"] if s > 10}
    assert sorted(after) == list(range(11, steps + 1))
    assert all(abs(loss - plain[s]) < 1e-5 for s, loss in after.items()), (after, plain)
    assert leftovers(summary["run_id"]) == []
