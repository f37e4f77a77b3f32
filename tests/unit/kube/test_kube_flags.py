"""Every flag `make kube` accepts shows in what it renders, or is refused by name with the
reason (issue 38): the table's kube flags are walked one by one, each against a baseline that
has what it needs beside it, and the manifest must change. A flag added to the table for kube
and left out here fails the walk."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from support.paths import ROOT
from support.run_records import a_run
from tuning.harness import cli
from tuning.harness.flags import flag_table

KUBE_FLAGS = {f.var for f in flag_table.TABLE if "kube" in f.commands}
# flags that act on the rehearsal (a run here), not on what is rendered
RUN_HERE = {"REHEARSE", "KILL", "AT_STEP"}
# where the objects go, not what they are (test_kube_front_door.py: OUT=- prints the same)
WHERE = {"OUT"}


def kube(tmp_path: Path, capsys, *words: str) -> tuple[int, str, str]:
    """`make kube GPUS=0 ...` in this process: (exit code, the manifest's text, stderr)."""
    code = cli.main(["kube", "--runs", str(tmp_path / "runs"), "--gpus", "0", *words])
    out, err = capsys.readouterr()
    if code:
        return code, "", err
    manifest = Path(out.strip().splitlines()[-1])
    return code, manifest.read_text(), err


@pytest.fixture
def setup(tmp_path):
    """The files a flag may name: a job, a config, code for SRC, and a measured run."""
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"max_steps": 10, "save_steps": 5}))
    code = tmp_path / "code" / "my"
    code.mkdir(parents=True)
    (code / "mod.py").write_text("print('trains')\n")
    a_run(tmp_path / "runs", "measured", job.resolve(), step_s=4.8, save_s=40.0)
    return {
        "job": str(job),
        "code": str(code.parent),
        "ddp": str(ROOT / "configs/accelerate/ddp.yaml"),
    }


# var -> (what it needs beside it, its value): the manifest with it differs from the one without
RENDERED = {
    "JOB": ((), "{job}"),
    "MODEL": ((), "pvc:models/granite"),
    "DATA": ((), "pvc:data/train.jsonl"),
    "CONFIG": ((), "{ddp}"),
    "SEED": ((), "7"),
    "STEPS": ((), "9"),
    "TIMEOUT": ((), "99"),
    "TRAINER": ((), "fms"),
    "IMAGE": ((), "me/trainer:1"),
    "ENTRY": (("--image", "me/trainer:1"), "my.mod"),
    "ARGS": (("--image", "me/trainer:1", "--entry", "my.mod"), "--output_dir /output --lr 1"),
    "SRC": (("--image", "me/trainer:1", "--entry", "my.mod"), "{code}"),
    "GPUS": ((), "1"),
    "NPROC": ((), "3"),
    "CUDA": (("--gpus", "1"), "12.8"),
    "MAX_RESTARTS": ((), "2"),
    "GRACE": ((), "45"),
    "RUN_ID": ((), "other"),
    "RDZV_TIMEOUT": ((), "77"),
    "NODES": (("--nproc", "1"), "2"),
    "NAME": ((), "mine"),
    "KIND": ((), "trainjob"),
    "RESTART_POLICY": ((), "OnFailure"),
    "OUTPUT_CLAIM": ((), "out"),
    "NAMESPACE": ((), "team-ml"),
    "KUBE_UID": ((), "auto"),
    "SAVE_ADVISED": (("--job", "{job}"), None),
    "GPU_HOURS_PER_FAILURE": (("--job", "{job}", "--save-advised"), "5"),
}


def test_the_walk_covers_every_kube_flag():
    assert set(RENDERED) | RUN_HERE | WHERE == KUBE_FLAGS, "a kube flag the walk does not try"
    assert not set(RENDERED) & RUN_HERE


@pytest.mark.parametrize("var", sorted(RENDERED))
def test_each_flag_kube_accepts_changes_the_manifest(var, setup, tmp_path, capsys):
    flag = flag_table.BY_VAR[var]
    beside, value = RENDERED[var]
    beside = [w.format(**setup) for w in beside]
    base_code, base, err = kube(tmp_path, capsys, "--run-id", "base", *beside)
    assert base_code == 0, err
    words = [flag.option] if flag.switch else [flag.option, value.format(**setup)]
    code, text, err = kube(tmp_path, capsys, "--run-id", "with", *beside, *words)
    assert code == 0, err
    # the two runs' ids differ in the labels: made the same (RUN_ID=other then still differs)
    base = base.replace("harness.run: base", "harness.run: with")
    assert text != base, f"{var}={value} changed nothing in the manifest"


def test_rendered_values_land_where_the_cluster_reads_them(tmp_path, capsys):
    code, text, err = kube(tmp_path, capsys, "--rdzv-timeout", "77", "--grace", "45")
    assert code == 0, err
    job = next(d for d in yaml.safe_load_all(text) if d["kind"] == "PyTorchJob")
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 45
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["HARNESS_RDZV_TIMEOUT"] == "77"  # the launcher: torchrun --rdzv_conf timeout=77


@pytest.mark.parametrize(
    "words, message",
    [
        (("--at-step", "5"), "AT_STEP=5 is the step the rehearsal's KILL strikes at"),
        (("--kill", "1"), "KILL kills a pod of the rehearsal; add REHEARSE=1"),
        # the harness image has no such script: refused as `make up` refuses it
        (("--entry", "train.py"), "ENTRY=train.py: no such script on this machine"),
        (
            (
                "--entry",
                "my.mod",
                "--image",
                "me/t:1",
                "--args",
                "--output_dir /output",
                "--save-advised",
            ),
            "SAVE_ADVISED=1 writes save_steps into the job file",
        ),
    ],
)
def test_a_flag_for_the_rehearsal_alone_is_refused_without_it(words, message, tmp_path, capsys):
    code, _, err = kube(tmp_path, capsys, *words)
    assert code == 2 and message in err, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
