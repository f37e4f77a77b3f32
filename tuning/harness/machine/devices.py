"""The one value a GPU request becomes: `GpuPlan`. up, bench, fault, kube and the examples
read their device, host GPUs, image, dtype and default accelerate config from it.

On the host (`for_host`): the GPUs nvidia-smi shows, less what CUDA_VISIBLE_DEVICES and
NVIDIA_VISIBLE_DEVICES hide, less those another run holds (gpu_locks), less those busy with
work that is not the harness's (`busy_why`) unless the user named them (GPUS=device=i,j or
CUDA_VISIBLE_DEVICES), lowest index first; MIG refused; the driver checked against the
image's CUDA. For a cluster (`for_cluster`: kube
renders GPUs per pod) nothing of this host is asked.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from tuning.harness.errors import ROOT, HarnessError
from tuning.harness.machine import gpu_locks, image_recipes, nvidia
from tuning.harness.machine.image_recipes import IMAGE

CONFIGS = ROOT / "configs"
DTYPE = {"gpu": "bfloat16", "cpu": "float32"}  # fms-hf-tuning's GPU default; CPUs lack bf16 speed


def device_of(gpus: int) -> str:
    """GPU ranks when any GPU is used, else CPU ranks on gloo."""
    return "gpu" if gpus else "cpu"


@dataclass(frozen=True)
class GpuPlan:
    count: int  # GPUs in use, in all (kube: over every pod); 0 = CPU ranks on gloo
    image: str
    ids: tuple[str, ...] = ()  # host GPU indices; () where no host is asked (a cluster)
    chosen: tuple[nvidia.Gpu, ...] = ()  # what nvidia-smi said of them
    driver: str | None = None

    @property
    def device(self) -> str:
        return device_of(self.count)

    @property
    def dtype(self) -> str:
        return DTYPE[self.device]

    @property
    def accelerate_config(self) -> Path:
        return accelerate_default(self.device)

    def record(self) -> list[dict]:
        """summary.json's "gpus": which GPUs the run used, by index and UUID."""
        return [g.record() for g in self.chosen]

    def describe(self) -> str:
        return ", ".join(f"{g.index} {g.uuid} ({g.name})" for g in self.chosen)


def accelerate_default(device: str) -> Path:
    """The accelerate config a run gets without CONFIG, either trainer: fms's FSDP defaults;
    on CPU ranks the launcher's CPU recipe of them."""
    cpu = CONFIGS / "accelerate/fsdp-cpu.yaml"
    gpu = device == "gpu" or not cpu.is_file()
    return CONFIGS / "accelerate" / ("fsdp.yaml" if gpu else cpu.name)


def for_cluster(
    gpus_per_pod: int, image: str = IMAGE, cuda: str | None = None, pods: int = 1
) -> GpuPlan:
    return GpuPlan(gpus_per_pod * pods, image_recipes.resolve(image, device_of(gpus_per_pod), cuda))


def assumed(gpus: int, image: str = IMAGE) -> GpuPlan:
    """GPUs 0..N-1 of a host not asked (the checked-in examples)."""
    return GpuPlan(
        gpus, image_recipes.resolve(image, device_of(gpus)), tuple(map(str, range(gpus)))
    )


def for_host(
    gpus: int | None,
    image: str = IMAGE,
    cuda: str | None = None,
    lock_dir: Path | None = None,
    names: tuple[str, ...] = (),
) -> GpuPlan:
    """GPUS=N (None: every visible GPU) as free host GPUs; `names` (GPUS=device=i,j): those.
    GPUS=0 asks nothing of the host. Not free: held by another run of the harness (its lock:
    always refused), or busy (`busy`), unless the user named it."""
    if gpus == 0:
        return GpuPlan(0, image_recipes.resolve(image, "cpu"))
    inv = nvidia.inventory()
    seen = nvidia.visible(inv)
    picked = _named(seen, names) if names else []
    n = len(picked) if names else len(seen) if gpus is None else gpus
    if n == 0:
        return GpuPlan(0, image_recipes.resolve(image, "cpu"))
    if n > len(seen):
        raise HarnessError(
            f"GPUS={n} but this host shows {len(seen)} GPU(s){nvidia.where_from()} "
            f"(nvidia-smi); use GPUS={len(seen)} or fewer, or GPUS=0 for CPU ranks"
        )
    mig = [g for g in seen if g.mig]
    if mig:
        others = ",".join(str(g.index) for g in seen if not g.mig) or "<none>"
        raise HarnessError(
            f"GPU {', '.join(f'{g.index} ({g.name})' for g in mig)} has MIG enabled; MIG "
            "instances are not supported yet. Disable MIG (`sudo nvidia-smi -i INDEX -mig 0`, "
            f"then reset the GPU), or pick other GPUs: CUDA_VISIBLE_DEVICES={others}"
        )
    held = {g.index: gpu_locks.holder(str(g.index), lock_dir or gpu_locks.LOCK_DIR) for g in seen}
    named = {g.index for g in picked} | nvidia.named(inv)
    apps = nvidia.compute_apps()
    busy = {g.index: why for g in seen if (why := busy_why(g, apps))}
    taken = picked or seen
    free = [g for g in taken if held[g.index] is None and (g.index in named or g.index not in busy)]
    if len(free) < n:
        said = [
            f"GPU {g.index} by run {h.get('run_id', '?')} (harness pid {h.get('pid', '?')})"
            for g in taken
            if (h := held[g.index]) is not None
        ]
        said += [
            f"GPU {g.index} busy: {busy[g.index]}"
            for g in taken
            if g.index in busy and g.index not in named and held[g.index] is None
        ]
        asked = f"GPUS=device={','.join(names)}" if names else f"GPUS={n}"
        of = f"{len(picked)} named" if names else f"{len(seen)} visible"
        raise HarnessError(
            f"{asked} but only {len(free)} of the {of} GPU(s) are free: {'; '.join(said)}. "
            f"Wait for those runs, stop one (`make down RUN_ID=...`), name a busy GPU to take "
            f"it anyway (GPUS=device=i or CUDA_VISIBLE_DEVICES=i), or use GPUS={len(free)}"
        )
    chosen = tuple(free[:n])
    for g in chosen:
        if g.index in busy:
            print(
                f"harness: GPU {g.index} is busy ({busy[g.index]}); taking it, as you named it",
                file=sys.stderr,
            )
    tag = image_recipes.resolve(image, "gpu", cuda)
    check_driver(inv.driver, chosen, tag)
    return GpuPlan(n, tag, tuple(str(g.index) for g in chosen), chosen, inv.driver)


# More memory in use than this, with no process nvidia-smi names, is someone's: an idle GPU
# shows a few MiB, while a CUDA context alone takes some 300-500 MiB.
BUSY_MIB = 256


def busy_why(gpu: nvidia.Gpu, apps: dict[str, list[nvidia.App]]) -> str | None:
    """Why a GPU counts as busy with work that is not the harness's, or None: compute
    processes on it, or more than BUSY_MIB of its memory in use."""
    if apps.get(gpu.uuid):
        return "compute process(es) " + ", ".join(a.describe() for a in apps[gpu.uuid])
    if gpu.memory_used_mib is not None and gpu.memory_used_mib > BUSY_MIB:
        return (
            f"{gpu.memory_used_mib} MiB of memory in use (more than {BUSY_MIB} MiB) by "
            "a process nvidia-smi does not list here (another container's?)"
        )
    return None


def _named(seen: list[nvidia.Gpu], names: tuple[str, ...]) -> list[nvidia.Gpu]:
    """GPUS=device=i,j as visible GPUs, in the order named."""
    by_id = {str(g.index): g for g in seen} | {g.uuid: g for g in seen}
    unknown = [x for x in names if x not in by_id]
    if unknown:
        shown = ", ".join(f"{g.index} ({g.uuid})" for g in seen) or "none"
        raise HarnessError(
            f"GPUS=device={','.join(names)}: no visible GPU {', '.join(unknown)}"
            f"{nvidia.where_from()}; nvidia-smi shows {shown}. Name GPUs by index or UUID"
        )
    picked = [by_id[x] for x in names]
    if len({g.index for g in picked}) < len(picked):
        raise HarnessError(f"GPUS=device={','.join(names)} names one GPU twice")
    return picked


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def check_driver(driver: str | None, gpus, tag: str) -> None:
    """Refuse a driver too old for the image's CUDA, or a GPU its torch has no kernels for.
    A user's own image (not a recipe here) is not known, so not checked."""
    recipe = image_recipes.named(tag)
    if not (recipe and recipe.cuda and driver):
        return
    floor = recipe.min_driver
    for cap, need in recipe.driver_for_compute:  # newer GPUs need newer drivers
        if any(g.compute_cap >= cap for g in gpus) and _version(need) > _version(floor):
            floor = need
    if _version(driver) < _version(floor):
        fits = [
            r
            for r in image_recipes.CUDA.values()
            if r is not recipe and _version(driver) >= _version(r.min_driver)
        ]
        fix = "upgrade the NVIDIA driver" + (f" to {floor} or newer" if not fits else "")
        for r in fits:
            fix += (
                f", or use the CUDA {r.cuda} image {r.tag}: `make image DEVICE=gpu "
                f"CUDA={r.cuda}`, then `make up CUDA={r.cuda} ...`"
            )
        raise HarnessError(
            f"the NVIDIA driver here is {driver}; image {tag} runs CUDA {recipe.cuda}, which "
            f"needs driver {floor} or newer (R{floor.split('.')[0]}). Fix: {fix}"
        )
    old = [g for g in gpus if g.compute_cap < recipe.min_compute]
    if old:
        need = ".".join(map(str, recipe.min_compute))
        named = ", ".join(
            f"{g.index} ({g.name}, compute {'.'.join(map(str, g.compute_cap))})" for g in old
        )
        raise HarnessError(
            f"GPU {named}: "
            f"image {tag} (CUDA {recipe.cuda}) has kernels for compute capability {need} and "
            "newer only; pick other GPUs (CUDA_VISIBLE_DEVICES) or run your own image built "
            "on torch's CUDA 12.6 wheels (IMAGE=... ENTRY=...)"
        )
