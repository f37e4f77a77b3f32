"""The late-master fault (faults/kinds/late_master.py): rank 0's node starts LATE s
after the others.

Without an engine: what a waiting node's log says (lines as torch 2.13 writes them, taken from
a run), the signature of the rendezvous timeout, fault.md's lines, and the refusal in
LAYOUT=single (the runs on the engine: engine/faults/test_fault_late_docker.py)."""

from __future__ import annotations

import json

from support.harness import harness
from tuning.harness.faults import record
from tuning.harness.faults.fault_json import FaultRecord
from tuning.harness.faults.kinds import late_master
from tuning.harness.faults.kinds.late_master import Late

# rank1's log from a per-rank run with LATE=40, RDZV_TIMEOUT=8 (torch 2.13, Docker's DNS)
WAITED = """\
[W1204 02:00:45.528099193 socket.cpp:764] [c10d] The IPv6 network addresses of (rank0, 29500) \
cannot be retrieved (gai error: -3 - Temporary failure in name resolution).
[E1204 02:00:45.528156611 socket.cpp:1028] [c10d] The client socket has timed out after 8000ms \
while trying to connect to (rank0, 29500).
[E1204 02:00:45.528487590 TCPStore.cpp:328] [c10d] TCP client failed to connect/validate to \
host rank0:29500 - timed out (try=0, timeout=8000ms): The client socket has timed out after \
8000ms while trying to connect to (rank0, 29500).
torch.distributed.DistNetworkError: The client socket has timed out after 8000ms while trying \
to connect to (rank0, 29500).
"""
RETRIED = (
    "[W1204 01:58:08.901256008 TCPStore.cpp:340] [c10d] TCP client failed to "
    "connect/validate to host rank0:29500 - retrying (try=0, timeout=3000ms, "
    "delay=3178ms): The client socket has timed out after 3000ms"
)


def test_the_rendezvous_timeout_is_named():
    last = WAITED.splitlines()[-1]
    assert record.signature(last) == "rendezvous timeout"
    assert record.signature(WAITED) == "rendezvous timeout"


def test_what_the_waiting_nodes_saw_is_counted():
    late = Late("rank0", 40)
    late.seen = [(101.0, "name not resolved (Temporary failure in name resolution)")]
    facts = late_master.facts(late, 100.0, {"rank0": "", "rank1": WAITED + RETRIED}, {}, 135.16)
    assert facts == {
        "late_s": 40,
        "master_started_t": None,
        "first_step_t": None,
        "job_end_t": 35.16,
        "peers_saw": {
            "rank1": {
                "name not resolved": 1,
                "connection refused": 0,
                "connect retries": 1,
                "connect timeouts": 1,
                "first_resolve_error": "cannot be retrieved (gai error: -3 - Temporary failure in "
                "name resolution)",
            }
        },
        "waiting_node_saw": [
            {"t": 1.0, "saw": "name not resolved (Temporary failure in name resolution)"}
        ],
    }
    rec = FaultRecord.from_json({"late": facts, "rdzv_timeout_s": 8})
    assert late_master.lines(rec) == [
        "- late master: 40 s late (RDZV_TIMEOUT=8 s); rank0 never started: the other nodes had "
        "given up; the job ended at t=35.16 s without a step",
        "- the other nodes' logs: rank1: 1 name not resolved, 1 connect retries, 1 connect "
        "timeouts",
        "- a waiting node saw: name not resolved (Temporary failure in name resolution) (t=1.0 s)",
    ]


def test_single_is_refused_with_the_reason(tmp_path):
    out = harness("fault", "--fault", "late-master", "--layout", "single", runs=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    rec = json.loads((tmp_path / "latest" / "fault.json").read_text())
    assert rec["status"] == "not applicable" and rec["reason"] == late_master.SINGLE
    assert rec["rank"] == 0
    assert f"late-master (single): not applicable: {late_master.SINGLE}" in out.stdout
