"""fms-hf-tuning's own training log, written as fms writes it, so a reader of fms's runs (the
harness, a user's script) reads ours alike."""

from __future__ import annotations

import json
import os
from datetime import datetime

from transformers import TrainerCallback


class FileLoggingCallback(TrainerCallback):
    """fms-hf-tuning's file logger: ``<output_dir>/training_logs.jsonl``, one line per HF log
    event that has a loss, in fms 3.2.2's exact format (tuning/trackers/filelogging_tracker.py):
    ``{"data": {"epoch": <2 decimals>, "step": N, "timestamp": ISO, "value": loss},
    "name": "training_loss" | "validation_loss"}``, keys sorted. Written by the world's rank 0."""

    def __init__(self, filename: str = "training_logs.jsonl"):
        self.filename = filename

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or logs is None or "epoch" not in logs:
            return
        if "loss" in logs:
            key, name = "loss", "training_loss"
        elif "eval_loss" in logs:
            key, name = "eval_loss", "validation_loss"
        else:
            return
        line = {
            "name": name,
            "data": {
                "epoch": round(logs["epoch"], 2),
                "step": state.global_step,
                "value": logs[key],
                "timestamp": datetime.isoformat(datetime.now()),
            },
        }
        with open(os.path.join(args.output_dir, self.filename), "a", encoding="utf-8") as fh:
            fh.write(f"{json.dumps(line, sort_keys=True)}\n")
