"""What a rank's file-system failure means, said plainly: a full volume, a read-only root.

Two failures reach users as bare or misleading errors:
- ENOSPC inside torch.save: torch's C++ writer (caffe2 serialize/inline_container.cc) drops the
  errno and raises "unexpected pos ..." or "basic_ios::clear: iostream error"; only the full
  volume tells what happened.
- EROFS: the container's root is read-only, as a PyTorchJob pod's is under
  readOnlyRootFilesystem; a trainer that writes to its working directory gets a bare
  `OSError: [Errno 30] Read-only file system` that does not say where it may write.

`explain(exc, output_dir)` returns the sentence to add to the error (None when neither).
Standalone on purpose (standard library only), like torn.py: our trainer imports it, and the
harness mounts it beside the rank recorder into a user's image.
"""

from __future__ import annotations

import errno
import os

# torch.save's failures when a write fails under it (its errno is lost)
TORCH_WRITE = (
    "inline_container.cc",
    "PytorchStreamWriter failed",
    "iostream error",
    "file write failed",
)
FULL_BYTES = 1 << 20  # a volume with less free than this is full for any checkpoint
WRITABLE = ("/tmp", "/dev/shm")  # tmpfs mounts of the harness's containers (and the pod's)


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def free_bytes(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _newest_checkpoint(output_dir: str) -> str | None:
    """The checkpoint being written: the newest `*checkpoint-*` directory in the output."""
    try:
        found = [e.path for e in os.scandir(output_dir) if "checkpoint-" in e.name and e.is_dir()]
    except OSError:
        return None
    return max(found, key=os.path.getmtime, default=None)


def explain(exc: BaseException, output_dir: str) -> str | None:
    """The plain sentence for a full volume or a read-only root in `exc`, else None."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno == errno.EROFS:
            return read_only(e.filename)
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return no_space(e.filename, output_dir)
    text = " ".join(str(e) for e in _chain(exc))
    free = free_bytes(output_dir)
    if any(x in text for x in TORCH_WRITE) and free is not None and free < FULL_BYTES:
        return no_space(_newest_checkpoint(output_dir), output_dir)
    return None


def no_space(path: str | None, output_dir: str) -> str:
    free = free_bytes(output_dir)
    return (
        f"ENOSPC (errno 28, No space left on device) writing {path or output_dir}: "
        f"{output_dir} has {free} bytes free. Free room on the volume (or give it more) and "
        "resume: the newest complete checkpoint is intact"
    )


def read_only(path: str | None) -> str:
    out = os.environ.get("HARNESS_OUTPUT_DIR", "/output")
    return (
        f"EROFS (errno 30): the container's root file system is read-only, as a "
        f"PyTorchJob pod's is (readOnlyRootFilesystem), and the trainer wrote "
        f"{path or 'a file'} (working directory {os.getcwd()}). A trainer can write only "
        f"under the output dir {out} (checkpoints, results), or {' and '.join(WRITABLE)} "
        "(scratch, lost at the end; HOME is /tmp): write there, not in the working "
        "directory"
    )
