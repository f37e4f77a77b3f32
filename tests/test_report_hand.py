"""report_derive on a profile small enough to work by hand: every expected figure is written
here as a number, worked out in the comments (no recomputation of the module's code); and
what the report does with pairs, missed goals and missing layouts."""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_report import REPO, make_report

from tuning.harness.commands import report as rp


def _repeat(container_start_s, step_s: float, busbw: float) -> dict:
    return {
        "run_id": "r",
        "phases": {"container_start_s": container_start_s, "imports_s": 3.0,
                   "rendezvous_s": 0.5, "model_load_s": 1.0, "first_step_s": 0.5},
        # rank 1 logged one step fewer: steps are cut to the shortest list (3)
        "step_s": [[step_s] * 4, [step_s] * 3],
        "tokens": [[100] * 4, [100] * 3],
        "probe": {"backend": "gloo", "world_size": 2,
                  "samples": [{"bytes": 1024, "busbw_GBps": busbw / 2},
                              {"bytes": 4096, "busbw_GBps": busbw}],
                  "transport": [{"rank": 0, "interface": "lo"}]},
        "peak_memory_bytes": [1000, 2000],
    }  # fmt: skip


REPORT = {
    "schema_version": 1,
    "meta": {"bench": "hand"},
    "layouts": [
        {"name": "host", "repeats": [_repeat(None, 0.5, 0.8)]},
        {"name": "single", "repeats": [_repeat(1.0, 0.51, 0.6)]},
    ],
}


def test_figures_of_a_hand_worked_profile():
    d = rp.derive(REPORT)["layouts"]
    host, single = d["host"], d["single"]
    assert host["step_s"]["median"] == pytest.approx(0.5)
    assert single["step_s"]["median"] == pytest.approx(0.51)
    # 3.0 + 0.5 + 1.0 + 0.5 (host: no container) and 1.0 more for single's container
    assert host["launch_to_first_step_s"] == pytest.approx(5.0)
    assert single["launch_to_first_step_s"] == pytest.approx(6.0)
    # 700 tokens / the slowest rank's 4 x 0.5 s = 350; per rank 100 / 0.5 = 200
    assert host["tokens_per_s"]["global"] == pytest.approx(350.0)
    assert host["tokens_per_s"]["per_rank"] == pytest.approx([200.0, 200.0])
    assert host["busbw_largest_GBps"] == pytest.approx(0.8)
    assert host["busbw_largest_bytes"] == 4096
    assert host["peak_memory_max_bytes"] == 2000
    assert host["transport"] == ["gloo/lo"]
    # 0.51 / 0.5 over one pair
    assert single["ratios"]["step_s"]["host"] == {"median": pytest.approx(1.02), "pairs": 1}


def test_goals_of_a_hand_worked_profile():
    goals = rp.derive(REPORT)["goals"]
    assert goals[0]["value"] == pytest.approx(1.02) and goals[0]["met"] is True  # <= 1.03
    assert goals[1]["met"] is None  # no per-rank-shared run
    assert goals[2]["value"] == pytest.approx(1.0) and goals[2]["met"] is True  # within 2 s


def test_pairwise_median_ratio_differs_from_ratio_of_medians():
    """Round effects (a slow round slows every layout in it) cancel only pair by pair."""
    rep = make_report(repeats=3)
    lay = {x["name"]: x for x in rep["layouts"]}
    host_steps, single_steps = [1.0, 2.0, 3.0], [1.1, 1.8, 3.6]
    for i in range(3):
        for name, s in (("host", host_steps[i]), ("single", single_steps[i])):
            lay[name]["repeats"][i]["step_s"] = [[s] * 5, [s] * 5]
    d = rp.derive(rep)
    pairwise = d["layouts"]["single"]["ratios"]["step_s"]["host"]
    assert pairwise == {"median": pytest.approx(1.1), "pairs": 3}  # median(1.1, 0.9, 1.2)
    of_medians = (
        d["layouts"]["single"]["step_s"]["median"] / d["layouts"]["host"]["step_s"]["median"]
    )
    assert of_medians == pytest.approx(0.9)  # 1.8 / 2.0: would wrongly say "faster than host"
    assert d["goals"][0]["value"] == pytest.approx(1.1) and d["goals"][0]["met"] is False


def test_missed_goals_name_their_cause():
    rep = make_report()
    lay = {x["name"]: x for x in rep["layouts"]}
    for r in lay["single"]["repeats"]:
        r["phases"]["container_start_s"] = 4.0  # host has none: +4 s
    for r in lay["per-rank-shared"]["repeats"]:
        r["transport"] = ["gloo/eth0"]
    goals = rp.derive(rep)["goals"]
    assert goals[2]["met"] is False and "container_start_s" in goals[2]["sentence"]
    assert goals[1]["met"] is False
    assert "per-rank-shared uses gloo/eth0 where single uses gloo/lo" in goals[1]["sentence"]


def test_missing_layouts_and_nulls_do_not_crash(tmp_path):
    rep = make_report()
    rep["layouts"] = [x for x in rep["layouts"] if x["name"] in ("host", "per-rank-isolated")]
    rep["layouts"][1]["repeats"][0]["probe"] = None
    j, m, p = rp.write(rep, tmp_path)
    goals = rp.derive(rep)["goals"]
    assert [g["met"] for g in goals] == [None, None, None]
    assert "NOT MEASURED" in m.read_text() and p.is_file()


def test_report_module_never_imports_torch():
    code = (
        "import sys, tuning.harness.commands.report as r; r.derive({'layouts': []});"
        " print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
