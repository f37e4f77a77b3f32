"""GPU boxes, host side, on a box without a GPU: which GPUs a run takes, the driver check, MIG,
a broken driver, and the render of every GPU shape.

`nvidia-smi` here is a stand-in: a script put first on PATH that answers the two command lines
the harness runs (`--query-gpu=...` and `-L`) in the real tool's output format, for GPUs
described by FAKE_SMI_* variables; FAKE_SMI_FAIL=1 answers as nvidia-smi does on a
driver/library mismatch (NVML's message, exit 18). Dry runs start nothing, so no Docker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tuning.harness import compose, devices, examples, images, kube
from tuning.harness.engine import HarnessError
from tuning.harness.layout import Layout

ROOT = Path(__file__).resolve().parents[1]
H100 = "NVIDIA H100 80GB HBM3"

NVIDIA_SMI = textwrap.dedent(f"""\
    #!{sys.executable}
    import os, sys
    env = os.environ.get
    if env("FAKE_SMI_FAIL"):
        print("Failed to initialize NVML: Driver/library version mismatch")
        print("NVML library version: 580.95")
        sys.exit(18)
    n = int(env("FAKE_SMI_GPUS", "8"))
    mig = {{int(i) for i in env("FAKE_SMI_MIG", "").split(",") if i}}
    def uuid(i):
        return f"GPU-{{i:08x}}-1111-2222-3333-{{i:012x}}"
    args = sys.argv[1:]
    query = "--query-gpu=index,uuid,name,driver_version,compute_cap,mig.mode.current"
    if sorted(args) == sorted(["--format=csv,noheader", query]):
        for i in range(n):
            print(f"{{i}}, {{uuid(i)}}, {{env('FAKE_SMI_NAME', '{H100}')}}, "
                  f"{{env('FAKE_SMI_DRIVER', '580.95.05')}}, {{env('FAKE_SMI_CC', '9.0')}}, "
                  f"{{'Enabled' if i in mig else 'Disabled'}}")
    elif args == ["-L"]:
        for i in range(n):
            print(f"GPU {{i}}: {{env('FAKE_SMI_NAME', '{H100}')}} (UUID: {{uuid(i)}})")
            if i in mig:
                mig_uuid = f"MIG-{{i:08x}}-aaaa-bbbb-cccc-000000000000"
                print(f"  MIG 1g.10gb     Device  0: (UUID: {{mig_uuid}})")
    else:
        print(f"stand-in nvidia-smi: unknown arguments {{args}}", file=sys.stderr)
        sys.exit(2)
""")


def uuid(i: int) -> str:
    return f"GPU-{i:08x}-1111-2222-3333-{i:012x}"


@pytest.fixture
def smi(tmp_path, monkeypatch):
    """The stand-in nvidia-smi first on PATH (for this process and its children); GPU locks
    in a directory of the test's own. Returns the environment for subprocesses."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HARNESS_GPU_LOCKS", str(tmp_path / "locks"))
    monkeypatch.setattr(devices.gpu_locks, "LOCK_DIR", tmp_path / "locks")
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    return os.environ


def harness(tmp_path, *args, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuning.harness", *args, "--runs", str(tmp_path / "runs")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )  # fmt: skip


def dry_up(tmp_path, *args, **env) -> tuple[dict, str]:
    """`up --dry-run`: the Compose file it prints (its comment lines are YAML comments)."""
    out = harness(tmp_path, "up", "--dry-run", "--run-id", "t", *args, **env)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout), out.stdout


def device_ids(svc: dict) -> list[str]:
    (dev,) = svc["deploy"]["resources"]["reservations"]["devices"]
    return dev["device_ids"]


# --- Which GPUs ---------------------------------------------------------------------------


def test_cuda_visible_devices_picks_the_gpus(smi, tmp_path):
    doc, text = dry_up(tmp_path, "--gpus", "4", "--layout", "per-rank",
                       CUDA_VISIBLE_DEVICES="4,5,6,7")  # fmt: skip
    assert [device_ids(s) for s in doc["services"].values()] == [["4"], ["5"], ["6"], ["7"]]
    assert f"# gpus: 4 {uuid(4)} ({H100}), 5 {uuid(5)}" in text and "driver 580.95.05" in text


def test_nvidia_visible_devices_by_uuid(smi, tmp_path):
    doc, _ = dry_up(tmp_path, "--gpus", "2", NVIDIA_VISIBLE_DEVICES=f"{uuid(6)},{uuid(3)}")
    assert device_ids(doc["services"]["trainer"]) == ["3", "6"]


@pytest.mark.parametrize("name, value", [("NVIDIA_VISIBLE_DEVICES", "none"),
                                         ("NVIDIA_VISIBLE_DEVICES", "void"),
                                         ("CUDA_VISIBLE_DEVICES", "")])  # fmt: skip
def test_no_visible_gpu_means_cpu_ranks_by_default_and_refuses_gpus(smi, tmp_path, name, value):
    doc, _ = dry_up(tmp_path, **{name: value})
    assert doc["services"]["trainer"]["environment"]["HARNESS_DEVICE"] == "cpu"
    out = harness(tmp_path, "up", "--dry-run", "--gpus", "1", **{name: value})
    assert out.returncode == 2 and f"GPUS=1 but this host shows 0 GPU(s) ({name}=" in out.stderr


def test_unknown_visible_ids_are_named(smi, tmp_path):
    out = harness(tmp_path, "up", "--dry-run", "--gpus", "1", CUDA_VISIBLE_DEVICES="3,9,GPU-x")
    assert out.returncode == 2
    assert "CUDA_VISIBLE_DEVICES=3,9,GPU-x: no GPU 9, GPU-x on this host" in out.stderr


HOLD = """
import sys, time
from pathlib import Path
from tuning.harness import gpu_locks
held = gpu_locks.take(sys.argv[2].split(","), "other-run", Path(sys.argv[1]))
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def other_run_holds_0_to_3(smi, tmp_path):
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "locks"), "0,1,2,3"],
                             cwd=ROOT, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert child.stdout.readline() == "held\n"
    yield child
    child.kill()
    child.wait()


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
    doc, _ = dry_up(tmp_path, "--gpus", "2", FAKE_SMI_GPUS="4", FAKE_SMI_MIG="1",
                    CUDA_VISIBLE_DEVICES="2,3")  # fmt: skip
    assert device_ids(doc["services"]["trainer"]) == ["2", "3"]


def test_old_driver_refused_for_cuda13_and_the_cuda12_image_takes_it(smi, tmp_path):
    out = harness(tmp_path, "up", "--dry-run", "--gpus", "2", FAKE_SMI_DRIVER="535.104.05")
    assert out.returncode == 2
    for want in ("the NVIDIA driver here is 535.104.05", "image tuning-harness:gpu runs CUDA "
                 "13.0, which needs driver 580.65.06 or newer (R580)", "tuning-harness:gpu-cu128",
                 "`make image DEVICE=gpu CUDA=12.8`", "`make up CUDA=12.8 ...`"):  # fmt: skip
        assert want in out.stderr
    doc, _ = dry_up(tmp_path, "--gpus", "2", "--cuda", "12.8", FAKE_SMI_DRIVER="535.104.05")
    assert doc["services"]["trainer"]["image"] == "tuning-harness:gpu-cu128"
    doc, _ = dry_up(tmp_path, "--gpus", "2", "--image", "tuning-harness:gpu-cu128",
                    FAKE_SMI_DRIVER="535.104.05")  # fmt: skip
    assert doc["services"]["trainer"]["image"] == "tuning-harness:gpu-cu128"


def test_driver_470_refused_for_both_images(smi, tmp_path):
    for cuda, image, floor in (("13.0", "tuning-harness:gpu", "580.65.06"),
                               ("12.8", "tuning-harness:gpu-cu128", "525.60.13")):  # fmt: skip
        out = harness(tmp_path, "up", "--dry-run", "--gpus", "1", "--cuda", cuda,
                      FAKE_SMI_DRIVER="470.256.02")  # fmt: skip
        assert out.returncode == 2
        assert f"driver here is 470.256.02; image {image} runs CUDA {cuda}" in out.stderr
        assert f"Fix: upgrade the NVIDIA driver to {floor} or newer" in out.stderr
        assert "CUDA=12.8`" not in out.stderr  # no image of ours runs on 470


def test_blackwell_needs_r570_on_the_cuda12_image_and_volta_is_refused(smi, tmp_path):
    out = harness(tmp_path, "up", "--dry-run", "--gpus", "1", "--cuda", "12.8",
                  FAKE_SMI_DRIVER="550.54.15", FAKE_SMI_CC="10.0")  # fmt: skip
    assert out.returncode == 2 and "needs driver 570 or newer (R570)" in out.stderr
    out = harness(tmp_path, "up", "--dry-run", "--gpus", "1", FAKE_SMI_CC="7.0",
                  FAKE_SMI_NAME="Tesla V100-SXM2-32GB")  # fmt: skip
    assert out.returncode == 2
    assert "GPU 0 (Tesla V100-SXM2-32GB, compute 7.0): image tuning-harness:gpu" in out.stderr


def test_gpus_check_driver_command(smi, tmp_path):
    ok = harness(tmp_path, "gpus", "--check-driver")
    assert ok.returncode == 0, ok.stderr
    assert f"  7 {uuid(7)} {H100} compute 9.0" in ok.stdout
    assert "gpus: driver 580.95.05 runs tuning-harness:gpu (CUDA 13.0)" in ok.stdout
    old = harness(tmp_path, "gpus", "--check-driver", FAKE_SMI_DRIVER="535.104.05")
    assert old.returncode == 2 and "needs driver 580.65.06 or newer" in old.stderr
    cu12 = harness(tmp_path, "gpus", "--check-driver", "--cuda", "12.8",
                   FAKE_SMI_DRIVER="535.104.05")  # fmt: skip
    assert cu12.returncode == 0 and "runs tuning-harness:gpu-cu128 (CUDA 12.8)" in cu12.stdout


def test_image_dry_run_refuses_an_old_driver_and_prints_the_cuda12_build(smi, tmp_path):
    old = harness(tmp_path, "image", "--device", "gpu", "--dry-run", FAKE_SMI_DRIVER="535.104.05")
    assert old.returncode == 2 and "CUDA 13.0, which needs driver 580.65.06" in old.stderr
    out = harness(tmp_path, "image", "--device", "gpu", "--cuda", "12.8", "--dry-run",
                  FAKE_SMI_DRIVER="535.104.05")  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("# tuning-harness:gpu-cu128 (recipe gpu-cu128, CUDA 12.8)")
    build = next(x for x in lines if x.startswith("docker build") and "--network none" not in x)
    for arg in ("-t tuning-harness:gpu-cu128", "--build-arg DEVICE=gpu",
                "--build-arg GPU_LOCK=requirements-gpu-cu128.lock",
                "--build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128",
                "--build-arg BASE_IMAGE=python:3.11-slim-bookworm"):  # fmt: skip
        assert arg in build
    wheels = next(x for x in lines if " pip download " in x)
    assert "--extra-index-url https://download.pytorch.org/whl/cu128" in wheels
    assert "docker/requirements-gpu-cu128.lock" in wheels
    assert any("--network none" in x and "BASE_IMAGE=harness-base:bookworm" in x for x in lines)


def test_summary_records_the_gpus_by_index_and_uuid(smi, monkeypatch, tmp_path):
    from tuning.harness import cli, options

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    a = cli.parser().parse_args(["up", "--runs", str(tmp_path / "runs"), "--run-id", "t"])
    spec = options.spec_from(a)
    assert spec.layout.gpu_ids == ("2", "5") and spec.layout.image == "tuning-harness:gpu"
    assert spec.job["torch_dtype"] == "bfloat16"
    assert spec.accelerate_config.name == "fsdp.yaml"
    two, five = ({"index": i, "uuid": uuid(i), "name": H100} for i in (2, 5))
    assert spec.summary_extra == {"gpus": [two, five]}


# --- Renders of every GPU shape ---------------------------------------------------------------


def gpu_service_checks(svc: dict, image: str = "tuning-harness:gpu") -> None:
    assert svc["image"] == image and svc["environment"]["HARNESS_DEVICE"] == "gpu"
    assert svc["ulimits"] == {"memlock": -1}


def test_single_gpu_render_keeps_p2p():
    (svc,) = compose.render(Layout(kind="single", gpus=2, gpu_ids=("3", "6"), run_id="t",
                                   image="tuning-harness:gpu"))["services"].values()  # fmt: skip
    gpu_service_checks(svc)
    assert device_ids(svc) == ["3", "6"] and svc["shm_size"] == "2gb"
    assert not any(k.startswith("NCCL_") for k in svc["environment"])


def test_per_rank_isolated_talks_over_eth0(smi, tmp_path):
    doc, _ = dry_up(tmp_path, "--gpus", "2", "--layout", "per-rank", CUDA_VISIBLE_DEVICES="1,2")
    for i, svc in enumerate(doc["services"].values()):
        gpu_service_checks(svc)
        assert device_ids(svc) == [str(i + 1)] and svc["shm_size"] == "2gb"
        assert svc["environment"]["NCCL_SOCKET_IFNAME"] == "eth0"
        assert "NCCL_P2P_DISABLE" not in svc["environment"]


def test_per_rank_shared_disables_p2p_and_shares_shm(smi, tmp_path):
    doc, _ = dry_up(tmp_path, "--gpus", "2", "--layout", "per-rank", "--network", "shared")
    rank0, rank1 = doc["services"].values()
    for svc in (rank0, rank1):
        gpu_service_checks(svc)
        assert svc["environment"]["NCCL_P2P_DISABLE"] == "1"
        assert "NCCL_SOCKET_IFNAME" not in svc["environment"]
    assert rank0["shm_size"] == "2gb" and rank0["ipc"] == "shareable"
    assert rank1["ipc"] == "service:rank0" and device_ids(rank1) == ["1"]


def test_cpu_layouts_get_no_nccl_settings():
    for network in ("isolated", "shared"):
        for svc in compose.render(Layout(kind="per-rank", network=network, run_id="t"))[
            "services"
        ].values():
            assert not any(k.startswith("NCCL_") for k in svc["environment"])
            assert "ulimits" not in svc and svc["image"] == "tuning-harness:latest"


def test_pytorchjob_pods_say_they_are_gpu_ranks():
    layout = kube.job_layout(4, 1, 2, name="tj", run_id="r1", run_dir="/tmp/r1")
    config_map, job = kube.render(layout, {"max_steps": 1}, "x: 1\n")
    for pod in kube.operator_pods(job):  # the rehearsal reads the env from the object
        assert pod.env["HARNESS_DEVICE"] == "gpu"
    pod = job.spec.pytorch_replica_specs["Worker"].template.spec
    ctr = pod.containers[0]
    assert ctr.image == "tuning-harness:gpu" and ctr.resources.limits == {"nvidia.com/gpu": "4"}
    (dshm,) = [v.empty_dir for v in pod.volumes if v.name == "dshm"]
    assert (dshm.medium, dshm.size_limit) == ("Memory", "2Gi")  # NCCL's /dev/shm
    cpu = kube.job_layout(0, 2, 1, name="tj", run_id="r1", run_dir="/tmp/r1")
    _, job = kube.render(cpu, {"max_steps": 1}, "x: 1\n")
    assert kube.operator_pods(job)[0].env["HARNESS_DEVICE"] == "cpu"
    cu12 = kube.job_layout(1, 1, 1, cuda="12.8", name="tj", run_id="r1", run_dir="/tmp/r1")
    assert cu12.image == "tuning-harness:gpu-cu128"


def test_examples_run_the_gpu_image():
    for name, layout in examples.layouts().items():
        doc = yaml.safe_load((examples.DIR / name).read_text())
        for i, svc in enumerate(doc["services"].values()):
            gpu_service_checks(svc)
            assert svc["shm_size"] == "2gb"
            want = [str(i)] if layout.kind == "per-rank" else [str(g) for g in range(layout.gpus)]
            assert device_ids(svc) == want
            assert (svc["environment"].get("NCCL_SOCKET_IFNAME") == "eth0") is (
                layout.kind == "per-rank"
            )


def test_unknown_cuda_is_refused():
    with pytest.raises(HarnessError, match=r"CUDA=11.8: no GPU image is built for it; use one "
                                           r"of 12.8, 13.0"):  # fmt: skip
        images.resolve("tuning-harness:latest", "gpu", "11.8")
