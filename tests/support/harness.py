"""The harness as a user runs it (`python -m tuning.harness ...` from the checkout), and what
its runs leave in their RUNS folder."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from support.paths import PYTHON, ROOT

# Words of a command line that YAML 1.2 (Compose) reads as numbers, booleans or null unless
# quoted; PyYAML (YAML 1.1) writes 3e-3, 1e5 and 0o17 bare (test_own_trainer.py renders them,
# test_own_trainer_docker.py has Compose read them back).
YAML_12_WORDS = (
    "--learning_rate",
    "3e-3",
    "--weight_decay",
    "1e5",
    "--mode",
    "0o17",
    "--x",
    ".5e3",
    "--max_steps",
    "20",
    "--flag",
    "true",
)


def harness(*args: str, runs: Path, timeout: float = 600, env: dict | None = None):
    """Run `python -m tuning.harness ARGS --runs RUNS` as a user would; returns the process."""
    return subprocess.run(
        [PYTHON, "-m", "tuning.harness", *args, "--runs", str(runs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def make(
    *words: str, runs: Path | None = None, timeout: float = 300, silent: bool = False
) -> subprocess.CompletedProcess:
    """`make WORDS [RUNS=runs]` in the checkout, as a user types it (`silent`: make -s)."""
    return subprocess.run(
        ["make", *(["-s"] if silent else []), "--no-print-directory", *words]
        + ([f"RUNS={runs}"] if runs is not None else []),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def up(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`up ARGS` with RUNS under tmp_path."""
    return harness("up", *args, runs=tmp_path / "runs", timeout=300, env=env)


def no_run_recorded(runs: Path) -> bool:
    """No run under `runs` recorded as succeeded."""
    return not runs.exists() or not any(
        json.loads(p.read_text()).get("status") == "succeeded" for p in runs.glob("*/summary.json")
    )


def wait_training(runs: Path, run_id: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    """Until every rank has logged a step (so every rank is up and training)."""
    metrics = runs / run_id / "output/metrics"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        files = list(metrics.glob("rank*.jsonl"))
        if len(files) == 2 and all('"event": "step"' in f.read_text() for f in files):
            return
        time.sleep(0.5)
    raise AssertionError("ranks never started training")
