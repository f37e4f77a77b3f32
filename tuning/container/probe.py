"""All-reduce bandwidth probe (container side: imports torch, never docker).

Run under a launcher that sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT
(torchrun, or ``accelerate launch``; on CPU: ``ACCELERATE_USE_CPU=1 accelerate launch
--multi_gpu ...``: accelerate 1.16 on CPU starts one process for MULTI_CPU)::

    python -m tuning.container.probe --out DIR [--min-bytes 1024] [--max-bytes 268435456]
                           [--warmup 5] [--iters 20] [--max-seconds-per-size 2.0]

Backend: nccl when CUDA is available and ``HARNESS_DEVICE`` is not ``cpu`` (device
``cuda:LOCAL_RANK``), else gloo on the CPU.

For every size from ``--min-bytes`` doubling up to ``--max-bytes`` (fp32 tensors):

1. correctness: each rank fills its tensor with ``rank + 1`` and all-reduces it (SUM); every
   element must then equal ``n(n+1)/2``. This dedicated op runs once before and once after the
   timed loop (the timed ops reuse one buffer, which would otherwise grow by a factor n per op).
   The per-rank verdicts are combined with an all_reduce MIN, so every rank knows the result.
2. warm-up: ``--warmup`` ops, but no more than a quarter of the per-size time budget allows
   (at least one; the first warm-up op is timed and calibrates the rest).
3. timing: barrier, then ``iters`` back-to-back all_reduce ops (CUDA: synchronize after), the
   elapsed time divided by ``iters`` on each rank, then the MAX over ranks. ``iters`` is
   ``--iters`` unless the calibrated op time says that would exceed
   ``--max-seconds-per-size``; then it is cut to fit, but never below 20 (nccl-tests' default
   count: at the largest sizes the timing must still average over enough ops; the budget
   bounds the warm-up and any iterations asked beyond 20). The count used is recorded per
   sample. The time buffer holds zeros (no denormals, no overflow).

As nccl-tests defines them: ``algbw = bytes / time``, ``busbw = algbw * 2(n-1)/n``, in GB/s
(1e9 bytes per second).

Transport. For every backend the probe lists this process's ESTABLISHED TCP connections
(sockets found through ``/proc/self/fd`` -> ``socket:[inode]``, matched in ``/proc/net/tcp``
and ``/proc/net/tcp6``) and names the interface that owns each local address. Connections to
or from ``MASTER_PORT`` are the rendezvous store ("store"); the rest are the collective's
("collective": gloo's pairs, or NCCL's bootstrap and NET/Socket sockets). For NCCL the
transport between GPUs (P2P/IPC, SHM, NET/Socket) is not visible from here: NCCL names it in
its log at ``NCCL_DEBUG=INFO`` (the launcher sets that for the probe on GPUs), which the host
reads with ``tuning.container.shared.transport.parse_nccl_transport``; the probe records
``nccl_debug`` (the variable's value) so the host knows whether to look.

Rank 0 writes ``DIR/probe.json``::

    {"world_size": int, "backend": "gloo"|"nccl", "device": "cpu"|"cuda",
     "dtype": "float32", "min_bytes": int, "max_bytes": int, "max_seconds_per_size": float,
     "samples": [{"bytes", "elements", "iters", "warmup", "time_s", "algbw_GBps",
                  "busbw_GBps", "correct"}],
     "transport": [{"rank", "hostname", "interface", "interfaces", "local", "peers",
                    "loopback", "store", "connections": [{"local", "remote", "interface",
                    "kind", "loopback"}], "nccl_debug"}],
     "correct": bool}

``time_s`` is seconds per op. ``interface`` is the single interface of the collective
connections (comma-joined if several; null if none), ``local`` the local IP(s) they use,
``peers`` their remote ``ip:port`` endpoints, and ``loopback`` true when every collective
connection stays inside this network namespace (its remote address is a loopback address or
one of this namespace's own addresses, so the kernel carries it over ``lo``).

Exit status: 0; 1 when any sum was wrong (probe.json is written first) or when
``HARNESS_DEVICE=gpu`` finds no usable GPU (tuning/container/rank/gpu_guard.py names what it found);
2 on bad arguments.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from tuning.container.rank import gpu_guard
from tuning.container.shared import affinity
from tuning.container.shared.transport import transport_info

GB = 1e9
MIN_TIMED_ITERS = 20  # nccl-tests' default iterations; fewer left 256 MiB at 3-11 on CPU


# ---------------------------------------------------------------------------------------
# Pure helpers (tested without a process group)
# ---------------------------------------------------------------------------------------


def sizes(min_bytes: int, max_bytes: int, elem_size: int = 4) -> list[int]:
    """Message sizes in bytes: min_bytes doubling while <= max_bytes (multiples of elem_size)."""
    if min_bytes < elem_size or min_bytes % elem_size:
        raise ValueError(f"--min-bytes must be a positive multiple of {elem_size}")
    if max_bytes < min_bytes:
        raise ValueError("--max-bytes must be >= --min-bytes")
    out, b = [], min_bytes
    while b <= max_bytes:
        out.append(b)
        b *= 2
    return out


def bus_factor(world_size: int) -> float:
    """nccl-tests all_reduce bus bandwidth factor 2(n-1)/n."""
    return 2.0 * (world_size - 1) / world_size


def bandwidths(nbytes: int, time_s: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one all_reduce of nbytes taking time_s."""
    algbw = nbytes / time_s / GB
    return algbw, algbw * bus_factor(world_size)


def timed_iters(op_time_s: float, iters: int, budget_s: float) -> int:
    """Timed iterations: `iters`, cut so that they fit in budget_s, but never below
    MIN_TIMED_ITERS (the budget bounds the warm-up and any iterations beyond 20)."""
    if op_time_s <= 0:
        return iters
    fit = int(budget_s // op_time_s)
    return max(MIN_TIMED_ITERS, min(iters, fit))


# ---------------------------------------------------------------------------------------
# The distributed part
# ---------------------------------------------------------------------------------------


def _backend_and_device() -> tuple[str, torch.device]:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    want = os.environ.get("HARNESS_DEVICE", "").lower()
    message = gpu_guard.problem()  # HARNESS_DEVICE=gpu without a usable GPU: what, and the fix
    if message:
        raise SystemExit(f"probe: {message}")
    if want != "cpu" and torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _max_over_ranks(x: float, device: torch.device) -> float:
    t = torch.tensor([x], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _all_true(ok: bool, device: torch.device) -> bool:
    t = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def _verify(t: torch.Tensor, rank: int, n: int, device: torch.device) -> bool:
    t.fill_(float(rank + 1))
    dist.all_reduce(t)
    _sync(device)
    return bool(torch.all(t == float(n * (n + 1) // 2)).item())


def _timed(t: torch.Tensor, k: int, device: torch.device) -> float:
    """Seconds per op for k back-to-back all_reduce ops, max over ranks."""
    dist.barrier()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(k):
        dist.all_reduce(t)
    _sync(device)
    return _max_over_ranks((time.perf_counter() - t0) / k, device)


def measure(
    nbytes: int,
    buf: torch.Tensor,
    rank: int,
    n: int,
    device: torch.device,
    warmup: int,
    iters: int,
    budget_s: float,
) -> dict:
    elements = nbytes // buf.element_size()
    t = buf[:elements]
    ok = _verify(t, rank, n, device)
    t.zero_()
    first = _timed(t, 1, device)  # first warm-up op, also the calibration
    more = max(0, min(warmup - 1, int((budget_s / 4) // first) if first > 0 else warmup - 1))
    calibrated = _timed(t, more, device) if more else first
    k = timed_iters(calibrated, iters, budget_s)
    time_s = _timed(t, k, device)
    ok = _verify(t, rank, n, device) and ok
    ok = _all_true(ok, device)
    algbw, busbw = bandwidths(nbytes, time_s, n)
    return {
        "bytes": nbytes,
        "elements": elements,
        "iters": k,
        "warmup": 1 + more,
        "time_s": time_s,
        "algbw_GBps": algbw,
        "busbw_GBps": busbw,
        "correct": ok,
    }


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tuning.container.probe", description=__doc__.split("\n")[0]
    )
    p.add_argument("--out", required=True, help="directory for probe.json (rank 0 writes it)")
    p.add_argument("--min-bytes", type=int, default=1024)
    p.add_argument("--max-bytes", type=int, default=256 * 1024 * 1024)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument(
        "--max-seconds-per-size",
        type=float,
        default=2.0,
        help="time budget for the timed ops of one size; iters is cut to fit (at least 20)",
    )
    p.add_argument("--timeout-s", type=float, default=300.0, help="process-group timeout")
    a = p.parse_args(argv)
    try:
        a.sizes = sizes(a.min_bytes, a.max_bytes)
    except ValueError as e:
        p.error(str(e))
    if a.warmup < 1 or a.iters < MIN_TIMED_ITERS or a.max_seconds_per_size <= 0:
        p.error(f"--warmup must be >= 1, --iters >= {MIN_TIMED_ITERS}, the budget > 0")
    return a


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    affinity.pin_rank()  # bench: this rank's own cores, as in training (shared/affinity.py)
    backend, device = _backend_and_device()
    kwargs = {"timeout": _dt.timedelta(seconds=args.timeout_s)}
    if backend == "nccl":
        kwargs["device_id"] = device
    dist.init_process_group(backend=backend, init_method="env://", **kwargs)
    rank, n = dist.get_rank(), dist.get_world_size()
    try:
        buf = torch.empty(args.sizes[-1] // 4, dtype=torch.float32, device=device)
        samples = []
        for nbytes in args.sizes:
            s = measure(
                nbytes, buf, rank, n, device, args.warmup, args.iters, args.max_seconds_per_size
            )
            samples.append(s)
            if rank == 0:
                print(
                    f"probe: {nbytes:>11} B  iters {s['iters']:>3}  {s['time_s'] * 1e6:>12.1f} us"
                    f"  algbw {s['algbw_GBps']:8.3f} GB/s  busbw {s['busbw_GBps']:8.3f} GB/s"
                    f"  {'ok' if s['correct'] else 'WRONG SUM'}",
                    flush=True,
                )
        del buf
        master_port = os.environ.get("MASTER_PORT")
        mine = transport_info(rank, int(master_port) if master_port else None)
        gathered: list = [None] * n
        dist.all_gather_object(gathered, mine)
        correct = all(s["correct"] for s in samples)
        if rank == 0:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            doc = {
                "world_size": n,
                "backend": backend,
                "device": device.type,
                "dtype": "float32",
                "min_bytes": args.sizes[0],
                "max_bytes": args.sizes[-1],
                "max_seconds_per_size": args.max_seconds_per_size,
                "samples": samples,
                "transport": gathered,
                "correct": correct,
            }
            tmp = out / "probe.json.tmp"
            tmp.write_text(json.dumps(doc, indent=2) + "\n")
            tmp.replace(out / "probe.json")
            print(f"probe: wrote {out / 'probe.json'}", flush=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if not correct:
        print(f"probe: rank {rank}: WRONG all_reduce sum", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
