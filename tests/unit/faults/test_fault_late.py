"""The late-master fault (commands/fault/kinds/late_master.py): rank 0's node starts LATE s
after the others.

Quick tests need no engine: what a waiting node's log says (lines as torch 2.13 writes them,
taken from a run), the signature of the rendezvous timeout, fault.md's lines, and the refusal
in LAYOUT=single. On the engine, per-rank: LATE below RDZV_TIMEOUT recovers, above it fails.
"""

from __future__ import annotations

import json

import pytest

from support.engine import leftovers
from support.harness import harness
from tuning.harness.commands.fault import record
from tuning.harness.commands.fault.kinds import late_master
from tuning.harness.commands.fault.kinds.late_master import Late

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
    rec = {"late": facts, "rdzv_timeout_s": 8}
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


# --- on the engine ------------------------------------------------------------------------
# (LATE, RDZV_TIMEOUT, TRAINER): the master comes within the rendezvous timeout, or long after
# it; fms meets the same launcher and rendezvous, so it recovers the same way
CASES = {
    "recovers": (20, 90, "harness"),
    "fails": (60, 8, "harness"),
    "recovers-fms": (20, 90, "fms"),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.docker
@pytest.mark.fault
@pytest.mark.slow
def test_late_master(case, harness_image, tmp_path):
    late_s, rdzv, trainer = CASES[case]
    if trainer == "fms":
        built = harness("image", "--trainer", "fms", runs=tmp_path, timeout=1200)
        assert built.returncode == 0, built.stdout + built.stderr
    out = harness(
        "fault",
        "--fault",
        "late-master",
        "--layout",
        "per-rank",
        "--late",
        str(late_s),
        "--rdzv-timeout",
        str(rdzv),
        "--timeout",
        "15",
        "--steps",
        "20",
        "--trainer",
        trainer,
        runs=tmp_path,
        timeout=400,
    )
    run_dir = (tmp_path / "latest").resolve()
    rec = json.loads((run_dir / "fault.json").read_text())
    assert "Traceback" not in out.stderr, out.stderr
    assert rec["goal_met"] is True, out.stdout + out.stderr
    assert rec["leftovers"] == [] and leftovers(rec["run_id"]) == []
    late, ranks = rec["late"], {x["rank"]: x for x in rec["ranks"]}
    saw = late["peers_saw"]["rank1"]
    md = (run_dir / "fault.md").read_text().splitlines()
    assert f"- on a cluster: {late_master.CLUSTER}" in md
    assert any(x.startswith("- the other nodes' logs: ") for x in md)
    saw_there = [x["saw"] for x in late["waiting_node_saw"]]
    # Before rank0's container exists its name does not resolve (Docker's DNS: EAI_AGAIN)
    assert saw_there[0] == "name not resolved (Temporary failure in name resolution)"
    assert (
        rec.get("trainer") is None
        if trainer == "harness"
        else rec["trainer"]["image"].endswith("-fms:latest")
    )
    if case.startswith("recovers"):
        # the port accepted once rank0's torchrun listened; the group trained from then on
        assert saw_there[-1] == late_master.ACCEPTS and saw["connect timeouts"] == 0
        assert late["master_started_t"] is not None
        assert late["first_step_t"] > late["master_started_t"]
        assert rec["outcome"] == "finished" and rec["steps_reached"] == 20
        assert ranks[0]["end_status"] == ranks[1]["end_status"] == "completed"
        assert any("no hang detected" in x for x in md), md
    else:
        # rank1 gave up at the rendezvous timeout; rank0 was never started after that
        assert saw["connect timeouts"] == 1 and late_master.ACCEPTS not in saw_there
        assert ranks[1]["signature"] == "rendezvous timeout" and ranks[1]["exit_code"] == 1
        assert late["master_started_t"] is None and ranks[0]["exit_code"] is None
        assert late["first_step_t"] is None and rec["outcome"] in ("failed fast", "failed slowly")
