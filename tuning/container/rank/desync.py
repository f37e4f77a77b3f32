"""Desync faults inside a rank, at the collective level: the harness's `make fault` kinds
slow-main, skip-collective and mismatch, for any trainer (ours imports this module; a foreign
one gets it from the rank recorder, mounted beside it). torchft's tests inject failures per
collective the same way: a wrapper around the process group's calls.

Off, and never imported, unless HARNESS_DESYNC names a kind. Then every collective of
torch.distributed (all_reduce, all_gather, broadcast, barrier, ...) is wrapped; the Nth one a
rank calls from outside torch.distributed (nested calls, such as all_gather_object's own
all_gathers, are not counted) is struck on HARNESS_DESYNC_RANK:
  HARNESS_DESYNC=slow-main        the rank spends HARNESS_DESYNC_S seconds before that
                                  collective (as a tokenization on the main process only does)
  HARNESS_DESYNC=skip-collective  the rank does not call it (its later calls meet the peers'
                                  earlier ones: its sequence numbers shift from there on)
  HARNESS_DESYNC=mismatch         the rank calls another collective at that point
                                  (HARNESS_DESYNC_HOW=op: all_reduce, or broadcast for an
                                  all_reduce) or the same all_reduce or all_gather_into_tensor
                                  with another shape (=shape)
N is HARNESS_DESYNC_AT (default 1) counted from the moment the file HARNESS_DESYNC_WHEN exists
(looked for at most every 50 ms; unset: from the start), so the harness can strike at a step
it sees. A call made with async_op=True, or the wrong op for `shape`, is counted and passed on:
the strike goes to the next call that takes it. Once struck, the rank writes one line to its
metrics: {"event": "fault", "kind", "collective": N, "op", "did", "site"}. Standard library only
at import (torch is imported by the trainer before any collective).
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import time
import traceback

KINDS = ("slow-main", "skip-collective", "mismatch")
HOWS = ("op", "shape")
# torch.distributed's collectives (module functions): the ones wrapped
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",  # torch 2.13's name for all_gather_into_tensor (accelerate calls it)
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",  # torch 2.13's name for reduce_scatter_tensor
    "barrier",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "gather_object",
    "scatter_object_list",
    "all_reduce_coalesced",
)
# The ops a shape strike takes. fms (HF Trainer, FSDP2) calls no all_reduce of its own in a step
# (FSDP's collectives are async or functional) until its save; its loss gather each logging step
# is an all_gather_into_tensor (pool run 25 never struck before the save at step 10). On gloo
# accelerate's gather is a list all_gather (accelerate.utils.operations._gpu_gather: "gloo does
# not support all_gather_into_tensor"), elsewhere torch 2.13's all_gather_single: a user's HF
# Trainer on CPU ranks never struck in 30 steps (make pool SEED=3, run 6)
SHAPED = ("all_reduce", "all_gather_into_tensor", "all_gather_single", "all_gather")
# HARNESS_DESYNC_WHEN: looked for at most this often (a stat, a few us). It was 0.5 s: fms's
# unpaced steps on 2 ranks take 0.05-0.3 s, so a strike told at step 7 could still be unseen at
# the save at step 10, where DETAIL on gloo kills every rank (make pool SEED=3, run 23)
POLL_S = 0.05
_local = threading.local()  # depth of wrapped calls on this thread: only the outermost counts


class Plan:
    """What HARNESS_DESYNC* ask for; ValueError names the variable that is wrong."""

    def __init__(self, env=os.environ):
        self.kind = env.get("HARNESS_DESYNC", "")
        if self.kind not in KINDS:
            raise ValueError(f"HARNESS_DESYNC={self.kind!r}: use one of {', '.join(KINDS)}")
        self.rank = _int(env, "HARNESS_DESYNC_RANK", 0)
        self.at = _int(env, "HARNESS_DESYNC_AT", 1)
        self.seconds = float(env.get("HARNESS_DESYNC_S") or 0)
        self.how = env.get("HARNESS_DESYNC_HOW") or "op"
        self.when = env.get("HARNESS_DESYNC_WHEN") or None
        if self.how not in HOWS or self.at < 1 or (self.kind == "slow-main" and self.seconds <= 0):
            raise ValueError(
                "HARNESS_DESYNC_HOW is op or shape, HARNESS_DESYNC_AT >= 1, and "
                "slow-main needs HARNESS_DESYNC_S > 0"
            )


def _int(env, name: str, default: int) -> int:
    try:
        return int(env.get(name) or default)
    except ValueError:
        raise ValueError(f"{name}={env.get(name)!r} is not a whole number") from None


class Striker:
    """Counts this rank's collectives and strikes the one the plan names, once."""

    def __init__(self, plan: Plan, rank: int, report):
        self.plan, self.rank, self.report = plan, rank, report
        self.armed = plan.when is None  # counting starts once the WHEN file exists
        self.looked = 0.0
        self.count = 0  # collectives counted since armed
        self.done = False
        self.lock = threading.Lock()

    def due(self) -> bool:
        if self.done or self.rank != self.plan.rank:
            return False
        if not self.armed:
            now = time.monotonic()
            if now - self.looked < POLL_S:
                return False
            self.looked = now
            self.armed = os.path.exists(self.plan.when)
            if not self.armed:
                return False
        self.count += 1
        return self.count >= self.plan.at

    def call(self, name: str, original, args, kwargs):
        with self.lock:
            strike = self.due()
        if not strike:
            return original(*args, **kwargs)
        bound = inspect.signature(original).bind(*args, **kwargs)
        if bound.arguments.get("async_op") or not self._takes(name, bound):
            self.plan.at = self.count + 1  # this one passes: the next one that takes it
            return original(*args, **kwargs)
        self.done = True
        return getattr(self, self.plan.kind.replace("-", "_"))(name, original, bound)

    def _takes(self, name: str, bound) -> bool:
        if self.plan.kind == "mismatch" and self.plan.how == "shape":
            return name in SHAPED  # another shape of the same op
        return True

    def _said(self, name: str, did: str) -> None:
        site = _site()
        print(
            f"harness desync: rank {self.rank} {did} (collective {self.count} since armed, "
            f"at {site})",
            file=sys.stderr,
            flush=True,
        )
        self.report(
            {
                "event": "fault",
                "kind": self.plan.kind,
                "collective": self.count,
                "op": name,
                "did": did,
                "site": site,
            }
        )

    def slow_main(self, name: str, original, bound):
        self._said(name, f"works {self.plan.seconds:g} s alone before {name}")
        main_process_work(self.plan.seconds)
        return original(*bound.args, **bound.kwargs)

    def skip_collective(self, name: str, original, bound):
        self._said(name, f"skipped {name}")
        return None

    def mismatch(self, name: str, original, bound):
        import torch
        import torch.distributed as dist

        group = bound.arguments.get("group")
        if self.plan.how == "shape":
            tensor = bound.arguments.get("tensor", bound.arguments.get("input_tensor"))
            other = torch.zeros(tensor.numel() + 1, dtype=tensor.dtype, device=tensor.device)
            self._said(
                name, f"called {name} on {list(other.shape)} instead of {list(tensor.shape)}"
            )
            if name == "all_reduce":
                return _outer(dist.all_reduce)(other, group=group)
            if name == "all_gather":  # the list form
                outs = [torch.zeros_like(other) for _ in range(dist.get_world_size(group))]
                return _outer(dist.all_gather)(outs, other, group=group)
            out = torch.zeros(
                dist.get_world_size(group) * other.numel(), dtype=tensor.dtype, device=tensor.device
            )
            return _outer(getattr(dist, name))(out, other, group=group)
        device = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
        buf = torch.zeros(1, device=device)
        if name == "all_reduce":
            self._said(name, "called broadcast instead of all_reduce")
            return _outer(dist.broadcast)(buf, src=0, group=group)
        self._said(name, f"called all_reduce instead of {name}")
        return _outer(dist.all_reduce)(buf, group=group)


def main_process_work(seconds: float) -> None:
    """Where slow-main's rank spends its time (a stack dump names it): work on one rank only,
    such as a tokenization or a dataset.map on the main process."""
    time.sleep(seconds)


def _site() -> str:
    """The innermost caller outside torch and this module: where the trainer called it."""
    for frame in reversed(traceback.extract_stack()):
        if "/torch/" not in frame.filename and frame.filename != __file__:
            return f"{frame.filename}:{frame.lineno} ({frame.name})"
    return "?"


def _outer(fn):
    """The original function behind a wrapper (a strike calls the real collective)."""
    return getattr(fn, "__wrapped_by_desync__", fn)


def _wrap(name: str, original, striker: Striker):
    def wrapper(*args, **kwargs):
        depth = getattr(_local, "depth", 0)
        _local.depth = depth + 1
        try:
            if depth:
                return original(*args, **kwargs)
            return striker.call(name, original, args, kwargs)
        finally:
            _local.depth = depth

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__wrapped_by_desync__ = original
    wrapper.__doc__ = original.__doc__
    return wrapper


def install(rank: int, report) -> Striker | None:
    """Wrap torch.distributed's collectives as HARNESS_DESYNC asks (None: unset). `report`
    takes the fault's line for the rank's metrics. A wrong setting exits the rank (2), naming
    the variable: a fault run must never train unfaulted while it thinks it injected."""
    if not os.environ.get("HARNESS_DESYNC"):
        return None
    try:
        plan = Plan()
    except ValueError as e:
        print(f"harness desync: {e}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    striker = Striker(plan, rank, report)
    for name in COLLECTIVES:
        original = getattr(c10d, name, None)
        if original is None:
            continue
        wrapped = _wrap(name, original, striker)
        setattr(c10d, name, wrapped)  # c10d's own callers (all_gather_object's all_gather...)
        setattr(dist, name, wrapped)  # everyone's torch.distributed.<name>
    return striker
