"""A training loop's collectives without a model, for the desync faults
(tuning/container/rank/desync.py): each iteration an all_reduce of the "gradients" (4 floats;
DESYNC_ENTRY_GATHER_ONLY=1: an all_gather_into_tensor of them instead; =list: a list all_gather, as
accelerate's gather on gloo) and an all_gather of the "loss",
as a trainer's step does, ITERS times (DESYNC_ENTRY_ITERS, default 40), then a barrier.
Prints "desync_entry: rank R step i" each iteration. Run under torchrun (gloo) with the
rank recorder, as a foreign ENTRY is run."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def step(i: int, grads: torch.Tensor) -> None:
    if os.environ.get("DESYNC_ENTRY_GATHER_ONLY") == "list":  # accelerate's gather on gloo
        dist.all_gather([torch.zeros_like(grads) for _ in range(dist.get_world_size())], grads)
    elif os.environ.get("DESYNC_ENTRY_GATHER_ONLY"):  # as fms's step: no all_reduce of its own
        out = torch.zeros(dist.get_world_size() * grads.numel())
        dist.all_gather_into_tensor(out, grads)  # STEP_INTO_TENSOR
    else:
        dist.all_reduce(grads)  # STEP_ALL_REDUCE
    loss = torch.tensor([float(i)])
    dist.all_gather([torch.zeros(1) for _ in range(dist.get_world_size())], loss)  # STEP_GATHER


if __name__ == "__main__":
    timeout = int(os.environ.get("DESYNC_ENTRY_TIMEOUT") or 60)
    dist.init_process_group("gloo", timeout=timedelta(seconds=timeout))
    grads = torch.ones(4)
    for i in range(int(os.environ.get("DESYNC_ENTRY_ITERS") or 40)):
        step(i, grads)
        print(f"desync_entry: rank {dist.get_rank()} step {i}", flush=True)
        time.sleep(float(os.environ.get("DESYNC_ENTRY_SLEEP") or 0.05))
    dist.barrier()
    dist.destroy_process_group()
