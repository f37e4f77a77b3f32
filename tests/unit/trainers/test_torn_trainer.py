"""Torn checkpoints (issue 23) with our trainer for real, on CPU: its saves are renamed whole,
and a newest checkpoint torn the way a kill inside a save leaves it (trainer_state.json and the
RNG state gone, the optimizer cut short; such a kill cannot be timed in a test), or whose files
are cut short, is moved aside and the trainer started again on the same output dir resumes
from the one before, as a MAX_RESTARTS restart or a restarted pod does (the rule, on trees
built by hand: test_torn.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.checkpoints import TORN_NAME, cut
from support.launch import check, launch_env, trainer_args
from support.metrics import step_losses
from support.paths import ROOT
from tuning.container.rank import torn


# --- the real trainer -----------------------------------------------------------------------
def train(model, data, out, *extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuning.sft_trainer", *trainer_args(model, data, out, *extra)],
        cwd=ROOT,
        env=launch_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def tear(ckpt: Path) -> None:
    """What a kill during the HF Trainer's save leaves: the state and RNG files not yet
    written, the optimizer file cut short."""
    (ckpt / "trainer_state.json").unlink()
    for f in ckpt.glob("rng_state*.pth"):
        f.unlink()
    opt = ckpt / "optimizer.pt"
    opt.write_bytes(opt.read_bytes()[: opt.stat().st_size // 2])


@pytest.fixture(scope="module")
def whole_run(tiny_model, demo_data, tmp_path_factory):
    """30 steps, checkpoints 10, 20, 30, one process."""
    out = tmp_path_factory.mktemp("whole") / "out"
    check(train(tiny_model, demo_data, out))
    return out


@pytest.mark.slow
def test_saves_are_renamed_whole(whole_run):
    names = sorted(p.name for p in whole_run.iterdir() if "checkpoint" in p.name)
    assert names == ["checkpoint-10", "checkpoint-20", "checkpoint-30"]  # no staging left
    assert all(torn.missing(p) is None for p in torn.checkpoints(whole_run))
    state = json.loads((whole_run / "checkpoint-30/trainer_state.json").read_text())
    assert state["global_step"] == 30


@pytest.mark.slow
def test_a_torn_newest_checkpoint_is_moved_aside_and_the_run_resumes(
    whole_run, tiny_model, demo_data, tmp_path
):
    # The failure: a trainer that loads the torn checkpoint dies on it.
    out = tmp_path / "out"
    out.mkdir()
    for name in ("checkpoint-10", "checkpoint-20", "checkpoint-30"):
        subprocess.run(["cp", "-a", str(whole_run / name), str(out / name)], check=True)
    tear(out / "checkpoint-30")
    cut = (out / "checkpoint-30/optimizer.pt").stat().st_size
    elsewhere = tmp_path / "elsewhere/checkpoint-30"
    elsewhere.parent.mkdir()
    subprocess.run(["cp", "-a", str(out / "checkpoint-30"), str(elsewhere)], check=True)
    died = train(tiny_model, demo_data, tmp_path / "o2", "--resume_from_checkpoint", str(elsewhere))
    assert died.returncode != 0
    assert "FileNotFoundError" in died.stderr and "trainer_state.json" in died.stderr

    # Started again on the output dir (resume_from_checkpoint unset: the newest, as fms).
    resumed = train(tiny_model, demo_data, out)
    check(resumed)
    (moved,) = torn.moved(out)
    assert TORN_NAME.fullmatch(moved) and moved.startswith("torn-checkpoint-30-")
    assert f"checkpoint-30 is incomplete (no trainer_state.json): moved aside to {moved}" in (
        resumed.stdout
    )
    assert (out / moved / "optimizer.pt").stat().st_size == cut  # kept as it was found
    losses, whole = step_losses(out, 0), step_losses(whole_run, 0)
    assert sorted(losses) == list(range(21, 31))  # from checkpoint-20, the newest complete
    assert all(abs(losses[s] - whole[s]) < 1e-5 for s in losses), (losses, whole)
    assert torn.missing(out / "checkpoint-30") is None  # saved again, whole


@pytest.mark.slow
def test_a_newest_checkpoint_whose_files_are_cut_short_is_moved_aside(
    whole_run, tiny_model, demo_data, tmp_path
):
    """Every file of checkpoint-30 present, its weights and optimizer cut short: before, the
    restart loaded it and died ("PytorchStreamReader failed reading zip archive"); now it is
    set aside like a torn one and the run resumes from checkpoint-20."""
    out = tmp_path / "out"
    out.mkdir()
    for name in ("checkpoint-10", "checkpoint-20", "checkpoint-30"):
        subprocess.run(["cp", "-a", str(whole_run / name), str(out / name)], check=True)
    for name in ("model.safetensors", "optimizer.pt"):
        cut(out / "checkpoint-30" / name, 0.6)
    why = torn.missing(out / "checkpoint-30")
    assert why.startswith("model.safetensors is cut short: "), why
    resumed = train(tiny_model, demo_data, out)
    check(resumed)
    (moved,) = torn.moved(out)
    assert f"checkpoint-30 is incomplete ({why}): moved aside to {moved}" in resumed.stdout
    assert sorted(step_losses(out, 0)) == list(range(21, 31))
