"""A run's metrics as its ranks wrote them (output/metrics/rank<N>.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(output_dir: Path, rank: int) -> list[dict]:
    path = Path(output_dir) / "metrics" / f"rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def step_losses(output_dir: Path, rank: int) -> dict[int, float]:
    """step -> loss; when a run was resumed in the same directory the latest line wins."""
    return {r["step"]: r["loss"] for r in read_metrics(output_dir, rank) if r["event"] == "step"}
