"""A trainer of your own as you launch it (issue 28, part 4): ENTRY a script or a module, ARGS
its command line, SRC its folder bound read-only; the rank recorder logs every rank's steps
and checkpoints from its HF Trainer, and refuses one that saves outside the run's output dir.

No engine here: ENTRY, SRC and ARGS checked and rendered; tests/user_scripts/train_sft.py (a
user's HfArgumentParser script that knows nothing of the harness) under the rank recorder and
torchrun on this machine, as a foreign ENTRY runs in a container. The containers:
tests/engine/trainers/test_own_trainer_docker.py.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.harness import YAML_12_WORDS, harness
from support.launch import free_port, recorder
from support.paths import ROOT
from tuning.harness import cli
from tuning.harness.backends import compose
from tuning.harness.errors import HarnessError
from tuning.harness.spec import own_trainer
from tuning.harness.spec.container import SRC_DIR
from tuning.harness.spec.flags import RunFlags
from tuning.harness.spec.layout import Layout
from tuning.rank import torn

SCRIPTS = ROOT / "tests/user_scripts"
SCRIPT = SCRIPTS / "train_sft.py"


def flags(*argv: str) -> RunFlags:
    return RunFlags.of(cli.parser().parse_args(["up", *argv]))


# --- ENTRY, SRC and ARGS, checked -------------------------------------------------------------


def test_a_script_in_src_runs_from_src_with_its_arguments():
    own = own_trainer.resolve(
        "train_sft.py",
        str(SCRIPTS),
        "--lr 1e-5 --output_dir /output --note 'two words'",
        "tuning-harness:latest",
    )
    assert own.entry == f"{SRC_DIR}/train_sft.py" and own.src == str(SCRIPTS)
    assert own.args == ("--lr", "1e-5", "--output_dir", "/output", "--note", "two words")
    # an absolute path inside SRC is the same script
    assert own_trainer.resolve(str(SCRIPT), str(SCRIPTS), None, "x").entry == own.entry


def test_a_script_here_without_src_brings_its_folder():
    own = own_trainer.resolve(str(SCRIPT), None, None, "tuning-harness:latest")
    assert (own.entry, own.src, own.args) == (f"{SRC_DIR}/train_sft.py", str(SCRIPTS), None)


def test_a_module_in_src_or_in_your_image():
    assert own_trainer.resolve("train_sft", str(SCRIPTS), None, "tuning-harness:latest").entry == (
        "train_sft"
    )
    assert own_trainer.resolve("my_pkg.train", None, None, "mine:1").src is None


@pytest.mark.parametrize(
    "entry, src, args, said",
    [
        ("nope.py", "SCRIPTS", None, "ENTRY=nope.py is not a file in SRC="),
        ("TESTS/conftest.py", "SCRIPTS", None, "is outside SRC="),
        (
            "nope.py",
            None,
            None,
            "ENTRY=nope.py: no such script on this machine (a relative ENTRY "
            "is a path in SRC); give its path, or SRC=<your code's folder>",
        ),
        ("/in/the/image.py", None, None, "no such script on this machine"),  # not in our image
        ("no_such_module", "SCRIPTS", None, "ENTRY=no_such_module: no such module in SRC="),
        ("my-trainer", "SCRIPTS", None, "is neither a module (my_pkg.train) nor a script"),
        ("train_sft.py", "/no/such/dir", None, "SRC=/no/such/dir: no such folder on this machine"),
        (
            "train_sft.py",
            "SCRIPTS",
            "--output_dir ./out",
            "ARGS sets --output_dir ./out: in the "
            "containers only /output (the run's output/) is kept and writable",
        ),
        ("train_sft.py", "SCRIPTS", "--output_dir=/tmp/x --x", "pass --output_dir /output"),
        (
            "train_sft.py",
            "SCRIPTS",
            "--note 'unclosed",
            'ARGS="--note \'unclosed": No closing quotation; quote it as a shell would',
        ),
    ],
)
def test_what_cannot_run_is_refused_with_the_fix(entry, src, args, said):
    entry = entry.replace("TESTS", str(ROOT / "tests"))
    src = str(SCRIPTS) if src == "SCRIPTS" else src
    with pytest.raises(HarnessError) as e:
        own_trainer.resolve(entry, src, args, "tuning-harness:latest")
    assert said in str(e.value)


def test_flags_beside_args_and_args_without_entry_are_refused_by_name():
    with pytest.raises(
        HarnessError,
        match=r"^STEPS=5: put --max_steps in ARGS; SEED=3: put "
        r"--seed in ARGS\. ARGS is ENTRY's whole command line",
    ):
        flags(
            "--entry",
            "train_sft.py",
            "--src",
            str(SCRIPTS),
            "--args",
            "--x 1",
            "--steps",
            "5",
            "--seed",
            "3",
        )
    with pytest.raises(HarnessError, match=r"^ARGS=--x 1 is for a trainer of your own: set ENTRY"):
        flags("--args", "--x 1")
    with pytest.raises(HarnessError, match=r"^SRC=\S+ is for a trainer of your own"):
        flags("--src", str(SCRIPTS))
    # a module in no image of the user's and no SRC: where would it come from?
    with pytest.raises(
        HarnessError,
        match=r"names a module: set IMAGE=<your image that has it>, "
        r"or SRC=<the folder that holds it>",
    ):
        flags("--entry", "my_pkg.train")
    f = flags("--entry", "train_sft.py", "--src", str(SCRIPTS), "--steps", "5")  # no ARGS: a job
    assert f.steps == 5 and f.image == "tuning-harness:latest"


def test_args_arrive_whole_from_make_even_a_single_option():
    for value in ("--learning_rate 1e-5 --note 'a b'", "--fp16"):
        make = ["make", "-n", "--no-print-directory", "up", f"ARGS={value}"]
        line = subprocess.run(make, cwd=ROOT, capture_output=True, text=True, check=True).stdout
        argv = shlex.split(next(x for x in line.splitlines() if "-m tuning.harness" in x))
        tail = argv[argv.index("tuning.harness") + 1 :]
        assert cli.parse(tail).args == value


# --- rendered -----------------------------------------------------------------------------------


def test_src_is_bound_read_only_and_is_the_working_dir():
    layout = Layout(
        kind="per-rank",
        nproc=2,
        entry=f"{SRC_DIR}/train_sft.py",
        src=str(SCRIPTS),
        args=("--output_dir", "/output", "--max_steps", "3"),
    )
    svc = compose.render(layout)["services"]["rank1"]
    binds = {v["target"]: v for v in svc["volumes"]}
    assert binds[SRC_DIR] == {
        "type": "bind",
        "source": str(SCRIPTS),
        "target": SRC_DIR,
        "read_only": True,
    }
    assert svc["working_dir"] == SRC_DIR and svc["image"] == "tuning-harness:latest"
    assert svc["command"] == ["--output_dir", "/output", "--max_steps", "3"]
    env = svc["environment"]
    assert env["HARNESS_WRAPPED_ENTRY"] == "/src/train_sft.py"
    assert env["PYTHONPATH"] == f"/opt/harness-launch:{SRC_DIR}"
    assert "SFT_TRAINER_CONFIG_JSON_PATH" not in env  # ARGS is the whole job
    assert "HARNESS_STEP_LINES" not in env  # the recorder logs its steps
    assert binds["/opt/harness-launch/trainer_steps.py"]["read_only"]
    fms = Layout(kind="single", entry="tuning.sft_trainer", recorder_steps=False)
    assert compose.render(fms)["services"]["trainer"]["environment"]["HARNESS_STEP_LINES"] == "0"


def test_args_that_yaml_1_2_reads_as_numbers_are_written_quoted():
    layout = Layout(kind="single", entry="train", args=YAML_12_WORDS)
    text = compose.dump(compose.render(layout))
    for word in ("3e-3", "1e5", "0o17", ".5e3"):
        assert f'- "{word}"\n' in text
    assert yaml.safe_load(text)["services"]["trainer"]["command"] == list(YAML_12_WORDS)


def test_up_dry_run_prints_what_each_rank_runs(tmp_path):
    out = harness(
        "up",
        "--gpus",
        "0",
        "--dry-run",
        "--layout",
        "per-rank",
        "--src",
        str(SCRIPTS),
        "--entry",
        "train_sft.py",
        "--args",
        "--output_dir /output --learning_rate 1e-5",
        runs=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    compose_text, job_text = out.stdout.split("\n---\n")
    assert "# rank1: accelerate launch " in compose_text
    assert compose_text.rstrip().endswith(
        "-m harness_rank --output_dir /output --learning_rate 1e-5"
    )
    assert job_text.startswith("# /job/job.json: model and data: where ENTRY's ARGS name them")
    assert yaml.safe_load(job_text) == {
        "entry": "/src/train_sft.py",
        "args": ["--output_dir", "/output", "--learning_rate", "1e-5"],
        "output_dir": "/output",
        "src": {"host": str(SCRIPTS), "ranks": SRC_DIR},
    }


# --- the user's script under the rank recorder (torchrun here) ----------------------------------

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
        str(ROOT / "tuning/rank/rank_record.py"),
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
