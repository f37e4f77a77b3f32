"""A stalled `make up` says its verdict: our trainer's rank 0 works alone for 45 s before a
collective (HARNESS_DESYNC=slow-main, as a tokenization on the main process does) while ranks
1-3 wait in it; the stall watch (STALL=15) dumps the ranks and names rank 0, then the run goes
on and finishes. LAYOUT=host: the ranks are this machine's processes (they inherit the
harness's environment, which is how the fault reaches them here); the container path differs
only in where the dump's shell runs (tests/engine/faults/test_stacks_docker.py)."""

from __future__ import annotations

import json

from support.harness import harness
from support.paths import ROOT


def test_a_stalled_up_names_the_rank_the_others_wait_for(tmp_path):
    # rank 0 works 35 s before a collective: the stall watch fires at 15 s and has 20 s to
    # read every rank's stack while rank 0 is still at that work
    env = {
        "HARNESS_DESYNC": "slow-main",
        "HARNESS_DESYNC_RANK": "0",
        "HARNESS_DESYNC_AT": "50",
        "HARNESS_DESYNC_S": "35",
    }
    out = harness(
        "up",
        "--layout",
        "host",
        "--nproc",
        "4",
        "--steps",
        "30",
        "--stall",
        "15",
        "--timeout",
        "600",
        "--run-id",
        "stalled",
        runs=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    verdict = next((x for x in out.stdout.splitlines() if x.startswith("harness: verdict")), "")
    assert verdict.startswith(
        "harness: verdict (the harness's reading): never arrived, culprit rank(s): 0: rank 0 "
        "never entered "
    ), out.stdout
    assert ", where ranks 1, 2 and 3 wait; rank 0 is in main_process_work at " in verdict
    assert verdict.endswith(
        f"called from {ROOT / 'tuning/container/sft_trainer.py'}:{_train_line()}"
    )
    summary = json.loads((tmp_path / "stalled/summary.json").read_text())
    assert summary["status"] == "succeeded"  # it was slow, not stuck: the run went on
    assert summary["verdict"]["culprits"] == [0] and summary["verdict"]["class"] == "never arrived"
    assert summary["stall"]["verdict"] == summary["verdict"]
    torch_said = summary["verdict"]["fr_trace"]
    assert torch_said["ran"] and torch_said["flagged"]["missing"] == [0], torch_said
    assert torch_said["agrees"] is True


def _train_line() -> int:
    """The line of sft_trainer.py whose collective rank 0 was about to call: trainer.train."""
    lines = (ROOT / "tuning/container/sft_trainer.py").read_text().splitlines()
    return next(i for i, x in enumerate(lines, 1) if "trainer.train(resume_from_checkpoint" in x)
