"""What summary.json says of a foreign trainer's run (TRAINER=fms, ENTRY=...): its figures
come from what it writes itself (fms: <output_dir>/training_logs.jsonl) and rank 0's log.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import yaml

from tuning.harness.rundirs import runs
from tuning.harness.spec.layout import SRC_DIR, Layout

METRICS_NOTE = (
    "steps and losses from rank 0's training_logs.jsonl (the trainer's own FileLoggingTracker, "
    "written by the world process zero only): no rank other than 0 has per-step figures. "
    "world_size_seen: the process group each rank joined (the harness's rank recorder)."
)
RECORDER_NOTE = (
    "each rank's steps from the rank recorder's TrainerCallback on its HF Trainer "
    "(tuning/rank/trainer_steps.py); loss and lr on the steps the Trainer logs (logging_steps), as "
    "it logs them: the mean over every rank and over the steps since its previous log. "
    "world_size_seen: the process group each rank joined (the harness's rank recorder)."
)


def trainer_record(layout: Layout) -> dict:
    """The foreign trainer a run ran: image and ENTRY, and SRC and ARGS when given."""
    out = {"image": layout.image, "entry": layout.entry}
    if layout.src:
        out["src"] = layout.src
    if layout.args is not None:
        out["args"] = list(layout.args)
    return out


def trl_tokens(log_path: Path, rank0_steps: list[dict]) -> list[tuple[dict, float]] | None:
    """[(step line, cumulative tokens)] from the HF Trainer's per-step lines in rank 0's log,
    where they count tokens (trl's SFTTrainer, which fms uses: `num_tokens`, the non-padding
    tokens of every rank so far, gathered); None where they do not, or do not pair up with
    training_logs.jsonl line for line."""
    text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    logged = hf_step_logs(text)
    if not logged or len(logged) != len(rank0_steps) or not all("num_tokens" in x for x in logged):
        return None
    return [(s, x["num_tokens"]) for s, x in zip(rank0_steps, logged, strict=True)]


def said(layout: Layout) -> str:
    """The run's opening line on a trainer of your own: what runs, from where, with what."""
    src = f" from {layout.src} (SRC, read-only at {SRC_DIR})" if layout.src else ""
    args = shlex.join(layout.args) if layout.args is not None else "none (a JSON job)"
    return f"ENTRY {layout.entry}{src} in {layout.image}; ARGS: {args}"


def summary_fields(layout: Layout, run_dir: Path, metrics: dict[int, list[dict]]) -> dict:
    """What summary.json says of a foreign trainer: where its figures come from, what
    accelerate set up in each rank, the HF Trainer's end-of-training line and tokens/s."""
    log = run_dir / "logs" / f"{layout.nodes()[0].name}.log"
    cfg = yaml.safe_load((run_dir / "job/accelerate.yaml").read_text()) or {}
    seen = {
        str(r): next((x.get("distributed_type") for x in lines if x.get("event") == "end"), None)
        for r, lines in sorted(metrics.items())
    }
    out = {"trainer": trainer_record(layout),
           "metrics_source": RECORDER_NOTE if layout.recorder_steps else METRICS_NOTE,
           # what the config asked for, and what accelerate set up in each rank (recorder)
           "distributed_type_asked": cfg.get("distributed_type"),
           "distributed_type_seen": seen,
           "hf_train_metrics": hf_train_metrics(log.read_text(errors="replace"))
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


_HF_TRAIN = re.compile(r"\{'train_runtime': [^{}]*\}")
_HF_STEP = re.compile(r"\{'loss': [^{}]*\}")


def hf_step_logs(log: str) -> list[dict]:
    """The HF Trainer's per-step log lines ({'loss': ..., 'epoch': ...}) in a rank 0 log."""
    out = []
    for found in _HF_STEP.findall(log):
        try:
            out.append(ast.literal_eval(found))
        except (ValueError, SyntaxError):
            pass
    return out


def hf_train_metrics(log: str) -> dict | None:
    """The HF Trainer's end-of-training line in a rank 0 log ({'train_runtime': ...,
    'train_tokens_per_second': ... with include_tokens_per_second}), the last one."""
    found = _HF_TRAIN.findall(log)
    try:
        return ast.literal_eval(found[-1]) if found else None
    except (ValueError, SyntaxError):
        return None
