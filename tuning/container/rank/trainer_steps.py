"""Each rank's step lines from any HF Trainer a trainer of your own builds, unmodified: the
harness follows steps (progress, faults at AT_STEP, the stall watch, MAX_RESTARTS' goal) from
the metrics, and an HF script writes none of its own.

The rank recorder (rank_record.py) calls `install` before it runs ENTRY: every
`transformers.Trainer` (and subclass: trl's SFTTrainer, ...) then gets a TrainerCallback that
appends to the rank's metrics/rank<N>.jsonl, in the metrics schema (docs/design.md):
  {"event": "phase", "name": "training", "step", "trainer", "output_dir", "max_steps"}
      at train begin, after a checkpoint resumed from is loaded (step: its global_step, as our
      trainer's metrics.py writes it; 0 on a fresh start)
  {"event": "step", "step", "loss", "lr", "epoch", "step_s", "peak_rss_bytes"}
      every optimizer step; loss and lr on the steps the Trainer logs (logging_steps), as it
      logs them: the mean over every rank and over the steps since its previous log; else null;
      and "num_tokens" where the Trainer logs it (trl: every rank's tokens so far)
  {"event": "evaluation", "step", "eval_s"}   after each evaluation
  {"event": "checkpoint", "step", "path", "save_s"}   after each save, on every rank (eval_s,
      save_s: from the end of the step, or of its evaluation, as our trainer's metrics.py)
HARNESS_STEP_SLEEP (fault runs) paces each step, as our trainer does, so a fault lands near
AT_STEP. HARNESS_STEP_LINES=0 turns it off: fms logs its own steps (training_logs.jsonl).

A Trainer whose output_dir is not the run's output dir is refused when it is built, on every
rank, before a step: the harness sets torn checkpoints aside there, a restart resumes from
there, and on the read-only root nothing else would keep them.

Standard library only at import (mounted beside the rank recorder into a user's image, loaded
by path); transformers is imported by `install`.
"""

from __future__ import annotations

import os
import resource
import time

VARIABLE = "HARNESS_STEP_LINES"


class OutputDirError(RuntimeError):
    """The Trainer saves outside the run's output dir."""


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def check_output_dir(trainer_dir: str, output_dir: str) -> None:
    if os.path.realpath(trainer_dir) == os.path.realpath(output_dir):
        return
    raise OutputDirError(
        f"the Trainer saves to output_dir={trainer_dir!r} ({os.path.realpath(trainer_dir)}), not "
        f"the run's output dir {output_dir}: the harness sets torn checkpoints aside and a "
        f"restart resumes only there, and nothing else outlives the container. Pass "
        f"--output_dir {output_dir} (ARGS)"
    )


def callback_class(write, sleep_s: float):
    """The TrainerCallback; `write(event, **fields)` appends a metrics line (Record.write)."""
    from transformers import TrainerCallback

    class StepLines(TrainerCallback):
        def __init__(self, trainer: str):
            self.trainer = trainer  # the Trainer class it serves
            self.pending: dict | None = None  # a step whose loss the Trainer logs right after
            self.began = self.mark = time.time()

        def flush(self) -> None:
            if self.pending is not None:
                line, self.pending = self.pending, None
                write("step", **line)

        def on_train_begin(self, args, state, control, **kwargs):
            write(
                "phase",
                name="training",
                step=state.global_step,
                trainer=self.trainer,
                output_dir=args.output_dir,
                max_steps=state.max_steps,
            )
            self.began = time.time()

        def on_step_begin(self, args, state, control, **kwargs):
            self.flush()
            if sleep_s:
                time.sleep(sleep_s)
            self.began = time.time()

        def on_step_end(self, args, state, control, **kwargs):
            line = {
                "step": state.global_step,
                "loss": None,
                "lr": None,
                "epoch": state.epoch,
                "step_s": round(time.time() - self.began, 6),
                "peak_rss_bytes": peak_rss_bytes(),
            }
            self.pending = line
            self.mark = time.time()  # what an evaluation or a save after this step costs
            if not control.should_log:  # else the Trainer logs this step's loss next (on_log)
                self.flush()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.pending is not None and logs and "loss" in logs:
                self.pending.update(loss=logs["loss"], lr=logs.get("learning_rate"))
                if "num_tokens" in logs:  # trl: every rank's tokens so far, as a number here
                    self.pending["num_tokens"] = logs["num_tokens"]
            self.flush()

        def on_evaluate(self, args, state, control, **kwargs):
            self.flush()
            now = time.time()
            write("evaluation", step=state.global_step, eval_s=round(now - self.mark, 3))
            self.mark = now

        def on_save(self, args, state, control, **kwargs):
            self.flush()
            now = time.time()
            path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            write("checkpoint", step=state.global_step, path=path, save_s=round(now - self.mark, 3))
            self.mark = now

        def on_train_end(self, args, state, control, **kwargs):
            self.flush()

    return StepLines


def install(write, output_dir: str, environ=os.environ) -> bool:
    """Give every HF Trainer built from now on the step callback and the output-dir check;
    False when off or when transformers is not installed (a trainer without it)."""
    if environ.get(VARIABLE) == "0":
        return False
    try:
        from transformers import Trainer
    except ImportError:
        return False
    if getattr(Trainer.__init__, "harness_steps", False):
        return True
    StepLines = callback_class(write, float(environ.get("HARNESS_STEP_SLEEP") or 0))
    original = Trainer.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        check_output_dir(self.args.output_dir, output_dir)
        self.add_callback(StepLines(type(self).__name__))

    __init__.harness_steps = True
    Trainer.__init__ = __init__
    return True
