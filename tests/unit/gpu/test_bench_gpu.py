"""The bench's GPU path, read without a GPU: what every layout's probe run would start on a
2-GPU box (the host's GPUs from the stand-in nvidia-smi, gpu_standin.py): NCCL's settings and
namespaces per layout, /dev/shm and IPC as NCCL needs them, each rank's cores, the launcher's
NCCL_DEBUG=INFO (the log the report reads the transport from), and how the report tells the
transports apart."""

from __future__ import annotations

import pytest

from support.gpu_standin import device_ids
from tuning.container import launch
from tuning.container.shared import affinity
from tuning.harness.backends import compose
from tuning.harness.bench import plan
from tuning.harness.bench.report_goals import path
from tuning.harness.cli import parser
from tuning.harness.flags.run_flags import RunFlags
from tuning.harness.run import render


@pytest.fixture
def probe_spec(smi, tmp_path, monkeypatch):
    monkeypatch.setattr(plan.os, "sched_getaffinity", lambda _pid: set(range(16)))  # 16 cores
    a = parser().parse_args(["bench", "--gpus", "2", "--run-id", "g", "--runs", str(tmp_path)])

    def spec(name: str):
        return plan.spec(
            a, RunFlags.of(a), tmp_path / "g", f"g-r1-{name}-probe", name, probe=True, threads=8
        )

    return spec


def test_single_keeps_both_gpus_in_one_namespace_for_p2p(probe_spec):
    (svc,) = compose.render(probe_spec("single").layout)["services"].values()
    assert device_ids(svc) == ["0", "1"] and svc["shm_size"] == "2gb"
    assert svc["ulimits"] == {"memlock": -1} and svc["cpuset"] == affinity.show(range(16))
    env = svc["environment"]
    assert not any(k.startswith("NCCL_") for k in env)  # P2P (NVLink / PCIe) as NCCL picks
    assert env[affinity.VAR] == "0,1,2,3,4,5,6,7;8,9,10,11,12,13,14,15"
    assert env["HARNESS_ENTRY"] == "tuning.container.probe" and env["OMP_NUM_THREADS"] == "8"
    # NCCL's busbw still climbs below 256 MiB: the GPU probe goes there (CPU ranks: 64 MiB)
    assert "--max-bytes 268435456 " in env["HARNESS_ENTRY_ARGS"]


def test_per_rank_isolated_has_its_own_namespaces_and_talks_over_eth0(probe_spec):
    rank0, rank1 = compose.render(probe_spec("per-rank-isolated").layout)["services"].values()
    for i, svc in enumerate((rank0, rank1)):
        assert device_ids(svc) == [str(i)] and svc["shm_size"] == "2gb"
        assert "ipc" not in svc and "network_mode" not in svc  # Docker's private IPC, own net
        assert svc["environment"]["NCCL_SOCKET_IFNAME"] == "eth0"  # NET/Socket over the bridge
        assert svc["cpuset"] == affinity.show(range(8 * i, 8 * i + 8))


def test_per_rank_shared_shares_ipc_and_shm_for_nccl_shm(probe_spec):
    rank0, rank1 = compose.render(probe_spec("per-rank-shared").layout)["services"].values()
    assert rank0["ipc"] == "shareable" and rank0["shm_size"] == "2gb"
    assert rank1["ipc"] == "service:rank0" and rank1["network_mode"] == "service:rank0"
    assert "shm_size" not in rank1  # rank 0's /dev/shm: SHM/direct between the containers
    for i, svc in enumerate((rank0, rank1)):
        # P2P with a GPU this container cannot see fails (NCCL src/transport/p2p.cc): SHM
        assert svc["environment"]["NCCL_P2P_DISABLE"] == "1"
        assert device_ids(svc) == [str(i)]
        assert svc["cpuset"] == affinity.show(range(8 * i, 8 * i + 8))


def test_every_gpu_probe_logs_nccl_transport_and_training_stays_quiet(probe_spec):
    for name in ("host", "single", "per-rank-isolated", "per-rank-shared"):
        s = probe_spec(name)
        for node, cmd in render.node_commands(s.layout, s.accelerate_config).items():
            assert cmd["env"]["NCCL_DEBUG"] == "INFO", (name, node)
            i = cmd["argv"].index("tuning.container.probe")
            assert cmd["argv"][i - 1 : i + 2] == ["-m", "tuning.container.probe", "--out"], (
                name,
                node,
            )
    argv, extra = launch.command({"HARNESS_DEVICE": "gpu", "PET_NPROC_PER_NODE": "2"}, [])
    assert "NCCL_DEBUG" not in extra  # a training run's log stays quiet


def test_the_report_tells_nccl_transports_apart_and_gloo_loopback_together():
    assert path(["nccl/P2P/CUMEM"]) == "nccl/P2P/CUMEM"
    assert path(["nccl/SHM/direct"]) != path(["nccl/P2P/CUMEM"])
    assert path(["nccl/NET/Socket"]) == "nccl/NET/Socket"
    assert path(["gloo/lo"]) == path(["gloo/eth0 via lo"]) == "loopback"
    assert path(["gloo/eth0"]) == "gloo/eth0"  # over the bridge
    assert path([]) == "unknown"
