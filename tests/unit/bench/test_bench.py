"""`make bench` on a real engine: a small bench over all four layouts (2 CPU ranks, few steps,
one round, probe up to 1 MiB), its report rendered from report.json and its phases checked
against the ranks' own moments, and a SIGINT in the middle of a bench. The pure parts
(phases, Docker times, the plan) run fast."""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import time

import pytest

from support.engine import leftovers
from support.harness import harness
from support.paths import PYTHON, ROOT
from support.report_table import parse_table
from tuning.harness.commands.bench import report, samples

LAYOUTS = ["host", "single", "per-rank-isolated", "per-rank-shared"]
STEPS = 10
PROBE_MAX = 1024 * 1024
SIZES = [1024 * 2**k for k in range(11)]  # 1 KiB .. 1 MiB
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def small_bench(harness_image, tmp_path_factory):
    runs = tmp_path_factory.mktemp("bench")
    t0 = time.monotonic()
    out = harness(
        "bench",
        "--gpus",
        "0",
        "--nproc",
        "2",
        "--repeat",
        "1",
        "--steps",
        str(STEPS),
        "--probe-max-bytes",
        str(PROBE_MAX),
        "--probe-seconds",
        "0.5",
        runs=runs,
        timeout=1200,
    )
    took = time.monotonic() - t0
    dirs = [p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()]
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert len(dirs) == 1, dirs
    doc = json.loads((dirs[0] / "report.json").read_text())
    print(f"small bench: {took:.0f} s")
    return out, dirs[0], doc


def _raw(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "derived"}


@pytest.mark.docker
@pytest.mark.slow
def test_bench_writes_three_files_and_prints_the_table(small_bench):
    out, bench_dir, doc = small_bench
    paths = [bench_dir / f"report.{e}" for e in ("json", "md", "png")]
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    for p in paths:
        assert f"bench: {p}" in out.stdout
    assert "| " + " | ".join(report.TABLE_HEADER) + " |" in out.stdout
    assert [lay["name"] for lay in doc["layouts"]] == LAYOUTS
    runs = doc["meta"]["runs"]
    # One round: every layout's training, then every layout's probe, in that order.
    assert [(r["layout"], r["what"]) for r in runs] == [(n, "train") for n in LAYOUTS] + [
        (n, "probe") for n in LAYOUTS
    ]
    assert all(r["status"] == "succeeded" for r in runs)
    assert doc["meta"]["interrupted"] is False and doc["meta"]["job"]["max_steps"] == STEPS


@pytest.mark.docker
@pytest.mark.slow
def test_report_md_is_report_json_rendered_and_one_round_resolves_nothing(small_bench):
    _, bench_dir, doc = small_bench
    md = (bench_dir / "report.md").read_text()
    table = parse_table(md)
    assert list(table) == LAYOUTS
    # The table shows what report.json recorded, worked out here from the raw samples alone
    # (not a second render): a step is the slowest rank's time at that index, and the cell is
    # the median with p10 and p90 of the steps (statistics' inclusive deciles).
    import statistics

    for layout in doc["layouts"]:
        (rep,) = layout["repeats"]
        ranks = [r for r in rep["step_s"] if r]
        steps = [max(r[i] for r in ranks) for i in range(min(len(r) for r in ranks))]
        q = statistics.quantiles(steps, n=10, method="inclusive")
        want = f"{statistics.median(steps):.4f} [{q[0]:.4f}, {q[8]:.4f}]"
        assert table[layout["name"]][2] == want, (layout["name"], table[layout["name"]], want)
    goals = [ln for ln in md.splitlines() if ln.startswith("- ")]
    # One round is one pair per goal: no interval, so no verdict but UNRESOLVED, and at least
    # 4 more rounds (a 90 % interval of a median takes 5).
    assert [g.split(":")[0] for g in goals] == ["- UNRESOLVED"] * 3, goals
    for g in goals:
        assert ", no interval: one pair (target " in g, g
        assert g.endswith(
            "one pair gives no interval; about 4 more rounds would likely resolve it."
        ), g
    assert [g["more_rounds"] for g in doc["derived"]["goals"]] == [4, 4, 4]


def _recorded(run_dir) -> dict[int, dict[str, float]]:
    """Per rank, the moments it recorded itself: process start (/proc, via the metrics line's
    time - t), its phases, and the end of step 1."""
    out = {}
    for p in sorted((run_dir / "output/metrics").glob("rank*.jsonl")):
        lines = [json.loads(x) for x in p.read_text().splitlines()]
        first = next(x for x in lines if "t" in x and "time" in x)
        moments = {"process": first["time"] - first["t"]}
        moments |= {x["name"]: x["time"] for x in lines if x.get("event") == "phase"}
        moments["step1"] = min(x["time"] for x in lines if x.get("event") == "step")
        out[int(p.stem.removeprefix("rank"))] = moments
    return out


@pytest.mark.docker
@pytest.mark.slow
def test_phases_come_from_the_ranks_own_moments_each_in_order(small_bench):
    _, bench_dir, doc = small_bench
    order = ["process", "imports", "rendezvous", "model_loaded", "step1"]
    for lay in doc["layouts"]:
        (rep,) = lay["repeats"]
        summary = json.loads((bench_dir / rep["run_id"] / "summary.json").read_text())
        issued = summary["ranks"][0]["issued_at"]
        recorded = _recorded(bench_dir / rep["run_id"])
        assert sorted(recorded) == [0, 1], (lay["name"], recorded)
        for rank, m in recorded.items():
            # btime is whole seconds: a process start may read up to 1 s early
            assert m["process"] >= issued - 1.0, (lay["name"], rank, m, issued)
            seen = [m[k] for k in order]
            assert seen == sorted(seen), (lay["name"], rank, m)
        for part in report.PHASES:
            v = rep["phases"][part]
            if part == "container_start_s" and lay["name"] == "host":
                assert v is None, (lay["name"], rep["phases"])
            else:
                assert v is not None and v >= -0.05, (lay["name"], part, rep["phases"])
        # the slowest rank sets each moment: step 1's end, from the ranks' own lines
        step1 = max(m["step1"] for m in recorded.values())
        loaded = max(m["model_loaded"] for m in recorded.values())
        assert rep["phases"]["first_step_s"] == pytest.approx(step1 - loaded, abs=1e-3)


@pytest.mark.docker
@pytest.mark.slow
def test_report_png_is_valid_with_both_panels(small_bench):
    _, bench_dir, doc = small_bench
    data = (bench_dir / "report.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">I4s", data[8:16]) == (13, b"IHDR")
    assert struct.unpack(">II", data[16:24]) == (1200, 480)
    fig = report.figure(_raw(doc))
    speed, bandwidth = fig.axes
    assert len(speed.patches) == len(LAYOUTS)  # a bar per layout
    assert len(bandwidth.lines) == len(LAYOUTS)  # a busbw curve per layout
    assert all(len(line.get_xdata()) == len(SIZES) for line in bandwidth.lines)


@pytest.mark.docker
@pytest.mark.slow
def test_probe_in_every_layout_is_correct_and_busbw_is_algbw_for_two_ranks(small_bench):
    _, _, doc = small_bench
    for lay in doc["layouts"]:
        (rep,) = lay["repeats"]
        probe = rep["probe"]
        assert probe["world_size"] == 2 and probe["backend"] == "gloo" and probe["correct"]
        assert [s["bytes"] for s in probe["samples"]] == SIZES
        for s in probe["samples"]:
            assert s["correct"], (lay["name"], s)
            assert s["busbw_GBps"] == pytest.approx(s["algbw_GBps"], rel=1e-12)  # 2(n-1)/n = 1
            assert s["busbw_GBps"] > 0
        assert len(probe["transport"]) == 2


@pytest.mark.docker
@pytest.mark.slow
def test_every_layout_saw_world_size_two_and_left_nothing(small_bench):
    _, _, doc = small_bench
    for lay in doc["layouts"]:
        (rep,) = lay["repeats"]
        assert rep["world_size_seen"] == [2, 2], lay["name"]
        assert rep["probe"]["world_size"] == 2
        assert [len(s) for s in rep["step_s"]] == [STEPS - 2, STEPS - 2]  # after warm-up
        assert all(m and m > 10 * MIB for m in rep["peak_memory_bytes"])
    for r in doc["meta"]["runs"]:
        assert not leftovers(r["run_id"]), r


@pytest.mark.docker
@pytest.mark.slow
def test_sigint_during_bench_stops_the_run_leaves_nothing_and_writes_the_report(
    harness_image, tmp_path
):
    bench_id = "sigint-bench"
    run = f"{bench_id}-r1-single"
    proc = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "tuning.harness",
            "bench",
            "--gpus",
            "0",
            "--nproc",
            "2",
            "--steps",
            "400",
            "--repeat",
            "2",
            "--layouts",
            "single,per-rank-shared",
            "--run-id",
            bench_id,
            "--runs",
            str(tmp_path),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        metrics = tmp_path / bench_id / run / "output/metrics/rank0.jsonl"
        deadline = time.monotonic() + 300
        while not (metrics.is_file() and '"step"' in metrics.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.5)
        assert leftovers(run)  # the run's containers are up
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out
    doc = json.loads((tmp_path / bench_id / "report.json").read_text())
    assert doc["meta"]["interrupted"] is True
    assert [(r["run_id"], r["status"]) for r in doc["meta"]["runs"]] == [(run, "interrupted")]
    assert all(not lay["repeats"] for lay in doc["layouts"])  # partial figures left out
    assert (tmp_path / bench_id / "report.md").is_file()
    # Nothing of the bench runs: not the interrupted run, and no later run was started.
    assert not leftovers(run)
    made = (tmp_path / bench_id).iterdir()
    assert sorted(p.name for p in made if p.is_dir() and not p.is_symlink()) == [run]


# ---------------------------------------------------------------------------------------
# Fast: no engine
# ---------------------------------------------------------------------------------------


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
    want = "-m tuning.probe --out /output --min-bytes 1024 --max-bytes 4096 --iters 100"
    assert want in out.stdout
    assert not (tmp_path / "dry").exists()  # a dry run leaves nothing behind


def test_launcher_runs_the_entry_with_its_own_arguments():
    from tuning import launch

    env = {
        "HARNESS_DEVICE": "cpu",
        "PET_NPROC_PER_NODE": "2",
        "HARNESS_ENTRY": "tuning.probe",
        "HARNESS_ENTRY_ARGS": "--out '/a dir' --max-bytes 4096",
    }
    argv, _ = launch.command(env, ["--config", "/job/job.yaml"])
    assert argv[-6:] == ["-m", "tuning.probe", "--out", "/a dir", "--max-bytes", "4096"]
    argv, _ = launch.command({"HARNESS_DEVICE": "cpu"}, ["--config", "/job/job.yaml"])
    assert argv[-4:] == ["-m", "tuning.sft_trainer", "--config", "/job/job.yaml"]


def test_without_job_the_bench_runs_its_own_workload_and_a_users_job_as_given(tmp_path):
    """No JOB: configs/jobs/bench.yaml on long records made once (2048 of 64 words a side); a
    DATA of the user's keeps it; a JOB of the user's is run as it is, data and all."""
    from tuning.harness.cli import parser
    from tuning.harness.commands.bench import plan
    from tuning.harness.spec.flags import RunFlags

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
