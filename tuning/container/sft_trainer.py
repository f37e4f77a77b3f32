"""Supervised fine-tuning of a causal LM on the HF Trainer: ``python -m tuning.sft_trainer``.

Reads in one sitting, top to bottom: config -> output dirs -> data validated -> imports ->
rendezvous -> model -> tokenized data -> Trainer.train -> summary. Everything tunable is in
tuning/container/sft/config.py. Runs under ``accelerate launch`` (any number of ranks) or plain
``python``.

Exit status: 0 done (or preempted and checkpointed), 2 refused config or data, 1 anything else
(HARNESS_DEVICE=gpu on a rank that cannot use CUDA among them: tuning/container/rank/gpu_guard.py,
before data or model are read; never a quiet fall back to CPU).
Fault hooks for the harness: HARNESS_CRASH_AT_STEP=k with HARNESS_CRASH_RANK=i makes global rank
i raise at the start of step k, once per output_dir (a marker in <output_dir>/.harness/ lets a
restarted group pass it); HARNESS_STEP_SLEEP=s paces every step (s seconds of sleep at
its end, no CPU) so a fault can land at a chosen step; HARNESS_SAVE_SLEEP=s holds every
save s seconds half written (tuning/container/sft/atomic_save.py); HARNESS_DESYNC=<kind> strikes one
collective (tuning/container/rank/desync.py: slow-main, skip-collective, mismatch); SIGTERM makes
every rank checkpoint at the next step boundary they agree on and exit 0 with status "preempted".
"""

from __future__ import annotations

import json
import logging
import os
import sys

import torch
import torch.distributed as dist
from transformers import (
    AutoModelForCausalLM,
    Trainer,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint

from tuning.container.rank import batch_dump, fs_errors, fsdp_gloo, gpu_guard, stack_dump, torn
from tuning.container.sft import fms_tokenizer, rendezvous, special_tokens
from tuning.container.sft.atomic_save import AtomicSaveMixin
from tuning.container.sft.collator import Collator
from tuning.container.sft.config import ConfigError, SFTConfig
from tuning.container.sft.config_args import parse_args
from tuning.container.sft.data import load_examples, tokenize_examples
from tuning.container.sft.fault_hooks import FaultHooks, Preemption
from tuning.container.sft.files import DataError
from tuning.container.sft.fms_logs import FileLoggingCallback
from tuning.container.sft.metrics import (
    MetricsTrainerMixin,
    MetricsWriter,
    Sharding,
    StepMetricsCallback,
    summarize,
)
from tuning.container.sft.records import gc_paused
from tuning.container.sft.shapes import formatting
from tuning.container.sft.tokenized import Node
from tuning.container.shared import affinity

EXIT_REFUSED = 2
# SFTConfig fields handed to TrainingArguments under the same name, unchanged.
PASSED_THROUGH = (
    "output_dir",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "per_device_eval_batch_size",
    "gradient_accumulation_steps",
    "learning_rate",
    "lr_scheduler_type",
    "optim",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "logging_strategy",
    "weight_decay",
    "max_grad_norm",
    "seed",
    "data_seed",
    "logging_steps",
    "eval_steps",
    "save_strategy",
    "save_steps",
    "save_total_limit",
    "ddp_timeout",
)


def main(argv: list[str] | None = None) -> int:
    affinity.pin_rank()  # bench: this rank's own cores (HARNESS_RANK_CPUS), the same everywhere
    # 1. Config, output dirs (every rank, before anything races for them), data checked.
    try:
        cfg = parse_args(argv)
    except ConfigError as exc:
        print(f"sft_trainer: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    os.makedirs(os.path.join(cfg.output_dir, "metrics"), exist_ok=True)
    # Every start (torchrun's restarts too): a checkpoint torn by a kill is moved aside, so
    # get_last_checkpoint below finds the newest complete one (tuning/container/rank/torn.py).
    torn.before_start(cfg.output_dir, int(os.environ.get("RANK") or 0))
    # SIGUSR1: every thread's stack to <output_dir>/stacks (the host's `stacks`, stall, fault)
    stack_dump.install(cfg.output_dir, int(os.environ.get("RANK") or 0))
    writer = MetricsWriter(cfg.output_dir)
    if os.environ.get(
        "HARNESS_DESYNC"
    ):  # make fault's desync kinds (tuning/container/rank/desync.py)
        from tuning.container.rank import desync

        desync.install(int(os.environ.get("RANK") or 0), lambda line: writer.log(**line))
    writer.phase("imports")  # the module's imports (torch, transformers) are done by now
    status, error = "failed", None
    try:
        gpu_guard.check()  # told it has GPUs and cannot use them: fail now, never train on CPU
        data = _load_data(cfg)
        status = _train(cfg, writer, data)
        return 0
    except (ConfigError, DataError, fsdp_gloo.NotSharded) as exc:
        status, error = "refused", str(exc)
        print(f"sft_trainer: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except gpu_guard.GpuUnavailable as exc:
        error = str(exc)
        print(f"sft_trainer: error: {exc}", file=sys.stderr)
        return 1
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        stack_dump.at_failure(cfg.output_dir, int(os.environ.get("RANK") or 0))
        why = fs_errors.explain(exc, cfg.output_dir)  # torch.save hides ENOSPC: say it
        if why:
            print(f"sft_trainer: error: {why}", file=sys.stderr)
            error = f"{why} ({error})"
        raise
    finally:
        writer.bind_from_env()
        got = Preemption.current
        if got is not None and got.received_at:  # this rank's own SIGTERM (a preempted group)
            writer.log("signal", name="SIGTERM", at=round(got.received_at, 3), pid=os.getpid())
        writer.log(
            "end", status=status, **({"error": error} if status != "completed" and error else {})
        )
        writer.close()


def _load_data(cfg: SFTConfig) -> dict:
    """Every record read and checked, on every rank, before any rendezvous: bad data is refused
    by each rank alike. A dict, so _train can drop the examples once they are tokenized."""
    fmt = formatting(cfg)
    with gc_paused():
        train = load_examples(cfg.training_data_path, **fmt)
        val = load_examples(cfg.validation_data_path, **fmt) if cfg.validation_data_path else None
    return {
        "training": (cfg.training_data_path, train),
        "validation": (cfg.validation_data_path, val),
    }


def _tokenize(cfg: SFTConfig, data: dict, tokenizer, name: str):
    """One data set tokenized (each rank of a node a slice: tuning/container/sft/tokenized.py); its
    examples dropped from `data` as they are done with, so training holds the compact arrays
    alone."""
    path, examples = data.pop(name)
    if examples is None:
        return None
    node = Node.from_env(cfg.output_dir)
    return tokenize_examples(
        examples, tokenizer, cfg.max_seq_length, path, cfg.response_template, node, name
    )


def _train(cfg: SFTConfig, writer: MetricsWriter, data: dict) -> str:
    # 2. Rendezvous (tuning/container/sft/rendezvous.py): gloo without a GPU, NCCL with one.
    rank, world_size, on_gpu = rendezvous.join(cfg.ddp_timeout)
    writer.bind(rank, world_size)
    writer.phase("rendezvous")
    preempt = Preemption(world_size, torch.device("cuda") if on_gpu else torch.device("cpu"))

    # 3. Model and tokenizer, from any local directory; no architecture assumed.
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(
        cfg.torch_dtype, "auto"
    )
    tokenizer = fms_tokenizer.load(cfg.tokenizer_path)  # the token ids fms's loading gives
    model = AutoModelForCausalLM.from_pretrained(cfg.model_name_or_path, dtype=dtype)
    # fms's setup_tokenizer: its special tokens, the embeddings resized (before LoRA, as fms)
    tokens = special_tokens.set_up(tokenizer, model, cfg)
    for _, records in data.values():  # pre-tokenized ids past the rows: refused
        special_tokens.check_token_ids(records, tokens["embedding_rows"][1])
    if rank == 0 and special_tokens.describe(tokens):
        print(f"sft_trainer: {special_tokens.describe(tokens)}", flush=True)
    if cfg.peft_method == "lora":
        from peft import LoraConfig, get_peft_model

        targets = cfg.target_modules
        lora = LoraConfig(
            r=cfg.r,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            target_modules=targets[0] if targets == ["all-linear"] else targets,  # None: peft's
            task_type="CAUSAL_LM",
        )
        model = get_peft_model(model, lora)
    writer.phase("model_loaded")

    # 4. Data: tokenized with prompt and padding masked to -100, once per node.
    train_ds = _tokenize(cfg, data, tokenizer, "training")
    eval_ds = _tokenize(cfg, data, tokenizer, "validation")
    writer.phase("data_ready")

    # 5. Train.
    # As fms: unset or "true" resumes from output_dir's latest checkpoint (none: start afresh).
    resume = cfg.resume_from_checkpoint
    if resume is None or resume.lower() == "true":
        resume = get_last_checkpoint(cfg.output_dir)
    elif resume.lower() == "false":
        resume = None
    args = TrainingArguments(
        **{name: getattr(cfg, name) for name in PASSED_THROUGH},
        warmup_steps=cfg.warmup_steps or cfg.warmup_ratio,  # transformers 5: < 1 is a ratio
        eval_strategy=cfg.eval_strategy if eval_ds is not None else "no",
        ddp_find_unused_parameters=False,
        bf16=False,
        report_to="none",
        disable_tqdm=not sys.stderr.isatty(),
        dataloader_num_workers=0,
        remove_unused_columns=False,
        **({"gradient_checkpointing": True} if cfg.gradient_checkpointing else {}),
    )
    fsdp_gloo.install()  # FSDP on CPU ranks too; an FSDP config never silently runs DDP
    batch_dump.install()  # HARNESS_DUMP_BATCHES (debug, parity tests): every batch, as fms's
    metrics = StepMetricsCallback(writer)
    params_total = sum(p.numel() for p in model.parameters())
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=Collator(tokenizer.pad_token_id, tokenizer.padding_side),
        processing_class=tokenizer,
        callbacks=[
            metrics,
            FaultHooks(rank, preempt),
            FileLoggingCallback(cfg.training_logs_filename),
        ],
    )
    metrics.trainer = trainer
    ran = str(trainer.accelerator.distributed_type.value)
    trainer.add_callback(Sharding(writer, ran, params_total))
    trainer.train(resume_from_checkpoint=resume)
    if cfg.save_model_dir:  # as fms: the final model (and tokenizer), every rank joins
        trainer.save_model(cfg.save_model_dir)

    # 6. Summary (every rank joins the reduction; rank 0 writes it).
    status = "preempted" if preempt.stopped else "completed"
    summary = summarize(metrics.steps, world_size, status, "cuda" if on_gpu else "cpu")
    summary["tokenizer"] = tokens
    if rank == 0:
        with open(os.path.join(cfg.output_dir, "train_summary.json"), "w") as fh:
            json.dump(summary, fh, indent=2)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return status


class SFTTrainer(AtomicSaveMixin, MetricsTrainerMixin, Trainer):
    """The HF Trainer plus per-rank step metrics (tuning.container.sft.metrics), each checkpoint
    complete under its name or not there at all (tuning.container.sft.atomic_save)."""


if __name__ == "__main__":
    code = main()
    # Everything is written and closed by now (metrics, checkpoints, the process group).
    # Skip the interpreter's teardown: torch's C++ threads have aborted it here now and then
    # ("terminate called without an active exception", exit -6), turning a finished rank
    # into a failed one and leaving its peer's launcher waiting in torchrun's exit barrier.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
