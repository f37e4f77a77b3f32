"""Bench report: raw samples -> derived figures, report.json, report.md, report.png.

Host side: never imports torch (nor docker). Only the standard library here; matplotlib
(Agg canvas, no pyplot) is imported inside `figure`, so `derive` works without it.

Input schema (a plain dict, JSON-serialisable)
----------------------------------------------
::

    {
      "schema_version": 1,
      "meta": {...},                      # free-form: bench id, model, steps, warm-up steps ...
      "layouts": [                        # in run order; rounds alternate A B C D A B C D ...
        {
          "name": "host",                 # "host", "single", "per-rank-shared", ...
          "repeats": [                    # repeat i was run in round i (this pairs them)
            {
              "run_id": "20260101-120000-host",     # optional
              "phases": {                 # seconds each; null = not applicable / not seen
                "container_start_s": null, "launcher_s": 2.0, "imports_s": 3.1,
                "rendezvous_s": 0.4, "model_load_s": 1.2, "first_step_s": 0.9
              },
              "step_s": [[...], [...]],   # per rank: step times after warm-up (seconds)
              "tokens": [[...], [...]],   # per rank: tokens per step, aligned with step_s
                                          # (a number instead of a list = same every step)
              "probe": {...} | null,      # probe.json as written by tuning.probe
              "peak_memory_bytes": [r0, r1],        # per rank
              "transport": ["gloo/lo"]    # optional strings; if absent they come from
                                          # probe["transport"] (backend/interface), and for
                                          # NCCL from parse_nccl_transport(log text)
            }, ...
          ]
        }, ...
      ]
    }

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

import json
import re
import statistics
from pathlib import Path
from typing import Any

PHASES = ("container_start_s", "launcher_s", "imports_s", "rendezvous_s", "model_load_s",
          "first_step_s")  # fmt: skip
REFERENCES = ("host", "single")
MIB = 1024 * 1024

GOAL_STEP_RATIO = 1.03
GOAL_BUSBW_RATIO = 0.95
GOAL_LAUNCH_DELTA_S = 2.0

TABLE_HEADER = (
    "layout",
    "first step s",
    "step s median [p10, p90]",
    "tokens/s",
    "busbw at largest (GB/s)",
    "peak memory (MiB)",
    "transport",
    "step ratio to host",
    "step ratio to single",
    "busbw ratio to single",
)

# ---------------------------------------------------------------------------------------
# NCCL logs
# ---------------------------------------------------------------------------------------

_NCCL_VIA = re.compile(r"NCCL INFO .*?\bvia\s+([A-Za-z0-9_]+(?:/[A-Za-z0-9_]+)?)")


def parse_nccl_transport(text: str) -> list[str]:
    """Transport names from an ``NCCL_DEBUG=INFO`` log, unique, in order of first appearance.

    A channel line such as ``... NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC`` gives
    ``P2P/IPC``; ``via SHM/direct/direct`` gives ``SHM/direct``; ``via NET/Socket/0`` gives
    ``NET/Socket``; ``via P2P/CUMEM/read`` gives ``P2P/CUMEM`` (the kind and its mechanism,
    without device index or read/write mode).
    """
    seen: list[str] = []
    for line in text.splitlines():
        m = _NCCL_VIA.search(line)
        if m and m.group(1) not in seen:
            seen.append(m.group(1))
    return seen


def probe_transport(probe: dict | None) -> list[str]:
    """``backend/interface`` strings from a probe.json (e.g. ``gloo/lo``, ``gloo/eth0``)."""
    if not probe:
        return []
    out = set()
    for t in probe.get("transport") or []:
        iface = t.get("interface")
        if iface:
            for i in iface.split(","):
                out.add(f"{probe.get('backend', '?')}/{i}")
    return sorted(out)


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


def _goals(report: dict, derived: dict) -> list[dict]:
    lays, goals = derived["layouts"], []
    per = {lay["name"]: _per_repeat(lay) for lay in report.get("layouts") or []}

    def missing(name, target, *need):
        absent = [n for n in need if n not in lays]
        return {
            "name": name,
            "target": target,
            "value": None,
            "pairs": 0,
            "met": None,
            "sentence": f"{name}: not measured (no {' or '.join(absent) or 'paired data'}).",
        }

    # 1. single/host steady step time
    name, target = "single/host steady step time", f"<= {GOAL_STEP_RATIO}"
    if "single" in lays and "host" in lays:
        v, n = paired_ratio(per["single"]["step_s"], per["host"]["step_s"])
        if v is None:
            goals.append(missing(name, target))
        else:
            met = v <= GOAL_STEP_RATIO
            s = f"{name} ratio {v:.3f} (target {target}, median of {n} paired ratios): "
            if met:
                s += "met."
            else:
                bw, _ = paired_ratio(
                    per["single"]["busbw_largest_GBps"], per["host"]["busbw_largest_GBps"]
                )
                ta, tb = lays["single"]["transport"], lays["host"]["transport"]
                if ta != tb or bw is None:
                    cause = _transport_cause(derived, "single", "host", "slowdown")
                elif bw < GOAL_BUSBW_RATIO:
                    cause = (
                        f"same transport ({', '.join(ta) or 'unknown'}) but the collective is "
                        f"slower on it (busbw ratio single/host {bw:.3f})."
                    )
                else:
                    cause = (
                        f"same transport ({', '.join(ta) or 'unknown'}) and busbw ratio "
                        f"single/host {bw:.3f}, so the extra time is in the step's compute, "
                        "not in the collective."
                    )
                s += "missed; " + cause
            goals.append(
                {"name": name, "target": target, "value": v, "pairs": n, "met": met, "sentence": s}
            )
    else:
        goals.append(missing(name, target, "single", "host"))

    # 2. per-rank-shared/single busbw at the largest size
    name, target = "per-rank-shared/single busbw at largest size", f">= {GOAL_BUSBW_RATIO}"
    if "per-rank-shared" in lays and "single" in lays:
        v, n = paired_ratio(
            per["per-rank-shared"]["busbw_largest_GBps"], per["single"]["busbw_largest_GBps"]
        )
        if v is None:
            goals.append(missing(name, target))
        else:
            met = v >= GOAL_BUSBW_RATIO
            s = f"{name} ratio {v:.3f} (target {target}, median of {n} paired ratios): "
            s += (
                "met."
                if met
                else "missed; "
                + _transport_cause(derived, "per-rank-shared", "single", "bandwidth loss")
            )
            goals.append(
                {"name": name, "target": target, "value": v, "pairs": n, "met": met, "sentence": s}
            )
    else:
        goals.append(missing(name, target, "per-rank-shared", "single"))

    # 3. single launch-to-first-step within 2 s of host
    name, target = "single - host launch-to-first-step", f"<= {GOAL_LAUNCH_DELTA_S} s"
    if "single" in lays and "host" in lays:
        v, n = paired_diff(
            per["single"]["launch_to_first_step_s"], per["host"]["launch_to_first_step_s"]
        )
        if v is None:
            goals.append(missing(name, target))
        else:
            met = v <= GOAL_LAUNCH_DELTA_S
            s = f"{name} {v:+.3f} s (target {target}, median of {n} paired differences): "
            s += "met." if met else "missed; " + _phase_cause(report, "single", "host")
            goals.append(
                {"name": name, "target": target, "value": v, "pairs": n, "met": met, "sentence": s}
            )
    else:
        goals.append(missing(name, target, "single", "host"))
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


# ---------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------


def _f(v, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def markdown(report: dict, derived: dict) -> str:
    lines = ["# Bench report", ""]
    order = derived["order"]
    rounds = max((d["repeats"] for d in derived["layouts"].values()), default=0)
    lines.append(f"Layouts in run order: {', '.join(order)}; {rounds} round(s), alternating.")
    lines.append("")
    meta = report.get("meta") or {}
    if meta.get("trainer"):  # a foreign trainer (TRAINER=fms, ENTRY=...): what was left out
        t = meta["trainer"]
        lines.append(f"Trainer: `{t['entry']}` in `{t['image']}`. {meta.get('metrics_source', '')}")
        skipped = [*meta.get("skipped", []), f"probe {meta.get('probe', {}).get('skipped', '')}"]
        lines += [f"- {x}" for x in skipped] + [""]
    lines.append("| " + " | ".join(TABLE_HEADER) + " |")
    lines.append("|" + "|".join(" --- " for _ in TABLE_HEADER) + "|")
    for name in order:
        d = derived["layouts"][name]
        st, tk, r = d["step_s"], d["tokens_per_s"], d["ratios"]
        step = f"{_f(st['median'], '.4f')} [{_f(st['p10'], '.4f')}, {_f(st['p90'], '.4f')}]"
        toks = _f(tk["global"], ".1f")
        if tk["per_rank"]:
            toks += " (per rank " + ", ".join(_f(x, ".1f") for x in tk["per_rank"]) + ")"
        mem = d["peak_memory_max_bytes"]
        cells = [
            name,
            _f(d["launch_to_first_step_s"], ".3f"),
            step,
            toks,
            _f(d["busbw_largest_GBps"], ".3f"),
            _f(None if mem is None else mem / MIB, ".1f"),
            ", ".join(d["transport"]) or "n/a",
            _f(r["step_s"]["host"]["median"], ".3f"),
            _f(r["step_s"]["single"]["median"], ".3f"),
            _f(r["busbw_largest_GBps"]["single"]["median"], ".3f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "first step s: launch to first step, the median over repeats of the summed phases "
        "(container start, launcher, imports, rendezvous, model load, first step). step s: "
        "steady steps after warm-up, slowest rank per step, pooled over repeats. tokens/s: all "
        "ranks' tokens over the slowest rank's time, median over repeats. busbw: nccl-tests bus "
        "bandwidth of all_reduce at the largest probed size, median over repeats. peak memory: "
        "max over ranks and repeats. Ratios: repeat i against repeat i of the reference (same "
        "round), then the median of the ratios.",
        "",
        "## Launch to first step, by part",
        "",
        "Seconds, each part's median over repeats (n/a: not applicable or not seen); the "
        "medians of the parts need not add up to the median of the sums above.",
        "",
    ]
    for name in order:
        ph = derived["layouts"][name]["phases_s"]
        parts = (f"{p.removesuffix('_s').replace('_', ' ')} {_f(ph[p], '.3f')}" for p in PHASES)
        lines += [f"{name}: {', '.join(parts)}", ""]
    lines += ["## Goals", ""]
    for g in derived["goals"]:
        tag = {True: "MET", False: "MISSED", None: "NOT MEASURED"}[g["met"]]
        lines.append(f"- {tag}: {g['sentence']}")
    return "\n".join(lines) + "\n"


def figure(report: dict, derived: dict | None = None):
    """Two-panel matplotlib Figure (Agg canvas): steps/s per layout with p10/p90 error bars;
    busbw against message size (log x), one curve per layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    derived = derived or derive(report)
    order = derived["order"]
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    xs, ys, lo, hi = [], [], [], []
    for i, name in enumerate(order):
        st = derived["layouts"][name]["step_s"]
        if not st["median"]:
            continue
        sps = 1.0 / st["median"]
        xs.append(i)
        ys.append(sps)
        lo.append(sps - 1.0 / st["p90"])  # slowest steps -> fewest steps/s
        hi.append(1.0 / st["p10"] - sps)
    ax1.bar(xs, ys, color="tab:blue", alpha=0.6)
    ax1.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor="black", capsize=5)
    ax1.set_xticks(range(len(order)), order, rotation=15)
    ax1.set_ylabel("steps per second (median; bars: p10-p90 of step time)")
    ax1.set_title("Steady training speed")
    for name in order:
        curve = derived["layouts"][name]["busbw_curve"]
        if curve:
            b = sorted(int(k) for k in curve)
            ax2.plot(b, [curve[str(k)] for k in b], marker="o", label=name)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("message size (bytes)")
    ax2.set_ylabel("all_reduce busbw (GB/s)")
    ax2.set_title("Collective bandwidth")
    if ax2.lines:
        ax2.legend()
    ax2.grid(True, which="both", alpha=0.3)
    return fig


def write(report: dict, run_dir) -> tuple[Path, Path, Path]:
    """Write report.json (raw + derived), report.md and report.png into run_dir."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    derived = derive(report)
    json_path, md_path, png_path = (run_dir / f"report.{e}" for e in ("json", "md", "png"))
    json_path.write_text(json.dumps({**report, "derived": derived}, indent=2) + "\n")
    md_path.write_text(markdown(report, derived))
    figure(report, derived).savefig(png_path, dpi=100)
    return json_path, md_path, png_path
