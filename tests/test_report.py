"""tuning.harness.commands.report: every figure in report.md recomputed here from report.json's raw
samples with numpy (an independent implementation), the PNG checked, pairwise ratios proven.
Fast; no docker, no torch."""

from __future__ import annotations

import json
import random
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from tuning.harness.commands import report as rp

REPO = Path(__file__).resolve().parents[1]
ORDER = ["host", "single", "per-rank-isolated", "per-rank-shared"]
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
    layouts = {name: {"name": name, "repeats": []} for name in ORDER}
    for _round in range(repeats):  # A B C D A B C D ...
        for name in ORDER:
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


# ---------------------------------------------------------------------------------------
# Independent recomputation (numpy), from report.json's raw samples only
# ---------------------------------------------------------------------------------------


def _steps(rep):
    n = min(len(r) for r in rep["step_s"])
    return np.max(np.array([r[:n] for r in rep["step_s"]]), axis=0)


def _launch(rep):
    return sum(v for v in rep["phases"].values() if v is not None)


def _tok(rep):
    tot = sum(sum(t) for t in rep["tokens"])
    return tot / max(sum(s) for s in rep["step_s"]), [
        sum(t) / sum(s) for t, s in zip(rep["tokens"], rep["step_s"], strict=True)
    ]


def _bus(rep):
    return max(rep["probe"]["samples"], key=lambda s: s["bytes"])["busbw_GBps"]


def _transport(rep):
    if rep.get("transport"):
        return set(rep["transport"])
    return {f"gloo/{t['interface']}" for t in rep["probe"]["transport"]}


def recompute(raw: dict) -> dict:
    lay = {lay_["name"]: lay_["repeats"] for lay_ in raw["layouts"]}

    def pair(name, ref, f):
        return float(np.median([f(a) / f(b) for a, b in zip(lay[name], lay[ref], strict=True)]))

    rows = {}
    for name, reps in lay.items():
        pooled = np.concatenate([_steps(r) for r in reps])
        toks = [_tok(r) for r in reps]
        rows[name] = {
            "first": float(np.median([_launch(r) for r in reps])),
            "step": float(np.median(pooled)),
            "p10": float(np.percentile(pooled, 10)),
            "p90": float(np.percentile(pooled, 90)),
            "tok": float(np.median([t[0] for t in toks])),
            "tok_rank": [float(np.median([t[1][i] for t in toks])) for i in range(NRANKS)],
            "bus": float(np.median([_bus(r) for r in reps])),
            "mem": max(max(r["peak_memory_bytes"]) for r in reps) / 2**20,
            "transport": ", ".join(sorted(set().union(*(_transport(r) for r in reps)))),
            "step_host": pair(name, "host", lambda r: np.median(_steps(r))),
            "step_single": pair(name, "single", lambda r: np.median(_steps(r))),
            "bus_single": pair(name, "single", _bus),
        }
    goals = {
        "step": pair("single", "host", lambda r: np.median(_steps(r))),
        "bus": pair("per-rank-shared", "single", _bus),
        "launch": float(
            np.median(
                [_launch(a) - _launch(b) for a, b in zip(lay["single"], lay["host"], strict=True)]
            )
        ),
    }
    return {"rows": rows, "goals": goals}


def parse_table(md: str) -> dict[str, list[str]]:
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == list(rp.TABLE_HEADER)
    assert set(lines[1].replace("|", "").split()) == {"---"}
    return {
        cells[0]: cells
        for cells in ([c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:])
    }


def close(text: str, value: float, decimals: int):
    assert float(text) == pytest.approx(value, abs=0.5 * 10**-decimals + 1e-12), (text, value)


# ---------------------------------------------------------------------------------------


def assert_table_matches(md: str, raw: dict, order: list[str]) -> dict[str, list[str]]:
    """Every figure of report.md's table, recomputed independently from the raw samples."""
    want = recompute(raw)
    table = parse_table(md)
    assert list(table) == order  # rows in run order
    for name, cells in table.items():
        w = want["rows"][name]
        close(cells[1], w["first"], 3)
        mm = re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", cells[2])
        close(mm[1], w["step"], 4)
        close(mm[2], w["p10"], 4)
        close(mm[3], w["p90"], 4)
        mt = re.fullmatch(r"(\S+) \(per rank (\S+), (\S+)\)", cells[3])
        close(mt[1], w["tok"], 1)
        close(mt[2], w["tok_rank"][0], 1)
        close(mt[3], w["tok_rank"][1], 1)
        close(cells[4], w["bus"], 3)
        close(cells[5], w["mem"], 1)
        assert cells[6] == w["transport"]
        close(cells[7], w["step_host"], 3)
        close(cells[8], w["step_single"], 3)
        close(cells[9], w["bus_single"], 3)
    return table


@pytest.fixture
def written(tmp_path):
    rep = make_report()
    paths = rp.write(rep, tmp_path / "bench")
    return rep, paths


def test_write_makes_three_files(written):
    _, (j, m, p) = written
    assert [x.name for x in (j, m, p)] == ["report.json", "report.md", "report.png"]
    assert all(x.is_file() and x.stat().st_size > 0 for x in (j, m, p))


def test_every_table_figure_recomputed_from_raw_samples(written):
    rep, (j, m, _) = written
    doc = json.loads(j.read_text())
    assert doc["layouts"] == json.loads(json.dumps(rep["layouts"]))  # raw samples kept verbatim
    assert "derived" in doc
    raw = {k: v for k, v in doc.items() if k != "derived"}  # recompute ignores derived
    table = assert_table_matches(m.read_text(), raw, ORDER)
    assert table["host"][7] == "1.000" and table["single"][8] == "1.000"
    assert table["per-rank-isolated"][6] == "gloo/eth0" and table["host"][6] == "gloo/lo"


def test_goal_lines_recomputed(written):
    rep, (j, m, _) = written
    want = recompute(json.loads(j.read_text()))["goals"]
    goals = [ln for ln in m.read_text().splitlines() if ln.startswith("- ")]
    assert len(goals) == 3
    step = re.search(r"single/host steady step time ratio (\S+) ", goals[0])
    close(step[1], want["step"], 3)
    assert goals[0].startswith("- MET" if want["step"] <= 1.03 else "- MISSED")
    bus = re.search(r"busbw at largest size ratio (\S+) ", goals[1])
    close(bus[1], want["bus"], 3)
    assert want["bus"] < 0.95 and goals[1].startswith("- MISSED")
    assert "same transport (gloo/lo)" in goals[1]  # the cause is named
    launch = re.search(r"launch-to-first-step (\S+) s ", goals[2])
    close(launch[1], want["launch"], 3)
    assert goals[2].startswith("- MET" if want["launch"] <= 2.0 else "- MISSED")


def test_png_is_valid_and_figure_has_both_panels(written):
    rep, (_, _, png) = written
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, ctype = struct.unpack(">I4s", data[8:16])
    assert (length, ctype) == (13, b"IHDR")
    w, h = struct.unpack(">II", data[16:24])
    assert w > h > 0  # a picture, wider than tall (two panels side by side)
    fig = rp.figure(rep)
    assert len(fig.axes) == 2
    speed, bw = fig.axes
    assert len(speed.patches) == len(ORDER)  # one bar per layout
    assert speed.containers and any(
        type(c).__name__ == "ErrorbarContainer" for c in speed.containers
    )
    assert bw.get_xscale() == "log"
    assert sorted(line.get_label() for line in bw.lines) == sorted(ORDER)
    assert all(len(line.get_xdata()) == len(SIZES) for line in bw.lines)
    # steps per second plotted = 1 / median step time
    d = rp.derive(rep)
    heights = [p.get_height() for p in speed.patches]
    assert heights == pytest.approx([1 / d["layouts"][n]["step_s"]["median"] for n in ORDER])
