"""Which trainer a run runs: this repo's `tuning.sft_trainer` (the default) or a foreign one,
a module in the user's own image (IMAGE=... ENTRY=...).

TRAINER=fms is the foreign preset: fms-hf-tuning 3.2.2's own `tuning.sft_trainer` in its own
image (docker/fms.Dockerfile, every package pinned in docker/fms.lock), its demo job in fms's
JSON format (configs/jobs/fms-demo.json) and fms's FSDP defaults. A foreign trainer runs under
the harness's launcher and rank recorder, bound into the container read-only (layout.py); its
losses and steps come from what it writes itself (fms: <output_dir>/training_logs.jsonl).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import docker.errors
import yaml

from . import runs
from .engine import ROOT, HarnessError, image_present
from .layout import IMAGE, Layout

TRAINERS = ("harness", "fms")
CONFIGS = ROOT / "configs"
DEFAULT_JOB = CONFIGS / "jobs/demo.yaml"
FMS_IMAGE = "tuning-harness-fms:latest"
FMS_ENTRY = "tuning.sft_trainer"
FMS_JOB = CONFIGS / "jobs/fms-demo.json"
METRICS_NOTE = (
    "steps and losses from rank 0's training_logs.jsonl (the trainer's own FileLoggingTracker, "
    "written by the world process zero only): no rank other than 0 has per-step figures. "
    "world_size_seen: the process group each rank joined (the harness's rank recorder)."
)


def resolve(a: argparse.Namespace) -> None:
    """Fill in what TRAINER implies where the user left a flag at its default."""
    trainer = getattr(a, "trainer", None) or "harness"
    if trainer not in TRAINERS:
        raise HarnessError(f"TRAINER={trainer!r} is unknown; use one of {', '.join(TRAINERS)}")
    entry = getattr(a, "entry", None) or None
    if trainer == "fms":
        entry = entry or FMS_ENTRY
        a.image = FMS_IMAGE if a.image == IMAGE else a.image
        a.job = str(FMS_JOB) if Path(a.job) == DEFAULT_JOB else a.job
    elif entry and a.image == IMAGE:
        raise HarnessError(
            f"ENTRY={entry} names a module in your own image; set IMAGE=<that image> as well "
            f"(the harness image {IMAGE} runs this repo's trainer), or TRAINER=fms"
        )
    a.trainer, a.entry = trainer, entry


def load_job(path: Path) -> dict:
    """A foreign job file: a JSON object (fms's format; YAML mappings are read too)."""
    if not path.is_file():
        raise HarnessError(f"JOB={path}: no such file")
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


def check_image(client, layout: Layout) -> None:
    """A foreign image must be on the engine already (nothing is pulled); the fms one is
    built from docker/fms.Dockerfile when it is missing."""
    if layout.image == FMS_IMAGE:
        from . import images  # the image recipes (engine-side; imported when needed)

        images.ensure(client, FMS_IMAGE)
        _prune_build_stages(client)
        return
    if not image_present(client, layout.image):
        raise HarnessError(
            f"IMAGE={layout.image} is not on this engine and nothing is pulled; build it "
            f"(docker build -t {layout.image} ...) or load it (docker load -i FILE) first"
        )


def trl_tokens(log_path: Path, rank0_steps: list[dict]) -> list[tuple[dict, float]] | None:
    """[(step line, cumulative tokens)] from the HF Trainer's per-step lines in rank 0's log,
    where they count tokens (trl's SFTTrainer, which fms uses: `num_tokens`, the non-padding
    tokens of every rank so far, gathered); None where they do not, or do not pair up with
    training_logs.jsonl line for line."""
    text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    logged = runs.hf_step_logs(text)
    if not logged or len(logged) != len(rank0_steps) or not all("num_tokens" in x for x in logged):
        return None
    return [(s, x["num_tokens"]) for s, x in zip(rank0_steps, logged, strict=True)]


def summary_fields(layout: Layout, run_dir: Path, metrics: dict[int, list[dict]]) -> dict:
    """What summary.json says of a foreign trainer: where its figures come from, what
    accelerate set up in each rank, the HF Trainer's end-of-training line and tokens/s."""
    log = run_dir / "logs" / f"{layout.nodes()[0].name}.log"
    cfg = yaml.safe_load((run_dir / "job/accelerate.yaml").read_text()) or {}
    seen = {
        str(r): next((x.get("distributed_type") for x in lines if x.get("event") == "end"), None)
        for r, lines in sorted(metrics.items())
    }
    out = {"trainer": {"image": layout.image, "entry": layout.entry},
           "metrics_source": METRICS_NOTE,
           # what the config asked for, and what accelerate set up in each rank (recorder)
           "distributed_type_asked": cfg.get("distributed_type"),
           "distributed_type_seen": seen,
           "hf_train_metrics": runs.hf_train_metrics(log.read_text(errors="replace"))
           if log.is_file() else None,
           "tokens_per_s": None}  # fmt: skip
    pairs = trl_tokens(log, runs.steps(metrics.get(0, [])))
    if not pairs:
        out["tokens_per_s_source"] = "not available: rank 0's log has no num_tokens per step"
        return out
    warm = [p for p in pairs if p[0]["step"] >= runs.WARMUP_STEPS] or pairs
    (s0, n0), (s1, n1) = warm[0], warm[-1]
    if s1["time"] > s0["time"]:
        out["tokens_per_s"] = round((n1 - n0) / (s1["time"] - s0["time"]), 1)
        out["tokens_per_s_source"] = (
            f"trl's num_tokens (non-padding tokens, every rank) in rank 0's log, steps "
            f"{s0['step']}..{s1['step']}, over training_logs.jsonl's timestamps"
        )
    return out


def _prune_build_stages(client) -> None:
    """The fms build stage (venv plus wheels, ~12 GB) stays as the next build's cache; stages
    that a rebuild left behind go. Only images carrying the stage's own label are touched."""
    found = client.images.list(filters={"label": "harness.build-stage=fms", "dangling": True})
    for old in sorted(found, key=lambda i: i.attrs["Created"])[:-1]:
        try:
            client.images.remove(old.id)
        except docker.errors.APIError:
            pass  # still in use (a build running now): the next run tries again
