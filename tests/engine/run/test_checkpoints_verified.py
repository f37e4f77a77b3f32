"""Checkpoints verified, not only present (issue 30, item 6), on the engine: a run's newest
checkpoint with every file there but its weights and optimizer cut short (a full disk, a copy
interrupted). Before, `RESUME_FROM` named it ("checkpoint-20, saved by 2 rank(s)") and both
ranks died reading it. Now it is set aside like a torn one, and the run resumes from the one
before, for our trainer and fms, in both layouts. The same for a DCP checkpoint (FSDP's
SHARDED_STATE_DICT) with one shard cut short beside its whole `.metadata` (issue 40, item 4)."""

from __future__ import annotations

import json

import pytest

from support.engine import leftovers
from support.harness import harness
from support.paths import ROOT
from tuning.container.rank import torn

LAYOUTS = ("single", "per-rank")
pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module", params=["harness", "fms"])
def cut_run(request, harness_image, tmp_path_factory):
    """One run of 20 steps (checkpoints 10 and 20) per trainer, then checkpoint-20's weights
    and optimizer cut to 60 %: every file present, those short (FSDP on CPU ranks saves
    model.safetensors, pytorch_model_fsdp.bin and optimizer.bin)."""
    trainer, runs = request.param, tmp_path_factory.mktemp(f"cut-{request.param}")
    if trainer == "fms":
        built = harness("image", "--trainer", "fms", runs=runs, timeout=1800)
        assert built.returncode == 0, built.stdout + built.stderr
    out = harness(
        "up",
        "--trainer",
        trainer,
        "--gpus",
        "0",
        "--steps",
        "20",
        "--run-id",
        "base",
        runs=runs,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    ckpt = runs / "base/output/checkpoint-20"
    cut = [p for g in ("model*.safetensors", "pytorch_model*", "optimizer*") for p in ckpt.glob(g)]
    assert {p.name for p in cut} >= {"model.safetensors", "optimizer.bin"}, sorted(cut)
    for path in cut:
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * 0.6)])
    assert torn.missing(ckpt).startswith("model.safetensors is cut short")
    return trainer, runs


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_cut_newest_checkpoint_is_set_aside_and_the_run_resumes_before_it(cut_run, layout):
    trainer, runs = cut_run
    run_id = f"resume-{layout}"
    out = harness(
        "up",
        "--trainer",
        trainer,
        "--gpus",
        "0",
        "--layout",
        layout,
        "--steps",
        "24",
        "--resume-from",
        "base",
        "--run-id",
        run_id,
        runs=runs,
        timeout=600,
    )
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert (
        "harness: checkpoint-20 of run base is incomplete (model.safetensors is cut short: " in said
        and "resuming from run base (succeeded): checkpoint-10" in said
    )
    summary = json.loads((runs / run_id / "summary.json").read_text())
    assert summary["status"] == "succeeded" and leftovers(run_id) == []
    (moved,) = summary["torn_checkpoints"]
    assert moved.startswith("torn-checkpoint-20-")
    assert summary["losses"][0][0] == 11, summary["losses"][:3]  # from checkpoint-10
    assert summary["losses"][-1][0] == 24
    # the earlier run's files stay as they were: its cut checkpoint is still there, by name
    assert (runs / "base/output/checkpoint-20").is_dir()


def up_sharded(runs, *args: str):
    """`make up` with fsdp-cpu.yaml saving SHARDED_STATE_DICT: each checkpoint's weights and
    optimizer are DCP folders (a .distcp shard per rank and a .metadata)."""
    config = runs / "fsdp-sharded.yaml"
    fixture = (ROOT / "configs/accelerate/fsdp-cpu.yaml").read_text()
    config.write_text(fixture.replace("_type: FULL_STATE_DICT", "_type: SHARDED_STATE_DICT"))
    return harness("up", "--gpus", "0", "--config", str(config), *args, runs=runs, timeout=600)


@pytest.fixture(scope="module")
def cut_dcp_run(harness_image, tmp_path_factory):
    """20 steps, then one shard of checkpoint-20's weights cut to 10 bytes: every file there,
    the .metadata whole."""
    runs = tmp_path_factory.mktemp("cut-dcp")
    out = up_sharded(runs, "--steps", "20", "--run-id", "base")
    assert out.returncode == 0, out.stdout + out.stderr
    dcp = runs / "base/output/checkpoint-20/pytorch_model_fsdp_0"
    assert sorted(p.name for p in dcp.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert torn.missing(dcp.parent) is None
    shard = dcp / "__1_0.distcp"
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[:10])
    why = f"{dcp.name} has {shard.name} cut short: 10 bytes where its .metadata names {size}"
    assert torn.missing(dcp.parent) == why
    return runs, why


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_cut_dcp_shard_is_set_aside_and_the_run_resumes_before_it(cut_dcp_run, layout):
    runs, why = cut_dcp_run
    run_id = f"resume-dcp-{layout}"
    out = up_sharded(
        runs, "--layout", layout, "--steps", "24", "--resume-from", "base", "--run-id", run_id
    )
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert f"harness: checkpoint-20 of run base is incomplete ({why})" in said
    assert "resuming from run base (succeeded): checkpoint-10" in said
    summary = json.loads((runs / run_id / "summary.json").read_text())
    assert summary["status"] == "succeeded" and leftovers(run_id) == []
    (moved,) = summary["torn_checkpoints"]
    assert moved.startswith("torn-checkpoint-20-")
    assert summary["losses"][0][0] == 11 and summary["losses"][-1][0] == 24
    assert torn.missing(runs / run_id / "output/checkpoint-20") is None  # saved again, whole
