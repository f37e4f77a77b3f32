"""A user's own HF script under the rank recorder and torchrun on this machine, as a foreign
ENTRY runs in a container (issue 28, part 4): tests/user_scripts/train_sft.py (a user's
HfArgumentParser script that knows nothing of the harness) has every rank's steps and
checkpoints logged from its HF Trainer, one that saves outside the run's output dir is refused
before its first step, and the step lines are off for fms (ENTRY, SRC and ARGS checked and
rendered: test_own_trainer.py; the containers: engine/trainers/test_own_trainer_docker.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.launch import free_port, recorder
from support.paths import ROOT, USER_SCRIPTS
from tuning.container.rank import torn

SCRIPT = USER_SCRIPTS / "train_sft.py"  # a user's HfArgumentParser script
TRAIN_ARGS = [
    "--max_steps",
    "12",
    "--save_steps",
    "5",
    "--logging_steps",
    "2",
    "--per_device_train_batch_size",
    "4",
    "--learning_rate",
    "3e-3",
    "--report_to",
    "none",
]


def _torchrun(out: Path, model: Path, data: Path, *extra: str) -> subprocess.CompletedProcess:
    """train_sft.py as a foreign ENTRY runs: `-m harness_rank` would be the launcher's; the
    recorder's own file is the same program (it loads what it needs beside itself)."""
    env = {
        **os.environ,
        "HARNESS_WRAPPED_ENTRY": str(SCRIPT),
        "HARNESS_OUTPUT_DIR": str(out),
        "OMP_NUM_THREADS": "1",
        "HF_HOME": str(out.parent / "hf"),
    }
    torchrun = Path(sys.executable).with_name("torchrun")
    argv = [
        str(torchrun),
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        str(ROOT / "tuning/container/rank/rank_record.py"),
        "--model_name_or_path",
        str(model),
        "--train_file",
        str(data),
        "--output_dir",
        str(out),
        *TRAIN_ARGS,
        *extra,
    ]
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=300, cwd=out.parent
    )


def _lines(out: Path, rank: int) -> list[dict]:
    return [json.loads(x) for x in (out / f"metrics/rank{rank}.jsonl").read_text().splitlines()]


def test_an_hf_scripts_steps_and_checkpoints_are_logged_by_every_rank(
    tiny_model, demo_data, tmp_path
):
    """Both ranks log every step (loss on the logged ones, the group's mean: equal on both) and
    every save; a checkpoint torn afterwards is set aside at the next start, and the script's
    own resume logic then starts from the newest complete one."""
    out = tmp_path / "output"
    ran = _torchrun(out, tiny_model, demo_data)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    for rank in (0, 1):
        lines = _lines(out, rank)
        (phase,) = [x for x in lines if x.get("name") == "training"]
        assert (phase["trainer"], phase["max_steps"], phase["step"]) == ("Trainer", 12, 0)
        steps = [x for x in lines if x["event"] == "step"]
        assert [x["step"] for x in steps] == list(range(1, 13))
        assert [x["step"] for x in steps if x["loss"] is not None] == [2, 4, 6, 8, 10, 12]
        assert all(x["world_size"] == 2 and x["step_s"] > 0 for x in steps)
        saved = [(x["step"], x["path"]) for x in lines if x["event"] == "checkpoint"]
        assert saved == [(s, str(out / f"checkpoint-{s}")) for s in (5, 10, 12)]
        # each save timed apart from its step, as the timeouts check reads it
        assert all(x["save_s"] > 0 for x in lines if x["event"] == "checkpoint")
        assert lines[-1]["event"] == "end" and lines[-1]["status"] == "completed"
    losses = [
        {x["step"]: x["loss"] for x in _lines(out, r) if x["event"] == "step"} for r in (0, 1)
    ]
    assert losses[0] == losses[1]
    # a save cut short, as a kill inside it leaves one: the next start sets it aside
    (out / "checkpoint-12/trainer_state.json").unlink()
    again = _torchrun(out, tiny_model, demo_data, "--max_steps", "14")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "checkpoint-12 is incomplete (no trainer_state.json): moved aside" in again.stdout
    assert f"train_sft: resuming from {out / 'checkpoint-10'}" in again.stdout
    assert [p for p in torn.moved(out) if p.startswith("torn-checkpoint-12-")]
    last = [x for x in _lines(out, 1) if x.get("name") == "training"][-1]
    assert (last["max_steps"], last["step"]) == (14, 10)  # resumed from checkpoint-10


def test_a_trainer_saving_elsewhere_is_refused_before_its_first_step(
    mounted, tiny_model, demo_data, tmp_path
):
    _, env = mounted
    out = Path(env["HARNESS_OUTPUT_DIR"])
    env = {**env, "HARNESS_WRAPPED_ENTRY": str(SCRIPT), "HF_HOME": str(tmp_path / "hf")}
    args = [
        "--model_name_or_path",
        str(tiny_model),
        "--train_file",
        str(demo_data),
        "--output_dir",
        str(tmp_path / "elsewhere"),
        *TRAIN_ARGS,
    ]
    ran = subprocess.run(
        [sys.executable, "-m", "harness_rank", *args],
        capture_output=True,
        text=True,
        env={**env, "HARNESS_DEVICE": "cpu"},
        timeout=300,
    )
    assert ran.returncode == 1, ran.stdout + ran.stderr
    lines = _lines(out, 0)
    assert not [x for x in lines if x["event"] == "step"]
    end = lines[-1]
    assert end["status"] == "failed"
    assert (
        f"OutputDirError: the Trainer saves to output_dir='{tmp_path / 'elsewhere'}'"
        in (end["error"])
    )
    assert f"Pass --output_dir {out} (ARGS)" in end["error"]
    assert not list((tmp_path / "elsewhere").rglob("*"))  # the Trainer made it; nothing saved


def test_the_step_lines_are_off_for_fms(mounted):
    """fms logs its own steps (training_logs.jsonl, read as rank 0's): HARNESS_STEP_LINES=0
    leaves every Trainer as it is."""
    marker, env = mounted
    user = Path(env["PYTHONPATH"].split(os.pathsep)[1])
    (user / "foreign_trainer.py").write_text(
        "import transformers\n"
        f"open({str(marker)!r}, 'w').write(str(getattr(transformers.Trainer.__init__, "
        "'harness_steps', False)))\n"
    )
    for value, patched in (("0", "False"), ("1", "True")):
        ran = recorder({**env, "HARNESS_STEP_LINES": value}, "cpu")
        assert ran.returncode == 0, ran.stderr
        assert marker.read_text() == patched
