"""How the rank recorder (rank_record.py) ends a rank's process: the process group a trainer
left open closed after a success, the process ended without finalizing the interpreter under
torch's threads, and a SIGTERM that finds the rank blocked in a collective ending it as it would
without the recorder. Standard library only at import (mounted beside the recorder)."""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import sys
import threading
from typing import NoReturn


def close_group() -> bool:
    """Destroy the process group a trainer returned with still open (fms 3.2.2 never calls
    destroy_process_group; torch asks every trainer process to). Only after a trainer that
    returned 0: on a failure peers may still be inside a collective (torchtitan #1342). It does
    not free a group others still hold (FSDP2's FSDPMeshInfo keeps fms's): gloo's threads live
    on until the process ends, which is why the process ends through `leave`."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return False
    try:
        dist.destroy_process_group()
    except Exception as e:  # the training is done; say so and let the exit code stand
        print(f"harness_rank: destroy_process_group failed: {e}", file=sys.stderr, flush=True)
        return False
    return True


def leave(code: int) -> NoReturn:
    """End the rank's process with `code` without finalizing the interpreter, after what a
    normal exit runs while Python is whole: joining non-daemon threads, then the atexit
    handlers, then flushing stdio.

    Why: a gloo worker thread can still hold the trainer's last collective when the trainer
    returns (fms: transformers' Trainer.store_flos all_gather, seen not yet retired in torch's
    flight recorder at return), and when it lets go of tensors whose Python objects were
    already dropped, torch takes the GIL to free them (ConcretePyInterpreterVTable::decref).
    If Python 3.11 has begun finalizing meanwhile, take_gil ends that thread with pthread_exit
    inside a noexcept destructor: std::terminate, "terminate called without an active
    exception", SIGABRT after a completed training (pytorch/pytorch#190489: AsyncAllgatherWork
    on a gloo thread; its Py_IsInitialized guard leaves that window, and the atexit
    destroy_process_group of #179291 was abandoned). The group cannot be drained from here
    (close_group), so the interpreter is never finalized under torch's threads: os._exit."""
    for thread in threading.enumerate():  # what Py_FinalizeEx does first (threading._shutdown)
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # the trainer's and its libraries' handlers (logging's flush, ...)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # closed or replaced by the trainer
            pass
    os._exit(code)


# How long the main thread has to run the recorder's SIGTERM handler itself: between two
# bytecodes it takes milliseconds; past this it is blocked in C (a gloo or NCCL wait).
MAIN_THREAD_S = 1.0


def watch_sigterm(note, handler, in_main: threading.Event) -> None:
    """A SIGTERM seen at once, even while the main thread is blocked in a collective: Python
    runs a signal handler only in the main thread, between bytecodes, and a gloo wait never
    returns to it, so a rank hung in a collective would outlive the SIGTERM that the default
    disposition (the recorder's absence) ends it with; the launcher or kubelet then waits its
    grace (torchrun 30 s) for a SIGKILL. Python's own C handler writes each signal's number
    to the wakeup fd at once: a thread here reads it, calls `note` (the record), and where the
    recorder's `handler` is still the one installed, over the default, and the main thread has
    not run it within MAIN_THREAD_S (`in_main`), ends the process by SIGTERM as the default
    would. A trainer that set a handler (or a wakeup fd) of its own keeps its way."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main thread: the handler alone, as before
        return

    def watch() -> None:
        while True:
            if signal.SIGTERM not in os.read(read_fd, 64):
                continue
            note()
            if signal.getsignal(signal.SIGTERM) is handler and not in_main.wait(MAIN_THREAD_S):
                die_by_sigterm()

    threading.Thread(target=watch, name="harness-sigterm", daemon=True).start()


def die_by_sigterm() -> None:
    """End the process by SIGTERM's default disposition, from any thread: Python's handler
    stands in front of it (and `signal.signal` is the main thread's alone), so libc's
    signal() puts the default back first."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.argtypes, libc.signal.restype = (ctypes.c_int, ctypes.c_void_p), ctypes.c_void_p
    libc.signal(signal.SIGTERM, None)  # SIG_DFL is 0
    os.kill(os.getpid(), signal.SIGTERM)
