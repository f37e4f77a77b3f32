"""Run directories (`runs/<run-id>/`) and what the host reads back from them."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import statistics
import time
from pathlib import Path

import yaml

WARMUP_STEPS = 2  # steps excluded from steady-state figures (compile, allocator, caches)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def create(root: Path, run_id: str) -> Path:
    """A fresh run directory; never reuses one. `latest` moves only now, when a run starts."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        run_dir = root / run_id
        run_dir.mkdir()  # FileExistsError: never write over another run
        for sub in ("job", "output", "logs", "ranks"):
            (run_dir / sub).mkdir()
    except FileExistsError:
        raise
    except OSError as e:
        raise PermissionError(
            f"cannot write the run directory under {root}: {e.strerror}. "
            "Make it writable or point RUNS=<dir> elsewhere."
        ) from None
    latest = root / "latest"
    tmp = root / f".latest-{run_id}"
    tmp.symlink_to(run_id)
    os.replace(tmp, latest)
    return run_dir


def write_job(run_dir: Path, job: dict, accelerate_config: Path) -> None:
    (run_dir / "job/job.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    shutil.copyfile(accelerate_config, run_dir / "job/accelerate.yaml")


def write_json(path: Path, data) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def read_metrics(output_dir: Path) -> dict[int, list[dict]]:
    """Each rank's metric lines; a line being written (no newline yet) is skipped."""
    out: dict[int, list[dict]] = {}
    for path in sorted((output_dir / "metrics").glob("rank*.jsonl")):
        rank = int(path.stem.removeprefix("rank"))
        lines = []
        with open(path) as f:
            for raw in f:
                if raw.endswith("\n"):
                    try:
                        lines.append(json.loads(raw))
                    except json.JSONDecodeError:
                        pass
        out[rank] = lines
    return out


def steps(lines: list[dict]) -> list[dict]:
    return [x for x in lines if x.get("event") == "step"]


def summarize(metrics: dict[int, list[dict]], t0: float) -> dict:
    """Training figures of a run from its ranks' metric lines (rank 0 is the reference).
    A group restarted from a checkpoint logs some steps again: the latest line of a step wins."""
    rank0 = list({s["step"]: s for s in steps(metrics.get(0, []))}.values())
    losses = [[s["step"], s["loss"]] for s in rank0]
    warm = [s for s in rank0 if s["step"] > WARMUP_STEPS] or rank0
    warm_steps = {s["step"] for s in warm}
    tokens = sum(
        s.get("tokens", 0) for lines in metrics.values() for s in steps(lines)
        if s["step"] in warm_steps
    )  # fmt: skip
    seconds = sum(s["step_s"] for s in warm)
    return {
        "losses": losses,
        "first_loss": losses[0][1] if losses else None,
        "final_loss": losses[-1][1] if losses else None,
        "steps": len(rank0),
        "time_to_first_step_s": round(rank0[0]["time"] - t0, 3) if rank0 else None,
        "steady_step_s": statistics.median(s["step_s"] for s in warm) if warm else None,
        "tokens_per_s": round(tokens / seconds, 1) if seconds else None,
    }


def restarts_seen(metrics: dict[int, list[dict]]) -> list[dict]:
    """Restarts of the group, from the metrics: every start of a rank's trainer logs the
    "imports" phase first, so a rank with n of them was restarted n - 1 times. Each restart:
    when the first rank came back, and which ranks had failed (their end line's error)."""
    attempts: dict[int, list[list[dict]]] = {}
    for r, lines in metrics.items():
        runs_of_rank: list[list[dict]] = []
        for x in lines:
            if (x.get("event"), x.get("name")) == ("phase", "imports") or not runs_of_rank:
                runs_of_rank.append([])
            runs_of_rank[-1].append(x)
        attempts[r] = runs_of_rank
    out = []
    for k in range(1, max((len(a) for a in attempts.values()), default=0)):
        back = [a[k][0]["time"] for a in attempts.values() if len(a) > k]
        failed = {}
        for r, a in sorted(attempts.items()):
            end = next((x for x in a[k - 1] if x.get("event") == "end"), None)
            if end is None or end.get("status") != "completed":
                failed[str(r)] = (end or {}).get("error") or "no end line"
        out.append({"time": min(back), "by": "torchrun", "failed": failed})
    return out


def world_sizes_seen(metrics: dict[int, list[dict]]) -> dict[int, int | None]:
    return {r: next((x["world_size"] for x in lines if "world_size" in x), None)
            for r, lines in metrics.items()}  # fmt: skip
