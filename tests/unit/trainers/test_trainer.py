"""Real runs of tuning.sft_trainer on CPU: one rank in-process-free subprocess, two ranks under
``accelerate launch`` (gloo), resume, LoRA, GPT-2, crash and preemption hooks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.launch import SAVE, STEPS, check, launch_cmd, launch_env, run_launch, trainer_args
from support.metrics import read_metrics, step_losses
from support.paths import ROOT


def steps_of(out: Path, rank: int) -> list[dict]:
    return [r for r in read_metrics(out, rank) if r["event"] == "step"]


def mean(xs):
    return sum(xs) / len(xs)


def assert_two_rank_run(out: Path, steps: int = STEPS, min_drop: float = 1.0) -> dict:
    summary = json.loads((out / "train_summary.json").read_text())
    seen = {}
    for rank in (0, 1):
        records = read_metrics(out, rank)
        for r in records:  # every line carries the common fields, as this rank saw them
            assert {"event", "rank", "world_size", "time", "t"} <= set(r)
            assert (r["rank"], r["world_size"]) == (rank, 2), r
            assert 0 < r["t"] < 3600 and abs(r["time"] - time.time()) < 3600
        phases = [r["name"] for r in records if r["event"] == "phase"]
        assert phases == ["imports", "rendezvous", "model_loaded", "data_ready", "training"]
        assert records[-1] == {**records[-1], "event": "end", "status": "completed"}
        st = steps_of(out, rank)
        assert [s["step"] for s in st] == list(range(1, steps + 1))
        for s in st:
            assert len(s["samples"]) == 4 and s["tokens"] > 0 and s["step_s"] > 0 and s["lr"] > 0
        losses = [s["loss"] for s in st]
        assert mean(losses[-5:]) < mean(losses[:5]) - min_drop, losses
        seen[rank] = {i for s in st for i in s["samples"]}
        ckpts = [r for r in records if r["event"] == "checkpoint"]
        assert [c["step"] for c in ckpts] == list(range(SAVE, steps + 1, SAVE))
    assert not seen[0] & seen[1], "the two ranks trained on the same samples"
    for step in range(SAVE, steps + 1, SAVE):
        assert (out / f"checkpoint-{step}" / "trainer_state.json").is_file()
    assert summary["status"] == "completed" and summary["world_size"] == 2
    assert summary["steps"] == steps and summary["final_loss"] < summary["first_loss"]
    assert summary["tokens_per_s"] > 0 and summary["peak_rss_bytes"] > 10_000_000
    total = sum(s["tokens"] for rank in (0, 1) for s in steps_of(out, rank))
    assert summary["tokens"] == total
    return summary


def test_single_rank_run(tiny_model, demo_data, tmp_path):
    """Plain python, one process: the same metrics contract with world_size 1."""
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuning.sft_trainer",
            *trainer_args(tiny_model, demo_data, out, "--save_strategy", "no", steps=4),
        ],
        cwd=ROOT,
        env=launch_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    check(proc)
    records = read_metrics(out, 0)
    assert all((r["rank"], r["world_size"]) == (0, 1) for r in records)
    assert [r["step"] for r in records if r["event"] == "step"] == [1, 2, 3, 4]
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["steps"] == 4 and summary["world_size"] == 1
    assert summary["first_loss"] == next(r["loss"] for r in records if r["event"] == "step")
    assert not list(out.glob("checkpoint-*"))


@pytest.fixture(scope="module")
def two_rank_run(tiny_model, demo_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("two_rank") / "out"
    proc = run_launch(trainer_args(tiny_model, demo_data, out))
    check(proc)
    return out


@pytest.mark.slow
def test_two_ranks(two_rank_run):
    summary = assert_two_rank_run(two_rank_run)
    assert summary["first_loss"] > 5.0  # ln(vocab) at random init: the run started from scratch


@pytest.mark.slow
@pytest.mark.fault
def test_crash_then_resume_follows_the_same_losses(two_rank_run, tiny_model, demo_data, tmp_path):
    out = tmp_path / "out"
    crashed = run_launch(
        trainer_args(tiny_model, demo_data, out), HARNESS_CRASH_AT_STEP=16, HARNESS_CRASH_RANK=1
    )
    assert crashed.returncode != 0
    assert "injected crash at step 16" in crashed.stdout + crashed.stderr
    end = read_metrics(out, 1)[-1]
    assert end["event"] == "end" and end["status"] == "failed" and "injected crash" in end["error"]
    assert max(s["step"] for s in steps_of(out, 1)) == 15
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-10"]

    check(run_launch(trainer_args(tiny_model, demo_data, out, "--resume_from_checkpoint", "true")))
    for rank in (0, 1):
        resumed, whole = step_losses(out, rank), step_losses(two_rank_run, rank)
        assert sorted(resumed) == list(range(1, STEPS + 1))
        for step in range(SAVE + 1, STEPS + 1):
            assert abs(resumed[step] - whole[step]) < 1e-5, (rank, step, resumed[step], whole[step])
        samples = {s["step"]: s["samples"] for s in steps_of(out, rank)}
        assert samples == {s["step"]: s["samples"] for s in steps_of(two_rank_run, rank)}
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["first_step"] == SAVE + 1 and summary["last_step"] == STEPS


@pytest.mark.slow
def test_two_ranks_gpt2(tiny_models, demo_data, tmp_path):
    out = tmp_path / "out"
    check(run_launch(trainer_args(tiny_models("gpt2"), demo_data, out)))
    assert_two_rank_run(out)
    config = json.loads((out / "checkpoint-30" / "config.json").read_text())
    assert config["model_type"] == "gpt2"


@pytest.mark.slow
def test_two_ranks_lora(tiny_model, demo_data, tmp_path):
    out = tmp_path / "out"
    args = ["--peft_method", "lora", "--r", "8", "--lora_alpha", "32", "--learning_rate", "1e-2"]
    check(run_launch(trainer_args(tiny_model, demo_data, out, *args)))
    assert_two_rank_run(out, min_drop=0.1)  # frozen random base: a small fall
    ckpt = out / "checkpoint-30"
    assert (ckpt / "adapter_model.safetensors").is_file() and not (
        ckpt / "model.safetensors"
    ).exists()
    adapter = json.loads((ckpt / "adapter_config.json").read_text())
    assert adapter["r"] == 8 and adapter["peft_type"] == "LORA"


@pytest.mark.slow
@pytest.mark.fault
def test_sigterm_checkpoints_then_resume(tiny_model, demo_data, tmp_path):
    out = tmp_path / "out"
    steps = 150
    args = trainer_args(tiny_model, demo_data, out, "--save_strategy", "no", steps=steps)
    log = open(tmp_path / "launch.log", "w")
    proc = subprocess.Popen(
        launch_cmd(args),
        cwd=ROOT,
        env=launch_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            path = out / "metrics" / "rank1.jsonl"
            if path.exists() and path.read_text().count('"event": "step"') >= 3:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be preempted"
        os.killpg(proc.pid, signal.SIGTERM)  # what `docker stop` or the torchrun agent does
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    stopped = set()
    for rank in (0, 1):
        records = read_metrics(out, rank)
        assert records[-1]["event"] == "end" and records[-1]["status"] == "preempted"
        ckpt = [r for r in records if r["event"] == "checkpoint"]
        assert len(ckpt) == 1 and ckpt[0]["step"] == max(s["step"] for s in steps_of(out, rank))
        stopped.add(ckpt[0]["step"])
    (step,) = stopped  # both ranks stopped at the same step
    assert step < steps and (out / f"checkpoint-{step}" / "optimizer.pt").is_file()
    assert json.loads((out / "train_summary.json").read_text())["status"] == "preempted"

    check(
        run_launch(
            trainer_args(
                tiny_model,
                demo_data,
                out,
                "--save_strategy",
                "no",
                "--resume_from_checkpoint",
                "true",
                steps=steps,
            )
        )
    )
    for rank in (0, 1):
        runs = [s["step"] for s in steps_of(out, rank)]
        assert runs == list(range(1, step + 1)) + list(range(step + 1, steps + 1))
        assert read_metrics(out, rank)[-1]["status"] == "completed"
