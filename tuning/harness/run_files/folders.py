"""A run's folder (`runs/<run-id>/`): its id, making it, the `latest` link, and the JSON and job
files the harness writes there."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from tuning.harness.errors import ROOT, HarnessError

# A run id names a directory under runs/, a Compose project (harness-<id>), labels and a
# PyTorchJob's labels: so one rule, a DNS label (RFC 1123), lower case, at most 63. Commands
# append to the id a user gives (fault: "-partition-per-rank", bench:
# "-r10-per-rank-isolated-probe", 29 at most), hence 32 for that one.
RUN_ID_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
RUN_ID_MAX = 32
LABEL_MAX = 63


def commit() -> str | None:
    """The code a measurement ran on: git's short commit, "+" where the tree had changes; None
    outside a checkout. A record carries it so that its figure names its code."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    if head.returncode:
        return None
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def check_run_id(run_id: str, limit: int = RUN_ID_MAX) -> str:
    """`run_id` if it keeps the rule, else ValueError saying why and how to fix it. `limit`:
    LABEL_MAX for the ids commands derive from a checked one."""
    if len(run_id) <= limit and RUN_ID_RE.fullmatch(run_id):
        return run_id
    why = (
        f"is {len(run_id)} characters, more than {limit}"
        if len(run_id) > limit
        else "must be lower-case letters, digits and '-', starting and ending with a "
        "letter or digit"
    )
    raise ValueError(f"RUN_ID={run_id!r} {why}; e.g. RUN_ID=my-run-2")


def create(root: Path, run_id: str, starts: bool = True) -> Path:
    """A fresh run directory; never reuses one. `latest` moves only now, when a run starts;
    starts=False: the directory alone, for files and no run (kube's render)."""
    run_dir = root / run_id
    try:
        root.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir()
        for sub in ("job", "output", "logs", "ranks") if starts else ():
            (run_dir / sub).mkdir()
    except FileExistsError:
        raise HarnessError(f"{run_dir} exists; a run never writes over another") from None
    except OSError as e:
        raise HarnessError(
            f"cannot write the run directory under {root}: {e.strerror}. "
            "Make it writable or point RUNS=<dir> elsewhere."
        ) from None
    if starts:
        point_latest(root, run_id)
    return run_dir


def point_latest(root: Path, name: str) -> None:
    """runs/latest -> the run that started last (up, fault, kube's rehearsal, a bench). The
    link is made under its own name and renamed over `latest`, so two runs starting at once
    never leave it missing or half-made: the later rename wins."""
    tmp = root / f".latest-{name}-{os.getpid()}"
    tmp.symlink_to(name)
    os.replace(tmp, root / "latest")


def job_text(job: dict, name: str = "job.yaml") -> str:
    """The job file's text: JSON for a foreign trainer's job.json, else YAML (kube's ConfigMap
    holds the same text)."""
    if name.endswith(".json"):
        return json.dumps(job, indent=2) + "\n"
    return yaml.safe_dump(job, sort_keys=False)


def write_job(run_dir: Path, job: dict, accelerate_config: Path, name: str = "job.yaml") -> None:
    (run_dir / "job" / name).write_text(job_text(job, name))
    shutil.copyfile(accelerate_config, run_dir / "job/accelerate.yaml")


def write_json(path: Path, data) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    """A JSON file the harness wrote ({} when it is missing or half-written)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def checkpoint_world_size(path: Path) -> int | None:
    """The ranks that saved it: the Trainer writes one rng_state_<rank>.pth per rank (one
    rng_state.pth for one process)."""
    per_rank = list(path.glob("rng_state_*.pth"))
    return len(per_rank) or (1 if (path / "rng_state.pth").is_file() else None)
