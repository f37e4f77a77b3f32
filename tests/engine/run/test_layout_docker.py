"""The engine's Compose reads every checked-in Compose file (the layout model and its rendering,
checked statically: unit/run/test_layout.py)."""

from __future__ import annotations

import subprocess

import pytest

from tuning.harness.backends import engine
from tuning.harness.commands import examples


@pytest.mark.docker
def test_compose_accepts_every_checked_in_file():
    for path in sorted(examples.DIR.glob("*.yaml")):
        out = subprocess.run(
            [*engine.compose_cmd(), "-f", str(path), "config", "-q"], capture_output=True, text=True
        )
        assert out.returncode == 0, f"{path}: {out.stderr}"
