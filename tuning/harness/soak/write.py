"""A soak's record on disk: soak.json (record.py build), soak.md (the same, to read) and
soak.png (progress over time, the failures marked; matplotlib, the bench extra, as report.png)."""

from __future__ import annotations

from pathlib import Path

from tuning.harness.checks.save_interval import duration
from tuning.harness.run_files import folders, metric_lines

COLUMNS = (
    ("detect_s", "detect"),
    ("teardown_s", "teardown"),
    ("restart_s", "restart"),
    ("imports_s", "imports"),
    ("rendezvous_s", "rendezvous"),
    ("load_s", "load (model, data, checkpoint)"),
    ("first_step_s", "first step"),
    ("recompute_s", "recompute"),
    ("restart_cost_s", "R"),
    ("work_lost_s", "work lost"),
)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _v(x) -> str:
    return "" if x is None else f"{x:g}" if isinstance(x, float) else str(x)


def markdown(rec: dict) -> str:
    plan = rec.get("plan") or {}
    step = rec.get("step_s")
    out = [
        f"# Soak {rec['run_id']}",
        "",
        f"layout {rec['layout']}, trainer {rec['trainer']}, {rec['world_size']} rank(s); "
        f"MTBF {rec['mtbf']} ({plan.get('mtbf_steps', '?')} steps at {step} s), KINDS "
        f"{','.join(rec['kinds'])}, FAULT_SEED {rec['fault_seed']}; save every "
        f"{rec['save_steps']} steps; DURATION {duration(rec['duration_s'])}",
        "",
    ]
    if rec.get("ett") is not None:
        iv = rec["ett_interval"]
        said = (
            f" ({100 * rec['interval_level']:.0f} % interval {_pct(iv[0])} to "
            f"{_pct(iv[1])}, from {len(rec['failures'])} failure(s): "
            f"{rec['failures_interval'][0]:g} to {rec['failures_interval'][1]:g})"
            if iv
            else ""
        )
        out.append(
            f"- ETT {_pct(rec['ett'])}{said}: {rec['final_step']} steps x {step} s = "
            f"{rec['useful_s']} s of {rec['wall_s']} s"
        )
    sv = rec["saves"]
    out.append(f"- saves: {sv['count']}, median {sv['median_s']} s, {sv['total_s']} s in all")
    m = rec.get("model")
    if m:
        where = "inside" if m["inside"] else "OUTSIDE"
        holds = m.get("first_order_holds", True)
        read = (
            ""
            if holds
            else (
                " (first order does not hold here: a restart and half an "
                "interval take about as long as the time between failures; "
                "read the renewal figure)"
            )
        )
        out += [
            f"- the model (Young/Daly) with C {m['save_s']} s, R {m['restart_s']} s, M "
            f"{m['mtbf_s']} s: ETT {_pct(m['ett'])} at this interval ({m['tau_s']} s), {where} "
            f"the measured interval; this soak's own process exactly (renewal): "
            f"{_pct(m['ett_renewal'])}{read}",
            f"- its best interval: {m['best_tau_s']} s ({m['best_save_steps']} steps), ETT "
            f"{_pct(m['best_ett'])}",
        ]
    out.append(
        f"- {rec.get('stop_reason') or 'stopped'}; left behind: "
        f"{', '.join(rec.get('leftovers') or []) or 'nothing'}"
    )
    if rec.get("advice"):
        out += ["", f"On a cluster: {rec['advice']}"]
    out += ["", "Seconds, from the strike; a step is the slowest rank's.", ""]
    head = ["#", "kind", "rank", "planned", "landed", "resumed", "lost", "held"]
    head += [name for _, name in COLUMNS]
    out += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for f in rec["failures"]:
        row = [
            f["n"],
            f["kind"],
            f["rank"],
            f["planned"],
            f["landed"],
            f["resumed_from"],
            f["steps_lost"],
            f["held_s"],
            *(f[key] for key, _ in COLUMNS),
        ]
        out.append("| " + " | ".join(_v(x) for x in row) + " |")
    return "\n".join(out) + "\n"


def figure(rec: dict, metrics: dict):
    """Step over time (rank 0, every attempt), a red line at each strike, a tick per save."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    t0 = rec.get("started_at") or 0
    fig = Figure(figsize=(10, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for i, a in enumerate(metric_lines.attempts(metrics.get(0, []))):
        st = metric_lines.steps(a)
        ax.plot(
            [x["time"] - t0 for x in st],
            [x["step"] for x in st],
            ".",
            ms=2,
            label="steps" if i == 0 else None,
            color="tab:blue",
        )
    for f in rec["failures"]:
        ax.axvline(f["time"] - t0, color="tab:red", lw=0.8)
        ax.annotate(
            f"{f['kind']} r{f['rank']}",
            (f["time"] - t0, f["landed"]),
            fontsize=7,
            color="tab:red",
            rotation=90,
            va="bottom",
        )
    for s in rec["saves"]["each"]:
        ax.plot([s["time"] - t0], [s["step"]], "|", color="tab:green", ms=6)
    ett = _pct(rec.get("ett"))
    ax.set_title(
        f"soak {rec['run_id']}: {rec['layout']}, {len(rec['failures'])} failures, ETT {ett}"
    )
    ax.set_xlabel("seconds since training began")
    ax.set_ylabel("step")
    ax.grid(alpha=0.3)
    return fig


def write(run_dir: Path, rec: dict) -> list[Path]:
    """soak.json, soak.md and, with matplotlib, soak.png."""
    folders.write_json(run_dir / "soak.json", rec)
    (run_dir / "soak.md").write_text(markdown(rec))
    out = [run_dir / "soak.json", run_dir / "soak.md"]
    try:
        fig = figure(rec, metric_lines.read_metrics(run_dir / "output"))
    except ImportError:
        print("harness: soak.png needs matplotlib (pip install -e '.[bench]')")
        return out
    fig.savefig(run_dir / "soak.png", dpi=100)
    return [*out, run_dir / "soak.png"]
