"""tuning.container.probe: pure helpers (fast), a wrong-sum run in-process (fast, world size 1), and
a real two-rank gloo run under `accelerate launch` (slow)."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from support.launch import free_port
from support.paths import ROOT
from tuning.container import probe
from tuning.container.shared import transport


def test_sizes_double_from_min_to_max():
    assert probe.sizes(1024, 8192) == [1024, 2048, 4096, 8192]
    assert probe.sizes(1024, 5000) == [1024, 2048, 4096]
    with pytest.raises(ValueError):
        probe.sizes(3, 1024)
    with pytest.raises(ValueError):
        probe.sizes(2048, 1024)


def test_bandwidths_follow_nccl_tests():
    alg, bus = probe.bandwidths(1_000_000_000, 0.5, 8)
    assert alg == pytest.approx(2.0)
    assert bus == pytest.approx(2.0 * 2 * 7 / 8)
    alg, bus = probe.bandwidths(4096, 1e-3, 2)
    assert bus == alg  # 2(n-1)/n == 1 for n = 2


def test_timed_iters_bounded_but_at_least_twenty():
    assert probe.timed_iters(1e-4, 20, 2.0) == 20
    assert probe.timed_iters(1e-4, 100, 2.0) == 100
    assert probe.timed_iters(0.0625, 100, 2.0) == 32  # 2 s / 0.0625 s
    assert probe.timed_iters(0.25, 20, 2.0) == 20  # over the budget, never below 20
    assert probe.timed_iters(5.0, 100, 2.0) == 20


def test_parse_proc_net_tcp_and_ip_addr():
    tcp = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
        "  timeout inode\n"
        "   2: 0100007F:D701 0100007F:D79C 01 00000000:00000000 00:00000000 00000000     0"
        "        0 15069 1 0000000059c5ec98 20 0 0 10 -1\n"
        "   3: 020011AC:7530 030011AC:9C40 0A 00000000:00000000 00:00000000 00000000     0"
        "        0 77 1 0000000059c5ec98 20 0 0 10 -1\n"
    )
    rows = transport.parse_proc_net_tcp(tcp)
    assert rows[0] == {
        "local_ip": "127.0.0.1",
        "local_port": 0xD701,
        "remote_ip": "127.0.0.1",
        "remote_port": 0xD79C,
        "state": "01",
        "inode": 15069,
    }
    assert rows[1]["local_ip"] == "172.17.0.2" and rows[1]["remote_port"] == 40000
    tcp6 = (
        "  sl  local_address                         remote_address                        st\n"
        "   0: 00000000000000000000000001000000:1F90 0000000000000000FFFF00000100007F:C350 01"
        " 00000000:00000000 00:00000000 00000000     0        0 99 1 0 20 0 0 10 -1\n"
    )
    r6 = transport.parse_proc_net_tcp(tcp6)[0]
    assert (r6["local_ip"], r6["remote_ip"], r6["inode"]) == ("::1", "127.0.0.1", 99)
    addrs = transport.parse_ip_addr(
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n"
        "4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\ valid_lft forever\n"
        "7: eth1@if8    inet6 fd00::2/64 scope global \\       valid_lft forever\n"
    )
    assert addrs == {"127.0.0.1": "lo", "192.0.2.2": "eth0", "fd00::2": "eth1"}


def test_tcp_connections_sees_own_loopback_connection():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as cli:
            acc, _ = srv.accept()
            with acc:
                conns = transport.tcp_connections(master_port=port)
                mine = f"127.0.0.1:{cli.getsockname()[1]}"
    by_local = {c["local"]: c for c in conns}
    assert by_local[mine]["remote"] == f"127.0.0.1:{port}"
    assert by_local[mine]["kind"] == "store" and by_local[mine]["loopback"]
    assert by_local[mine]["interface"] == "lo"


def test_wrong_sum_is_recorded_and_exits_nonzero(tmp_path, monkeypatch):
    """A collective that returns a wrong sum must give correct: false and exit status 1."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("HARNESS_DEVICE", "cpu")
    real = probe.dist.all_reduce

    def corrupting(t, *a, **kw):
        out = real(t, *a, **kw)
        if t.dtype == probe.torch.float32 and t.numel() >= 512:
            t[-1] += 1.0  # one element off, only from 2 KiB up
        return out

    monkeypatch.setattr(probe.dist, "all_reduce", corrupting)
    rc = probe.main(
        ["--out", str(tmp_path), "--max-bytes", "4096", "--warmup", "1", "--iters", "20"]
    )
    assert rc == 1
    doc = json.loads((tmp_path / "probe.json").read_text())
    assert doc["world_size"] == 1 and doc["correct"] is False
    assert [s["correct"] for s in doc["samples"]] == [True, False, False]


@pytest.mark.slow
def test_two_rank_gloo_probe_under_accelerate(tmp_path):
    out = tmp_path / "probe"
    accelerate = Path(sys.executable).with_name("accelerate")
    if not accelerate.exists():
        accelerate = ROOT / ".venv" / "bin" / "accelerate"
    port = free_port()
    env = {
        **os.environ,
        "ACCELERATE_USE_CPU": "1",
        "HARNESS_DEVICE": "cpu",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    # fmt: off
    cmd = [
        str(accelerate), "launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--machine_rank", "0",
        "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
        "--rdzv_backend", "static", "--same_network",
        "-m", "tuning.container.probe", "--out", str(out), "--max-bytes", "1048576",
    ]
    # fmt: on
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads((out / "probe.json").read_text())

    assert doc["world_size"] == 2  # a silent single-process run would say 1
    assert (doc["backend"], doc["device"]) == ("gloo", "cpu")
    assert doc["correct"] is True
    assert [s["bytes"] for s in doc["samples"]] == probe.sizes(1024, 1048576)
    for s in doc["samples"]:
        assert s["correct"] is True
        assert s["iters"] >= 20 and s["time_s"] > 0
        assert s["algbw_GBps"] == pytest.approx(s["bytes"] / s["time_s"] / 1e9, rel=1e-12)
        assert s["busbw_GBps"] == pytest.approx(s["algbw_GBps"], rel=1e-12)  # 2(n-1)/n = 1

    tr = {t["rank"]: t for t in doc["transport"]}
    assert sorted(tr) == [0, 1]
    for t in tr.values():
        coll = [c for c in t["connections"] if c["kind"] == "collective"]
        assert coll, t
        assert t["loopback"] is True and t["interface"] == "lo", t
        for c in coll:
            for ep in (c["local"], c["remote"]):
                assert ipaddress.ip_address(ep.rsplit(":", 1)[0].strip("[]")).is_loopback, c
        assert t["store"] and all(s.endswith(f":{port}") for s in t["store"])
    # the two ranks see the two ends of the same gloo connection(s)
    ends0 = {(c["local"], c["remote"]) for c in tr[0]["connections"] if c["kind"] == "collective"}
    ends1 = {(c["remote"], c["local"]) for c in tr[1]["connections"] if c["kind"] == "collective"}
    assert ends0 & ends1
