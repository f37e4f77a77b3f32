"""Checkpoints that are complete under their name or not there at all (a Trainer mixin).

transformers' Trainer._save_checkpoint (5.24) writes straight into `checkpoint-N`: the
weights, then the optimizer, the scheduler, each rank's RNG state, trainer_state.json last. A
rank killed in between leaves `checkpoint-N` half written, and get_last_checkpoint, which
takes the highest N, hands it to every restart (fms-hf-tuning issue #432).

Here every rank writes into `tmp-checkpoint-N/checkpoint-N` (a name that regex and
rotate_checkpoints' glob pass by), waits until every rank has written (as DCP writes its
metadata last), and then the process that saves renames it `checkpoint-N` in one step and
rotates (save_total_limit) among the finished ones only. The files are fsynced before the
rename and the folder after it, so a power loss or a node crash cannot leave `checkpoint-N`
naming data still in the page cache. A staging dir a kill leaves behind is moved aside by
tuning/container/rank/torn.py at the next start.

HARNESS_SAVE_SLEEP=s (set only by `make fault FAULT=save-kill`) holds every rank s seconds
inside the save, after the weights and before the optimizer, so a kill lands in it every time;
a soak's save-kill holds its one target rank there instead, in the save it was planned for
(HARNESS_HOLD_FILE: tuning/container/sft/fault_hooks.hold), so the other saves cost what they cost.
"""

from __future__ import annotations

import os
import shutil
import time

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from tuning.container.rank import torn
from tuning.container.sft.fault_hooks import hold


class AtomicSaveMixin:
    """Put before transformers.Trainer in the bases. best_model_checkpoint (only set with
    metric_for_best_model, which the job does not take) would name the staging dir."""

    _staging: str | None = None

    def _get_output_dir(self, trial) -> str:
        run_dir = super()._get_output_dir(trial)
        return os.path.join(run_dir, self._staging) if self._staging else run_dir

    def _save_checkpoint(self, model, trial) -> None:
        run_dir = self._get_output_dir(trial)
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        self._staging = torn.STAGING + name
        try:  # into tmp-checkpoint-N/checkpoint-N; its rotation sees that one alone
            super()._save_checkpoint(model, trial)
        finally:
            self._staging = None
        self.accelerator.wait_for_everyone()  # every rank's files are written
        if self.args.should_save:
            staged, final = (
                os.path.join(run_dir, torn.STAGING + name, name),
                os.path.join(run_dir, name),
            )
            if os.path.isdir(final):  # the same step saved again: the Trainer overwrites it
                shutil.rmtree(final)
            _fsync_tree(staged)  # the files on disk before the name says they are whole
            os.rename(staged, final)
            os.rmdir(os.path.dirname(staged))
            _fsync(run_dir)  # ... and the rename itself
            rotate_checkpoints(
                output_dir=run_dir,
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        pause = float(os.environ.get("HARNESS_SAVE_SLEEP") or 0)
        if pause and self._staging:
            time.sleep(pause)  # the save-kill fault's window: weights written, the rest not
        if self._staging:
            hold("save", self.args.process_index, self.state.global_step)
        super()._save_optimizer_and_scheduler(output_dir)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: str) -> None:
    """Every file and folder under `root` (the ranks' files are written when this runs)."""
    for folder, _, files in os.walk(root):
        for name in files:
            _fsync(os.path.join(folder, name))
        _fsync(folder)
