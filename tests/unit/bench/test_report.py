"""tuning.harness.bench.report on a larger generated profile: the files it writes, the
raw samples kept, the table's shape, and the PNG. Every figure's value is pinned on the
hand-worked profile in test_report_hand.py. Fast; no docker, no torch."""

from __future__ import annotations

import json
import random
import struct

import pytest

from support.bench_report import LAYOUTS, parse_table
from tuning.harness.bench import report, stopping

SIZES = [1024 * 2**k for k in range(15)]  # 1 KiB .. 16 MiB
NRANKS, STEPS = 2, 24

# layout -> (container_start_s, rendezvous_s, step_s, busbw GB/s at the plateau, interface)
PROFILE = {
    "host": (None, 0.30, 0.250, 0.88, "lo"),
    "single": (1.20, 0.32, 0.254, 0.87, "lo"),
    "per-rank-isolated": (2.00, 0.95, 0.300, 0.40, "eth0"),
    "per-rank-shared": (2.20, 0.40, 0.270, 0.68, "lo"),
}


def _probe(rng: random.Random, peak: float, iface: str) -> dict:
    samples = []
    for b in SIZES:
        bus = peak * b / (b + 256 * 1024) * rng.uniform(0.93, 1.07)
        t = b / (bus * 1e9)  # n = 2: algbw == busbw
        samples.append(
            {
                "bytes": b,
                "elements": b // 4,
                "iters": 20,
                "warmup": 5,
                "time_s": t,
                "algbw_GBps": b / t / 1e9,
                "busbw_GBps": bus,
                "correct": True,
            }
        )
    local = "127.0.0.1" if iface == "lo" else "172.30.0.2"
    return {
        "world_size": NRANKS,
        "backend": "gloo",
        "device": "cpu",
        "samples": samples,
        "transport": [
            {
                "rank": r,
                "interface": iface,
                "local": [local],
                "peers": [],
                "loopback": iface == "lo",
            }
            for r in range(NRANKS)
        ],
        "correct": True,
    }


def make_report(seed: int = 7, repeats: int = 2) -> dict:
    rng = random.Random(seed)
    layouts = {name: {"name": name, "repeats": []} for name in LAYOUTS}
    for _round in range(repeats):  # A B C D A B C D ...
        for name in LAYOUTS:
            cstart, rdzv, step, peak, iface = PROFILE[name]
            jit = lambda x, f=0.05: None if x is None else x * rng.uniform(1 - f, 1 + f)  # noqa: E731
            rep = {
                "run_id": f"r{_round}-{name}",
                "phases": {
                    "container_start_s": jit(cstart),
                    "imports_s": jit(3.1),
                    "rendezvous_s": jit(rdzv),
                    "model_load_s": jit(1.05),
                    "first_step_s": jit(0.8),
                },
                "step_s": [
                    [step * rng.lognormvariate(0, 0.04) for _ in range(STEPS - r)]
                    for r in range(NRANKS)  # rank 1 logged one step fewer: cut to the shortest
                ],
                "tokens": [
                    [rng.randint(1800, 2048) for _ in range(STEPS - r)] for r in range(NRANKS)
                ],
                "probe": _probe(rng, peak, iface),
                "peak_memory_bytes": [int(rng.uniform(700, 900) * 2**20) for _ in range(NRANKS)],
            }
            if name == "per-rank-isolated":
                rep["transport"] = ["gloo/eth0"]  # given explicitly rather than from the probe
            layouts[name]["repeats"].append(rep)
    return {"schema_version": 1, "meta": {"bench": "test"}, "layouts": list(layouts.values())}


@pytest.fixture
def written(tmp_path):
    rep = make_report(repeats=5)  # 5 rounds: the fewest a 90 % interval of a median takes
    paths = report.write(rep, tmp_path / "bench")
    return rep, paths


def test_write_makes_three_files(written):
    _, (j, m, p) = written
    assert [x.name for x in (j, m, p)] == ["report.json", "report.md", "report.png"]
    assert all(x.is_file() and x.stat().st_size > 0 for x in (j, m, p))


def test_report_json_keeps_the_raw_samples_and_the_table_has_a_row_per_layout(written):
    rep, (j, m, _) = written
    doc = json.loads(j.read_text())
    assert doc["layouts"] == json.loads(json.dumps(rep["layouts"]))  # raw samples kept verbatim
    table = parse_table(m.read_text())
    assert list(table) == LAYOUTS  # rows in run order
    assert table["host"][7] == "1.000 [1.000, 1.000]"  # host against itself, every round
    assert table["single"][8] == "1.000 [1.000, 1.000]"
    # the probe's interface, and an explicit transport kept as given
    assert table["per-rank-isolated"][6] == "gloo/eth0" and table["host"][6] == "gloo/lo"
    goals = [ln for ln in m.read_text().splitlines() if ln.startswith("- ")]
    assert [g.split(":")[0] for g in goals] == ["- UNRESOLVED", "- MISSED", "- MET"], goals
    assert all("94 % interval [" in g for g in goals), goals  # 5 rounds: 1 - 2 / 2^5


def test_png_is_valid_and_figure_has_both_panels(written):
    rep, (_, _, png) = written
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, ctype = struct.unpack(">I4s", data[8:16])
    assert (length, ctype) == (13, b"IHDR")
    w, h = struct.unpack(">II", data[16:24])
    assert (w, h) == (1200, 480)  # 12 x 4.8 inches at 100 dpi: two panels side by side
    # The written file itself: the bars (tab:blue at alpha 0.6 on white) only in the left
    # panel, the second layout's busbw curve (tab:orange) only in the right one.
    from matplotlib.image import imread

    rgb = imread(png)[:, :, :3]
    bar = (rgb[:, :, 0] > 0.43) & (rgb[:, :, 0] < 0.51) & (rgb[:, :, 2] > 0.79)
    orange = (rgb[:, :, 0] > 0.95) & (rgb[:, :, 1] > 0.4) & (rgb[:, :, 1] < 0.6)
    orange &= rgb[:, :, 2] < 0.15
    left, right = slice(0, w // 2), slice(w // 2, w)
    assert bar[:, left].sum() > 1000 > 100 > bar[:, right].sum()  # a blue curve's antialiasing
    assert orange[:, right].sum() > 50 and orange[:, left].sum() == 0
    fig = report.figure(rep)
    assert len(fig.axes) == 2
    speed, bw = fig.axes
    assert len(speed.patches) == len(LAYOUTS)  # one bar per layout
    assert speed.containers and any(
        type(c).__name__ == "ErrorbarContainer" for c in speed.containers
    )
    assert bw.get_xscale() == "log"
    assert sorted(line.get_label() for line in bw.lines) == sorted(LAYOUTS)
    assert all(len(line.get_xdata()) == len(SIZES) for line in bw.lines)
    # steps per second plotted = 1 / median step time
    d = report.derive(rep)
    heights = [p.get_height() for p in speed.patches]
    assert heights == pytest.approx([1 / d["layouts"][n]["step_s"]["median"] for n in LAYOUTS])


JOB = """max_steps: 24
per_device_train_batch_size: 8
gradient_accumulation_steps: 2
learning_rate: 0.001
max_seq_length: 96
seed: 7
logging_steps: 1
save_strategy: steps
save_steps: 7
"""


def _bench_args(tmp_path, *flags):
    from tuning.harness.cli import parser

    return parser().parse_args(
        ["bench", "--gpus", "0", "--nproc", "2", "--run-id", "j", "--runs", str(tmp_path), *flags]
    )


def test_a_users_job_runs_with_its_own_checkpoints_and_the_report_says_so(tmp_path):
    """`make bench JOB=...`: every layout runs the job's save_steps as the job sets them, and
    report.json's meta and report.md's Workload line say so."""
    from tuning.harness.bench import plan
    from tuning.harness.flags.run_flags import RunFlags

    job = tmp_path / "mine.yaml"
    job.write_text(JOB)
    a = _bench_args(tmp_path, "--job", str(job))
    f = plan.workload(a, RunFlags.of(a))
    for name in LAYOUTS:
        spec = plan.spec(a, f, tmp_path / "j", f"j-r1-{name}", name, probe=False, threads=1)
        assert (spec.job["save_strategy"], spec.job["save_steps"]) == ("steps", 7), name
        assert (spec.job["max_steps"], spec.job["max_seq_length"]) == (24, 96)
    meta = report.job_meta(spec.job, f.job, own=f.job == str(plan.BENCH_JOB))
    assert meta["job"]["save_steps"] == 7 and meta["own_workload"] is False
    assert report.workload(meta) == (
        f"Workload: your job (JOB={job}): 24 steps, 8 x 96 tokens a rank, a checkpoint every 7 "
        "steps, as the job sets them (a save's own time is left out of step s; the steps after "
        "it are in)."
    )
    own = report.job_meta(
        {
            "max_steps": 30,
            "per_device_train_batch_size": 32,
            "max_seq_length": 128,
            "save_strategy": "no",
        },
        str(plan.BENCH_JOB),
        own=True,
    )
    assert report.workload(own).startswith(
        "Workload: the bench's own (configs/jobs/bench.yaml): 30 steps, 32 x 128 tokens a rank, "
        "no checkpoints, as the job sets them"
    )


def test_the_bench_prints_its_stopping_rule_and_its_error_first(tmp_path, capsys):
    from tuning.harness.commands import bench

    job = tmp_path / "mine.yaml"
    job.write_text(JOB)
    for repeat, said in (
        (
            "auto",
            "a group-sequential sign test: a look after every round from "
            "5 to 30, 4 % a side spent linearly over the looks, bounds set for rounds "
            "correlated up to 0.3, so a decision can come from round 9 on; at a goal's "
            "edge false MET and false MISSED are 3.8 % each (exact for a walk of rounds so "
            "correlated, whatever the noise; 0.8 % for independent rounds)",
        ),
        (
            "8",
            "8 round(s), one look after 8 rounds: each goal's 90 % interval "
            "of the median; at a goal's edge false MET and false MISSED are 3.5 % "
            "each",
        ),
    ):
        a = _bench_args(tmp_path, "--job", str(job), "--repeat", repeat, "--dry-run")
        assert bench.main(a) == 0
        assert said in capsys.readouterr().out.splitlines()[0]


def test_an_unresolved_goal_says_its_spread_and_the_rounds_it_would_take():
    """Five rounds of a user's job whose step ratio wanders 0.90-1.14 about 1.00: the report
    says how far the rounds spread and how many a fixed bench needs to decide."""
    rep = make_report(repeats=5)
    host = report.derive(rep)["layouts"]["host"]["step_s"]["per_repeat"]
    ratios = (0.90, 1.14, 1.00, 0.95, 1.08)
    for r, h, ratio in zip(rep["layouts"][1]["repeats"], host, ratios, strict=True):
        r["step_s"] = [[h * ratio] * 20, [h * ratio] * 20]
    step = report.derive(rep)["goals"][0]
    assert step["verdict"] == "UNRESOLVED" and step["value"] == pytest.approx(1.00)
    # |ratio - 1.00|: 0.10, 0.14, 0, 0.05, 0.08 -> MAD 0.08, x 1.4826 = 0.119; the median 0.03
    # under 1.03: a round lands past it with chance Phi(-0.03 / 0.119) = 40 %
    assert step["need"]["spread"] == pytest.approx(0.1186, abs=1e-4)
    assert step["need"]["past_chance"] == pytest.approx(0.40, abs=0.005)
    md = report.markdown(rep, report.derive(rep))
    assert (
        "  - why: its paired rounds spread ±0.119 (1.4826 x their median absolute deviation) "
        "about a median 0.030 from the target, so about 40 % of rounds land past it; a fixed "
        "bench, looked at once, would need more than 100 rounds to decide it 4 times in 5, and "
        "a REPEAT=auto bench decides it within its 30 rounds 16 % of the time."
    ) in md.splitlines()


def test_the_report_says_how_much_its_rounds_correlate():
    """Each goal's line is followed by its rounds' lag-1 correlation, and the report says
    where that passes what the design's stated error holds for (0.3)."""
    rep = make_report(repeats=6)
    host = report.derive(rep)["layouts"]["host"]["step_s"]["per_repeat"]
    ratios = (0.90, 0.91, 0.92, 1.10, 1.11, 1.12)  # three slow rounds, then three fast
    for r, h, ratio in zip(rep["layouts"][1]["repeats"], host, ratios, strict=True):
        r["step_s"] = [[h * ratio] * 20, [h * ratio] * 20]
    rep["meta"]["design"] = stopping.SEQUENTIAL.as_meta()
    step = report.derive(rep)["goals"][0]
    assert step["lag1"]["n"] == 6 and step["lag1"]["r"] > 0.4, step["lag1"]
    md = report.markdown(rep, report.derive(rep)).splitlines()
    said = next(ln for ln in md if ln.startswith("  - rounds: its 6 paired rounds correlate"))
    assert "the stated error holds up to 0.3" in said or "more than the 0.3" in said, said
    ratios = (0.90, 1.12, 0.91, 1.11, 0.92, 1.10)  # alternating: negative
    for r, h, ratio in zip(rep["layouts"][1]["repeats"], host, ratios, strict=True):
        r["step_s"] = [[h * ratio] * 20, [h * ratio] * 20]
    assert report.derive(rep)["goals"][0]["lag1"]["r"] < -0.5
