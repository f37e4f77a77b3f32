"""What every script here shares, as a user's training script has it: the process group from
torchrun's environment, a small model, its data split by rank, and one step of training whose
gradients are averaged by hand (all_reduce). Each script beside it has one bug of its own."""

import argparse

import torch
import torch.distributed as dist


def args():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--output_dir", default="/output")
    p.add_argument("--timeout", type=int, default=30)  # seconds, the process group's
    return p.parse_args()


def setup(timeout: int):
    from datetime import timedelta

    dist.init_process_group("gloo", timeout=timedelta(seconds=timeout))
    torch.manual_seed(0)
    return dist.get_rank(), dist.get_world_size()


def model():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def records(n: int):
    """n training records: a vector and its target."""
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(16, generator=g), torch.randn(1, generator=g)) for _ in range(n)]


def step(net, opt, batch, world: int) -> float:
    x = torch.stack([b[0] for b in batch])
    y = torch.stack([b[1] for b in batch])
    loss = torch.nn.functional.mse_loss(net(x), y)
    opt.zero_grad()
    loss.backward()
    for p in net.parameters():  # data parallel by hand: every rank's gradients averaged
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    return loss.item()


def log(rank: int, step_no: int, loss: float) -> None:
    if rank == 0:
        print(f"step {step_no} loss {loss:.4f}", flush=True)


def done() -> None:
    dist.destroy_process_group()
