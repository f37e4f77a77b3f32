"""report_derive, report_goals and report.md on a profile small enough to work by hand: three
(the table) or five (the verdicts) rounds of host, single and per-rank-shared whose every cell
is written below, and every expected figure and verdict written here as a literal, worked out
in the comments (nothing recomputes the module's formulas).

The interval of a median over n rounds is [min, max] for n = 3 to 7: it misses the median
only when every round lands on one side of it, 2 x (1/2)^n: 75 % for 3 rounds (too unsure to
decide), 93.75 % ("94 %") for 5."""

from __future__ import annotations

import subprocess
import sys
from copy import deepcopy

import pytest

from support.bench_report import parse_table
from support.paths import ROOT
from tuning.harness.bench import report

MIB = 1024 * 1024
# Per round; every steady step of both ranks the same. Rounds 4 and 5 keep the first three's
# medians and ranges: ratios 1.02, 1.05, 1.00, 1.01, 1.04 -> median 1.02, [1.00, 1.05]
HOST_STEP = (0.50, 0.40, 0.60, 0.50, 0.50)
SINGLE_STEP = (0.51, 0.42, 0.60, 0.505, 0.52)
SHARED_BUSBW = (0.8, 0.9, 0.85, 0.82, 0.88)  # ratios to single's 1.0: 0.85, [0.80, 0.90]
SINGLE_CONTAINER = (0.5, 1.0, 1.5, 0.8, 1.2)  # single - host launch: median +1.0, [0.5, 1.5]


def _probe(busbw: float, iface: str, loopback: bool) -> dict:
    return {
        "backend": "gloo",
        "world_size": 2,
        "samples": [{"bytes": 1024, "busbw_GBps": busbw / 2}, {"bytes": 4096, "busbw_GBps": busbw}],
        "transport": [{"rank": r, "interface": iface, "loopback": loopback} for r in (0, 1)],
    }


def _repeat(step: float, busbw: float, container, iface="lo", loopback=True) -> dict:
    return {
        "phases": {
            "container_start_s": container,
            "launcher_s": 2.0,
            "imports_s": 3.0,
            "rendezvous_s": 0.5,
            "model_load_s": 1.0,
            "first_step_s": 0.5,
        },
        "step_s": [[step] * 3, [step] * 3],
        "tokens": [[100] * 3, [100] * 3],
        "probe": _probe(busbw, iface, loopback),
        "peak_memory_bytes": [100 * MIB, 200 * MIB],
    }


def profile(rounds: int = 3) -> dict:
    host = [_repeat(HOST_STEP[i], 1.0, None) for i in range(rounds)]
    # single: gloo binds the hostname's eth0 address, but both ranks share one namespace
    single = [_repeat(SINGLE_STEP[i], 1.0, SINGLE_CONTAINER[i], "eth0") for i in range(rounds)]
    shared = [_repeat(0.5, SHARED_BUSBW[i], 1.0) for i in range(rounds)]
    return {
        "schema_version": 1,
        "meta": {"bench": "hand"},
        "layouts": [
            {"name": "host", "repeats": host},
            {"name": "single", "repeats": single},
            {"name": "per-rank-shared", "repeats": shared},
        ],
    }


def test_every_cell_of_the_table():
    rep = profile()
    table = parse_table(report.markdown(rep, report.derive(rep)))
    # host: launch 2 + 3 + 0.5 + 1 + 0.5 = 7.0 every round. Steps pooled: 0.4 x3, 0.5 x3,
    # 0.6 x3: median 0.5, p10 and p90 (inclusive, positions 0.8 and 7.2) 0.4 and 0.6.
    # tokens: 600 per round over 3 steps of 0.5/0.4/0.6 s: 400, 500, 333.3 -> 400; per rank
    # 300 over the same: 200. Peak memory: 200 MiB. Ratios to itself 1, 1, 1.
    # host / single: 0.5/0.51, 0.4/0.42, 1: 0.980, 0.952, 1.000 -> median 0.980
    assert table["host"] == [
        "host",
        "7.000",
        "0.5000 [0.4000, 0.6000]",
        "400.0 (per rank 200.0, 200.0)",
        "1.000",
        "200.0",
        "gloo/lo",
        "1.000 [1.000, 1.000]",
        "0.980 [0.952, 1.000]",
        "1.000 [1.000, 1.000]",
    ]
    # single: launch 7.5, 8.0, 8.5 -> 8.0; steps 0.42 x3, 0.51 x3, 0.6 x3: median 0.51.
    # tokens 600 / 1.53, 1.26, 1.8: 392.2, 476.2, 333.3 -> 392.2; per rank 196.1.
    assert table["single"] == [
        "single",
        "8.000",
        "0.5100 [0.4200, 0.6000]",
        "392.2 (per rank 196.1, 196.1)",
        "1.000",
        "200.0",
        "gloo/eth0 via lo",
        "1.020 [1.000, 1.050]",
        "1.000 [1.000, 1.000]",
        "1.000 [1.000, 1.000]",
    ]
    # per-rank-shared: launch 8.0 every round; busbw 0.8, 0.9, 0.85 -> 0.85; step 0.5 against
    # host's 0.5, 0.4, 0.6: 1.0, 1.25, 0.833 -> 1.000 [0.833, 1.250]
    assert table["per-rank-shared"] == [
        "per-rank-shared",
        "8.000",
        "0.5000 [0.5000, 0.5000]",
        "400.0 (per rank 200.0, 200.0)",
        "0.850",
        "200.0",
        "gloo/lo",
        "1.000 [0.833, 1.250]",
        "0.980 [0.833, 1.190]",
        "0.850 [0.800, 0.900]",
    ]


def test_three_way_verdicts_with_their_intervals():
    goals = report.derive(profile(5))["goals"]
    assert [g["verdict"] for g in goals] == ["UNRESOLVED", "MISSED", "MET"]
    step, busbw, launch = goals
    assert step["value"] == pytest.approx(1.02)
    assert step["interval"] == pytest.approx((1.00, 1.05))  # spans 1.03
    # half-width 0.025, 0.01 from the target: 5 x (0.025 / 0.01)^2 = 31.25 -> 32 pairs, 27 more
    assert step["more_rounds"] == 27
    assert busbw["value"] == pytest.approx(0.85) and busbw["interval"] == pytest.approx((0.8, 0.9))
    assert launch["value"] == pytest.approx(1.0) and launch["interval"] == pytest.approx((0.5, 1.5))
    md = report.markdown(profile(5), report.derive(profile(5)))
    lines = [ln for ln in md.splitlines() if ln.startswith("- ")]
    assert lines == [
        "- UNRESOLVED: single/host steady step time ratio 1.020, 94 % interval [1.000, 1.050] "
        "(target <= 1.03, median of 5 paired ratios): unresolved: the interval spans the "
        "target; about 27 more rounds would likely resolve it.",
        # single's eth0 stays inside its namespace: the same path as host's lo
        "- MISSED: per-rank-shared/single busbw at largest size ratio 0.850, 94 % interval "
        "[0.800, 0.900] (target >= 0.95, median of 5 paired ratios): missed; not the "
        "transport: both layouts' collectives take the same path (loopback).",
        "- MET: single - host launch-to-first-step difference +1.000 s, 94 % interval "
        "[+0.500, +1.500] s (target <= 2.0 s, median of 5 paired differences): met.",
    ]


def test_three_rounds_decide_nothing():
    """The same figures over the first three rounds: a 75 % interval, too unsure for a verdict
    however clear the figure (busbw 0.80-0.90 is wholly below its 0.95 target)."""
    goals = report.derive(profile(3))["goals"]
    # step: 3 x (0.025 / 0.01)^2 = 18.75 -> 16 more; busbw and launch: at least 5 - 3 = 2
    assert [(g["verdict"], g["more_rounds"]) for g in goals] == [
        ("UNRESOLVED", 16),
        ("UNRESOLVED", 2),
        ("UNRESOLVED", 2),
    ]
    assert goals[1]["sentence"] == (
        "per-rank-shared/single busbw at largest size ratio 0.850, 75 % interval [0.800, 0.900] "
        "(target >= 0.95, median of 3 paired ratios): unresolved: 3 rounds give no 90 % interval "
        "(it takes 5); about 2 more rounds would likely resolve it."
    )


def test_a_missed_goal_names_only_a_part_measured_beyond_its_uncertainty():
    rep = profile(5)
    single = rep["layouts"][1]["repeats"]
    for r, extra in zip(single, (4.0, 3.0, 3.5, 3.7, 3.3), strict=True):
        r["phases"]["container_start_s"] += extra  # 4.5, 4.0, 5.0, 4.5, 4.5: median 4.5
    single[1]["phases"]["imports_s"] = 3.4  # later in one round only: interval [0, 0.4]
    launch = report.derive(rep)["goals"][2]
    # launch differences 4.5, 4.4 (container 4.0 + imports 0.4), 5.0, 4.5, 4.5
    assert launch["verdict"] == "MISSED" and launch["interval"] == pytest.approx((4.4, 5.0))
    # container start: 4.0 to 5.0 later -> named; imports 0, +0.4, 0, 0, 0: not beyond zero
    assert launch["sentence"].endswith(
        "missed; container_start_s is later by +4.500 s [+4.000, +5.000] (median of paired "
        "differences)."
    )
    for r in single:
        r["phases"]["container_start_s"] = 3.0
    single[0]["phases"]["container_start_s"] = 5.0  # differences +5, +3, +3, +3, +3: MISSED
    single[1]["phases"]["imports_s"] = 3.0
    assert report.derive(rep)["goals"][2]["sentence"].endswith(
        "container_start_s is later by +3.000 s [+3.000, +5.000] (median of paired differences)."
    )


def test_the_transport_is_blamed_only_when_the_paths_differ():
    rep = profile(5)
    for r in rep["layouts"][2]["repeats"]:  # per-rank-shared over a bridge: its own namespace
        r["probe"] = _probe(r["probe"]["samples"][1]["busbw_GBps"], "eth0", loopback=False)
    busbw = report.derive(rep)["goals"][1]
    assert busbw["verdict"] == "MISSED"
    assert busbw["sentence"].endswith(
        "missed; the transport differs: per-rank-shared's collective takes gloo/eth0 where "
        "single's takes loopback."
    )


def test_a_slower_step_blames_the_collective_only_when_it_is_measurably_slower():
    rep = profile(5)
    single = rep["layouts"][1]["repeats"]
    for r, s in zip(single, (0.56, 0.44, 0.66, 0.55, 0.56), strict=True):  # 1.10-1.12: MISSED
        r["step_s"] = [[s] * 3, [s] * 3]
    step = report.derive(rep)["goals"][0]
    assert step["verdict"] == "MISSED"
    assert step["sentence"].endswith(
        "missed; no measured part explains it: the collective is not slower beyond its "
        "uncertainty (busbw ratio single/host 1.000 [1.000, 1.000]); the rest is the step's "
        "compute."
    )
    for r, bw in zip(single, (0.7, 0.8, 0.6, 0.75, 0.65), strict=True):  # 0.7 [0.6, 0.8]: < 1
        r["probe"]["samples"][1]["busbw_GBps"] = bw
    assert report.derive(rep)["goals"][0]["sentence"].endswith(
        "missed; the collective is slower (busbw ratio single/host 0.700 [0.600, 0.800]); not "
        "the transport: both layouts' collectives take the same path (loopback)."
    )


def test_one_round_is_unresolved_and_asks_for_four_more():
    goals = report.derive(profile(rounds=1))["goals"]
    assert [(g["verdict"], g["interval"], g["more_rounds"]) for g in goals] == [
        ("UNRESOLVED", None, 4),
        ("UNRESOLVED", None, 4),
        ("UNRESOLVED", None, 4),
    ]
    assert "ratio 1.020, no interval: one pair (target <= 1.03," in goals[0]["sentence"]
    assert goals[0]["sentence"].endswith(
        "unresolved: one pair gives no interval; about 4 more rounds would likely resolve it."
    )


def test_pairwise_median_ratio_differs_from_ratio_of_medians():
    """Round effects (a slow round slows every layout in it) cancel only pair by pair."""
    rep = profile()
    for lay, steps in zip(rep["layouts"][:2], ((1.0, 2.0, 3.0), (1.1, 1.8, 3.6)), strict=True):
        for r, s in zip(lay["repeats"], steps, strict=True):
            r["step_s"] = [[s] * 5, [s] * 5]
    d = report.derive(rep)
    pairwise = d["layouts"]["single"]["ratios"]["step_s"]["host"]
    assert pairwise["median"] == pytest.approx(1.1)  # median(1.1, 0.9, 1.2)
    assert pairwise["interval"] == pytest.approx([0.9, 1.2]) and pairwise["pairs"] == 3
    of_medians = (
        d["layouts"]["single"]["step_s"]["median"] / d["layouts"]["host"]["step_s"]["median"]
    )
    assert of_medians == pytest.approx(0.9)  # 1.8 / 2.0: would wrongly say "faster than host"


def test_missing_layouts_and_nulls_do_not_crash(tmp_path):
    rep = deepcopy(profile())
    rep["layouts"] = [rep["layouts"][0]]
    rep["layouts"][0]["repeats"][0]["probe"] = None
    j, m, p = report.write(rep, tmp_path)
    goals = report.derive(rep)["goals"]
    assert [g["verdict"] for g in goals] == ["NOT MEASURED"] * 3
    assert (
        "- NOT MEASURED: single/host steady step time: not measured (no single)." in m.read_text()
    )
    assert p.is_file()


def test_report_module_never_imports_torch():
    code = (
        "import sys, tuning.harness.bench.report as r; r.derive({'layouts': []});"
        " print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def test_a_gap_no_single_phase_explains_names_none():
    """+3 s every round, but from imports in rounds 1-2 and model load in rounds 3-5: the launch
    goal is MISSED ([3, 3]) while each phase's interval is [0, 3], not beyond zero."""
    rep = profile(5)
    for i, r in enumerate(rep["layouts"][1]["repeats"]):
        r["phases"]["container_start_s"] = None  # as host: no container part
        r["phases"]["imports_s" if i < 2 else "model_load_s"] += 3.0
    launch = report.derive(rep)["goals"][2]
    assert launch["verdict"] == "MISSED" and launch["interval"] == pytest.approx((3.0, 3.0))
    assert launch["sentence"].endswith("missed; no phase is later beyond its uncertainty.")


def test_the_median_interval_takes_order_statistics_and_says_its_coverage():
    from tuning.harness.bench import report_stats

    # coverage 1 - 2 P(Binomial(n, 1/2) < k): n=3 k=1: 1 - 2/8; n=5: 1 - 2/32; n=8 k=2: 1 - 18/256
    assert [report_stats.coverage_of(n) for n in (2, 3, 5, 8)] == [0.5, 0.75, 0.9375, 0.9296875]
    assert report_stats.MIN_PAIRS == 5
    assert report_stats.interval([1.0]) is None
    assert report_stats.interval([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert report_stats.interval([8, 1, 7, 2, 6, 3, 5, 4]) == (
        2,
        7,
    )  # k=2 from 8 rounds: x_2 and x_7
