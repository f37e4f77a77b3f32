"""The trainer's rendezvous: this rank joins its process group. Without a GPU, accelerate must be
told to use gloo (ACCELERATE_USE_CPU=1), and the collective timeout (ddp_timeout) is set here,
because accelerate's CPU path drops it. (HARNESS_DEVICE=gpu without CUDA never gets here:
gpu_guard.check() in sft_trainer.main.)"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist


def join(timeout: int) -> tuple[int, int, bool]:
    """(rank, world size, on a GPU) once this rank is in its group (a lone rank: none)."""
    on_gpu = torch.cuda.is_available() and os.environ.get(
        "ACCELERATE_USE_CPU", "0"
    ).lower() not in ("1", "true")
    if not on_gpu:
        os.environ["ACCELERATE_USE_CPU"] = "1"
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        if on_gpu:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(
            backend="cuda:nccl,cpu:gloo" if on_gpu else "gloo",
            timeout=timedelta(seconds=timeout),
            **_restart_store(world, timeout),
        )
    rank = dist.get_rank() if dist.is_initialized() else 0
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    return rank, world_size, on_gpu


def _restart_store(world: int, timeout: int) -> dict:
    """After a torchrun restart (--max_restarts) under the static rendezvous, the agent keeps
    ONE store for every attempt, so a restarted group would read the last attempt's gloo
    addresses (connectFullMesh: Connection refused). A prefix per attempt keeps them apart."""
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
    if not attempt or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return {}
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world,
        is_master=False,
        timeout=timedelta(seconds=timeout),
    )
    return {
        "store": dist.PrefixStore(f"harness-attempt-{attempt}", store),
        "rank": int(os.environ["RANK"]),
        "world_size": world,
    }
