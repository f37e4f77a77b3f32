"""Per-rank metrics (``<output_dir>/metrics/rank<N>.jsonl``) and the run summary.

Every line has ``event``, ``rank``, ``world_size`` (as this rank's torch.distributed saw them),
``time`` (unix seconds) and ``t`` (seconds since the *process* started, from /proc, so
interpreter start-up and imports count). Events: ``phase`` (imports, rendezvous, model_loaded,
data_ready; training, with the ``step`` it starts from: a restart's checkpoint is loaded by
then), ``step``, ``checkpoint``, ``end``. Every line is flushed as it is written.

The step numbers come from MetricsTrainerMixin (what each rank fed the model in an optimizer
step: its loss, tokens and sample indices) and StepMetricsCallback (timing, lr, writing).
At the end rank 0 writes ``<output_dir>/train_summary.json``.
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

from transformers import TrainerCallback

from tuning.container.shared.boot import boot_time

WARMUP_STEPS = 2  # steps left out of tokens_per_s


def process_start_time() -> float:
    """Unix time this process started: starttime (clock ticks after boot) plus the boot time."""
    try:
        stat = Path("/proc/self/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        start_ticks = int(fields[19])  # field 22 of the whole line; fields[0] is field 3
        return boot_time() + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return time.time()


PROCESS_START = process_start_time()


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def memory_peaks() -> dict:
    """This rank's peak memory so far: RSS, and on CUDA the allocator's peak (step lines)."""
    out = {"peak_rss_bytes": peak_rss_bytes()}
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
    return out


class MetricsWriter:
    """Appends JSON lines to metrics/rank<N>.jsonl. Lines written before ``bind`` (before the
    rank is known from torch.distributed) are buffered with their original times."""

    def __init__(self, output_dir: str | os.PathLike):
        self.dir = Path(output_dir) / "metrics"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rank: int | None = None
        self.world_size: int | None = None
        self._fh = None
        self._pending: list[dict] = []

    def bind(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size
        self._fh = open(self.dir / f"rank{rank}.jsonl", "a", buffering=1)
        for record in self._pending:
            self._write(record)
        self._pending.clear()

    def bind_from_env(self) -> None:
        """Fallback when the run stops before rendezvous: the launcher's RANK/WORLD_SIZE."""
        if self._fh is None:
            self.bind(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))

    def _write(self, record: dict) -> None:
        record = {**record, "rank": self.rank, "world_size": self.world_size}
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()

    def log(self, event: str, **fields) -> None:
        now = time.time()
        record = {
            "event": event,
            **fields,
            "time": round(now, 6),
            "t": round(now - PROCESS_START, 6),
        }
        if self._fh is None:
            self._pending.append(record)
        else:
            self._write(record)

    def phase(self, name: str) -> None:
        self.log("phase", name=name)

    def close(self) -> None:
        if self._fh is None and self._pending:
            self.bind_from_env()
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class MetricsTrainerMixin:
    """Mix into a transformers.Trainer: records, per optimizer step, this rank's summed token
    loss, its count of loss tokens, its non-padding tokens and the sample indices it used.
    ``sample_index`` (from data.Collator) is popped here and never reaches the model."""

    def _reset_step_record(self) -> None:
        self.step_record = {"loss_sum": 0.0, "loss_tokens": 0, "tokens": 0, "samples": []}

    def training_step(self, model, inputs, num_items_in_batch=None):
        if not hasattr(self, "step_record"):
            self._reset_step_record()
        rec = self.step_record
        index = inputs.pop("sample_index", None)
        if index is not None:
            rec["samples"].extend(index.tolist())
        mask = inputs.get("attention_mask")
        labels = inputs.get("labels")
        rec["tokens"] += int(mask.sum()) if mask is not None else int(inputs["input_ids"].numel())
        n_local = int(labels[..., 1:].ne(-100).sum()) if labels is not None else 0
        loss = super().training_step(model, inputs, num_items_in_batch)
        value = float(loss)
        # Undo the Trainer's normalisation to get this rank's summed token loss (see compute_loss).
        if self.model_accepts_loss_kwargs and num_items_in_batch is not None:
            scale = self.accelerator.num_processes if self.args.average_tokens_across_devices else 1
            value = value * float(num_items_in_batch) / scale
        else:  # a per-batch mean, divided by the accumulation steps
            value = value * self.current_gradient_accumulation_steps * n_local
        rec["loss_sum"] += value
        rec["loss_tokens"] += n_local
        return loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs.pop("sample_index", None)
        return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)


class StepMetricsCallback(TrainerCallback):
    """Writes event=step and event=checkpoint lines; keeps what the summary needs."""

    def __init__(self, writer: MetricsWriter):
        self.writer = writer
        self.trainer = None  # set by the trainer after construction
        self.steps: list[dict] = []
        self._lr = None
        self._t0 = None
        self._mark = None  # when the last step, evaluation or save ended

    def on_train_begin(self, args, state, control, **kwargs):
        # After the Trainer is built and a checkpoint resumed from is loaded (a soak's restart
        # cost ends here), before the batches it skips.
        self.writer.log("phase", name="training", step=state.global_step)
        self._t0 = self._mark = time.perf_counter()
        if self.trainer is not None:
            self.trainer._reset_step_record()

    def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        if optimizer is not None:
            self._lr = float(optimizer.param_groups[0]["lr"])  # before the scheduler steps

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        rec = self.trainer.step_record
        loss = rec["loss_sum"] / rec["loss_tokens"] if rec["loss_tokens"] else float("nan")
        step = {
            "step": state.global_step,
            "loss": loss,
            "lr": self._lr,
            "tokens": rec["tokens"],
            "step_s": round(now - self._t0, 6),
            "samples": rec["samples"],
        }
        self.writer.log("step", **step, **memory_peaks())
        if state.is_world_process_zero and state.global_step % max(1, args.logging_steps) == 0:
            # the log's own word on progress (kubectl logs; make repro reads "step k/n" back)
            print(
                f"sft_trainer: step {state.global_step}/{state.max_steps} loss {loss:.4f}",
                flush=True,
            )
        self.steps.append({**step, "loss_sum": rec["loss_sum"], "loss_tokens": rec["loss_tokens"]})
        self.trainer._reset_step_record()
        self._t0 = self._mark = time.perf_counter()

    def on_evaluate(self, args, state, control, **kwargs):
        now = time.perf_counter()  # the Trainer evaluates after the step, before it saves
        self.writer.log("evaluation", step=state.global_step, eval_s=round(now - self._mark, 3))
        self._t0 = self._mark = now

    def on_save(self, args, state, control, **kwargs):
        now = time.perf_counter()
        path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        self.writer.log(
            "checkpoint", step=state.global_step, path=path, save_s=round(now - self._mark, 3)
        )
        self._t0 = self._mark = time.perf_counter()  # saving is not part of the next step's time


def summarize(steps: list[dict], world_size: int, status: str, device_type: str = "cpu") -> dict:
    """Build train_summary.json on every rank (all ranks must call it: it reduces across them)."""
    import torch
    import torch.distributed as dist

    n = len(steps)
    per_step = torch.tensor(
        [[s["loss_sum"], float(s["loss_tokens"]), float(s["tokens"])] for s in steps]
        or [[0.0, 0.0, 0.0]],
        dtype=torch.float64,
    )
    rss = torch.tensor([float(peak_rss_bytes())], dtype=torch.float64)
    distributed = dist.is_available() and dist.is_initialized() and world_size > 1
    if distributed:
        device = (
            torch.device("cuda", torch.cuda.current_device())
            if device_type == "cuda"
            else torch.device("cpu")
        )
        per_step, rss_max = per_step.to(device), rss.clone().to(device)
        dist.all_reduce(per_step, op=dist.ReduceOp.SUM)
        dist.all_reduce(rss_max, op=dist.ReduceOp.MAX)
        per_step, rss_max = per_step.cpu(), rss_max.cpu()
    else:
        rss_max = rss
    losses = [(row[0] / row[1]).item() if row[1] > 0 else float("nan") for row in per_step[:n]]
    timed = list(range(WARMUP_STEPS, n)) if n > WARMUP_STEPS else list(range(n))
    seconds = sum(steps[i]["step_s"] for i in timed)
    tokens = sum(per_step[i, 2].item() for i in timed)
    summary = {
        "status": status,
        "world_size": world_size,
        "steps": n,
        "first_step": steps[0]["step"] if steps else None,
        "last_step": steps[-1]["step"] if steps else None,
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        "losses": losses,
        "tokens": int(per_step[:n, 2].sum().item()) if n else 0,
        "tokens_per_s": tokens / seconds if seconds > 0 else None,
        "tokens_per_s_steps": len(timed),
        "peak_rss_bytes": int(rss.item()),
        "peak_rss_bytes_max_rank": int(rss_max.item()),
    }
    if device_type == "cuda":
        import torch.cuda

        summary["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
    return summary


class Sharding(TrainerCallback):
    """Logs how much of the model this rank holds once the Trainer has wrapped it: FSDP's
    shards are ~1/world of the parameters, DDP's replicas all of them."""

    def __init__(self, writer: MetricsWriter, distributed_type: str, params_total: int):
        self.writer, self.distributed_type, self.total = writer, distributed_type, params_total

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        local = sum(_local_numel(p) for p in model.parameters())
        self.writer.log(
            "sharding",
            distributed_type=self.distributed_type,
            params_local=local,
            params_total=self.total,
        )


def _local_numel(param) -> int:
    # FSDP2 parameters are DTensors (their local shard); FSDP1 with use_orig_params leaves
    # each parameter a view of its part of this rank's flat shard (maybe empty).
    return param.to_local().numel() if hasattr(param, "to_local") else param.numel()
