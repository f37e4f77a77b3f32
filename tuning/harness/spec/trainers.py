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


def load_job(path: Path) -> dict:
    """A foreign job file: a JSON object (fms's format; YAML mappings are read too)."""
    text = path.read_text()
    try:
        job = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise HarnessError(
            f"JOB={path}: not valid {path.suffix.lstrip('.') or 'YAML'}: {e}"
        ) from None
    if not isinstance(job, dict):
        raise HarnessError(
            f"JOB={path}: must hold one object of trainer arguments, not {type(job).__name__}"
        )
    return job
