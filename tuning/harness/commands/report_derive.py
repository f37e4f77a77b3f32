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
  the median of those ratios (not the ratio of medians), with the number of pairs.

Goals (``derived["goals"]``): single/host steady step time <= 1.03; per-rank-shared/single
busbw at the largest size >= 0.95; single launch-to-first-step within 2 s of host (median of
the paired differences). A missed goal gets a sentence naming its cause: the phase whose paired
difference is largest, or the transports of the two layouts.
"""

from __future__ import annotations

import statistics
from typing import Any

from tuning.transport import probe_transport

PHASES = ("container_start_s", "launcher_s", "imports_s", "rendezvous_s", "model_load_s",
          "first_step_s")  # fmt: skip
REFERENCES = ("host", "single")

GOAL_STEP_RATIO = 1.03
GOAL_BUSBW_RATIO = 0.95
GOAL_LAUNCH_DELTA_S = 2.0


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


def paired_ratio(xs: list, refs: list) -> tuple[float | None, int]:
    """Median over i of xs[i] / refs[i] (pairs with a missing value skipped), and the pairs."""
    rs = [x / r for x, r in zip(xs, refs, strict=False) if x is not None and r]
    return (statistics.median(rs) if rs else None), len(rs)


def paired_diff(xs: list, refs: list) -> tuple[float | None, int]:
    ds = [x - r for x, r in zip(xs, refs, strict=False) if x is not None and r is not None]
    return (statistics.median(ds) if ds else None), len(ds)


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
    }


def _by_name(report: dict) -> dict[str, dict]:
    return {lay["name"]: lay for lay in report.get("layouts") or []}


def _phase_cause(report: dict, name: str, ref: str) -> str:
    """Sentence naming the phase whose paired median difference (name - ref) is largest."""
    lays = _by_name(report)
    a, b = lays[name].get("repeats") or [], lays[ref].get("repeats") or []
    best = None
    for p in PHASES:
        xs = [(r.get("phases") or {}).get(p) or 0.0 for r in a]
        ys = [(r.get("phases") or {}).get(p) or 0.0 for r in b]
        d, n = paired_diff(xs, ys)
        if n and (best is None or d > best[1]):
            best = (p, d, _median(xs), _median(ys))
    if best is None:
        return "no phase timings to compare."
    p, d, x, y = best
    return (
        f"the largest difference is {p} (+{d:.3f} s: {name} {x:.3f} s vs {ref} {y:.3f} s,"
        " median of paired differences)."
    )


def _transport_cause(derived: dict, name: str, ref: str, what: str) -> str:
    ta = derived["layouts"][name]["transport"]
    tb = derived["layouts"][ref]["transport"]
    if ta != tb:
        return (
            f"the transport differs: {name} uses {', '.join(ta) or 'unknown'} where {ref} uses "
            f"{', '.join(tb) or 'unknown'}."
        )
    return (
        f"both use the same transport ({', '.join(ta) or 'unknown'}), so the {what} is not in"
        " the path the collective takes."
    )


def _step_cause(report: dict, derived: dict, per: dict) -> str:
    """Why single steps slower than host: the transport, the collective, else the compute."""
    lays = derived["layouts"]
    bw, _ = paired_ratio(per["single"]["busbw_largest_GBps"], per["host"]["busbw_largest_GBps"])
    ta, tb = lays["single"]["transport"], lays["host"]["transport"]
    if ta != tb or bw is None:
        return _transport_cause(derived, "single", "host", "slowdown")
    if bw < GOAL_BUSBW_RATIO:
        return (
            f"same transport ({', '.join(ta) or 'unknown'}) but the collective is "
            f"slower on it (busbw ratio single/host {bw:.3f})."
        )
    return (
        f"same transport ({', '.join(ta) or 'unknown'}) and busbw ratio "
        f"single/host {bw:.3f}, so the extra time is in the step's compute, "
        "not in the collective."
    )


# (name, layout, reference, per-repeat figure, paired by, target, met, cause of a miss)
GOALS = (
    ("single/host steady step time", "single", "host", "step_s", "ratio",
     f"<= {GOAL_STEP_RATIO}", lambda v: v <= GOAL_STEP_RATIO, _step_cause),
    ("per-rank-shared/single busbw at largest size", "per-rank-shared", "single",
     "busbw_largest_GBps", "ratio", f">= {GOAL_BUSBW_RATIO}", lambda v: v >= GOAL_BUSBW_RATIO,
     lambda report, derived, per: _transport_cause(derived, "per-rank-shared", "single",
                                                   "bandwidth loss")),
    ("single - host launch-to-first-step", "single", "host", "launch_to_first_step_s",
     "difference", f"<= {GOAL_LAUNCH_DELTA_S} s", lambda v: v <= GOAL_LAUNCH_DELTA_S,
     lambda report, derived, per: _phase_cause(report, "single", "host")),
)  # fmt: skip


def _goals(report: dict, derived: dict) -> list[dict]:
    lays, goals = derived["layouts"], []
    per = {lay["name"]: _per_repeat(lay) for lay in report.get("layouts") or []}
    for name, layout, ref, figure, by, target, meets, cause in GOALS:
        absent = [n for n in (layout, ref) if n not in lays]
        v, n = None, 0
        if not absent:
            pair = paired_ratio if by == "ratio" else paired_diff
            v, n = pair(per[layout][figure], per[ref][figure])
        if v is None:
            goals.append({"name": name, "target": target, "value": None, "pairs": 0,
                          "met": None, "sentence": f"{name}: not measured (no "
                          f"{' or '.join(absent) or 'paired data'})."})  # fmt: skip
            continue
        met = meets(v)
        shown = f"ratio {v:.3f}" if by == "ratio" else f"{v:+.3f} s"
        s = f"{name} {shown} (target {target}, median of {n} paired {by}s): "
        s += "met." if met else "missed; " + cause(report, derived, per)
        goals.append({"name": name, "target": target, "value": v, "pairs": n, "met": met,
                      "sentence": s})  # fmt: skip
    return goals


def derive(report: dict) -> dict:
    """Derived figures for every layout, paired ratios to host and single, and the goals."""
    layouts = report.get("layouts") or []
    derived: dict[str, Any] = {
        "order": [lay["name"] for lay in layouts],
        "layouts": {lay["name"]: _derive_layout(lay) for lay in layouts},
    }
    per = {lay["name"]: _per_repeat(lay) for lay in layouts}
    for name, d in derived["layouts"].items():
        d["ratios"] = {}
        for metric in ("step_s", "busbw_largest_GBps", "tokens_per_s", "launch_to_first_step_s"):
            d["ratios"][metric] = {}
            for ref in REFERENCES:
                if ref in per:
                    v, n = paired_ratio(per[name][metric], per[ref][metric])
                    d["ratios"][metric][ref] = {"median": v, "pairs": n}
                else:
                    d["ratios"][metric][ref] = {"median": None, "pairs": 0}
    derived["goals"] = _goals(report, derived)
    return derived
