"""The GPU image (tuning-harness:gpu) builds here, offline, and trains CPU ranks in both
layouts: everything but the CUDA kernels is proved. The image is ~7 GB (torch's CUDA build
and its CUDA libraries), so this is outside the default run: `make test-gpu-image`.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from packaging.version import Version

from support.engine import leftovers
from support.harness import harness
from support.locks import GPU_LOCK, pins
from support.paths import ROOT

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.gpu_image]
TAG = "tuning-harness:gpu"


@pytest.fixture(scope="module")
def gpu_image() -> str:
    out = subprocess.run(
        [sys.executable, "-m", "tuning.harness", "image", "--device", "gpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"harness: image {TAG} (gpu" in out.stdout
    return TAG


def test_the_gpu_image_holds_the_locked_cuda_torch(gpu_image):
    code = "import torch, transformers; print(torch.__version__, torch.version.cuda)"
    run = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python", gpu_image]
    out = subprocess.run([*run, "-c", code], capture_output=True, text=True, check=True)
    version, cuda = out.stdout.split()
    assert Version(version).public == pins(GPU_LOCK)["torch"]
    assert Version(version).local.startswith("cu") and cuda != "None"  # e.g. 2.13.0+cu130


@pytest.mark.parametrize("layout", ["single", "per-rank"])
def test_the_gpu_image_trains_cpu_ranks(gpu_image, layout, tmp_path):
    out = harness(
        "up",
        "--image",
        gpu_image,
        "--layout",
        layout,
        "--gpus",
        "0",
        "--nproc",
        "2",
        "--steps",
        "6",
        runs=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads(((tmp_path / "latest").resolve() / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["steps"] == 6
    assert [r["world_size_seen"] for r in summary["ranks"]] == [2, 2]
    assert [r["distributed_type"] for r in summary["ranks"]] == ["FSDP", "FSDP"]
    assert leftovers(summary["run_id"]) == []
