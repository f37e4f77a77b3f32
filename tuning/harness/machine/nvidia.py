"""The host's GPUs, from nvidia-smi, and the ones the user lets a run see.

One query gives every GPU's index, UUID, name, compute capability and MIG mode, and the
driver's version; `nvidia-smi -L` lists the MIG devices (indented "MIG ..." lines under their
GPU). No nvidia-smi on PATH means no GPU (a CPU box). An nvidia-smi that is there but fails
(a driver/library mismatch after a driver upgrade, say) is an error: a run never turns into
CPU ranks because the driver is broken.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from tuning.harness.errors import HarnessError

QUERY = [
    "nvidia-smi",
    "--format=csv,noheader",
    "--query-gpu=index,uuid,name,driver_version,compute_cap,mig.mode.current,memory.used",
]
# The processes with a compute context on each GPU (`nvidia-smi --help-query-compute-apps`);
# the name last, as it is free text. One of another PID namespace (another container) may
# not be listed at all: memory.used still counts it.
APPS = [
    "nvidia-smi",
    "--format=csv,noheader",
    "--query-compute-apps=gpu_uuid,pid,used_gpu_memory,process_name",
]
LIST = ["nvidia-smi", "-L"]
NONE = ("none", "void", "")  # NVIDIA_VISIBLE_DEVICES values that mean no GPU (the toolkit's)


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    compute_cap: tuple[int, int]
    mig: bool  # MIG mode on: CUDA sees its instances, not the GPU
    memory_used_mib: int | None = None  # memory.used; None where the driver says [N/A]

    def record(self) -> dict:
        return {"index": self.index, "uuid": self.uuid, "name": self.name}


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[Gpu, ...] = ()
    driver: str | None = None


def _smi(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        out = subprocess.CompletedProcess(cmd, -1, "", str(e))
    if out.returncode != 0:
        said = " ".join((out.stdout + " " + out.stderr).split()) or "no output"
        raise HarnessError(
            f"`{' '.join(cmd)}` failed (exit {out.returncode}): {said}\n"
            "  The NVIDIA driver is not working. A driver/library version mismatch follows a "
            "driver upgrade without a reboot: reboot, or reinstall the driver. To train on CPU "
            "ranks meanwhile, say so: GPUS=0."
        )
    return out.stdout


def inventory() -> Inventory:
    """Every GPU of this host and the driver version; empty without nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return Inventory()
    rows = [line.split(", ") for line in _smi(QUERY).splitlines() if line.strip()]
    with_mig = _mig_parents(_smi(LIST))
    gpus = []
    for row in rows:
        if len(row) < 7:
            raise HarnessError(f"`{' '.join(QUERY)}` gave {', '.join(row)!r}; expected 7 fields")
        index, uuid, *name, _driver, cap, mig, used = (x.strip() for x in row)
        major, _, minor = cap.partition(".")
        gpus.append(
            Gpu(
                int(index),
                uuid,
                ", ".join(name),
                (int(major), int(minor or 0)),
                mig == "Enabled" or int(index) in with_mig,
                _mib(used),
            )
        )
    return Inventory(tuple(gpus), rows[0][3].strip() if rows else None)


def _mib(value: str) -> int | None:
    """ "1234 MiB" -> 1234; "[N/A]" (not supported, or not allowed here) -> None."""
    number = value.removesuffix("MiB").strip()
    return int(number) if number.isdigit() else None


@dataclass(frozen=True)
class App:
    """A process with a compute context on a GPU."""

    pid: int
    name: str
    memory_mib: int | None

    def describe(self) -> str:
        mib = f", {self.memory_mib} MiB" if self.memory_mib is not None else ""
        return f"pid {self.pid} ({self.name}{mib})"


def compute_apps() -> dict[str, list[App]]:
    """GPU UUID -> the compute processes nvidia-smi lists on it (none: no line)."""
    if not shutil.which("nvidia-smi"):
        return {}
    out: dict[str, list[App]] = {}
    for line in _smi(APPS).splitlines():
        parts = [x.strip() for x in line.split(", ")]
        if len(parts) < 3:  # a note ("No running processes found"), not a process
            continue
        uuid, pid, used, *name = parts
        if uuid and pid.isdigit():
            out.setdefault(uuid, []).append(App(int(pid), ", ".join(name) or "?", _mib(used)))
    return out


def _mig_parents(listing: str) -> set[int]:
    """Indices of the GPUs `nvidia-smi -L` lists MIG devices under."""
    parents, current = set(), None
    for line in listing.splitlines():
        if line.startswith("GPU "):
            current = int(line.split()[1].rstrip(":"))
        elif line.strip().startswith("MIG ") and current is not None:
            parents.add(current)
    return parents


def visible(inv: Inventory, env=os.environ) -> list[Gpu]:
    """The GPUs CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES leave (both, when both are set),
    lowest index first. Each takes indices or UUIDs; NVIDIA_VISIBLE_DEVICES also "all", and
    "none", "void" or empty for no GPU; CUDA_VISIBLE_DEVICES empty or -1 for no GPU."""
    seen = list(inv.gpus)
    for name in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        raw = env.get(name)
        if raw is None or raw.strip() == "all":
            continue
        value = raw.strip()
        if value in NONE or (name == "CUDA_VISIBLE_DEVICES" and value == "-1"):
            return []
        wanted = [x.strip() for x in value.split(",") if x.strip()]
        by_id = {str(g.index): g for g in inv.gpus} | {g.uuid: g for g in inv.gpus}
        unknown = [x for x in wanted if x not in by_id]
        if unknown:
            shown = ", ".join(f"{g.index} ({g.uuid})" for g in inv.gpus) or "none"
            mig = " MIG devices are not supported yet;" * any(x.startswith("MIG-") for x in unknown)
            raise HarnessError(
                f"{name}={raw}: no GPU {', '.join(unknown)} on this host;{mig} nvidia-smi "
                f"shows {shown}. Name GPUs by index or UUID, or unset {name}"
            )
        chosen = {by_id[x].index for x in wanted}
        seen = [g for g in seen if g.index in chosen]
    return sorted(seen, key=lambda g: g.index)


def named(inv: Inventory, env=os.environ) -> set[int]:
    """The GPUs CUDA_VISIBLE_DEVICES names one by one (not "all", not unset): the user's own
    choice, taken busy or not (devices.for_host)."""
    raw = (env.get("CUDA_VISIBLE_DEVICES") or "").strip()
    wanted = {x.strip() for x in raw.split(",") if x.strip()}
    return {g.index for g in inv.gpus if str(g.index) in wanted or g.uuid in wanted}


def where_from(env=os.environ) -> str:
    """What limits the visible GPUs, for messages: the variables set, or nothing."""
    named = [
        f"{n}={env[n]}" for n in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES") if n in env
    ]
    return f" ({', '.join(named)})" if named else ""
