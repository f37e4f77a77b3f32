"""TRL's own SFT script as a user runs it (issue 38): trl/scripts/sft.py of the trl the lock pins
(in the harness image), copied unmodified into SRC, `make up ENTRY=sft.py ARGS=...` in both
layouts and `make fault FAULT=save-kill MAX_RESTARTS=1`: every run ends succeeded, with its
steps, saves and tokens per second in the summary."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from support.engine import leftovers
from support.paths import ROOT

STEPS, SAVE = 12, 4


@pytest.fixture(scope="module")
def trl_job(tmp_path_factory, demo_data) -> tuple[Path, Path]:
    """(SRC: a folder with TRL's sft.py as trl ships it, DATA: prompt/completion records)."""
    import trl

    src = tmp_path_factory.mktemp("trl-src")
    shutil.copy(Path(trl.__file__).parent / "scripts/sft.py", src / "sft.py")
    data = tmp_path_factory.mktemp("trl-data") / "pairs"
    data.mkdir()
    rows = [json.loads(x) for x in demo_data.read_text().splitlines()[:256]]
    (data / "train.jsonl").write_text(
        "".join(json.dumps({"prompt": r["input"], "completion": r["output"]}) + "\n" for r in rows)
    )
    for p in (src, data, *src.iterdir(), *data.iterdir()):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return src, data


def args(data: Path) -> str:
    return (
        f"--model_name_or_path /opt/harness/assets/tiny-model --dataset_name /data/{data.name} "
        f"--output_dir /output --max_steps {STEPS} --save_steps {SAVE} --logging_steps 1 "
        "--per_device_train_batch_size 4 --max_length 64 --bf16 false --report_to none "
        "--learning_rate 1e-3 --dataloader_num_workers 0 --seed 5"
    )


def make(
    target: str, runs: Path, src: Path, data: Path, *extra: str
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "make",
            "--no-print-directory",
            target,
            "GPUS=0",
            "NPROC=2",
            f"SRC={src}",
            "ENTRY=sft.py",
            f"DATA={data}",
            f"ARGS={args(data)}",
            f"RUNS={runs}",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def read_summary(runs: Path, run_id: str, out: subprocess.CompletedProcess) -> dict:
    said = out.stdout[-4000:] + out.stderr[-4000:]
    assert out.returncode == 0 and "Traceback" not in out.stdout + out.stderr, said
    summary = json.loads((runs / run_id / "summary.json").read_text())
    assert leftovers(run_id, runs) == [], said
    return summary


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["single", "per-rank"])
def test_trls_sft_script_trains_in_both_layouts(layout, trl_job, tmp_path, harness_image):
    src, data = trl_job
    runs, run_id = tmp_path / "runs", f"trl-{layout}"
    out = make("up", runs, src, data, f"LAYOUT={layout}", f"RUN_ID={run_id}")
    summary = read_summary(runs, run_id, out)
    assert summary["status"] == "succeeded" and summary["steps"] == STEPS, summary
    assert summary["trainer"]["entry"] == "/src/sft.py"
    assert [r["world_size_seen"] for r in summary["ranks"]] == [2, 2]
    assert summary["tokens_per_s"] > 0, summary["tokens_per_s_source"]
    assert "step lines" in summary["tokens_per_s_source"]
    saved = sorted(
        int(p.name.split("-")[1]) for p in (runs / run_id / "output").glob("checkpoint-*")
    )
    assert saved == list(range(SAVE, STEPS + 1, SAVE))
    assert isinstance(summary["hf_train_metrics"]["train_runtime"], float)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.fault
def test_trls_sft_script_survives_a_kill_inside_a_save(trl_job, tmp_path, harness_image):
    src, data = trl_job
    runs = tmp_path / "runs"
    out = make(
        "fault",
        runs,
        src,
        data,
        "FAULT=save-kill",
        "MAX_RESTARTS=1",
        "AT_STEP=5",
        "LAYOUT=per-rank",
        "RUN_ID=trl-savekill",
    )
    record = json.loads((runs / "latest/fault.json").read_text())
    summary = read_summary(runs, record["run_id"], out)
    assert summary["status"] == "succeeded" and summary["steps"] == STEPS, summary
    assert len(summary["restarts"]) == 1 and summary["torn_checkpoints"], summary
    assert summary["tokens_per_s"] > 0, summary["tokens_per_s_source"]
