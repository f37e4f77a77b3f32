"""fms-hf-tuning 3.2.2 itself in the harness (TRAINER=fms), and foreign images in general,
without an engine: what a foreign trainer's layout renders, and how fms's own log is read (fms
trained in containers: engine/trainers/test_fms_docker.py)."""

from __future__ import annotations

import argparse
import json

import pytest

from support.paths import ROOT
from tuning.harness.backends import compose
from tuning.harness.contract.container import LAUNCH_DIR, LAUNCHER, RANK_RECORD
from tuning.harness.errors import HarnessError
from tuning.harness.flags import trainers
from tuning.harness.flags.run_flags import RunFlags
from tuning.harness.layout.job_files import job_of_file, load_job
from tuning.harness.layout.layout import Layout, LayoutError
from tuning.harness.layout.topology import Topology
from tuning.harness.layout.trainer import Trainer
from tuning.harness.machine.devices import GpuPlan
from tuning.harness.run import foreign
from tuning.harness.run.render import node_commands
from tuning.harness.run_files import metric_lines

FMS_JOB = ROOT / "configs/jobs/fms-demo.json"


def fms_layout(kind: str = "per-rank") -> Layout:
    return Layout(
        topology=Topology(kind, GpuPlan(0, trainers.FMS_IMAGE), nproc=2),
        trainer=Trainer(entry="tuning.sft_trainer"),
    )


# --- static -----------------------------------------------------------------------------------


def test_foreign_service_gets_launcher_recorder_and_json_job():
    svc = compose.render(fms_layout())["services"]["rank1"]
    assert svc["entrypoint"] == ["python3", LAUNCHER] and "command" not in svc
    binds = {v["target"]: v for v in svc["volumes"]}
    assert binds[LAUNCHER]["read_only"] and binds[LAUNCHER]["source"].endswith(
        "tuning/container/launch.py"
    )
    assert binds[RANK_RECORD]["source"].endswith("tuning/container/rank/rank_record.py")
    assert binds[f"{LAUNCH_DIR}/gpu_guard.py"]["source"].endswith(
        "tuning/container/rank/gpu_guard.py"
    )  # beside the recorder
    env = svc["environment"]
    assert env["HARNESS_ENTRY"] == "harness_rank"
    assert env["HARNESS_WRAPPED_ENTRY"] == "tuning.sft_trainer"
    assert env["SFT_TRAINER_CONFIG_JSON_PATH"] == "/job/job.json"
    # fms's own top-level `tuning` package is not shadowed: only the launch dir is added
    assert env["PYTHONPATH"] == "/opt/harness-launch"
    # our own image is unchanged: its entrypoint, `--config /job/job.yaml`
    ours = compose.render(Layout(topology=Topology("per-rank", nproc=2)))["services"]["rank1"]
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
