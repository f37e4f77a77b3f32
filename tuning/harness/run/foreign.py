"""What summary.json says of a foreign trainer's run (TRAINER=fms, ENTRY=...): its figures
come from what it writes itself (fms: <output_dir>/training_logs.jsonl) and rank 0's log.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import yaml

from tuning.harness.contract.container import SRC_DIR
from tuning.harness.layout.layout import Layout
from tuning.harness.run_files import metric_lines

METRICS_NOTE = (
    "steps and losses from rank 0's training_logs.jsonl (the trainer's own FileLoggingTracker, "
    "written by the world process zero only): no rank other than 0 has per-step figures. "
    "world_size_seen: the process group each rank joined (the harness's rank recorder)."
)
RECORDER_NOTE = (
    "each rank's steps from the rank recorder's TrainerCallback on its HF Trainer "
    "(tuning/container/rank/trainer_steps.py); loss and lr on the steps the Trainer logs "
    "(logging_steps), as it logs them: the mean over every rank and over the steps since its "
    "previous log. "
    "world_size_seen: the process group each rank joined (the harness's rank recorder)."
)


def trainer_record(layout: Layout) -> dict:
    """The foreign trainer a run ran: image and ENTRY, and SRC and ARGS when given."""
    out = {"image": layout.topology.plan.image, "entry": layout.trainer.entry}
    if layout.mounts.src:
        out["src"] = layout.mounts.src
    if layout.trainer.args is not None:
        out["args"] = list(layout.trainer.args)
    return out


def number(value) -> float | None:
    """A figure from a trainer's log as a number: a log is text until parsed, and the HF
    Trainer prints its floats as text ('256', '1.235e+05': transformers 5's ProgressCallback
    formats each float with 4 significant digits); None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def trl_tokens(
    log_path: Path, rank0_steps: list[dict]
) -> tuple[list[tuple[dict, float]] | None, str]:
    """([(step line, cumulative tokens)], where they came from) of trl's `num_tokens` (the
    non-padding tokens of every rank so far, gathered: trl's SFTTrainer, which fms uses too);
    (None, why not) where there are none to use. First the rank recorder's step lines, which
    took it from the Trainer's logs in the rank, as a number; else the HF Trainer's per-step
    lines in rank 0's log, paired line for line with the steps (fms: training_logs.jsonl)."""
    recorded = [(s, number(s["num_tokens"])) for s in rank0_steps if "num_tokens" in s]
    if recorded:
        bad = [s["num_tokens"] for s, n in recorded if n is None]
        if bad:
            return None, f"not available: rank 0's num_tokens {bad[0]!r} is not a number"
        return recorded, "trl's num_tokens in rank 0's step lines (the Trainer's logs, in the rank)"
    text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    logged = [x for x in hf_step_logs(text) if "num_tokens" in x]
    if not logged:
        return None, "not available: rank 0's log has no num_tokens per step"
    if len(logged) != len(rank0_steps):
        return None, (
            f"not available: rank 0's log has {len(logged)} num_tokens lines for "
            f"{len(rank0_steps)} steps, which do not pair up"
        )
    pairs = [(s, number(x["num_tokens"])) for s, x in zip(rank0_steps, logged, strict=True)]
    bad = [x["num_tokens"] for x, (_, n) in zip(logged, pairs, strict=True) if n is None]
    if bad:
        return None, f"not available: rank 0's log's num_tokens {bad[0]!r} is not a number"
    return pairs, "trl's num_tokens in rank 0's log, line for line with the steps"


def said(layout: Layout) -> str:
    """The run's opening line on a trainer of your own: what runs, from where, with what."""
    t, where = layout.trainer, layout.mounts.src
    src = f" from {where} (SRC, read-only at {SRC_DIR})" if where else ""
    args = shlex.join(t.args) if t.args is not None else "none (a JSON job)"
    return f"ENTRY {t.entry}{src} in {layout.topology.plan.image}; ARGS: {args}"


def summary_fields(layout: Layout, run_dir: Path, metrics: dict[int, list[dict]]) -> dict:
    """What summary.json says of a foreign trainer: where its figures come from, what
    accelerate set up in each rank, the HF Trainer's end-of-training line and tokens/s."""
    log = run_dir / "logs" / f"{layout.nodes()[0].name}.log"
    cfg = yaml.safe_load((run_dir / "job/accelerate.yaml").read_text()) or {}
    seen = {
        str(r): next((x.get("distributed_type") for x in lines if x.get("event") == "end"), None)
        for r, lines in sorted(metrics.items())
    }
    out = {
        "trainer": trainer_record(layout),
        "metrics_source": RECORDER_NOTE if layout.trainer.recorder_steps else METRICS_NOTE,
        # what the config asked for, and what accelerate set up in each rank (recorder)
        "distributed_type_asked": cfg.get("distributed_type"),
        "distributed_type_seen": seen,
        "hf_train_metrics": hf_train_metrics(log.read_text(errors="replace"))
        if log.is_file()
        else None,
        "tokens_per_s": None,
    }
    pairs, source = trl_tokens(log, metric_lines.steps(metrics.get(0, [])))
    out["tokens_per_s_source"] = source
    if not pairs:
        return out
    warm = [p for p in pairs if p[0]["step"] >= metric_lines.WARMUP_STEPS] or pairs
    (s0, n0), (s1, n1) = warm[0], warm[-1]
    if s1["time"] > s0["time"]:
        out["tokens_per_s"] = round((n1 - n0) / (s1["time"] - s0["time"]), 1)
        out["tokens_per_s_source"] = (
            f"{source}: non-padding tokens of every rank, steps {s0['step']}..{s1['step']}, "
            "over the step lines' times"
        )
    else:
        out["tokens_per_s_source"] = f"not available: {source} spans no time (one step)"
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
    'train_tokens_per_second': ... with include_tokens_per_second}), the last one, its figures
    parsed (transformers 5 prints them as text); a value that is no number is kept as text."""
    found = _HF_TRAIN.findall(log)
    try:
        line = ast.literal_eval(found[-1]) if found else None
    except (ValueError, SyntaxError):
        return None
    if not isinstance(line, dict):
        return None
    return {k: v if number(v) is None else number(v) for k, v in line.items()}
