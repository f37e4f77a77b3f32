"""A run's summary.json, from its layout, its nodes' ends and its ranks' metric lines; and a
failed run's ranks' own words, printed."""

from __future__ import annotations

import sys
from pathlib import Path

from tuning.container.rank import torn
from tuning.harness.layout.layout import Layout
from tuning.harness.run import foreign
from tuning.harness.run_files import folders, metric_lines


def write(
    layout: Layout,
    run_dir: Path,
    status: str,
    details: dict,
    t0: float,
    restarts: list[dict] = (),
    extra: dict | None = None,
) -> dict:
    metrics = metric_lines.read_metrics(run_dir / "output")
    seen, shards = metric_lines.world_sizes_seen(metrics), metric_lines.sharding_seen(metrics)
    ranks = []
    for node in layout.nodes():
        d = details.get(node.name, {})
        for r in node.ranks:
            ranks.append(
                {
                    "rank": r,
                    "node": node.name,
                    **d,
                    "world_size_seen": seen.get(r),
                    **shards.get(r, {}),
                }
            )
    summary = {
        "run_id": layout.run_id,
        **layout.record(),
        "status": status,
        **metric_lines.summarize(metrics, t0),
        "ranks": ranks,
        "restarts": [{**x, "t": round(x["time"] - t0, 2)} for x in restarts],
        "torn_checkpoints": torn.moved(run_dir / "output"),
    }
    if layout.trainer.entry:
        summary.update(foreign.summary_fields(layout, run_dir, metrics))
    summary.update(extra or {})
    folders.write_json(run_dir / "summary.json", summary)
    return summary


def explain_failure(run_dir: Path, summary: dict) -> None:
    """Say why ranks failed: their own error lines, else the end of their logs."""
    for node in dict.fromkeys(r["node"] for r in summary["ranks"] if r.get("exit_code")):
        log = run_dir / f"logs/{node}.log"
        lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
        errors = [x for x in lines if "error:" in x.lower() or x.startswith(("Error", "OSError"))]
        shown = list(dict.fromkeys(errors))[-5:] or lines[-10:]
        print(f"harness: {node} failed; from {log}:", file=sys.stderr)
        for line in shown:
            print(f"  {line}", file=sys.stderr)
