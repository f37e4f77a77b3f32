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
from support.paths import ROOT
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
    assert "harness: repro: never arrived, culprit rank(s) 5 of at least 8" in out.stdout
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


def test_a_named_culprit_is_never_beside_cannot_tell_and_the_replay_runs_as_printed(tmp_path):
    """With a culprit named, what the logs could not tell is said as how sure, never as "cannot
    tell"; the replay line carries GPUS=0 on a box with no GPU and the user's JOB, and says how
    to run it with RUN=1."""
    folder = R.write(tmp_path / "logs", watchdog_job("2.6", 5, world=8, nproc=4))
    job = ROOT / "configs/jobs/demo.yaml"
    out = make("repro", f"FROM={folder}", f"JOB={job}", runs=tmp_path / "runs", silent=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "culprit rank(s) 5 of at least 8" in out.stdout and "cannot tell" not in out.stdout
    assert "how sure: no flight recorder dump" in out.stdout
    replay = next(x for x in out.stdout.splitlines() if "replay here: make fault" in x)
    assert "GPUS=0" in replay and f"JOB={job}" in replay, replay
    assert f"make repro FROM={folder} RUN=1 JOB={job}" in out.stdout


def test_from_one_file_and_a_read_that_fails_leaves_nothing(tmp_path):
    logs = R.write(tmp_path / "logs", {"sft-master-0": R.traceback("2.6", 0, "ValueError: bad")})
    one = logs / "sft-master-0.log"
    out = make("repro", f"FROM={one}", runs=tmp_path / "runs", silent=True)
    assert out.returncode == 0 and "died, culprit rank(s) 0 of at least 1" in out.stdout, out.stdout
    out = make("repro", f"FROM={tmp_path / 'nothing'}", runs=tmp_path / "runs2", silent=True)
    assert out.returncode != 0 and "no such folder or file" in out.stderr
    assert not (tmp_path / "runs2").exists() or not any((tmp_path / "runs2").iterdir())


@pytest.mark.parametrize(
    "end, kind",
    [
        ("exitcode  : -11 (pid: 101)", "segv"),
        ("exitcode  : -9 (pid: 101)", "kill"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "crash"),
    ],
)
def test_the_replay_kind_follows_how_the_rank_died(end, kind, tmp_path):
    """A segfault is replayed as a segfault, a SIGKILL as a kill, a CUDA out-of-memory
    exception as the rank's own error (crash), never as the kernel's OOM killer."""
    reset = "RuntimeError: [pair.cc:534] Read error [10.0.0.7]:41234: Connection reset by peer"
    if end.startswith("exitcode"):
        code = int(end.split(":")[1].split()[0])
        rank1 = R.child_failed("2.6", [(1, 0, code, "2024-12-05_02:07:08")], 1)
    else:
        rank1 = R.traceback("2.6", 1, end)
    folder = R.write(
        tmp_path / "logs", {"sft-master-0": R.traceback("2.6", 0, reset), "sft-worker-0": rank1}
    )
    rec = judged(folder)
    assert (rec["verdict"]["class"], rec["verdict"]["culprits"]) == ("died", [1]), rec
    from tuning.harness.clusterlogs import replay, seen, source
    from tuning.harness.verdict.record import Verdict

    got = source.load(folder)
    plan = replay.plan(Verdict.from_json(rec["verdict"]), seen.inputs(got), got, 2, False, 30)
    assert plan.kind == kind, plan
