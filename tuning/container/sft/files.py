"""Reading job and data files: an unreadable one refused with the OS's reason, a data record
and the error that refuses one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple


def read_or_refuse(path: Path, refuse: Callable[[str], Exception], binary: bool = False):
    """The file's text (its bytes if `binary`); an OSError becomes refuse(the OS's reason)."""
    try:
        return path.read_bytes() if binary else path.read_text()
    except OSError as exc:
        raise refuse(exc.strerror or str(exc)) from None


class DataError(ValueError):
    """A data file the trainer refuses before training; the message names the file and line."""


class Record(NamedTuple):
    where: str  # "file:line" or "file row N"
    line: int  # the line (JSON) or row (tables) it starts on, from 1
    data: dict
