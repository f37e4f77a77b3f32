"""Runs written as a trainer and the harness write them (metrics lines and a summary), for the
code that reads a finished run back."""

from __future__ import annotations

import json
from pathlib import Path


def a_run(
    runs: Path,
    run_id: str,
    job_file: Path,
    *,
    step_s=0.5,
    save_s=2.0,
    eval_s=None,
    joined=(100.0, 100.4),
) -> Path:
    """A finished run of `job_file`: two ranks' metrics and its summary."""
    out = runs / run_id / "output/metrics"
    out.mkdir(parents=True)
    for rank, t_join in enumerate(joined):
        lines = [{"event": "phase", "name": "rendezvous", "rank": rank, "time": t_join}]
        for step in range(1, 11):
            t = 100.0 + step
            lines.append({"event": "step", "rank": rank, "step": step, "step_s": step_s, "time": t})
            if eval_s is not None and step == 5:
                lines.append({"event": "evaluation", "rank": rank, "step": 5, "eval_s": eval_s})
            if step % 5 == 0:
                lines.append(
                    {
                        "event": "checkpoint",
                        "rank": rank,
                        "step": step,
                        "save_s": save_s,
                        "time": t + save_s,
                    }
                )
        (out / f"rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    summary = {"job_file": str(job_file), "steps": 10, "status": "succeeded"}
    (runs / run_id / "summary.json").write_text(json.dumps(summary))
    return runs / run_id
