"""`make repro` where the logs cannot name a culprit, and what it prints: no failure, an
unreadable file, another framework's logs, no logs (each said, nobody named, exit 2), the
silent rank's log missing, a death signal with no time to order it; and the replay line it
prints when they can (log sets from support/repro_logs.py; the culprits they name:
test_repro_logs.py)."""

from __future__ import annotations

import json

import pytest

from support import repro_logs as R
from support.harness import make
from support.repro_logs import judged, watchdog_job


def test_a_missing_log_of_the_silent_rank_names_nobody(tmp_path):
    logs = watchdog_job("2.6", 3, world=4, nproc=1)
    del logs["sft-worker-2"]  # rank 3's pod: its log was never copied (its object was)
    pods = [
        R.pod(name, n, 1, 4, 1)
        for n, name in enumerate(["sft-master-0", "sft-worker-0", "sft-worker-1"])
    ]
    folder = R.write(tmp_path / "logs", logs, pods)
    rec = judged(folder)
    assert rec["verdict"]["culprits"] == [] and rec["read"]["missing_ranks"] == [3]
    assert any("no log and no object of rank(s) 3" in x for x in rec["could_not_tell"])


@pytest.mark.parametrize("case", ["no failure", "unreadable", "another framework", "empty"])
def test_what_the_logs_cannot_tell_is_said_and_exits_2(case, tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    if case == "no failure":
        R.write(
            folder,
            {
                "sft-master-0": [
                    R.tqdm(100, 100),
                    "{'train_runtime': '50.1', 'train_loss': '1.2', 'epoch': '1'}",
                ],
                "sft-worker-0": ["[rank1]: done"],
            },
        )
    elif case == "unreadable":
        (folder / "dump.bin").write_bytes(b"\x80\x04\x00\x01\x02")
    elif case == "another framework":
        R.write(
            folder,
            {
                "worker-0": [
                    "I1205 jax._src.distributed: Connecting to coordinator",
                    "ERROR: slice failed",
                ]
            },
        )
    out = make("repro", f"FROM={folder}", runs=folder.parent / "runs", silent=True)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and "the logs cannot tell:" in out.stderr, out.stderr
    rec = json.loads(next((tmp_path / "runs").glob("*/repro.json")).read_text())
    assert rec["replay"] is None and (rec["verdict"] or {}).get("culprits", []) == []
    assert "kubectl logs --timestamps" in out.stderr  # what to collect next


def test_make_repro_prints_the_replay_line(tmp_path):
    folder = R.write(tmp_path / "logs", watchdog_job("2.6", 5, world=8, nproc=4))
    out = make("repro", f"FROM={folder}", runs=folder.parent / "runs", silent=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "harness: repro: never arrived, culprit rank(s) 5 of 8" in out.stdout
    # step 151 of the cluster's job is past the demo job's 30: the nearest it reaches
    assert (
        "replay here: make fault FAULT=slow-main LAYOUT=per-rank RANK=1 NPROC=2 AT_STEP=28"
        in out.stdout
    ), out.stdout
    assert "at step 28, where the logs' progress last showed 151" in out.stdout


def test_a_death_signal_with_no_time_to_order_it_names_nobody(tmp_path):
    """An operator deleting the pods still running after a job failed sends the same SIGTERM:
    with no times to put it before the others' failures, a launcher's line alone names nobody."""
    reset = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [10.0.0.7]:41234: Connection reset by peer"
    logs = {
        "sft-master-0": R.traceback("2.13", 0, reset),
        "sft-worker-0": [R.agent("2.13", "Received 15 death signal, shutting down workers")],
    }
    v = judged(R.write(tmp_path / "logs", logs))["verdict"]
    assert v["culprits"] == [], v
