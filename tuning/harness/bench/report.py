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
              "probe": {...} | null,      # probe.json as written by tuning.container.probe
              "peak_memory_bytes": [r0, r1],        # per rank
              "transport": ["gloo/lo"]    # optional strings; if absent they come from
                                          # probe["transport"] (backend/interface), and for
                                          # NCCL from the log's channel lines
                                          # (tuning.container.shared.transport.parse_nccl_transport)
            }, ...
          ]
        }, ...
      ]
    }

The derived figures and the goals: `bench/report_derive.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

from tuning.harness.bench.goal import Goal
from tuning.harness.bench.report_derive import PHASES, derive
from tuning.harness.bench.report_goals import lag1_line, need_line
from tuning.harness.bench.stopping import FIXED, from_meta
from tuning.harness.run_files.status import Status

MIB = 1024 * 1024

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
# Files
# ---------------------------------------------------------------------------------------


def _f(v, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def _ratio(p: dict) -> str:
    """A paired ratio with its interval: ``1.020 [0.990, 1.050]`` (one pair: none)."""
    iv = p.get("interval")
    return _f(p["median"], ".3f") + (f" [{iv[0]:.3f}, {iv[1]:.3f}]" if iv else "")


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
            _ratio(r["step_s"]["host"]),
            _ratio(r["step_s"]["single"]),
            _ratio(r["busbw_largest_GBps"]["single"]),
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
        "round), then the median of the ratios, with the order-statistic interval of that "
        "median in brackets: 90 % from 5 rounds on, the whole range under 5 (3 rounds: 75 %), "
        "none under two.",
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
    rule = (meta.get("design") or {}).get("describe") or FIXED.describe(max(rounds, 1))
    lines += [f"Stopping rule: {rule}.", ""]
    if meta.get("stopped"):
        lines += [f"Rounds: {meta['stopped']}", ""]
    if workload(meta):
        lines += [workload(meta), ""]
    design = from_meta(meta)
    for g in map(Goal.from_json, derived["goals"]):
        lines.append(f"- {g.verdict}: {g.sentence}")
        if g.verdict == "UNRESOLVED" and need_line(g):
            lines.append(f"  - {need_line(g)}")
        if lag1_line(g, design):
            lines.append(f"  - rounds: {lag1_line(g, design)}")
    return "\n".join(lines) + "\n"


# The job's figures report.json keeps (meta.job), checkpoints included: a user's JOB runs as it
# sets them, so a layout's cost is measured with the job's own saves.
JOB_KEYS = (
    "max_steps",
    "seed",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_seq_length",
    "torch_dtype",
    "save_strategy",
    "save_steps",
)


def job_meta(job: dict, job_file: str | None, own: bool) -> dict:
    """report.json's meta on the workload: the job's figures as the layouts ran them."""
    return {"job": {k: job.get(k) for k in JOB_KEYS}, "job_file": job_file, "own_workload": own}


def workload(meta: dict) -> str | None:
    """report.md's line on the job the layouts ran, its checkpoints as the job sets them."""
    job = meta.get("job")
    if not job:
        return None
    whose = (
        "the bench's own (configs/jobs/bench.yaml)"
        if meta.get("own_workload")
        else f"your job (JOB={meta.get('job_file')})"
    )
    save, every = job.get("save_strategy"), job.get("save_steps")
    if save == "no":
        saves = "no checkpoints"
    elif save == "steps" or (save is None and every):
        saves = f"a checkpoint every {every} steps"
    else:
        saves = f"checkpoints by save_strategy {save or 'the trainer default'}"
    shape = [f"{job['max_steps']} steps"] if job.get("max_steps") else []
    if job.get("per_device_train_batch_size") and job.get("max_seq_length"):
        shape.append(
            f"{job['per_device_train_batch_size']} x {job['max_seq_length']} tokens a rank"
        )
    return (
        f"Workload: {whose}: {', '.join([*shape, saves])}, as the job sets them (a save's own "
        "time is left out of step s; the steps after it are in)."
    )


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


def show(raw: dict, paths) -> None:
    """What the bench prints at its end: report.md's body, the runs that failed, the files."""
    md = paths[1].read_text()
    print("\n" + md.split("\n", 2)[2] if md.startswith("# ") else md)
    for r in raw["meta"]["runs"]:
        if r["status"] != Status.SUCCEEDED:
            print(f"bench: {r['run_id']} ({r['layout']} {r['what']}) {r['status']}")
    if raw["meta"]["interrupted"]:
        print("bench: interrupted; the report holds the runs that finished")
    for p in paths:
        print(f"bench: {p}")


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
