"""`make fault` without an engine: the failure signatures, torchrun's failure table read, the
rendezvous timeout reaching torchrun, the start deadline, and LAYOUT's default (the fault runs
themselves: engine/faults/test_fault_docker.py)."""

from __future__ import annotations

import json
import subprocess

from support.fault_runs import TIMEOUT
from support.paths import ROOT
from tuning.container import launch
from tuning.harness.faults import record
from tuning.harness.watch import Stop


def test_signatures():
    sig = record.signature
    assert sig("RuntimeError: injected crash at step 12") == "injected crash"
    assert (
        sig("Read error [10.0.0.3]:55973: Connection reset by peer") == "Connection reset by peer"
    )
    assert sig("Timed out waiting 15000ms for recv operation to complete") == "collective timeout"
    assert (
        sig("DistStoreError: Timed out after 21 seconds waiting for clients. 1/2 clients joined.")
        == "rendezvous timeout"
    )
    assert sig("DistStoreError: wait timeout after 15000ms, keys: /default_pg/0//cpu//0/1") == (
        "process-group timeout"
    )
    assert sig("all fine") is None
    assert record.is_timeout("Timed out waiting") and not record.is_timeout("reset")


def test_torchrun_failure_table_is_read():
    log = (
        "Root Cause (first observed failure):\n[0]:\n  host      : trainer\n"
        "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 11)\n"
    )
    assert record._FAILURE.findall(log) == [("1", "-9")]


def test_rdzv_timeout_reaches_torchrun():
    env = {
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "1",
        "PET_NODE_RANK": "0",
        "HARNESS_DEVICE": "cpu",
        "HARNESS_RDZV_TIMEOUT": "17",
    }
    argv, _ = launch.command(env, [])
    assert argv[argv.index("--rdzv_conf") + 1] == "timeout=17"
    argv, _ = launch.command({k: v for k, v in env.items() if k != "HARNESS_RDZV_TIMEOUT"}, [])
    assert "--rdzv_conf" not in argv


def test_the_start_deadline_runs_from_the_first_tick_not_from_the_image_build():
    """The follow is made before `lifecycle.start` builds the image (minutes on a fresh
    machine): the ranks' time to reach AT_STEP counts from the first tick, once they run."""
    from tuning.harness.faults.follow import START_DEADLINE_S, Follow

    knobs = {"rank": 1, "at_step": 12, "timeout_s": TIMEOUT, "world_size": 2}
    follow = Follow("kill", "per-rank", "rank1", knobs, "r")
    follow.t0 -= START_DEADLINE_S + 60  # the image took that long to build
    state = {"rank0": None, "rank1": None}
    assert follow({}, state, nodes=None) is None and follow.stopped_by is None
    follow.first_tick -= START_DEADLINE_S + 1  # then the ranks never got to the step
    assert follow({}, state, nodes=None) == Stop()
    assert follow.stopped_by == "never reached the step"


def test_layout_unset_is_the_default_single(tmp_path):
    """`make fault FAULT=partition` with no LAYOUT runs in LAYOUT=single, where partition does
    not apply: its record says so, with nothing started (no engine needed)."""
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "fault",
            "FAULT=partition",
            "RUN_ID=no-layout",
            f"RUNS={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rec = json.loads((tmp_path / "no-layout" / "fault.json").read_text())
    assert (rec["layout"], rec["status"]) == ("single", "not applicable"), rec
    assert "harness: fault partition (single): not applicable: every rank of a single " in (
        out.stdout
    )
