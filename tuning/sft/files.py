"""One reader for job and data files: an unreadable one is refused with the OS's reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def read_or_refuse(path: Path, refuse: Callable[[str], Exception], binary: bool = False):
    """The file's text (its bytes if `binary`); an OSError becomes refuse(the OS's reason)."""
    try:
        return path.read_bytes() if binary else path.read_text()
    except OSError as exc:
        raise refuse(exc.strerror or str(exc)) from None
