"""Which trainer a run runs: this repo's `tuning.sft_trainer` (the default) or a foreign one,
a module in the user's own image (IMAGE=... ENTRY=...).

TRAINER=fms is the foreign preset: fms-hf-tuning 3.2.2's own `tuning.sft_trainer` in its own
image (docker/fms.Dockerfile, every package pinned in docker/fms.lock), its demo job in fms's
JSON format (configs/jobs/fms-demo.json) and fms's FSDP defaults. A foreign trainer runs under
the harness's launcher and rank recorder, bound into the container read-only (layout.py); its
losses and steps come from what it writes itself (fms: <output_dir>/training_logs.jsonl).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tuning.harness.errors import ROOT, HarnessError

TRAINERS = ("harness", "fms")
CONFIGS = ROOT / "configs"
DEFAULT_JOB = CONFIGS / "jobs/demo.yaml"
FMS_IMAGE = "tuning-harness-fms:latest"
FMS_ENTRY = "tuning.sft_trainer"
FMS_JOB = CONFIGS / "jobs/fms-demo.json"


def logs_own_steps(trainer: str) -> bool:
    """fms logs its steps itself (training_logs.jsonl, rank 0's), which the harness reads; for
    any other foreign trainer the rank recorder logs every rank's HF Trainer steps."""
    return trainer == "fms"


def load_job(path: Path, what: str = "JOB") -> dict:
    """A job file as a dict: JSON by its suffix (fms's format), else YAML. A syntax error is
    said with the file, the line and the column the parser stopped at, and the fix."""
    text = path.read_text()
    kind = "JSON" if path.suffix == ".json" else "YAML"
    try:
        job = json.loads(text) if kind == "JSON" else yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise HarnessError(
            f"{what}={path}: not valid JSON at line {e.lineno}, column {e.colno}: "
            f"{e.msg}; fix the file and run again"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise HarnessError(
            f"{what}={path}: not valid YAML{where}: {problem}; fix the file and run again"
        ) from None
    if job is None:
        return {}
    if not isinstance(job, dict):
        raise HarnessError(
            f"{what}={path}: must hold a mapping of trainer arguments, not {type(job).__name__}"
        )
    return job
