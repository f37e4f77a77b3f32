"""The late-master fault on the engine (faults/kinds/late_master.py), per-rank: rank 0's
node starts LATE s after the others; LATE below RDZV_TIMEOUT recovers, above it fails."""

from __future__ import annotations

import json

import pytest

from support.engine import leftovers
from support.harness import harness
from tuning.harness.faults.kinds import late_master

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
