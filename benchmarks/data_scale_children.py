"""What benchmarks/data_scale.py's child processes run (``--child KIND DATA OUT MODEL``), each
in a fresh process: ``host``, the harness's data check; ``rank``, one rank's load-and-tokenize;
and ``status``, the /proc memory figures they (and the parent's sampler) read. tuning/ is
imported from the repository root, which data_scale.py puts on sys.path."""

from __future__ import annotations

import os
import time
from pathlib import Path


def status(field: str, pid: str = "self") -> int:
    """A /proc/<pid>/status or smaps_rollup field, in bytes (0 when gone)."""
    name = "smaps_rollup" if field in ("Pss", "Private", "Rss") else "status"
    try:
        text = Path(f"/proc/{pid}/{name}").read_text()
    except OSError:
        return 0
    total = 0
    for line in text.splitlines():
        key = line.split(":")[0]
        if key == field or (field == "Private" and key.startswith("Private_")):
            total += int(line.split()[1]) * 1024
    return total


def child_host(data: str, out: str, model: str) -> dict:
    from tuning.container.sft.config_args import parse_args
    from tuning.harness.checks.preflight import check_data

    cfg = parse_args(
        ["--model_name_or_path", model, "--training_data_path", data, "--output_dir", out]
    )
    base = status("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    check_data(data, cfg)
    return {
        "seconds": time.perf_counter() - t0,
        "cpu": time.process_time() - c0,
        "base": base,
        "peak": status("VmHWM"),
    }


def child_rank(data: str, out: str, model: str) -> dict:
    import torch.distributed as dist
    from transformers import AutoTokenizer

    from tuning.container import sft_trainer
    from tuning.container.sft.config_args import parse_args

    cfg = parse_args(
        [
            "--model_name_or_path",
            model,
            "--training_data_path",
            data,
            "--output_dir",
            out,
            "--max_seq_length",
            "128",
        ]
    )
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
    tokenizer = AutoTokenizer.from_pretrained(model)
    base = status("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    loaded = sft_trainer._load_data(cfg)
    t1, c1 = time.perf_counter(), time.process_time()
    ds = sft_trainer._tokenize(cfg, loaded, tokenizer, "training")
    t2, c2 = time.perf_counter(), time.process_time()
    peak = status("VmHWM")
    for i in range(len(ds)):  # an epoch's reads: every row once (the shared pages mapped in)
        ds[i]
    result = {
        "seconds": t2 - t0,
        "load_s": t1 - t0,
        "cpu": c2 - c0,
        "load_cpu": c1 - c0,
        "tokenize_cpu": c2 - c1,
        "base": base,
        "peak": peak,
        "records": len(ds),
        "tokenized": ds.nbytes,
        "after_epoch": {k: status(k) for k in ("Rss", "Pss", "Private")},
    }
    if dist.is_initialized():
        result["rank"] = dist.get_rank()
        dist.barrier()
        dist.destroy_process_group()
    return result
