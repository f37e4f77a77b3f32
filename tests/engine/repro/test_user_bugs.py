"""Users' own bugs, with no fault injected (issue 39): each script of tests/user_bugs/ is run as
a user runs it, `make up SRC=tests/user_bugs ENTRY=<bug>.py ARGS=...`, on 4 CPU ranks, and its
verdict is scored like the pool's: live (the stall watch's stacks, or at the end the run's logs,
its containers' ends and each failed rank's flight recorder) and from its logs alone (`make repro
FROM=<the run>`, what a cluster would have left). The culprit must be the rank the bug is in;
where the logs alone cannot tell, they name nobody.

And the same failure injected (`make fault`) beside the one a script causes: the verdicts agree."""

from __future__ import annotations

import json

import pytest

from support.engine import leftovers
from support.harness import make

ARGS = "--steps 30 --timeout 10"
# bug -> (live verdict, from its logs alone): the outcomes that are right, each (class, culprits)
# or None (nobody named). Never another rank. Two races of milliseconds: early_exit's rank 3,
# stopped by torchrun's agent while it was leaving, reads from its log alone as stopped by its
# launcher; uneven_pad's rank 0 aborts on gloo's size check at once, and a rank the agent then
# stops before it records its all_gather leaves no sizes to compare.
BUGS = {
    "early_exit": ({("left a collective", (3,))}, {("left a collective", (3,)), None}),
    "loader_error": ({("died", (1,))}, {("died", (1,))}),
    "uneven_pad": ({("desync", (3,)), None}, {None}),  # the logs never say the sizes
    "barrier_if": ({("desync", (0,))}, {("desync", (0,))}),
    "partial_save": ({("desync", (0,))}, {("desync", (0,))}),
    "slow_loader": ({("never arrived", (2,))}, {("never arrived", (2,))}),
}


def outcome(v: dict | None):
    return (v["class"], tuple(v["culprits"])) if v and v["culprits"] else None


@pytest.fixture(scope="module")
def bug_runs(tmp_path_factory, harness_image) -> dict:
    """Every bug's run, once (the parity test below reads them too)."""
    runs = tmp_path_factory.mktemp("user-bugs")
    out = {}
    for bug in BUGS:
        run_id = bug.replace("_", "-")
        # the stall watch stays at its default (60 s): a script with no step lines shows it no
        # progress, and the ranks' own timeout (10 s) ends each hang before it looks
        said = make(
            "up",
            "SRC=tests/user_bugs",
            f"ENTRY={bug}.py",
            f"ARGS={ARGS}",
            "GPUS=0",
            "NPROC=4",
            f"RUN_ID={run_id}",
            runs=runs,
            timeout=600,
        )
        out[bug] = (runs / run_id, said)
    return out


def repro(run_dir, runs) -> tuple[int, dict]:
    got = make("repro", f"FROM={run_dir}", runs=runs, timeout=600)
    rec = json.loads(next(runs.glob("*/repro.json")).read_text())
    return got.returncode, rec


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("bug", BUGS)
def test_a_users_own_bug_is_named_live_and_from_its_logs(bug, bug_runs, tmp_path):
    run_dir, said = bug_runs[bug]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed", said.stdout[-2000:]
    live, from_logs = BUGS[bug]
    assert outcome(summary["verdict"]) in live, summary["verdict"]
    assert leftovers(run_dir.name, run_dir.parent) == []
    code, rec = repro(run_dir, tmp_path)
    read = outcome(rec["verdict"])
    assert read in from_logs, rec["verdict"]  # never another rank: nothing guessed
    assert code == (0 if read else 2)


# bug -> the kind that injects the same failure, on the same rank of 4 (our trainer)
PAIRS = {
    "loader_error": ("crash", 1),
    "slow_loader": ("slow-main", 2),
    "barrier_if": ("mismatch", 0),
    "uneven_pad": ("mismatch-shape", 3),
}


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.fault
@pytest.mark.parametrize("bug", PAIRS)
def test_an_injected_fault_is_judged_as_the_same_bug_a_script_has(bug, bug_runs, tmp_path):
    """The verdict reads what a user's run would show, never the injector's own words: the
    fault and the script's bug come out alike, class and culprit."""
    kind, rank = PAIRS[bug]
    said = make(
        "fault",
        f"FAULT={kind}",
        f"RANK={rank}",
        "NPROC=4",
        "GPUS=0",
        "AT_STEP=8",
        "TIMEOUT=10",
        "RUN_ID=injected",
        runs=tmp_path,
        timeout=600,
    )
    fault = json.loads((tmp_path / "injected/fault.json").read_text())
    script = json.loads((bug_runs[bug][0] / "summary.json").read_text())["verdict"]
    assert outcome(fault["verdict"]) == outcome(script) or outcome(script) is None, (
        fault["verdict"],
        script,
        said.stdout[-2000:],
    )
    assert outcome(fault["verdict"]) in BUGS[bug][0] - {None}  # the fault's is named
