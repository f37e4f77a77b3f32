"""A rank's Python stacks on demand: SIGUSR1 makes this process write every thread's stack to
<output>/stacks/rank<R>.txt (faulthandler, from C: it works while the main thread is blocked
inside a collective, where no Python signal handler would ever run).

Standard library only, like rank_record.py, beside which it is mounted into a user's image
(/opt/harness-launch/stack_dump.py); our trainer imports it as tuning.container.rank.stack_dump. The
host (tuning/harness/stacks/dumps.py) finds the process through <output>/stacks/rank<R>.pid.json
(written only once the handler is in place, so a signal never kills a rank that lacks it),
appends a header line to the file, then signals. The launcher and torchrun's agent never
register: the host signals only the pids these files name.

A watcher thread adds torch's flight recorder after each dump: the last collectives of this
rank (op, seq, done or pending, input and output sizes, when it was called),
which torch 2.13 records on gloo as on NCCL once TORCH_FR_BUFFER_SIZE is set (set here, before
the process group exists), then an end line the host waits for. It also writes torch's own
dump of the recorder, as torch's analysis (fr_trace) reads it, to <output>/stacks/fr/rank<R>
(tuning/container/rank/fr_check.py runs that analysis over every rank's). The thread polls the
file's size; it needs the GIL, which c10d releases while a collective waits.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time

SIGNAL = signal.SIGUSR1
END = "=== end of dump ==="
FR_BEGIN = "=== flight recorder ==="  # written at once: the host then waits for END
FR_PREFIX = "flight recorder: "
FR_BUFFER = "64"  # entries per process group; TORCH_FR_BUFFER_SIZE (0, torch's default: off)
# every entry torch keeps (FR_BUFFER): a skipped one's shift shows in 16, but the slow rule
# needs the collectives every rank finished, and 7 ranks on 2 cores stood 9 apart (seed 2, run 18)
FR_SHOWN = 64
_installed: list = []  # the open file: faulthandler writes to its fd for the process's life


def _start_ticks() -> int | None:
    """This process's start time in clock ticks (/proc/self/stat field 22): the host checks it,
    so a pid reused by another process is never signalled."""
    try:
        return int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def install(output_dir: str, rank: int) -> str | None:
    """Register the dump for this rank; returns the stacks file, None where it cannot."""
    if _installed:
        return _installed[0].name
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", FR_BUFFER)
    folder = os.path.join(output_dir, "stacks")
    path = os.path.join(folder, f"rank{rank}.txt")
    try:
        os.makedirs(folder, exist_ok=True)
        out = open(path, "a", buffering=1)
        faulthandler.register(SIGNAL, file=out, all_threads=True, chain=False)
        info = {
            "pid": os.getpid(),
            "rank": rank,
            "file": os.path.abspath(path),
            "start_ticks": _start_ticks(),
            "main_thread": threading.main_thread().ident,
        }
        tmp = os.path.join(folder, f".rank{rank}.pid.json.{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(info, f)
        os.replace(tmp, os.path.join(folder, f"rank{rank}.pid.json"))
    except OSError as e:  # never break the trainer over a diagnostic
        print(f"stack_dump: no stack dumps for rank {rank}: {e}", file=sys.stderr)
        return None
    _installed.append(out)
    threading.Thread(target=_watch, args=(out,), name="harness-stack-dump", daemon=True).start()
    return path


def _watch(out) -> None:
    size = os.fstat(out.fileno()).st_size
    while True:
        time.sleep(0.25)
        now = os.fstat(out.fileno()).st_size
        if now == size:
            continue
        # A dump is being written: wait until it stops growing, then add what torch knows.
        while True:
            time.sleep(0.25)
            later = os.fstat(out.fileno()).st_size
            if later == now:
                break
            now = later
        try:
            out.write(FR_BEGIN + "\n")
            out.flush()
            for entry in collectives(os.path.dirname(out.name)):
                out.write(FR_PREFIX + json.dumps(entry) + "\n")
            out.write(END + "\n")
            out.flush()
        except Exception as e:  # a diagnostic thread must never raise into the trainer
            print(f"stack_dump: {e}", file=sys.stderr)
        size = os.fstat(out.fileno()).st_size


def collectives(folder: str | None = None) -> list[dict]:
    """The newest flight recorder entries of this process, oldest first: op, backend, seq,
    process group, state, input/output sizes and the time it was called (unix s). gloo's
    entries stay "scheduled": `retired` marks the done ones. With `folder`, torch's whole dump
    goes to <folder>/fr/rank<R> for fr_check.py. Without the entries' Python stacks: torch's
    first read of them took 2.8 s a rank here (4 ranks on 2 cores: an 11 s dump); the pending
    one's call site is in the rank's own stack."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return []
    import pickle

    from torch._C._distributed_c10d import _dump_fr_trace

    raw = _dump_fr_trace(includeCollectives=True, includeStackTraces=False, onlyActive=False)
    if folder:
        _keep(raw, os.path.join(folder, "fr"), dist.get_rank())
    out = []
    for e in pickle.loads(raw).get("entries", [])[-FR_SHOWN:]:
        backend, _, op = str(e.get("profiling_name", "")).rpartition(":")
        state = "done" if e.get("retired") else e.get("state")
        state = "pending" if state == "scheduled" else state
        created = e.get("time_created_ns")
        out.append(
            {
                "op": op,
                "backend": backend or None,
                "seq": e.get("collective_seq_id"),
                "pg": e.get("pg_id"),
                "state": state,
                "in": e.get("input_sizes"),
                "out": e.get("output_sizes"),
                "t": round(created / 1e9, 4) if created else None,
            }
        )
    return out


def at_failure(output_dir: str, rank: int) -> None:
    """The flight recorder as it stands when the rank fails (its trainer raised): written to
    <output>/stacks/rank<R>.failed.json, so the host can read what every failed rank was waiting
    in even when no dump was taken (a run that dies within a second). Never raises."""
    try:
        folder = os.path.join(output_dir, "stacks")
        entries = collectives(folder)
        if not entries:
            return
        path = os.path.join(folder, f"rank{rank}.failed.json")
        with open(path + ".tmp", "w") as f:
            json.dump({"rank": rank, "time": round(time.time(), 3), "collectives": entries}, f)
        os.replace(path + ".tmp", path)
    except Exception as e:  # a diagnostic must never hide the trainer's own error
        print(f"stack_dump: no flight recorder at failure: {e}", file=sys.stderr)


def _keep(raw: bytes, folder: str, rank: int) -> None:
    """torch's dump as written by its own dump-on-timeout, for its analysis to read."""
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".rank{rank}.{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(raw)
    os.replace(tmp, os.path.join(folder, f"rank{rank}"))
