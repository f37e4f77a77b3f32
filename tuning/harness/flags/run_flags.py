"""The flags of a job command (up, bench, fault, kube), typed once into a frozen `RunFlags`.
Which flags exist and who honours them is flag_table.py's; whole numbers and sizes are
checked here, with the Makefile's variable names in the messages; a command that needs a
variant (bench's layouts, fault's knobs) makes one with `dataclasses.replace`.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path

from tuning.harness.errors import HarnessError
from tuning.harness.flags import own_trainer, trainers
from tuning.harness.machine.image_recipes import IMAGE

GRACE_S = 60.0  # seconds to wait for peers after a rank fails


def int_arg(name: str, raw: str | int | None, minimum: int) -> int | None:
    """A whole-number flag (None when unset); a value already parsed passes the same check."""
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise HarnessError(f"{name}={raw!r} is not a whole number; e.g. {name}={minimum}") from None
    if value < minimum:
        raise HarnessError(f"{name}={value} must be at least {minimum}")
    return value


TIME_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}


def time_arg(name: str, raw: str | float | None) -> float | None:
    """A length of time: seconds, or a number with s, m or h (``10m``, ``90s``, ``1.5h``);
    None when unset."""
    if raw is None or raw == "":
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(raw))
    if not m or float(m[1]) <= 0:
        raise HarnessError(f"{name}={raw!r}: use a positive time such as {name}=10m, 600s or 1h")
    return float(m[1]) * TIME_UNITS[m[2]]


def memory(raw: str | None) -> str | None:
    """MEMORY, a per-container limit as Compose takes it: a number and a unit (b, k, m, g)."""
    if not raw:
        return None
    if not re.fullmatch(r"[1-9][0-9]*(\.[0-9]+)?[bkmg]", raw.lower()):
        raise HarnessError(f"MEMORY={raw!r} is not a size; e.g. MEMORY=8g or MEMORY=512m")
    return raw.lower()


@dataclass(frozen=True)
class RunFlags:
    """Every flag of a job command (up, bench, fault, kube: flag_table.JOB), typed; TRAINER's
    preset filled in. A flag left unset keeps the default here."""

    steps: int | None = None
    seed: int | None = None
    timeout: int | None = None
    config: str | None = None
    job: str = str(trainers.DEFAULT_JOB)
    layout: str = "single"
    network: str = "isolated"
    gpus: int | None = None  # None: every visible GPU (devices.for_host)
    gpu_names: tuple[str, ...] = ()  # GPUS=device=i,j: these host GPUs (indices or UUIDs)
    cuda: str | None = None
    nproc: int = 2  # CPU ranks when GPUS=0
    model: str | None = None
    data: str | None = None
    max_restarts: int = 0
    resume: bool = False
    resume_from: str | None = None
    grace: float = GRACE_S
    run_id: str | None = None
    trainer: str = "harness"
    memory: str | None = None
    pids: int | None = None
    entry: str | None = None
    args: str | None = None  # ARGS as typed: ENTRY's command line (own_trainer.words splits it)
    src: str | None = None
    runs: str = "runs"
    image: str = IMAGE
    dry_run: bool = False  # prints what would run: writes nothing, RUNS included

    @classmethod
    def of(cls, a: argparse.Namespace) -> RunFlags:
        f = _trainer_preset(cls(**_typed(a, cls)))
        _nothing_beside_args(a, f)
        return f


# name: (the Makefile's variable, minimum) of every whole-number flag
_WHOLE = {
    "steps": ("STEPS", 1),
    "seed": ("SEED", 0),
    "timeout": ("TIMEOUT", 1),
    "gpus": ("GPUS", 0),
    "nproc": ("NPROC", 1),
    "max_restarts": ("MAX_RESTARTS", 0),
    "pids": ("PIDS", 16),
}


def _typed(a: argparse.Namespace, cls: type) -> dict:
    values = {
        f.name: getattr(a, f.name) for f in fields(cls) if getattr(a, f.name, None) is not None
    }
    raw = str(values.get("gpus", ""))
    if raw.startswith(DEVICE):
        values["gpu_names"] = gpu_names(raw)
        values["gpus"] = len(values["gpu_names"])
    elif raw and not re.fullmatch(r"\s*-?[0-9]+\s*", raw):
        raise HarnessError(
            f"GPUS={raw!r} is not a whole number (GPUS=2: that many GPUs), nor GPUs by name "
            f"(GPUS=device={raw.strip()}: nvidia-smi's indices or UUIDs)"
        )
    for name, (var, minimum) in _WHOLE.items():
        if name in values:
            values[name] = int_arg(var, values[name], minimum)
    for name, default in (("max_restarts", 0), ("nproc", 2)):
        if name in values:
            values[name] = values[name] or default
    if "memory" in values:
        values["memory"] = memory(values["memory"])
    if "grace" in values:
        values["grace"] = seconds("GRACE", values["grace"])
    return values


DEVICE = "device="  # GPUS=device=2,3: docker run --gpus's way to name GPUs, not count them


def gpu_names(raw: str) -> tuple[str, ...]:
    """GPUS=device=i,j,...: the host GPUs named by nvidia-smi index or UUID."""
    names = tuple(x.strip() for x in raw.removeprefix(DEVICE).split(",") if x.strip())
    if not names or len(set(names)) != len(names):
        raise HarnessError(
            f"GPUS={raw!r} names no GPU, or one twice; e.g. GPUS=device=2,3 "
            "(nvidia-smi's indices or UUIDs)"
        )
    return names


def seconds(name: str, raw: str | float) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        raise HarnessError(f"{name}={raw!r} is not a number of seconds >= 0; e.g. {name}=60")
    return value


def _trainer_preset(f: RunFlags) -> RunFlags:
    """What TRAINER implies where the user left a flag at its default (trainers.py)."""
    trainer = f.trainer or "harness"
    if trainer not in trainers.TRAINERS:
        raise HarnessError(
            f"TRAINER={trainer!r} is unknown; use one of {', '.join(trainers.TRAINERS)}"
        )
    entry = f.entry or None
    if trainer == "fms":
        default_job = Path(f.job) == trainers.DEFAULT_JOB
        return replace(
            f,
            trainer=trainer,
            entry=entry or trainers.FMS_ENTRY,
            image=trainers.FMS_IMAGE if f.image == IMAGE else f.image,
            job=str(trainers.FMS_JOB) if default_job else f.job,
        )
    if entry and f.image == IMAGE and not f.src and not own_trainer.is_script(entry):
        raise HarnessError(
            f"ENTRY={entry} names a module: set IMAGE=<your image that has it>, or SRC=<the "
            f"folder that holds it> (the harness image {IMAGE} then runs it, with torch, "
            f"transformers, accelerate, peft and datasets), or TRAINER=fms"
        )
    if f.src and not entry and Path(f.src).expanduser().is_file():
        entry = Path(f.src).name  # SRC of one file: it is the script (own_trainer: its folder)
    for var, value in (("ARGS", f.args), ("SRC", f.src)):
        if value and not entry:
            raise HarnessError(
                f"{var}={value} is for a trainer of your own: set ENTRY=<your "
                "script or module> as well"
            )
    return replace(f, trainer=trainer, entry=entry)


# What the harness would otherwise put into a job file, which a trainer taking ARGS never reads.
_ARGS_OWN = {
    "steps": ("STEPS", "--max_steps"),
    "seed": ("SEED", "--seed"),
    "timeout": ("TIMEOUT", "--ddp_timeout"),
    "job": ("JOB", "your script's own config flag"),
}


def _nothing_beside_args(a: argparse.Namespace, f: RunFlags) -> None:
    """ARGS is ENTRY's whole command line: the harness adds nothing to it, so STEPS, SEED,
    TIMEOUT and JOB, which it would write into a job file the script never reads, are refused
    by name, with where they go instead."""
    if own_trainer.words(f.args) is None:
        return
    typed = [
        (var, where, getattr(a, name))
        for name, (var, where) in _ARGS_OWN.items()
        if getattr(a, name, None) not in (None, "")
    ]
    if typed:
        said = "; ".join(f"{var}={value}: put {where} in ARGS" for var, where, value in typed)
        raise HarnessError(
            f"{said}. ARGS is ENTRY's whole command line; the harness adds nothing to it"
        )
