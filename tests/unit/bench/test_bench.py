"""`make bench`'s pure parts, run fast: phases, Docker times, the plan of a dry run, the
launcher's arguments, and the workload a bench runs without JOB (the bench on a real engine:
engine/bench/test_bench_docker.py)."""

from __future__ import annotations

import json
import re

import pytest

from support.bench_report import LAYOUTS
from support.harness import harness
from support.paths import ROOT
from tuning.harness.bench import report, samples


def test_parse_docker_time():
    assert samples.parse_docker_time("1970-01-01T00:00:10.250000000Z") == pytest.approx(10.25)
    assert samples.parse_docker_time("1970-01-01T01:00:10+01:00") == pytest.approx(10.0)
    assert samples.parse_docker_time("0001-01-01T00:00:00Z") is None  # never started
    assert samples.parse_docker_time(None) is None


def _line(event, time_, t, **kw):
    return {"event": event, "time": time_, "t": t, **kw}


def test_phases_take_the_slowest_rank():
    def rank(imports, rendezvous, loaded, step, start):
        return [
            _line("phase", imports, imports - start, name="imports"),
            _line("phase", rendezvous, rendezvous - start, name="rendezvous"),
            _line("phase", loaded, loaded - start, name="model_loaded"),
            _line("step", step, step - start, step=1),
        ]

    metrics = {
        0: rank(105.0, 106.0, 107.0, 108.0, 102.0),
        1: rank(105.5, 106.1, 106.5, 108.2, 102.5),
    }
    started = ("1970-01-01T00:01:40.5Z", "1970-01-01T00:01:41Z")
    nodes = [
        {"issued_at": 100.0, "container": f"c{i}", "started_at": s} for i, s in enumerate(started)
    ]
    ph = samples.phases(metrics, nodes, fix=0.0)
    assert tuple(ph) == report.PHASES
    assert ph == {
        "container_start_s": 1.0,  # the later container
        "launcher_s": 1.5,  # ranks' processes started at 102.0 and 102.5
        "imports_s": 3.0,
        "rendezvous_s": 0.6,
        "model_load_s": 0.9,
        "first_step_s": 1.2,
    }
    host = samples.phases(metrics, [{"issued_at": 100.0, "container": None}], fix=0.25)
    assert host["container_start_s"] is None and host["launcher_s"] == 2.75


def test_dry_run_plans_alternating_rounds_and_the_probe_under_the_same_launcher(tmp_path):
    out = harness(
        "bench",
        "--gpus",
        "0",
        "--repeat",
        "2",
        "--run-id",
        "dry",
        "--dry-run",
        "--probe-max-bytes",
        "4096",
        runs=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    planned = re.findall(r"round (\d): (\S+) (train|probe) -> (\S+)", out.stdout)
    want = [
        (str(r), n, w, f"dry-r{r}-{n}" + ("-probe" if w == "probe" else ""))
        for r in (1, 2)
        for w in ("train", "probe")
        for n in LAYOUTS
    ]
    assert planned == want
    want = "-m tuning.container.probe --out /output --min-bytes 1024 --max-bytes 4096 --iters 100"
    assert want in out.stdout
    assert not (tmp_path / "dry").exists()  # a dry run leaves nothing behind


def test_launcher_runs_the_entry_with_its_own_arguments():
    from tuning.container import launch

    env = {
        "HARNESS_DEVICE": "cpu",
        "PET_NPROC_PER_NODE": "2",
        "HARNESS_ENTRY": "tuning.container.probe",
        "HARNESS_ENTRY_ARGS": "--out '/a dir' --max-bytes 4096",
    }
    argv, _ = launch.command(env, ["--config", "/job/job.yaml"])
    assert argv[-6:] == ["-m", "tuning.container.probe", "--out", "/a dir", "--max-bytes", "4096"]
    argv, _ = launch.command({"HARNESS_DEVICE": "cpu"}, ["--config", "/job/job.yaml"])
    assert argv[-4:] == ["-m", "tuning.sft_trainer", "--config", "/job/job.yaml"]


def test_without_job_the_bench_runs_its_own_workload_and_a_users_job_as_given(tmp_path):
    """No JOB: configs/jobs/bench.yaml on long records made once (2048 of 64 words a side); a
    DATA of the user's keeps it; a JOB of the user's is run as it is, data and all."""
    from tuning.harness.bench import plan
    from tuning.harness.cli import parser
    from tuning.harness.flags.run_flags import RunFlags

    def spec(*flags):
        a = parser().parse_args(
            [
                "bench",
                "--gpus",
                "0",
                "--nproc",
                "2",
                "--run-id",
                "w",
                "--runs",
                str(tmp_path),
                *flags,
            ]
        )
        f = plan.workload(a, RunFlags.of(a))
        return plan.spec(a, f, tmp_path / "w", "w-r1-host", "host", probe=False, threads=1)

    job = spec().job
    assert (job["per_device_train_batch_size"], job["max_seq_length"], job["max_steps"]) == (
        32,
        128,
        30,
    )
    assert job["save_strategy"] == "no" and "save_steps" not in job
    assert job["training_data_path"] == str(plan.BENCH_DATA)
    lines = plan.BENCH_DATA.read_text().splitlines()
    words = {len(json.loads(x)["input"].split(":")[1].split("\n")[0].split()) for x in lines}
    assert len(lines) == 2048 and words == {64}
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"input": "### Input: cat\\n\\n## Label:", "output": " red"}\n')
    job = spec("--data", str(mine)).job
    assert job["training_data_path"] == str(mine) and job["per_device_train_batch_size"] == 32
    demo = ROOT / "configs/jobs/demo.yaml"
    job = spec("--job", str(demo)).job
    assert job["per_device_train_batch_size"] == 4 and job["save_steps"] == 10
    assert not job["training_data_path"].endswith("bench-w64.jsonl")
