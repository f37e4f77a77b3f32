"""The bench report's derived figures (`derive`): from the raw samples (the schema is in
report.py's docstring) to medians, spreads, paired ratios and the goals.

Derived figures (`derive`), per layout
--------------------------------------
- ``phases_s``: median over repeats of each phase (nulls skipped; null if never seen).
- ``launch_to_first_step_s``: median over repeats of the sum of that repeat's non-null phases.
- ``step_s``: a step's time is the max over ranks at that step index (the slowest rank sets the
  pace; ranks are cut to the shortest list). ``median``, ``p10`` and ``p90`` are taken over all
  steady steps of all repeats pooled (``statistics.quantiles(n=10, method="inclusive")``, i.e.
  linear interpolation); ``per_repeat`` holds each repeat's median (used for ratios).
- ``tokens_per_s``: per repeat, global = all ranks' tokens / the slowest rank's summed step
  time, per rank = that rank's tokens / its summed step time; median over repeats.
- ``busbw_largest_GBps``: busbw of the probe sample with the most bytes, median over repeats
  (``busbw_largest_bytes`` names that size); ``busbw_curve``: size -> median busbw.
- ``peak_memory_bytes``: per rank, the max over repeats; ``peak_memory_max_bytes`` the max of
  those.
- ``transport``: sorted unique transport strings over repeats.
- ``ratios``: for step_s, busbw_largest_GBps, tokens_per_s and launch_to_first_step_s, against
  ``host`` and ``single``: repeat i of the layout divided by repeat i of the reference, then
  the median of those ratios (not the ratio of medians), the number of pairs, the per-round
  ratios and the order-statistic interval of the median (`report_stats.paired`).
- ``per_repeat``: the per-round figures the ratios and the goals pair.

Goals (``derived["goals"]``, three-way verdicts with their intervals): `bench/report_goals.py`,
under the stopping rule the rounds ran by (`bench/stopping.py`; meta.design).
"""

from __future__ import annotations

import statistics
from typing import Any

from tuning.container.shared.transport import probe_transport
from tuning.harness.bench.report_goals import goals
from tuning.harness.bench.report_stats import paired
from tuning.harness.bench.stopping import Design, from_meta

PHASES = (
    "container_start_s",
    "launcher_s",
    "imports_s",
    "rendezvous_s",
    "model_load_s",
    "first_step_s",
)
REFERENCES = ("host", "single")


# ---------------------------------------------------------------------------------------
# Small statistics
# ---------------------------------------------------------------------------------------


def _median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _p10_p90(xs: list[float]) -> tuple[float, float]:
    if len(xs) == 1:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=10, method="inclusive")
    return q[0], q[8]


def _steps(repeat: dict) -> list[float]:
    """Per-step time of a repeat: max over ranks at each step index."""
    per_rank = [list(r) for r in repeat.get("step_s") or [] if r]
    if not per_rank:
        return []
    n = min(len(r) for r in per_rank)
    return [max(r[i] for r in per_rank) for i in range(n)]


def _tokens(repeat: dict) -> tuple[float | None, list[float | None]]:
    steps = repeat.get("step_s") or []
    toks = repeat.get("tokens") or []
    per_rank: list[float | None] = []
    total_tok, slowest = 0.0, 0.0
    for r, st in enumerate(steps):
        tk = toks[r] if r < len(toks) else None
        if not st or tk is None:
            per_rank.append(None)
            continue
        ntok = float(tk) * len(st) if isinstance(tk, int | float) else float(sum(tk))
        per_rank.append(ntok / sum(st))
        total_tok += ntok
        slowest = max(slowest, sum(st))
    glob = total_tok / slowest if slowest > 0 and None not in per_rank else None
    return glob, per_rank


def _largest_busbw(repeat: dict) -> tuple[int | None, float | None]:
    samples = (repeat.get("probe") or {}).get("samples") or []
    if not samples:
        return None, None
    s = max(samples, key=lambda s: s["bytes"])
    return s["bytes"], s["busbw_GBps"]


def _launch(repeat: dict) -> float | None:
    parts = [v for v in (repeat.get("phases") or {}).values() if v is not None]
    return sum(parts) if parts else None


def _transport(repeat: dict) -> list[str]:
    if repeat.get("transport"):
        return list(repeat["transport"])
    return probe_transport(repeat.get("probe"))


def _per_repeat(layout: dict) -> dict[str, list]:
    """Per-repeat scalars used both for medians and for pairwise ratios."""
    reps = layout.get("repeats") or []
    return {
        "step_s": [_median(_steps(r)) for r in reps],
        "busbw_largest_GBps": [_largest_busbw(r)[1] for r in reps],
        "tokens_per_s": [_tokens(r)[0] for r in reps],
        "launch_to_first_step_s": [_launch(r) for r in reps],
    }


# ---------------------------------------------------------------------------------------
# derive
# ---------------------------------------------------------------------------------------


def _derive_layout(layout: dict) -> dict[str, Any]:
    reps = layout.get("repeats") or []
    pooled = [s for r in reps for s in _steps(r)]
    p10, p90 = _p10_p90(pooled) if pooled else (None, None)
    toks = [_tokens(r) for r in reps]
    nranks = max((len(t[1]) for t in toks), default=0)
    sizes: dict[int, list[float]] = {}
    for r in reps:
        for s in (r.get("probe") or {}).get("samples") or []:
            sizes.setdefault(s["bytes"], []).append(s["busbw_GBps"])
    largest = [_largest_busbw(r) for r in reps]
    mem_ranks = max((len(r.get("peak_memory_bytes") or []) for r in reps), default=0)
    peak = [
        max(
            (r["peak_memory_bytes"][i] for r in reps if len(r.get("peak_memory_bytes") or []) > i),
            default=None,
        )
        for i in range(mem_ranks)
    ]
    per = _per_repeat(layout)
    return {
        "repeats": len(reps),
        "phases_s": {p: _median((r.get("phases") or {}).get(p) for r in reps) for p in PHASES},
        "launch_to_first_step_s": _median(per["launch_to_first_step_s"]),
        "step_s": {
            "median": _median(pooled),
            "p10": p10,
            "p90": p90,
            "spread": "p10/p90 of steady steps pooled over repeats",
            "steps": len(pooled),
            "per_repeat": per["step_s"],
        },
        "tokens_per_s": {
            "global": _median(t[0] for t in toks),
            "per_rank": [
                _median(t[1][i] if i < len(t[1]) else None for t in toks) for i in range(nranks)
            ],
        },
        "busbw_largest_bytes": max((b for b, _ in largest if b is not None), default=None),
        "busbw_largest_GBps": _median(v for _, v in largest),
        "busbw_curve": {str(b): statistics.median(v) for b, v in sorted(sizes.items())},
        "peak_memory_bytes": peak,
        "peak_memory_max_bytes": max((p for p in peak if p is not None), default=None),
        "transport": sorted({t for r in reps for t in _transport(r)}),
        "per_repeat": per,
    }


def derive(report: dict, design: Design | None = None) -> dict:
    """Derived figures for every layout, paired ratios to host and single, and the goals
    (decided by `design`, else by the one in the report's meta)."""
    layouts = report.get("layouts") or []
    derived: dict[str, Any] = {
        "order": [lay["name"] for lay in layouts],
        "layouts": {lay["name"]: _derive_layout(lay) for lay in layouts},
    }
    per = {lay["name"]: _per_repeat(lay) for lay in layouts}
    empty = {"median": None, "pairs": 0, "interval": None, "per_round": []}
    for name, d in derived["layouts"].items():
        d["ratios"] = {
            metric: {
                ref: paired(per[name][metric], per[ref][metric]) if ref in per else empty
                for ref in REFERENCES
            }
            for metric in ("step_s", "busbw_largest_GBps", "tokens_per_s", "launch_to_first_step_s")
        }
    decided = goals(report, derived, per, design or from_meta(report.get("meta")))
    derived["goals"] = [g.to_json() for g in decided]  # as report.json holds them
    return derived
