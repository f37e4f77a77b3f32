"""Run a foreign trainer's module in this rank, unchanged, and record what the harness cannot
read from that trainer: the process group this rank really joined, and how it ended.

It also installs fsdp_gloo.py (mounted beside it): FSDP on CPU ranks, and a rank whose config
asked for FSDP and got anything else fails before its first step. And before the trainer's
module is even imported, gpu_guard.py (mounted beside it too): a rank told it has GPUs
(HARNESS_DEVICE=gpu) that cannot use CUDA ends failed, its "end" record naming what it found;
and torn.py (beside it too): torn checkpoints are moved aside before the trainer looks for one
to resume from. And stack_dump.py: SIGUSR1 dumps the rank's stacks (the host's `stacks`);
fs_errors.py: a full volume or the read-only root, said plainly; desync.py, only when
HARNESS_DESYNC names a fault kind (slow-main, skip-collective, mismatch: make fault's collective
level desyncs); library_patches.py: a save held for save-kill, torchrun's restarts given
their own store keys; leaving.py: the group a trainer left open closed, the process ended
without finalizing Python under torch's threads. With HARNESS_DUMP_BATCHES
set (a debug switch the parity tests use), batch_dump.py dumps every batch the trainer's HF
Trainer feeds the model.

Standalone on purpose (standard library only, no `tuning` import): it is mounted into a
user's image (fms-hf-tuning's, whose own top-level package is also called `tuning`) as
/opt/harness-launch/harness_rank.py, and `accelerate launch` runs it as module `harness_rank`
(PYTHONPATH=/opt/harness-launch). The launcher sets HARNESS_ENTRY=harness_rank and passes the
user's module (or script path) in HARNESS_WRAPPED_ENTRY; it runs as __main__ via runpy, with its
own arguments (ARGS). Each HF Trainer it builds logs every rank's steps (trainer_steps.py, mounted
beside; off for fms, whose steps are its own <output_dir>/training_logs.jsonl).

Writes <HARNESS_OUTPUT_DIR>/metrics/rank<RANK>.jsonl in the metrics schema (docs/design.md),
each line marked "source": "harness_rank":
  {"event": "phase", "name": "imports", "utc_offset_s": ...}   when the rank's process starts
  {"event": "phase", "name": "rendezvous", "backend": ...}      after init_process_group
                                                                (world_size: the group's size)
  step, checkpoint and phase "training" lines of every HF Trainer it builds (trainer_steps.py)
  {"event": "signal", "name": "SIGTERM"} when this rank receives one (note_sigterm)
  {"event": "end", "status": "completed"|"failed", "exit_code", "error",
   "distributed_type", "closed_group"}   when it returns; distributed_type: what accelerate
                         set up in this rank (its AcceleratorState), which may differ from what
                         the config asked for (accelerate 1.16 sets FSDP up on accelerators
                         only); closed_group: the trainer left its process group open and this
                         recorder destroyed it (leaving.py close_group)
"""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import signal
import sys
import threading
import time
import traceback

START = time.time()


def _process_start() -> float:
    try:
        stat = open("/proc/self/stat").read()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        btime = next(int(x.split()[1]) for x in open("/proc/stat") if x.startswith("btime"))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return START


class Record:
    def __init__(self, env=os.environ):
        self.rank = int(env.get("RANK", "0"))
        self.world_size = int(env.get("WORLD_SIZE", "1"))  # torchrun's; replaced by the group's
        self.started = _process_start()
        out = env.get("HARNESS_OUTPUT_DIR", "/output")
        self.path = os.path.join(out, "metrics", f"rank{self.rank}.jsonl")

    def write(self, event: str, **fields) -> None:
        now = time.time()
        line = {
            "event": event,
            "rank": self.rank,
            "world_size": self.world_size,
            "time": round(now, 3),
            "t": round(now - self.started, 3),
            "source": "harness_rank",
            **fields,
        }
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(self.path, "a") as f:
                f.write(json.dumps(line) + "\n")
        except OSError as e:  # never break the user's trainer over a record
            print(f"harness_rank: cannot write {self.path}: {e}", file=sys.stderr)


def watch_process_group(record: Record) -> None:
    """Wrap torch.distributed.init_process_group (when torch is imported, not before) so the
    rank records the size of the group it actually joined."""
    import torch.distributed as dist

    original = dist.init_process_group

    def init_process_group(*args, **kwargs):
        result = original(*args, **kwargs)
        record.world_size = dist.get_world_size()
        backend = str(dist.get_backend())
        # the group's collective timeout, as the trainer gave it (HF TrainingArguments'
        # ddp_timeout reaches here through accelerate's PartialState), else torch's default
        timeout = kwargs.get("timeout") or (args[2] if len(args) > 2 else None)
        if timeout is None:
            timeout = dist.distributed_c10d._get_default_timeout(backend)
        record.write("phase", name="rendezvous", backend=backend, timeout_s=timeout.total_seconds())
        return result

    dist.init_process_group = init_process_group
    dist.distributed_c10d.init_process_group = init_process_group


# How the entry ended, once it has (code, error); its end line once written. A SIGTERM after
# the entry returned (its launcher stopping every worker once another failed, while this one
# was still leaving) must not lose the end line that says it completed.
ENDED: dict = {"returned": None, "written": False}


def write_end(record: Record, closed: bool = False) -> None:
    if ENDED["written"] or ENDED["returned"] is None:
        return
    code, error = ENDED["returned"]
    ENDED["written"] = True
    record.write(
        "end",
        status="completed" if code == 0 else "failed",
        exit_code=code,
        error=error,
        distributed_type=accelerate_distributed_type(),
        closed_group=closed,
    )


def note_sigterm(record: Record) -> None:
    """A SIGTERM this rank receives is written down at once, then handled as before (the
    trainer's own handler, else the default: the process ends), the rank blocked in a
    collective too (leaving.py watch_sigterm). The verdict tells a rank stopped from outside
    (an eviction, a preemption, a deletion) by the first such line: a launcher stopping the
    others after a failure sends theirs later."""
    previous = signal.getsignal(signal.SIGTERM)
    lock, noted, in_main = threading.RLock(), threading.Event(), threading.Event()

    def note() -> None:  # once, by whichever thread sees the signal first; the other waits
        with lock:
            if noted.is_set():
                return
            noted.set()
            record.write("signal", name="SIGTERM", pid=os.getpid())
            if ENDED["returned"] is None:  # stopped while it ran: what it was waiting in, as
                # a failing rank writes it (a launcher stopping it may beat its own failure)
                out = os.path.dirname(os.path.dirname(record.path))
                _beside("stack_dump").at_failure(out, record.rank)
            write_end(record)  # the entry had returned already: say how

    def on_sigterm(signum, frame):
        in_main.set()
        note()
        if callable(previous):
            previous(signum, frame)
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous != signal.SIG_IGN else previous)
        if previous != signal.SIG_IGN:
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    if previous == signal.SIG_DFL:  # where the default would end a blocked rank at once
        _beside("leaving").watch_sigterm(note, on_sigterm, in_main)


def _beside(name: str):
    """A module mounted beside this file (layout/layout.py BESIDE_RECORDER),
    loaded by path: the user's image may have a `tuning` package of its own (fms does)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"harness_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fsdp_on_gloo() -> None:
    """The trainer's own FSDP-on-CPU shim and no-fallback check (fsdp_gloo.py), for a trainer
    that cannot import it: fms on CPU ranks shards too."""
    _beside("fsdp_gloo").install()


def sweep_torn(record: Record) -> None:
    """Every start of the trainer (torchrun's restarts too): rank 0 moves torn checkpoints
    aside (torn.py), the others wait for it, so the trainer resumes from a complete one."""
    out = os.path.dirname(os.path.dirname(record.path))
    _beside("torn").before_start(out, record.rank)


def accelerate_distributed_type() -> str | None:
    state = sys.modules.get("accelerate.state")
    if state is None:
        return None
    shared = getattr(state.AcceleratorState, "_shared_state", {}) or {}
    value = shared.get("distributed_type")
    return getattr(value, "value", None) or (str(value) if value is not None else None)


def explained(e: BaseException, error: str, record: Record) -> str:
    """`error`, with a full volume or the read-only root said plainly (fs_errors.py, mounted
    beside) where `e` or what it was raised from (fms exits 203 from its except) shows one."""
    why = _beside("fs_errors").explain(e, os.path.dirname(os.path.dirname(record.path)))
    if not why:
        return error
    print(f"harness_rank: {why}", file=sys.stderr, flush=True)
    return f"{why} ({error})"


def is_script(entry: str) -> bool:
    """ENTRY is a script's path (train.py, /src/train.py), else a module's name (pkg.train)."""
    return entry.endswith(".py") or "/" in entry


def run_entry(entry: str) -> None:
    """ENTRY as __main__, with sys.argv[1:] its own arguments: a module as `python -m` runs it;
    a script as `python train.py` does, its folder first on sys.path (its own imports)."""
    if not is_script(entry):
        runpy.run_module(entry, run_name="__main__", alter_sys=True)
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(entry)))
    runpy.run_path(entry, run_name="__main__")


def main() -> int:
    entry = os.environ.get("HARNESS_WRAPPED_ENTRY")
    if not entry:
        print("harness_rank: HARNESS_WRAPPED_ENTRY is not set (the module to run)", file=sys.stderr)
        return 2
    record = Record()
    record.write("phase", name="imports", entry=entry, utc_offset_s=time.localtime().tm_gmtoff)
    message = _beside("gpu_guard").problem()  # no silent CPU: fail before the trainer starts
    if message:
        print(f"harness_rank: {message}", file=sys.stderr, flush=True)
        record.write("end", status="failed", exit_code=1, error=message, distributed_type=None)
        return 1
    # SIGUSR1: every thread's stack to <output>/stacks (stack_dump.py, mounted beside this)
    _beside("stack_dump").install(os.path.dirname(os.path.dirname(record.path)), record.rank)
    watch_process_group(record)
    note_sigterm(record)
    fsdp_on_gloo()
    patches = _beside("library_patches")
    patches.hold_saves()
    patches.store_per_attempt()
    sweep_torn(record)
    if os.environ.get("HARNESS_DUMP_BATCHES"):  # a debug switch; off: not even loaded
        _beside("batch_dump").install()
    # every HF Trainer it builds logs this rank's steps (trainer_steps.py, mounted beside)
    _beside("trainer_steps").install(record.write, os.path.dirname(os.path.dirname(record.path)))
    if os.environ.get("HARNESS_DESYNC"):  # a fault run's desync kinds; off: not even loaded
        _beside("desync").install(record.rank, lambda line: record.write(**line))
    sys.argv = [entry, *sys.argv[1:]]
    code, error = 0, None
    try:
        run_entry(entry)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        said = f"SystemExit({e.code!r})"
        caught = e.__cause__ or e.__context__
        if caught is not None:  # fms exits 203 from its except: what it caught says why
            said += " from " + "".join(traceback.format_exception_only(caught)).strip()
        error = None if code == 0 else explained(e, said, record)
    except BaseException as e:
        code = 1
        error = explained(e, "".join(traceback.format_exception_only(e)).strip(), record)
        # as an uncaught exception prints: torch's excepthook (set by init_process_group)
        # puts [rankN]: before every line, so the log reads as the script's own run's
        sys.excepthook(type(e), e, e.__traceback__)
    ENDED["returned"] = (code, error)
    if code != 0:  # what this rank was waiting in when it failed (the host's verdict reads it)
        _beside("stack_dump").at_failure(os.path.dirname(os.path.dirname(record.path)), record.rank)
    write_end(record, _beside("leaving").close_group() if code == 0 else False)
    return code


if __name__ == "__main__":
    _beside("leaving").leave(main())
