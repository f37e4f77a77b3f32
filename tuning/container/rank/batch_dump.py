"""Dump every batch the HF Trainer feeds the model, per rank, as JSON lines: how parity with
fms-hf-tuning is proven from fms's own run (tests/engine/trainers/test_fms_batches.py).

Off unless HARNESS_DUMP_BATCHES names a directory (the harness sets it for the ranks when it
runs with HARNESS_DUMP_BATCHES=1); then each rank appends one line per micro-batch to
<dir>/rank<RANK>.jsonl:
  {"rank", "step": the optimizer step it belongs to (1-based), "micro": its index in the step,
   "keys": the batch's keys, "input_ids", "labels", "attention_mask", "position_ids" (those
   present, as nested lists), "num_items_in_batch", "loss": what training_step returned}

Standard library only, and no `tuning` import: it is mounted beside the rank recorder into a
foreign image (fms-hf-tuning's own package is also called `tuning`), which loads it by path;
our trainer imports it as tuning.container.rank.batch_dump. Both patch
transformers.Trainer.training_step, the one method every Trainer subclass (trl's SFTTrainer, ours)
passes each collated batch through, on its way to compute_loss and the model's forward.
"""

from __future__ import annotations

import json
import os

VARIABLE = "HARNESS_DUMP_BATCHES"
FIELDS = ("input_ids", "labels", "attention_mask", "position_ids")


def _plain(value):
    """A tensor (or anything with .tolist()) as lists; numbers as they are."""
    return value.tolist() if hasattr(value, "tolist") else value


def install(environ=os.environ) -> str | None:
    """Patch the Trainer when HARNESS_DUMP_BATCHES is set; returns the file this rank writes
    (None: off, nothing imported, nothing patched)."""
    folder = environ.get(VARIABLE)
    if not folder:
        return None
    from transformers import Trainer

    path = os.path.join(folder, f"rank{environ.get('RANK', '0')}.jsonl")
    original = Trainer.training_step
    if getattr(original, "harness_dump", None):  # installed already (a second call)
        return path
    seen = {"step": None, "micro": 0}

    def training_step(self, model, inputs, num_items_in_batch=None, *args, **kwargs):
        step = self.state.global_step + 1
        seen["micro"] = seen["micro"] + 1 if seen["step"] == step else 0
        seen["step"] = step
        line = {
            "rank": int(environ.get("RANK", "0")),
            "step": step,
            "micro": seen["micro"],
            "keys": sorted(inputs),
        }
        line.update({k: _plain(inputs[k]) for k in FIELDS if k in inputs})
        line["num_items_in_batch"] = _plain(num_items_in_batch)
        loss = original(self, model, inputs, num_items_in_batch, *args, **kwargs)
        line["loss"] = float(loss)
        os.makedirs(folder, exist_ok=True)  # here, not at install: no batch, no folder
        with open(path, "a") as fh:
            fh.write(json.dumps(line) + "\n")
        return loss

    training_step.harness_dump = True
    Trainer.training_step = training_step
    return path
