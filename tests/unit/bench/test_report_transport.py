"""The transport a bench reports: NCCL's channels read from its INFO log, and a probe run's
transport as bench_samples and the report see it."""

from __future__ import annotations

import json

from tuning.container.shared import transport
from tuning.harness.bench import report


def test_parse_nccl_transport():
    log = "\n".join(
        [
            "gpu0:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
            "gpu0:123:456 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC",
            "gpu0:123:457 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read",
            "rank0:10:20 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct",
            "rank0:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0",
            "rank1:11:21 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] [receive] via NET/Socket/0",
            "n1:7:9 [3] NCCL INFO Channel 02/0 : 11[3] -> 3[3] [receive] via NET/IB/0/GDRDMA",
            "rank0:10:20 [0] NCCL INFO Using network Socket",
            "rank0:10:20 [0] NCCL INFO NET/Socket : Using [0]eth0:172.18.0.2<0>",
            "rank0:10:20 [0] NCCL INFO Bootstrap: Using eth0 via the TCP store",  # not a channel
            "some unrelated line that goes via nothing",
        ]
    )
    found = ["P2P/IPC", "P2P/CUMEM", "SHM/direct", "NET/Socket", "NET/IB"]
    assert transport.parse_nccl_transport(log) == found
    assert transport.parse_nccl_transport("") == []


def test_the_bench_reads_ncclS_transport_from_the_probe_runs_logs(tmp_path):
    from tuning.harness.bench import samples

    run = tmp_path / "run"
    (run / "output").mkdir(parents=True)
    (run / "logs").mkdir()
    probe = {
        "backend": "nccl",
        "world_size": 2,
        "samples": [],
        "transport": [{"rank": 0, "interface": "eth0"}],
    }  # NCCL's bootstrap socket only
    (run / "output/probe.json").write_text(json.dumps(probe))
    (run / "logs/rank0.log").write_text(
        "rank0:10:20 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct\n"
    )
    (run / "logs/rank1.log").write_text(
        "rank0:11:21 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0\n"
    )
    sample = samples.probe_sample(run, {"run_id": "b-r1-per-rank-probe", "status": "ok"})
    assert sample["transport"] == ["nccl/SHM/direct", "nccl/NET/Socket"]
    # no channel lines (NCCL_DEBUG was not INFO): unknown, never the bootstrap socket's eth0
    for log in (run / "logs").iterdir():
        log.write_text("rank0:10:20 [0] NCCL INFO Bootstrap : Using eth0:172.18.0.2<0>\n")
    sample = samples.probe_sample(run, {"run_id": "b-r1-per-rank-probe", "status": "ok"})
    assert sample["transport"] == ["nccl/unknown"]
    rep = {"layouts": [{"name": "per-rank-shared", "repeats": [{**sample, "step_s": [[1.0]]}]}]}
    assert report.derive(rep)["layouts"]["per-rank-shared"]["transport"] == ["nccl/unknown"]
