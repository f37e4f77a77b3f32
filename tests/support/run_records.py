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


def trainer_output(run, ranks=2, steps=10, batch=4, seq=512, pad=0):
    """Our trainer's output folder after `steps` steps on `ranks` ranks (metrics lines and
    train_summary.json), as benchmarks/mfu.py reads it: two slow steps, then 0.25 s each."""
    (run / "metrics").mkdir(parents=True)
    for rank in range(ranks):
        rows = [{"event": "phase", "name": "imports"}] + [
            {
                "event": "step",
                "step": i + 1,
                "tokens": batch * seq - pad,
                "step_s": 3.0 if i < 2 else 0.25,
                "samples": list(range(batch)),
                "max_memory_allocated_bytes": 2**30 * (i + 1),
            }
            for i in range(steps)
        ]
        text = "".join(json.dumps(r) + "\n" for r in rows)
        (run / "metrics" / f"rank{rank}.jsonl").write_text(text)
    summary = {
        "status": "completed",
        "world_size": ranks,
        "steps": steps,
        "tokens_per_s": 12345.0,
        "tokens_per_s_steps": steps - 2,
        "first_loss": 10.4,
        "final_loss": 9.1,
    }
    (run / "train_summary.json").write_text(json.dumps(summary))
    return run
