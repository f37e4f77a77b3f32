"""A trainer that finishes and then never exits: both ranks train one all_reduce, return, and
hang in an atexit handler (as a process can hang in destroy_process_group or a library's
exit hook). It stands in for a user's trainer in the stall tests (a foreign ENTRY)."""

from __future__ import annotations

import atexit
import time

import torch
import torch.distributed as dist


def linger() -> None:
    time.sleep(100000)  # LINGER


if __name__ == "__main__":
    dist.init_process_group("gloo")
    t = torch.ones(2)
    dist.all_reduce(t)
    dist.destroy_process_group()
    atexit.register(linger)
