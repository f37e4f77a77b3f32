"""A trainer of your own as you launch it (issue 28, part 4): ENTRY a script or a module, ARGS
its command line, SRC its folder bound read-only; checked and rendered here, with no engine and
no run (under the rank recorder and torchrun on this machine: test_own_trainer_ranks.py; the
containers: engine/trainers/test_own_trainer_docker.py)."""

from __future__ import annotations

import shlex
import subprocess

import pytest
import yaml

from support.harness import YAML_12_WORDS, harness
from support.paths import ROOT, USER_SCRIPTS
from tuning.harness import cli
from tuning.harness.backends import compose
from tuning.harness.contract.container import SRC_DIR
from tuning.harness.errors import HarnessError
from tuning.harness.flags import own_trainer
from tuning.harness.flags.run_flags import RunFlags
from tuning.harness.layout.layout import Layout
from tuning.harness.layout.mounts import Mounts
from tuning.harness.layout.topology import Topology
from tuning.harness.layout.trainer import Trainer

SCRIPT = USER_SCRIPTS / "train_sft.py"  # a user's HfArgumentParser script


def flags(*argv: str) -> RunFlags:
    return RunFlags.of(cli.parser().parse_args(["up", *argv]))


# --- ENTRY, SRC and ARGS, checked -------------------------------------------------------------


def test_a_script_in_src_runs_from_src_with_its_arguments():
    own = own_trainer.resolve(
        "train_sft.py",
        str(USER_SCRIPTS),
        "--lr 1e-5 --output_dir /output --note 'two words'",
        "tuning-harness:latest",
    )
    assert own.entry == f"{SRC_DIR}/train_sft.py" and own.src == str(USER_SCRIPTS)
    assert own.args == ("--lr", "1e-5", "--output_dir", "/output", "--note", "two words")
    # an absolute path inside SRC is the same script
    assert own_trainer.resolve(str(SCRIPT), str(USER_SCRIPTS), None, "x").entry == own.entry


def test_a_script_here_without_src_brings_its_folder():
    own = own_trainer.resolve(str(SCRIPT), None, None, "tuning-harness:latest")
    assert (own.entry, own.src, own.args) == (f"{SRC_DIR}/train_sft.py", str(USER_SCRIPTS), None)


def test_a_module_in_src_or_in_your_image():
    assert (
        own_trainer.resolve("train_sft", str(USER_SCRIPTS), None, "tuning-harness:latest").entry
        == "train_sft"
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
        (
            "train_sft.py",
            "/no/such/dir",
            None,
            "SRC=/no/such/dir: no such folder or file on this machine",
        ),
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
    src = str(USER_SCRIPTS) if src == "SCRIPTS" else src
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
            str(USER_SCRIPTS),
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
        flags("--src", str(USER_SCRIPTS))
    # a module in no image of the user's and no SRC: where would it come from?
    with pytest.raises(
        HarnessError,
        match=r"names a module: set IMAGE=<your image that has it>, "
        r"or SRC=<the folder that holds it>",
    ):
        flags("--entry", "my_pkg.train")
    # no ARGS: a job
    f = flags("--entry", "train_sft.py", "--src", str(USER_SCRIPTS), "--steps", "5")
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
        topology=Topology("per-rank", nproc=2),
        mounts=Mounts(src=str(USER_SCRIPTS)),
        trainer=Trainer(
            entry=f"{SRC_DIR}/train_sft.py", args=("--output_dir", "/output", "--max_steps", "3")
        ),
    )
    svc = compose.render(layout)["services"]["rank1"]
    binds = {v["target"]: v for v in svc["volumes"]}
    assert binds[SRC_DIR] == {
        "type": "bind",
        "source": str(USER_SCRIPTS),
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
    fms = Layout(trainer=Trainer(entry="tuning.sft_trainer", recorder_steps=False))
    assert compose.render(fms)["services"]["trainer"]["environment"]["HARNESS_STEP_LINES"] == "0"


def test_args_that_yaml_1_2_reads_as_numbers_are_written_quoted():
    layout = Layout(trainer=Trainer(entry="train", args=YAML_12_WORDS))
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
        str(USER_SCRIPTS),
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
        "src": {"host": str(USER_SCRIPTS), "ranks": SRC_DIR},
    }
