"""A trainer of your own as you launch it: `accelerate launch train.py --learning_rate 1e-5 ...`
becomes `make up SRC=. ENTRY=train.py ARGS="--learning_rate 1e-5 --output_dir /output ..."`.

- ENTRY is a module (`pkg.train`, `python -m` style) or a script (`train.py`, a path).
- SRC is a folder on this machine, bound read-only at /src in every container, the ranks'
  working directory and on their PYTHONPATH: an edit takes effect at the next run, with no
  image to rebuild. A script ENTRY is a path in SRC; a script on this machine given without
  SRC brings its own folder as SRC. With SRC the harness's own image runs it (torch,
  transformers, accelerate, peft, datasets); IMAGE=your own works as well.
- ARGS is ENTRY's whole command line (shell words, as a shell would split them). The harness
  adds nothing to it: STEPS, SEED, TIMEOUT and JOB are refused beside it (flags.py).

The checkpoints must land in the run's output dir (/output): the harness sets torn ones aside
and a restart resumes only there, and nothing else outlives a container. An `--output_dir`
in ARGS that says otherwise is refused here; a Trainer built with another one is refused in
the rank before its first step (tuning/container/rank/trainer_steps.py).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tuning.container.rank.rank_record import (
    is_script,  # the rank's own rule: a script, else a module
)
from tuning.harness.contract.container import OUTPUT_DIR, SRC_DIR
from tuning.harness.errors import HarnessError
from tuning.harness.machine.image_recipes import IMAGE

MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class OwnTrainer:
    entry: str  # as the ranks see it: a module name, or the script's path in the container
    src: str | None  # the host folder bound at SRC_DIR
    args: tuple[str, ...] | None  # ENTRY's command line; None: it reads a JSON job


def words(raw: str | None) -> tuple[str, ...] | None:
    """ARGS as shell words; unset or blank: None."""
    if raw is None or not raw.strip():
        return None
    try:
        return tuple(shlex.split(raw))
    except ValueError as e:
        raise HarnessError(f"ARGS={raw!r}: {e}; quote it as a shell would") from None


def value_in(args: tuple[str, ...], name: str) -> str | None:
    """The value of the last --name (or its dashed spelling, --save-steps for --save_steps) in
    ARGS, as argparse and HfArgumentParser take it; None when it is not there."""
    names = {f"--{name}", f"--{name.replace('_', '-')}"}
    found = None
    for i, word in enumerate(args):
        flag, eq, value = word.partition("=")
        if flag in names:
            found = value if eq else (args[i + 1] if i + 1 < len(args) else "")
    return found


def check_output_dir(args: tuple[str, ...]) -> None:
    value = value_in(args, "output_dir")
    if value is None or str(PurePosixPath(value)) == OUTPUT_DIR:
        return
    raise HarnessError(
        f"ARGS sets --output_dir {value or '(nothing)'}: in the containers only {OUTPUT_DIR} (the "
        f"run's output/) is kept and writable, and the harness sets torn checkpoints aside and "
        f"resumes only there: pass --output_dir {OUTPUT_DIR}"
    )


def resolve(entry: str, src: str | None, raw_args: str | None, image: str) -> OwnTrainer:
    """ENTRY, SRC and ARGS checked, with ENTRY as the ranks will see it."""
    args = words(raw_args)
    if args is not None:
        check_output_dir(args)
    folder = _folder(src) if src else None
    if not is_script(entry):
        if not MODULE.fullmatch(entry):
            raise HarnessError(
                f"ENTRY={entry!r} is neither a module (my_pkg.train) nor a script (train.py)"
            )
        if folder and image == IMAGE and not _module_in(folder, entry):
            raise HarnessError(
                f"ENTRY={entry}: no such module in SRC={src} (looked for "
                f"{entry.replace('.', '/')}.py and its package)"
            )
        return OwnTrainer(entry, str(folder) if folder else None, args)
    path = Path(entry).expanduser()
    if folder:
        host = path if path.is_absolute() else folder / path
        if host.resolve().is_relative_to(folder) and host.is_file():
            rel = host.resolve().relative_to(folder)
            return OwnTrainer(str(PurePosixPath(SRC_DIR, rel.as_posix())), str(folder), args)
        if host.exists() or not path.is_absolute():
            where = "is outside" if host.exists() else "is not a file in"
            raise HarnessError(
                f"ENTRY={entry} {where} SRC={src}: only SRC is bound into the "
                "containers; name a script in it (ENTRY=train.py)"
            )
        if image == IMAGE:
            raise HarnessError(
                f"ENTRY={entry}: no such script on this machine, and the harness "
                f"image {IMAGE} has none; name a script in SRC={src} "
                "(ENTRY=train.py), or set IMAGE=<your image that has it>"
            )
        return OwnTrainer(entry, str(folder), args)  # a script inside IMAGE
    if path.is_file():  # on this machine, no SRC: its folder is bound
        host = path.resolve()
        return OwnTrainer(f"{SRC_DIR}/{host.name}", str(host.parent), args)
    if path.is_absolute() and image != IMAGE:
        return OwnTrainer(entry, None, args)  # a script inside IMAGE
    raise HarnessError(
        f"ENTRY={entry}: no such script on this machine"
        + ("" if path.is_absolute() else " (a relative ENTRY is a path in SRC)")
        + "; give its path, or SRC=<your code's folder> and ENTRY=<script in it>"
    )


def _folder(src: str) -> Path:
    folder = Path(src).expanduser().resolve()
    if folder.is_file():  # SRC of one file: its folder here (make kube ships the file alone)
        return folder.parent
    if not folder.is_dir():
        raise HarnessError(
            f"SRC={src}: no such folder or file on this machine (your code's folder, or one "
            "script, bound read-only at /src)"
        )
    return folder


def _module_in(folder: Path, module: str) -> bool:
    base = folder.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file() or base.is_dir()
