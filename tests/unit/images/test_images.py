"""Image recipes (tuning/harness/backends/images.py) without building: which recipe a tag
picks, what a digest covers, and that two builds never stage the shared wheelhouse at once
(one process checks its image once, on the engine: test_images_docker.py)."""

from __future__ import annotations

import subprocess
import sys

from support.paths import ROOT
from tuning.harness.backends import images
from tuning.harness.machine import image_recipes
from tuning.harness.machine.image_recipes import IMAGE


def test_the_default_image_is_the_devices_own_and_a_tag_picks_its_recipe():
    assert image_recipes.resolve(IMAGE, "cpu") == "tuning-harness:latest"
    assert image_recipes.resolve(IMAGE, "gpu") == "tuning-harness:gpu"
    assert image_recipes.resolve("mine:1", "gpu") == "mine:1"
    # the GPU image can run CPU ranks: its tag keeps its recipe on a CPU run
    assert image_recipes.recipe_for("tuning-harness:gpu", "cpu").name == "gpu"
    assert image_recipes.recipe_for("mine:1", "gpu").name == "gpu"
    assert "docker/requirements-gpu.lock" in image_recipes.RECIPES["gpu"].locks
    # CUDA=12.8: the CUDA 12 image, its own lock and floor; a tag of its own picks it too
    assert image_recipes.resolve(IMAGE, "gpu", "12.8") == "tuning-harness:gpu-cu128"
    assert image_recipes.resolve(IMAGE, "cpu", "12.8") == "tuning-harness:latest"
    cu128 = image_recipes.recipe_for("tuning-harness:gpu-cu128", "gpu")
    assert cu128.locks[-1] == "docker/requirements-gpu-cu128.lock"
    assert (cu128.cuda, cu128.min_driver) == ("12.8", "525.60.13")
    assert (image_recipes.RECIPES["gpu"].cuda, image_recipes.RECIPES["gpu"].min_driver) == (
        "13.0",
        "580.65.06",
    )
    assert image_recipes.named("mine:1") is None  # a user's image: its CUDA is not known here


def test_online_builds_read_pytorchs_index_and_the_cpu_wheelhouse_does_not():
    cpu = images.build_command(image_recipes.RECIPES["cpu"], "t", images.BASE_REGISTRY, "d")
    assert "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in cpu
    assert "--network" not in cpu
    offline = images.build_command(image_recipes.RECIPES["cpu"], "t", images.BASE_OFFLINE, "d")
    assert offline[-3:] == ["--network", "none", "."]
    # the offline CPU build's wheels come from PyPI (its mirror) alone, +cpu as today
    assert "--extra-index-url" not in images.wheelhouse_command(image_recipes.RECIPES["cpu"], ROOT)


def test_the_digest_covers_the_locks_and_the_code():
    files = images._files(image_recipes.RECIPES["gpu"])
    names = {str(p.relative_to(ROOT)) for p in files}
    assert {
        "docker/Dockerfile",
        "docker/requirements.lock",
        "docker/requirements-gpu.lock",
        "docker/check_image.py",
        "tuning/container/sft_trainer.py",
        "configs/accelerate/fsdp.yaml",
    } <= names
    assert images.digest(image_recipes.RECIPES["cpu"]) != images.digest(
        image_recipes.RECIPES["gpu"]
    )


HOLD = """
import sys, time
from pathlib import Path
from tuning.harness.machine import image_recipes
from tuning.harness.backends import images
images.BUILD_LOCK = Path(sys.argv[1])  # the test's own: a real build may hold the checkout's
with images._one_build_at_a_time(lambda m: print(m, flush=True)):
    print("in", time.time(), flush=True)
    sys.stdin.readline()  # held until the test says go
    print("out", time.time(), flush=True)
"""


def test_two_builds_never_stage_at_once(tmp_path):
    """The first holds the lock until the second has said it waits (events, not sleeps)."""
    hold = [sys.executable, "-c", HOLD, str(tmp_path / "image-build.lock")]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True, "cwd": ROOT}
    first = subprocess.Popen(hold, **pipes)
    second = None
    try:
        assert first.stdout.readline().startswith("in ")
        second = subprocess.Popen(hold, **pipes)
        waits = second.stdout.readline().strip()
        assert waits == "image: another image build is running here; waiting for it"
        first.stdin.write("go\n")
        first.stdin.flush()
        out_first = float(first.stdout.readline().split()[1])
        entered = second.stdout.readline()
        second.stdin.write("go\n")
        second.stdin.flush()
        assert entered.startswith("in ") and float(entered.split()[1]) >= out_first
        assert first.wait(timeout=60) == 0 and second.wait(timeout=60) == 0
    finally:
        for proc in (first, second):
            if proc and proc.poll() is None:
                proc.kill()
