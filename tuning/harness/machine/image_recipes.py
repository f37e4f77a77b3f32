"""The images the harness builds, as data: each recipe's tag, files, CUDA and what that CUDA
needs of the host's driver and GPUs; which image a device (and CUDA) runs. Building them is
images.py's (the engine's side); deciding from them is a run's spec (devices.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from tuning.harness.errors import HarnessError

IMAGE = "tuning-harness:latest"  # the harness image (recipe cpu): what IMAGE defaults to


@dataclass(frozen=True)
class Recipe:
    name: str
    tag: str
    dockerfile: str = "docker/Dockerfile"
    locks: tuple[str, ...] = ("docker/requirements.lock",)
    requirements: str = "docker/requirements.txt"
    build_args: tuple[tuple[str, str], ...] = ()
    # what the image is built from besides the above: a change means a rebuild
    sources: tuple[str, ...] = ("pyproject.toml", "docker/check_image.py", "configs", "tuning")
    # A GPU image's CUDA and what it needs of the host: the driver (CUDA's release notes,
    # "CUDA Toolkit and Corresponding Driver Versions"), the oldest GPU its torch has kernels
    # for (PyTorch RELEASE.md's CUDA support matrix; pytorch/pytorch#172352: no Volta in the
    # 12.8 and 13.0 builds), and newer GPUs that need a newer driver than CUDA does.
    cuda: str | None = None
    min_driver: str | None = None
    min_compute: tuple[int, int] = (7, 5)
    driver_for_compute: tuple[tuple[tuple[int, int], str], ...] = ()
    # Where pip finds this torch build besides PyPI: every online build (the Dockerfile's
    # TORCH_INDEX), and the host's wheelhouse too when PyPI lacks the locked wheel (+cu128).
    torch_index: str | None = None
    wheels_need_index: bool = False


TORCH_WHL = "https://download.pytorch.org/whl"
RECIPES = {
    # torch's CPU build: PyPI's plain torch 2.13.0 is the CUDA one; 2.13.0+cpu sorts above it
    "cpu": Recipe(
        "cpu",
        "tuning-harness:latest",
        torch_index=f"{TORCH_WHL}/cpu",
        build_args=(("DEVICE", "cpu"), ("TORCH_INDEX", f"{TORCH_WHL}/cpu")),
    ),
    # PyPI's torch 2.13.0 is built with CUDA 13.0: an R580 driver (580.65.06) or newer
    "gpu": Recipe(
        "gpu",
        "tuning-harness:gpu",
        locks=("docker/requirements.lock", "docker/requirements-gpu.lock"),
        build_args=(("DEVICE", "gpu"),),
        cuda="13.0",
        min_driver="580.65.06",
    ),
    # The same torch built with CUDA 12.8, for R525-R570 drivers: CUDA 12's minor-version
    # compatibility runs it on any 12.x driver (>= 525.60.13); Blackwell needs R570 anyway.
    "gpu-cu128": Recipe(
        "gpu-cu128",
        "tuning-harness:gpu-cu128",
        locks=("docker/requirements.lock", "docker/requirements-gpu-cu128.lock"),
        build_args=(
            ("DEVICE", "gpu"),
            ("GPU_LOCK", "requirements-gpu-cu128.lock"),
            ("TORCH_INDEX", f"{TORCH_WHL}/cu128"),
        ),
        cuda="12.8",
        min_driver="525.60.13",
        driver_for_compute=(((10, 0), "570"),),
        torch_index=f"{TORCH_WHL}/cu128",
        wheels_need_index=True,
    ),
    # fms-hf-tuning 3.2.2 itself, a user's own image (trainers.py: TRAINER=fms)
    "fms": Recipe(
        "fms",
        "tuning-harness-fms:latest",
        dockerfile="docker/fms.Dockerfile",
        locks=("docker/fms.lock",),
        requirements="docker/fms.lock",
        sources=(
            "docker/fms_check.py",
            "docker/fms_assets.py",
            "tuning/__init__.py",
            "tuning/container/launch.py",
            "tuning/container/rank/torn.py",
            "tuning/container/tiny_model.py",
            "tuning/container/demo_data.py",
        ),
    ),
}
CUDA = {r.cuda: r for r in RECIPES.values() if r.cuda}  # CUDA=12.8 -> its GPU recipe


def for_device(device: str, cuda: str | None = None) -> Recipe:
    if device != "gpu":
        return RECIPES["cpu"]
    if cuda and cuda not in CUDA:
        known = f"{', '.join(sorted(CUDA))} (default {RECIPES['gpu'].cuda})"
        raise HarnessError(f"CUDA={cuda}: no GPU image is built for it; use one of {known}")
    return CUDA[cuda] if cuda else RECIPES["gpu"]


def recipe_for(tag: str, device: str) -> Recipe:
    """A recipe's own tag names it (tuning-harness:gpu runs CPU ranks too); another tag is
    built from the device's recipe."""
    return named(tag) or for_device(device)


def named(tag: str) -> Recipe | None:
    """The recipe whose tag this is; None for a user's own image."""
    return next((r for r in RECIPES.values() if r.tag == tag), None)


def resolve(tag: str, device: str, cuda: str | None = None) -> str:
    """The default tag (IMAGE) means the device's own image: GPU ranks get the CUDA build
    (CUDA=12.8: the CUDA 12 one)."""
    return for_device(device, cuda).tag if tag == IMAGE else tag
