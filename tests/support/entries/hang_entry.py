"""Two ranks that wait on each other for ever, in collectives: rank 0 in all_reduce, rank 1 in
recv from rank 0, which never sends. It stands in for a user's trainer stuck in a collective
(a foreign ENTRY); the stack tests dump both. Run under torchrun (gloo, any device)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def wait_on_each_other() -> None:
    t = torch.ones(2)
    dist.all_reduce(t)  # one that completes: the flight recorder's seq 1
    print(f"hang_entry: rank {dist.get_rank()} waits", flush=True)
    if dist.get_rank() == 0:
        dist.all_reduce(t)  # HANG_RANK0
    else:
        dist.recv(t, src=0)  # HANG_RANK1


if __name__ == "__main__":
    dist.init_process_group("gloo")
    wait_on_each_other()
