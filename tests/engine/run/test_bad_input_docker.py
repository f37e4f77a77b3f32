"""Mistakes only an engine can answer (test_bad_input.py holds the rest): GPUS on an engine
without the NVIDIA runtime, and a CONFIG key accelerate does not know; each ends with one clear
message, a non-zero exit and no run recorded as succeeded."""

from __future__ import annotations

import pytest

from support.harness import no_run_recorded, up
from support.paths import ROOT
from tuning.harness.backends import engine
from tuning.harness.errors import HarnessError
from tuning.harness.layout.layout import Layout
from tuning.harness.layout.topology import Topology
from tuning.harness.machine.devices import GpuPlan
from tuning.harness.machine.image_recipes import IMAGE
from tuning.harness.run import lifecycle


@pytest.mark.docker
def test_gpus_on_an_engine_without_the_nvidia_runtime():
    # GPUS>0 passes the host's GPU count on a GPU box; the engine check comes next. An
    # engine without the NVIDIA runtime must be refused, naming the fix; one with it (a GPU
    # box with the toolkit) has nothing to refuse.
    if engine.has_nvidia_runtime(engine.client()):
        pytest.skip("this engine has the NVIDIA runtime: there is no refusal to see here")
    with pytest.raises(HarnessError, match="no NVIDIA runtime; install the NVIDIA"):
        lifecycle.prepare(Layout(run_id="t", topology=Topology("single", GpuPlan(1, IMAGE))))


@pytest.mark.docker
def test_config_with_a_key_accelerate_does_not_know(harness_image, tmp_path):
    cfg = tmp_path / "acc.yaml"
    cfg.write_text((ROOT / "configs/accelerate/cpu.yaml").read_text() + "fsdp_turbo: true\n")
    out = up(tmp_path, "--gpus", "0", "--config", str(cfg))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "accelerate refuses it" in out.stderr and "fsdp_turbo" in out.stderr
    assert no_run_recorded(tmp_path / "runs")
