"""Renders of every GPU shape: Compose single, per-rank isolated and shared, the PyTorchJob and
the checked-in examples (image, device_ids, HARNESS_DEVICE, NCCL settings, memlock, /dev/shm);
CPU layouts unchanged. The host's GPUs come from a stand-in nvidia-smi (gpu_standin.py)."""

from __future__ import annotations

import pytest
import yaml

from support.gpu_standin import device_ids, dry_up
from tuning.harness.backends import compose
from tuning.harness.commands import examples, kube
from tuning.harness.errors import HarnessError
from tuning.harness.layout.layout import Layout
from tuning.harness.layout.topology import Topology
from tuning.harness.machine import image_recipes
from tuning.harness.machine.devices import GpuPlan


def gpu_service_checks(svc: dict, image: str = "tuning-harness:gpu") -> None:
    assert svc["image"] == image and svc["environment"]["HARNESS_DEVICE"] == "gpu"
    assert svc["ulimits"] == {"memlock": -1}


def test_single_gpu_render_keeps_p2p():
    (svc,) = compose.render(
        Layout(
            run_id="t", topology=Topology("single", GpuPlan(2, "tuning-harness:gpu", ("3", "6")))
        )
    )["services"].values()
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
        layout = Layout(run_id="t", topology=Topology("per-rank", network=network))
        for svc in compose.render(layout)["services"].values():
            assert not any(k.startswith("NCCL_") for k in svc["environment"])
            assert "ulimits" not in svc and svc["image"] == "tuning-harness:latest"


def test_pytorchjob_pods_say_they_are_gpu_ranks():
    layout = kube.job_layout(4, 1, 2, name="tj", run_id="r1", run_dir="/tmp/r1")
    config_map, job = kube.render(layout, {"max_steps": 1}, "x: 1\n")
    for pod in kube.operator_pods(job):  # the rehearsal reads the env from the object
        assert pod.env["HARNESS_DEVICE"] == "gpu"
    pod = job.spec.pytorch_replica_specs["Worker"].template.spec
    ctr = pod.containers[0]
    assert ctr.image == "tuning-harness:gpu" and ctr.resources.limits["nvidia.com/gpu"] == "4"
    (dshm,) = [v.empty_dir for v in pod.volumes if v.name == "dshm"]
    assert (dshm.medium, dshm.size_limit) == ("Memory", "4Gi")  # NCCL's /dev/shm, 1 GiB a rank
    cpu = kube.job_layout(0, 2, 1, name="tj", run_id="r1", run_dir="/tmp/r1")
    _, job = kube.render(cpu, {"max_steps": 1}, "x: 1\n")
    assert kube.operator_pods(job)[0].env["HARNESS_DEVICE"] == "cpu"
    cu12 = kube.job_layout(1, 1, 1, cuda="12.8", name="tj", run_id="r1", run_dir="/tmp/r1")
    assert cu12.topology.plan.image == "tuning-harness:gpu-cu128"


def test_examples_run_the_gpu_image():
    for name, layout in examples.layouts().items():
        doc = yaml.safe_load((examples.DIR / name).read_text())
        for i, svc in enumerate(doc["services"].values()):
            gpu_service_checks(svc)
            assert svc["shm_size"] == "2gb"
            t = layout.topology
            want = [str(i)] if t.kind == "per-rank" else [str(g) for g in range(t.gpus)]
            assert device_ids(svc) == want
            assert (svc["environment"].get("NCCL_SOCKET_IFNAME") == "eth0") is (
                t.kind == "per-rank"
            )


def test_unknown_cuda_is_refused():
    with pytest.raises(
        HarnessError,
        match=r"CUDA=11.8: no GPU image is built for it; use one "
        r"of 12.8, 13.0",
    ):
        image_recipes.resolve("tuning-harness:latest", "gpu", "11.8")
