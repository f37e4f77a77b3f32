"""fms-hf-tuning 3.2.2 itself in the harness (TRAINER=fms), and foreign images in general.

Static tests: what a foreign trainer's layout renders, and how fms's own log is read.
Container tests (marker docker): both layouts train fms on 2 CPU ranks from `make up`, and a
fault run on it is recorded.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from support.engine import leftovers
from support.paths import ROOT
from tuning.harness.backends import compose
from tuning.harness.errors import HarnessError
from tuning.harness.run import foreign
from tuning.harness.run.render import node_commands
from tuning.harness.run_files import metric_lines
from tuning.harness.spec import trainers
from tuning.harness.spec.container import LAUNCH_DIR, LAUNCHER, RANK_RECORD
from tuning.harness.spec.flags import RunFlags
from tuning.harness.spec.job_files import job_of_file, load_job
from tuning.harness.spec.layout import Layout, LayoutError

FMS_JOB = ROOT / "configs/jobs/fms-demo.json"
STEPS = 12


def fms_layout(kind: str = "per-rank", **kw) -> Layout:
    return Layout(kind=kind, nproc=2, entry="tuning.sft_trainer", image=trainers.FMS_IMAGE, **kw)


# --- static -----------------------------------------------------------------------------------


def test_foreign_service_gets_launcher_recorder_and_json_job():
    svc = compose.render(fms_layout())["services"]["rank1"]
    assert svc["entrypoint"] == ["python3", LAUNCHER] and "command" not in svc
    binds = {v["target"]: v for v in svc["volumes"]}
    assert binds[LAUNCHER]["read_only"] and binds[LAUNCHER]["source"].endswith("tuning/launch.py")
    assert binds[RANK_RECORD]["source"].endswith("tuning/rank/rank_record.py")
    assert binds[f"{LAUNCH_DIR}/gpu_guard.py"]["source"].endswith(
        "tuning/rank/gpu_guard.py"
    )  # beside the recorder
    env = svc["environment"]
    assert env["HARNESS_ENTRY"] == "harness_rank"
    assert env["HARNESS_WRAPPED_ENTRY"] == "tuning.sft_trainer"
    assert env["SFT_TRAINER_CONFIG_JSON_PATH"] == "/job/job.json"
    # fms's own top-level `tuning` package is not shadowed: only the launch dir is added
    assert env["PYTHONPATH"] == "/opt/harness-launch"
    # our own image is unchanged: its entrypoint, `--config /job/job.yaml`
    ours = compose.render(Layout(kind="per-rank", nproc=2))["services"]["rank1"]
    assert "entrypoint" not in ours and ours["command"] == ["--config", "/job/job.yaml"]


def test_foreign_launch_command_runs_the_recorder_then_the_entry():
    cmds = node_commands(fms_layout("single"), ROOT / "configs/accelerate/fsdp-cpu.yaml")
    argv = cmds["trainer"]["argv"]
    assert argv[:2] == ["accelerate", "launch"] and argv[-2:] == ["-m", "harness_rank"]
    assert "--num_processes" in argv and argv[argv.index("--num_processes") + 1] == "2"


def test_fms_job_is_fms_json_with_the_layout_filled_in():
    job = job_of_file(fms_layout(), FMS_JOB, 5, 3, 40, resume=True)
    assert job["max_steps"] == 5 and job["seed"] == 3 and job["ddp_timeout"] == 40
    assert job["output_dir"] == "/output" and job["logging_strategy"] == "steps"
    assert "resume_from_checkpoint" not in job  # fms resumes from output_dir by itself
    assert job["trackers"] == ["file_logger"] and job["use_flash_attn"] is False


def _args(**kw) -> argparse.Namespace:
    base = {
        "trainer": "harness",
        "entry": None,
        "image": "tuning-harness:latest",
        "job": str(trainers.DEFAULT_JOB),
    }
    return argparse.Namespace(**{**base, **kw})


def test_trainer_presets_and_bad_input():
    a = _args(trainer="fms")
    f = RunFlags.of(a)
    assert (f.image, f.entry, f.job) == (trainers.FMS_IMAGE, "tuning.sft_trainer", str(FMS_JOB))
    assert a.image == "tuning-harness:latest"  # the flags as parsed stay as they were
    with pytest.raises(HarnessError, match="set IMAGE="):
        RunFlags.of(_args(entry="my.trainer"))
    with pytest.raises(HarnessError, match="TRAINER='nope' is unknown"):
        RunFlags.of(_args(trainer="nope"))
    with pytest.raises(LayoutError, match="LAYOUT=host"):
        fms_layout("host")


def test_bad_foreign_job_files(tmp_path):
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(HarnessError, match="must hold a mapping"):
        trainers.load_job(tmp_path / "list.json")
    with pytest.raises(HarnessError, match="not valid JSON at line 1"):
        trainers.load_job(tmp_path / "broken.json")
    with pytest.raises(HarnessError, match="no such file"):
        load_job(tmp_path / "missing.json")


def test_fms_training_logs_become_rank0_steps(tmp_path):
    """The exact lines fms's FileLoggingCallback writes (json.dumps(sort_keys=True))."""
    (tmp_path / "metrics").mkdir()
    lines = [
        {
            "data": {
                "epoch": 0.02,
                "step": 1,
                "timestamp": "2026-12-03T09:38:00.000000",
                "value": 5.0,
            },
            "name": "training_loss",
        },
        {
            "data": {
                "epoch": 0.03,
                "step": 2,
                "timestamp": "2026-12-03T09:38:00.500000",
                "value": 4.0,
            },
            "name": "training_loss",
        },
        {
            "data": {
                "epoch": 0.03,
                "step": 2,
                "timestamp": "2026-12-03T09:38:00.600000",
                "value": 4.5,
            },
            "name": "validation_loss",
        },
        {
            "data": {
                "epoch": 0.05,
                "step": 4,
                "timestamp": "2026-12-03T09:38:01.500000",
                "value": 3.0,
            },
            "name": "training_loss",
        },
    ]
    text = "".join(json.dumps(x, sort_keys=True) + "\n" for x in lines)
    (tmp_path / metric_lines.FMS_LOGS).write_text(
        text + '{"data": {"step": 5'
    )  # a line being written
    rec = {
        "event": "phase",
        "name": "imports",
        "rank": 0,
        "world_size": 2,
        "time": 0,
        "utc_offset_s": 3600,
    }
    (tmp_path / "metrics/rank0.jsonl").write_text(json.dumps(rec) + "\n")
    steps = metric_lines.steps(metric_lines.read_metrics(tmp_path)[0])
    assert [(s["step"], s["loss"]) for s in steps] == [(1, 5.0), (2, 4.0), (4, 3.0)]
    assert steps[0]["step_s"] is None and steps[1]["step_s"] == pytest.approx(0.5)
    assert steps[2]["step_s"] == pytest.approx(0.5)  # 1 s over two steps
    assert steps[0]["time"] == pytest.approx(1796290680.0 - 3600)  # local time at UTC+1
    assert {s["world_size"] for s in steps} == {2}
    summary = metric_lines.summarize(metric_lines.read_metrics(tmp_path), 0)
    assert summary["losses"] == [[1, 5.0], [2, 4.0], [4, 3.0]] and summary["tokens_per_s"] is None


def test_hf_log_lines():
    log = (
        "{'loss': 4.4, 'grad_norm': 1.7, 'learning_rate': 0.003, 'num_tokens': 1712.0, "
        "'epoch': 0.19}\nnoise\n{'train_runtime': 2.5, 'train_tokens_per_second': 10.0, "
        "'epoch': 0.19}\n"
    )
    assert foreign.hf_step_logs(log) == [
        {"loss": 4.4, "grad_norm": 1.7, "learning_rate": 0.003, "num_tokens": 1712.0, "epoch": 0.19}
    ]
    assert foreign.hf_train_metrics(log)["train_runtime"] == 2.5


# --- containers -------------------------------------------------------------------------------


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
