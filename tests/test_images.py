"""Image recipes (tuning/harness/images.py) without building: which recipe a tag picks, what
a digest covers, and that two builds never stage the shared wheelhouse at once."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

from tuning.harness import images
from tuning.harness.layout import IMAGE


def test_the_default_image_is_the_devices_own_and_a_tag_picks_its_recipe():
    assert images.resolve(IMAGE, "cpu") == "tuning-harness:latest"
    assert images.resolve(IMAGE, "gpu") == "tuning-harness:gpu"
    assert images.resolve("mine:1", "gpu") == "mine:1"
    # the GPU image can run CPU ranks: its tag keeps its recipe on a CPU run
    assert images.recipe_for("tuning-harness:gpu", "cpu").name == "gpu"
    assert images.recipe_for("mine:1", "gpu").name == "gpu"
    assert "docker/requirements-gpu.lock" in images.RECIPES["gpu"].locks


def test_the_digest_covers_the_locks_and_the_code():
    files = images._files(images.RECIPES["gpu"])
    names = {str(p.relative_to(ROOT)) for p in files}
    assert {"docker/Dockerfile", "docker/requirements.lock", "docker/requirements-gpu.lock",
            "docker/check_image.py", "tuning/sft_trainer.py",
            "configs/accelerate/fsdp.yaml"} <= names  # fmt: skip
    assert images.digest(images.RECIPES["cpu"]) != images.digest(images.RECIPES["gpu"])


HOLD = """
import sys, time
from tuning.harness import images
with images._one_build_at_a_time(lambda m: print(m, flush=True)):
    print("in", time.time(), flush=True)
    time.sleep(float(sys.argv[1]))
    print("out", time.time(), flush=True)
"""


def test_two_builds_never_stage_at_once():
    first = subprocess.Popen([sys.executable, "-c", HOLD, "2"], cwd=ROOT, stdout=subprocess.PIPE,
                             text=True)  # fmt: skip
    assert first.stdout.readline().startswith("in ")
    second = subprocess.run([sys.executable, "-c", HOLD, "0"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    out_first = float(first.stdout.read().split()[1])
    first.wait()
    lines = second.stdout.splitlines()
    assert lines[0] == "image: another image build is running here; waiting for it"
    assert float(lines[1].split()[1]) >= out_first  # it entered only once the first had left
