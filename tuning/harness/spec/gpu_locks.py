"""Which run holds which GPU on this machine, so two runs never train on one GPU.

A run holds an flock on one file per GPU it uses, in a directory every user's harness shares,
for as long as its harness lives: the kernel drops the lock when the process ends, even by
SIGKILL, so a dead harness never keeps a GPU locked (its containers might: leftovers.py stops
those before a run takes its locks). A second run that wants a busy GPU is refused, naming
the run that has it; nothing of it has started or been written by then.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path

from tuning.harness.errors import HarnessError

LOCK_DIR = Path(
    os.environ.get("HARNESS_GPU_LOCKS", Path(tempfile.gettempdir(), "tuning-harness-gpus"))
)


class Held:
    """The GPU locks of one run (released by `release`, or when this process ends)."""

    def __init__(self, files: list):
        self.files = files

    def release(self) -> None:
        for fh in self.files:
            fh.close()
        self.files = []


def take(gpu_ids: list[str], run_id: str, lock_dir: Path = LOCK_DIR) -> Held:
    """Lock every GPU in `gpu_ids` for `run_id`, all or none."""
    held = Held([])
    if not gpu_ids:
        return held
    lock_dir.mkdir(parents=True, exist_ok=True)
    _share(lock_dir, 0o1777)
    for gpu in gpu_ids:
        path = lock_dir / f"gpu{gpu}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        _share(fd)
        fh = os.fdopen(fd, "r+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fh)
            fh.close()
            held.release()
            raise HarnessError(
                f"GPU {gpu} is in use by run {holder.get('run_id', '?')} (harness pid "
                f"{holder.get('pid', '?')}); wait for it to end, stop it (`make down "
                f"RUN_ID={holder.get('run_id', '...')}`), or use other GPUs"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"run_id": run_id, "pid": os.getpid()}))
        fh.flush()
        held.files.append(fh)
    return held


def holder(gpu: str, lock_dir: Path = LOCK_DIR) -> dict | None:
    """Who holds GPU `gpu` now ({"run_id", "pid"}), or None when it is free. Tries the lock
    and lets it go at once: it says how things are, it takes nothing."""
    path = lock_dir / f"gpu{gpu}.lock"
    try:
        fh = open(path)
    except OSError:  # never locked here (or not readable: take() will say)
        return None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(fh)
        return None


def _share(what, mode: int = 0o666) -> None:
    # Every user's harness must open these (the umask took the bits away); the owner can.
    try:
        os.chmod(what, mode) if isinstance(what, Path) else os.fchmod(what, mode)
    except PermissionError:
        pass


def _holder(fh) -> dict:
    try:
        fh.seek(0)
        return json.loads(fh.read() or "{}")
    except (OSError, ValueError):
        return {}
