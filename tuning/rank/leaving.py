"""How the rank recorder (rank_record.py) ends a rank's process: the process group a trainer
left open closed after a success, and the process ended without finalizing the interpreter
under torch's threads. Standard library only at import (mounted beside the recorder)."""

from __future__ import annotations

import atexit
import os
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
