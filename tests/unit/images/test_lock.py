"""One locked dependency set: pyproject.toml's ranges, docker/requirements*.lock's exact pins,
docker/requirements.txt's names, the host venv and the Dockerfile must all agree."""

from __future__ import annotations

import importlib.metadata as md
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from support.locks import CU128_LOCK, GPU_LOCK, LOCK, PIN, pins
from support.paths import ROOT


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def declared() -> list[Requirement]:
    extras = project()["optional-dependencies"]
    return [Requirement(r) for r in project()["dependencies"] + sum(extras.values(), [])]


def test_every_line_of_the_locks_is_an_exact_pin():
    for path in (LOCK, GPU_LOCK, CU128_LOCK):
        for line in path.read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                assert PIN.match(line) and ";" not in line, f"{path.name}: not exact: {line!r}"


def test_the_lock_satisfies_pyproject():
    locked = pins(LOCK)
    for req in declared():
        name = canonicalize_name(req.name)
        assert name in locked, f"{req} (pyproject.toml) is not in {LOCK.name}; run `make lock`"
        assert req.specifier.contains(locked[name], prereleases=True), (
            f"{LOCK.name} pins {name}=={locked[name]}, outside pyproject's {req}; run `make lock`"
        )


def test_the_image_installs_the_train_extra():
    lines = (ROOT / "docker/requirements.txt").read_text().splitlines()
    image = {canonicalize_name(x.strip()) for x in lines if x.strip() and not x.startswith("#")}
    train = {
        canonicalize_name(Requirement(r).name) for r in project()["optional-dependencies"]["train"]
    }
    assert image == train
    assert image <= set(pins(LOCK))


def test_gpu_lock_is_the_same_torch_and_agrees_on_every_shared_package():
    cpu, gpu = pins(LOCK), pins(GPU_LOCK)
    assert gpu["torch"] == cpu["torch"], "the GPU image must run the torch version of the lock"
    assert "torch===" in GPU_LOCK.read_text(), "=== keeps the CPU wheel (+cpu) out of the GPU image"
    for name in set(cpu) & set(gpu):
        assert cpu[name] == gpu[name], f"{name}: {cpu[name]} vs {gpu[name]} (GPU lock)"
    assert any(n.startswith("nvidia-") for n in gpu), "the CUDA libraries are pinned too"


def test_cuda12_lock_is_the_same_torch_built_with_cuda_12_8():
    cpu, cu128 = pins(LOCK), pins(CU128_LOCK)
    assert cu128 == {"torch": f"{cpu['torch']}+cu128"}, "torch alone; its wheel pins the rest"
    assert Version(cu128["torch"]).public == Version(cpu["torch"]).public
    assert "nvidia-*-cu12 libraries" in CU128_LOCK.read_text()  # why nothing else is pinned
    assert f"torch==={cpu['torch']}+cu128" in (ROOT / "docker/lock.sh").read_text().replace(
        "$torch", cpu["torch"]
    )


def test_the_host_venv_runs_the_lock_and_the_lock_is_closed():
    """Every locked package is installed here at its locked version (the venv was made from
    the lock), and every requirement of an installed locked package is itself locked."""
    locked = pins(LOCK)
    env = default_environment()
    for name, version in locked.items():
        have = md.version(name)
        assert Version(have).public == Version(version).public, (
            f"{name}: the venv has {have}, the lock pins {version}; `make .venv/.train` reinstalls"
        )
        for raw in md.requires(name) or []:
            req = Requirement(raw)
            if req.marker and not req.marker.evaluate({**env, "extra": ""}):
                continue
            assert canonicalize_name(req.name) in locked, f"{name} needs {req}, not in the lock"


def test_every_install_reads_the_lock():
    make = (ROOT / "Makefile").read_text()
    assert (
        make.count("pip install -q -c $(LOCK)") == 2
        and "LOCK   := docker/requirements.lock" in make
    )
    dockerfile = (ROOT / "docker/Dockerfile").read_text()
    assert "-c /tmp/req/requirements.lock $gpu -r /tmp/req/requirements.txt" in dockerfile
    assert 'gpu="-c /tmp/req/$GPU_LOCK"' in dockerfile
    assert "ARG GPU_LOCK=requirements-gpu.lock" in dockerfile
    # PyTorch's index only online: with a wheelhouse the build reads nothing else
    assert 'elif [ -n "$TORCH_INDEX" ]; then src="--extra-index-url $TORCH_INDEX"' in dockerfile


def _check(tmp_path: Path, device: str, torch_version: str | None = None, cuda: str | None = None):
    """docker/check_image.py (the build's own check) here, optionally under a stand-in torch
    of another version, as a base image with its own old torch would give."""
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    if torch_version:
        (tmp_path / "torch").mkdir()
        (tmp_path / "torch/__init__.py").write_text(
            f"__version__ = {torch_version!r}\nfrom . import version\n"
        )
        (tmp_path / "torch/version.py").write_text(f"cuda = {cuda!r}\n")
        info = tmp_path / f"torch-{torch_version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: torch\nVersion: {torch_version}\n"
        )
        env["PYTHONPATH"] = str(tmp_path)
    return subprocess.run(
        [sys.executable, str(ROOT / "docker/check_image.py"), "--device", device],
        capture_output=True,
        text=True,
        env=env,
    )


def test_image_check_passes_the_locked_set(tmp_path):
    out = _check(tmp_path, "cpu")
    assert out.returncode == 0, out.stderr
    assert f"torch {pins(LOCK)['torch']}" in out.stdout


def test_image_check_fails_when_transformers_cannot_use_torch(tmp_path):
    # The defect this lock fixes: torch 2.5.1 under transformers 5 (PyTorch disabled).
    out = _check(tmp_path, "cpu", "2.5.1")
    assert out.returncode == 1
    assert "cannot use torch 2.5.1" in out.stderr and "requirements.lock" in out.stderr


def test_image_check_fails_a_gpu_image_with_a_cpu_torch(tmp_path):
    import torch

    out = _check(tmp_path, "gpu")
    assert (out.returncode == 0) is bool(torch.version.cuda)
    if not torch.version.cuda:
        assert "is a CPU build; the GPU image needs the CUDA wheel" in out.stderr


def test_image_check_fails_a_cpu_image_with_a_cuda_torch(tmp_path):
    # PyPI's plain torch 2.13.0 is the CUDA build: an online CPU image without TORCH_INDEX
    # would get it (a stand-in torch of that version and CUDA 13.0 stands for it here).
    out = _check(tmp_path, "cpu", pins(LOCK)["torch"], cuda="13.0")
    assert out.returncode == 1, out.stdout
    assert f"torch {pins(LOCK)['torch']} is a CUDA 13.0 build; the CPU image needs" in out.stderr
    assert "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in out.stderr
