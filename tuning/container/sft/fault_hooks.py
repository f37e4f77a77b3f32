"""What the harness's faults hook into in our trainer (tuning/container/sft_trainer.py): an injected
crash at a step (HARNESS_CRASH_AT_STEP / HARNESS_CRASH_RANK), step pacing (HARNESS_STEP_SLEEP),
a hold where a soak's next failure strikes (HARNESS_HOLD_FILE) and checkpoint-and-stop on
SIGTERM, agreed by every rank."""

from __future__ import annotations

import json
import os
import signal
import time

import torch
import torch.distributed as dist
from transformers import TrainerCallback


class Preemption:
    """SIGTERM sets a flag; the ranks agree on it through a MAX all-reduce issued at one step's
    end and read at the next, so no step waits on it and every rank stops at the same step."""

    current: Preemption | None = None  # this process's, for its end line (sft_trainer.py)

    def __init__(self, world_size: int, device):
        Preemption.current = self
        self.world_size, self.device = world_size, device
        self.requested = False
        self.received_at: float | None = None
        self.stopped = False
        self._work = self._buf = None
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum, frame):
        # this rank's own SIGTERM, when (its end line says it: the verdict tells the rank
        # stopped from outside from the ones that stopped with it)
        self.received_at = self.received_at or time.time()
        self.requested = True

    def agreed(self) -> bool:
        if self.world_size == 1:
            return self.requested
        seen = False
        if self._work is not None:
            self._work.wait()
            seen = bool(self._buf.item())
        self._buf = torch.tensor([int(self.requested)], device=self.device)
        self._work = dist.all_reduce(self._buf, op=dist.ReduceOp.MAX, async_op=True)
        return seen

    def drain(self) -> None:
        if self._work is not None:
            self._work.wait()
            self._work = None


HOLD_MAX_S = 120  # a hold the harness never ends (its fault did not land) lets the rank go on


def hold(where: str, rank: int, step: int, preempt: Preemption | None = None) -> bool:
    """A soak's failure lands at its planned step (make soak: soak/plan.py): the file
    HARNESS_HOLD_FILE names a rank and a step, and `where` (at the end of that step, once its
    step line is written; or inside the save of the first checkpoint at or after it). That rank
    waits there until the harness, which follows the step lines, has struck it: killed (the
    wait ends with the process), SIGTERM (preempt, term) or HOLD_MAX_S. Returns whether it held."""
    path = os.environ.get("HARNESS_HOLD_FILE")
    try:
        with open(path or os.devnull) as fh:
            want = json.loads(fh.read() or "{}")
    except (OSError, ValueError):  # not written yet (the harness writes it whole, by a rename)
        return False
    if (want.get("rank"), want.get("at")) != (rank, where) or not isinstance(want.get("step"), int):
        return False
    if (step != want["step"]) if where == "step" else (step < want["step"]):
        return False
    until = time.monotonic() + HOLD_MAX_S
    while time.monotonic() < until and not (preempt and preempt.requested):
        time.sleep(0.05)
    return True


class FaultHooks(TrainerCallback):
    """HARNESS_CRASH_AT_STEP / HARNESS_CRASH_RANK, step pacing, a soak's hold, and
    checkpoint-and-stop on SIGTERM."""

    def __init__(self, rank: int, preempt: Preemption):
        self.rank, self.preempt = rank, preempt
        at = os.environ.get("HARNESS_CRASH_AT_STEP")
        self.crash_at = int(at) if at else None
        self.crash_rank = int(os.environ.get("HARNESS_CRASH_RANK", "0"))
        self.step_sleep = float(os.environ.get("HARNESS_STEP_SLEEP") or 0)

    def on_step_begin(self, args, state, control, **kwargs):
        if self.step_sleep:  # at the start: a step's time holds it, the save before it does not
            time.sleep(self.step_sleep)
        step = state.global_step + 1
        if self.crash_at is not None and step == self.crash_at and self.rank == self.crash_rank:
            # Once per run: a group restarted from a checkpoint (MAX_RESTARTS) must get past it.
            marker = os.path.join(
                args.output_dir, ".harness", f"crashed-step{step}-rank{self.rank}"
            )
            if os.path.exists(marker):
                return
            os.makedirs(os.path.dirname(marker), exist_ok=True)
            open(marker, "w").close()
            raise RuntimeError(f"injected crash at step {step}")

    def on_step_end(self, args, state, control, **kwargs):
        hold("step", self.rank, state.global_step, self.preempt)  # after the step line (metrics)
        if self.preempt.agreed() and not self.preempt.stopped:
            self.preempt.stopped = True
            control.should_save = True
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        self.preempt.drain()
