"""The engine's tests: each needs a Docker engine with Compose v2 and the harness's images, and
is marked `docker` (by its own marker, and by this folder: `pytest -m "not docker"` deselects
every test here). Their fixtures: the images, built through the path `make up` takes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.paths import PYTHON, ROOT

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    # Runs before -m deselects (conftest hooks run ahead of pytest's own): a test in this
    # folder without its own `docker` marker is still a container test.
    for item in items:
        if HERE in Path(item.path).parents and not item.get_closest_marker("docker"):
            item.add_marker(pytest.mark.docker)


@pytest.fixture(scope="session")
def harness_image() -> str:
    """The harness image, built through the same path `make up` takes if it is missing."""
    out = subprocess.run(
        [PYTHON, "-m", "tuning.harness", "image"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, f"the harness image is not available:\n{out.stdout}{out.stderr}"
    return "tuning-harness:latest"


@pytest.fixture(scope="session")
def fms_image() -> str:
    """fms's image, built through the same path `make up TRAINER=fms` takes if missing."""
    out = subprocess.run(
        [PYTHON, "-m", "tuning.harness", "image", "--trainer", "fms"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, f"the fms image is not available:\n{out.stdout}{out.stderr}"
    return "tuning-harness-fms:latest"
