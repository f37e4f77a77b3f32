"""GPU boxes, host side, on a box without a GPU: which GPUs a run takes, a broken driver, MIG,
the driver check per image, and what is recorded. `nvidia-smi` is a stand-in (gpu_standin.py);
dry runs start nothing, so no Docker."""

from __future__ import annotations

import pytest

from support import gpu_standin
from support.gpu_standin import H100, device_ids, dry_up, harness, uuid

# --- Which GPUs ---------------------------------------------------------------------------


def test_cuda_visible_devices_picks_the_gpus(smi, tmp_path):
    doc, text = dry_up(
        tmp_path, "--gpus", "4", "--layout", "per-rank", CUDA_VISIBLE_DEVICES="4,5,6,7"
    )
    assert [device_ids(s) for s in doc["services"].values()] == [["4"], ["5"], ["6"], ["7"]]
    assert f"# gpus: 4 {uuid(4)} ({H100}), 5 {uuid(5)}" in text and "driver 580.95.05" in text


def test_nvidia_visible_devices_by_uuid(smi, tmp_path):
    doc, _ = dry_up(tmp_path, "--gpus", "2", NVIDIA_VISIBLE_DEVICES=f"{uuid(6)},{uuid(3)}")
    assert device_ids(doc["services"]["trainer"]) == ["3", "6"]


@pytest.mark.parametrize(
    "name, value",
    [
        ("NVIDIA_VISIBLE_DEVICES", "none"),
        ("NVIDIA_VISIBLE_DEVICES", "void"),
        ("CUDA_VISIBLE_DEVICES", ""),
    ],
)
def test_no_visible_gpu_means_cpu_ranks_by_default_and_refuses_gpus(smi, tmp_path, name, value):
    doc, _ = dry_up(tmp_path, **{name: value})
    assert doc["services"]["trainer"]["environment"]["HARNESS_DEVICE"] == "cpu"
    out = harness(tmp_path, "up", "--dry-run", "--gpus", "1", **{name: value})
    assert out.returncode == 2 and f"GPUS=1 but this host shows 0 GPU(s) ({name}=" in out.stderr


def test_unknown_visible_ids_are_named(smi, tmp_path):
    out = harness(tmp_path, "up", "--dry-run", "--gpus", "1", CUDA_VISIBLE_DEVICES="3,9,GPU-x")
    assert out.returncode == 2
    assert "CUDA_VISIBLE_DEVICES=3,9,GPU-x: no GPU 9, GPU-x on this host" in out.stderr


@pytest.fixture
def other_run_holds_0_to_3(smi, tmp_path):
    with gpu_standin.other_run_holds(tmp_path, "0,1,2,3") as child:
        yield child


def test_gpus_taken_are_the_free_ones(other_run_holds_0_to_3, tmp_path):
    doc, _ = dry_up(tmp_path, "--gpus", "4")
    assert device_ids(doc["services"]["trainer"]) == ["4", "5", "6", "7"]


def test_too_few_free_gpus_names_the_holder(other_run_holds_0_to_3, tmp_path):
    out = harness(tmp_path, "up", "--dry-run", "--gpus", "5")
    assert out.returncode == 2
    pid = other_run_holds_0_to_3.pid
    assert "GPUS=5 but only 4 of the 8 visible GPU(s) are free" in out.stderr
    assert f"GPU 0 by run other-run (harness pid {pid})" in out.stderr
    assert "GPU 3 by run other-run" in out.stderr and "use GPUS=4" in out.stderr


# --- A broken driver, MIG, an old driver ----------------------------------------------------


def test_failing_nvidia_smi_is_an_error_not_cpu_ranks(smi, tmp_path):
    for args in ((), ("--gpus", "2")):
        out = harness(tmp_path, "up", "--dry-run", *args, FAKE_SMI_FAIL="1")
        assert out.returncode == 2 and "services:" not in out.stdout
        assert "failed (exit 18): Failed to initialize NVML: Driver/library version mismatch" in (
            out.stderr
        )
        assert "reboot, or reinstall the driver" in out.stderr and "GPUS=0" in out.stderr
    # GPUS=0 asks nothing of the driver: CPU ranks, as the message offers
    doc, _ = dry_up(tmp_path, "--gpus", "0", FAKE_SMI_FAIL="1")
    assert doc["services"]["trainer"]["environment"]["HARNESS_DEVICE"] == "cpu"


def test_mig_gpu_is_refused(smi, tmp_path):
    out = harness(tmp_path, "up", "--dry-run", "--gpus", "2", FAKE_SMI_GPUS="4", FAKE_SMI_MIG="1")
    assert out.returncode == 2
    assert f"GPU 1 ({H100}) has MIG enabled; MIG instances are not supported yet" in out.stderr
    assert "CUDA_VISIBLE_DEVICES=0,2,3" in out.stderr and "-mig 0" in out.stderr
    doc, _ = dry_up(
        tmp_path, "--gpus", "2", FAKE_SMI_GPUS="4", FAKE_SMI_MIG="1", CUDA_VISIBLE_DEVICES="2,3"
    )
    assert device_ids(doc["services"]["trainer"]) == ["2", "3"]


def test_old_driver_refused_for_cuda13_and_the_cuda12_image_takes_it(smi, tmp_path):
    out = harness(tmp_path, "up", "--dry-run", "--gpus", "2", FAKE_SMI_DRIVER="535.104.05")
    assert out.returncode == 2
    for want in (
        "the NVIDIA driver here is 535.104.05",
        "image tuning-harness:gpu runs CUDA 13.0, which needs driver 580.65.06 or newer (R580)",
        "tuning-harness:gpu-cu128",
        "`make image DEVICE=gpu CUDA=12.8`",
        "`make up CUDA=12.8 ...`",
    ):
        assert want in out.stderr
    doc, _ = dry_up(tmp_path, "--gpus", "2", "--cuda", "12.8", FAKE_SMI_DRIVER="535.104.05")
    assert doc["services"]["trainer"]["image"] == "tuning-harness:gpu-cu128"
    doc, _ = dry_up(
        tmp_path, "--gpus", "2", "--image", "tuning-harness:gpu-cu128", FAKE_SMI_DRIVER="535.104.05"
    )
    assert doc["services"]["trainer"]["image"] == "tuning-harness:gpu-cu128"


def test_driver_470_refused_for_both_images(smi, tmp_path):
    for cuda, image, floor in (
        ("13.0", "tuning-harness:gpu", "580.65.06"),
        ("12.8", "tuning-harness:gpu-cu128", "525.60.13"),
    ):
        out = harness(
            tmp_path, "up", "--dry-run", "--gpus", "1", "--cuda", cuda, FAKE_SMI_DRIVER="470.256.02"
        )
        assert out.returncode == 2
        assert f"driver here is 470.256.02; image {image} runs CUDA {cuda}" in out.stderr
        assert f"Fix: upgrade the NVIDIA driver to {floor} or newer" in out.stderr
        assert "CUDA=12.8`" not in out.stderr  # no image of ours runs on 470


def test_blackwell_needs_r570_on_the_cuda12_image_and_volta_is_refused(smi, tmp_path):
    out = harness(
        tmp_path,
        "up",
        "--dry-run",
        "--gpus",
        "1",
        "--cuda",
        "12.8",
        FAKE_SMI_DRIVER="550.54.15",
        FAKE_SMI_CC="10.0",
    )
    assert out.returncode == 2 and "needs driver 570 or newer (R570)" in out.stderr
    out = harness(
        tmp_path,
        "up",
        "--dry-run",
        "--gpus",
        "1",
        FAKE_SMI_CC="7.0",
        FAKE_SMI_NAME="Tesla V100-SXM2-32GB",
    )
    assert out.returncode == 2
    assert "GPU 0 (Tesla V100-SXM2-32GB, compute 7.0): image tuning-harness:gpu" in out.stderr


def test_gpus_check_driver_command(smi, tmp_path):
    ok = harness(tmp_path, "gpus", "--check-driver")
    assert ok.returncode == 0, ok.stderr
    assert f"  7 {uuid(7)} {H100} compute 9.0" in ok.stdout
    assert "gpus: driver 580.95.05 runs tuning-harness:gpu (CUDA 13.0)" in ok.stdout
    old = harness(tmp_path, "gpus", "--check-driver", FAKE_SMI_DRIVER="535.104.05")
    assert old.returncode == 2 and "needs driver 580.65.06 or newer" in old.stderr
    cu12 = harness(
        tmp_path, "gpus", "--check-driver", "--cuda", "12.8", FAKE_SMI_DRIVER="535.104.05"
    )
    assert cu12.returncode == 0 and "runs tuning-harness:gpu-cu128 (CUDA 12.8)" in cu12.stdout


def test_image_dry_run_refuses_an_old_driver_and_prints_the_cuda12_build(smi, tmp_path):
    old = harness(tmp_path, "image", "--device", "gpu", "--dry-run", FAKE_SMI_DRIVER="535.104.05")
    assert old.returncode == 2 and "CUDA 13.0, which needs driver 580.65.06" in old.stderr
    out = harness(
        tmp_path,
        "image",
        "--device",
        "gpu",
        "--cuda",
        "12.8",
        "--dry-run",
        FAKE_SMI_DRIVER="535.104.05",
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("# tuning-harness:gpu-cu128 (recipe gpu-cu128, CUDA 12.8)")
    build = next(x for x in lines if x.startswith("docker build") and "--network none" not in x)
    for arg in (
        "-t tuning-harness:gpu-cu128",
        "--build-arg DEVICE=gpu",
        "--build-arg GPU_LOCK=requirements-gpu-cu128.lock",
        "--build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128",
        "--build-arg BASE_IMAGE=python:3.11-slim-bookworm",
    ):
        assert arg in build
    wheels = next(x for x in lines if " pip download " in x)
    assert "--extra-index-url https://download.pytorch.org/whl/cu128" in wheels
    assert "docker/requirements-gpu-cu128.lock" in wheels
    assert any("--network none" in x and "BASE_IMAGE=harness-base:bookworm" in x for x in lines)


def test_summary_records_the_gpus_by_index_and_uuid(smi, monkeypatch, tmp_path):
    from tuning.harness import cli
    from tuning.harness.flags.run_flags import RunFlags
    from tuning.harness.layout import options

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    a = cli.parser().parse_args(["up", "--runs", str(tmp_path / "runs"), "--run-id", "t"])
    spec = options.spec_from(RunFlags.of(a))
    plan = spec.layout.topology.plan
    assert plan.ids == ("2", "5") and plan.image == "tuning-harness:gpu"
    assert spec.job["torch_dtype"] == "bfloat16"
    assert spec.accelerate_config.name == "fsdp.yaml"
    two, five = ({"index": i, "uuid": uuid(i), "name": H100} for i in (2, 5))
    assert spec.summary_extra["gpus"] == [two, five]
