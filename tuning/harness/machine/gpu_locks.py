"""Which run holds which GPU on this machine, so two runs never train on one GPU.

A run holds an flock on one file per GPU it uses, in one folder for the whole machine, for as
long as its harness lives: the kernel drops the lock when the process ends, even by SIGKILL,
so a dead harness never keeps a GPU locked (its containers might: leftovers.py stops those
before a run takes its locks). A second run that wants a busy GPU is refused, naming the run
that has it; nothing of it has started or been written by then.

The folder is the same for every user (never under $TMPDIR, which may be per user), writable
by all and sticky, as /tmp is. Every user's harness opens every lock file there, whoever made
it; so a lock file is opened without O_CREAT once it exists: under fs.protected_regular the
kernel refuses an O_CREAT open of another user's file in a sticky world-writable folder, even
one that exists and that the mode lets us write. A new one is made under a name of its own,
given mode 0666, and linked into place, so no one ever sees it with the umask's mode.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
from pathlib import Path

from tuning.harness.errors import HarnessError

# /run/lock is the machine's folder for lock files (FHS 3.0; a tmpfs, emptied at boot, mode
# 1777 on Debian and Ubuntu); /tmp where there is none. HARNESS_GPU_LOCKS moves it: every user
# of the machine must then name the same folder.
SHARED = Path("/run/lock")
LOCK_DIR = Path(
    os.environ.get("HARNESS_GPU_LOCKS")
    or (SHARED if SHARED.is_dir() and SHARED.stat().st_mode & 0o1777 == 0o1777 else Path("/tmp"))
    / "tuning-harness-gpus"
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
    _folder(lock_dir)
    for gpu in gpu_ids:
        fh = os.fdopen(_open(lock_dir / f"gpu{gpu}.lock"), "r+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fh)
            fh.close()
            held.release()
            raise HarnessError(
                f"GPU {gpu} is in use by run {holder.get('run_id', '?')} (harness pid "
                f"{holder.get('pid', '?')}, uid {holder.get('uid', '?')}); wait for it to end, "
                f"stop it (`make down RUN_ID={holder.get('run_id', '...')}`), or use other GPUs"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"run_id": run_id, "pid": os.getpid(), "uid": os.getuid()}))
        fh.flush()
        held.files.append(fh)
    return held


def holder(gpu: str, lock_dir: Path = LOCK_DIR) -> dict | None:
    """Who holds GPU `gpu` now ({"run_id", "pid", "uid"}), or None when it is free. Tries the
    lock and lets it go at once: it says how things are, it takes nothing."""
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


def _folder(lock_dir: Path) -> None:
    """The shared folder, made at once with its mode (1777), as its lock files are."""
    if lock_dir.is_dir():
        return
    tmp = lock_dir.with_name(f".{lock_dir.name}-{secrets.token_hex(4)}")
    try:
        tmp.mkdir(parents=True)
        os.chmod(tmp, 0o1777)  # the umask took bits away
        os.rename(tmp, lock_dir)
    except OSError as e:
        if tmp.is_dir():
            tmp.rmdir()
        if not lock_dir.is_dir():  # another harness made it first: fine; else say why
            raise HarnessError(
                f"cannot make the GPU lock folder {lock_dir}: {e.strerror}. Make it as root, "
                f"once, for every user: `install -d -m 1777 {lock_dir}`"
            ) from None


def _open(path: Path) -> int:
    """The lock file, read-write, whoever made it; made (mode 0666) when missing."""
    for _ in range(10):
        try:
            return os.open(path, os.O_RDWR)  # no O_CREAT: see the module's docstring
        except FileNotFoundError:
            pass
        except PermissionError as e:
            raise _unusable(path, e) from None
        tmp = path.with_name(f".{path.name}-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except OSError as e:
            raise _unusable(path.parent, e) from None
        try:
            os.fchmod(fd, 0o666)
            os.link(tmp, path)  # fails if another harness made it meanwhile: open theirs
            return fd
        except FileExistsError:
            os.close(fd)
        finally:
            os.unlink(tmp)
    raise HarnessError(f"cannot open the GPU lock {path}: it keeps appearing and vanishing")


def _unusable(path: Path, e: OSError) -> HarnessError:
    try:
        st = path.stat()
        what = f"owner uid {st.st_uid}, mode {st.st_mode & 0o7777:o}"
    except OSError:
        what = "not readable"
    fix = "chmod 1777" if path.is_dir() else "chmod 666"
    why = errno.errorcode.get(e.errno, "") or e.strerror
    return HarnessError(
        f"cannot use the GPU lock {'folder' if path.is_dir() else 'file'} {path} ({what}): "
        f"{e.strerror} ({why}). Every user's harness shares it: ask its owner or root to "
        f"`{fix} {path}`"
    )


def _holder(fh) -> dict:
    try:
        fh.seek(0)
        return json.loads(fh.read() or "{}")
    except (OSError, ValueError):
        return {}
