"""The scored pool's list and its scoring (commands/pool.py, faults/pool_list.py); the pool's
runs are fault runs (tests/engine/faults/test_pool_docker.py runs three of them on the engine)."""

from __future__ import annotations

import re
import subprocess
import sys

from support.paths import ROOT
from tuning.harness.commands import pool
from tuning.harness.faults import pool_list
from tuning.harness.faults.fault_json import FaultRecord
from tuning.harness.faults.kinds import TABLE
from tuning.harness.run_files import metric_lines


def test_the_pool_is_fixed_and_covers_every_kind_rank_layout_and_trainer():
    every = pool_list.experiments()
    assert every == pool_list.experiments()  # the seed fixes it
    # two runs of each kind its table entry places in the pool, in their places' order
    assert len(every) == 2 * len(pool_list.REGRESSION) >= 24
    assert [e.kind for e in every[::2]] == list(pool_list.REGRESSION)
    assert [e.n for e in every] == list(range(1, len(every) + 1))
    kinds = {e.kind for e in every}
    asked = (
        "kill crash oom pause slow partition no-show late-master save-kill slow-main "
        "skip-collective mismatch"
    )
    assert kinds >= set(asked.split())
    for kind in kinds:
        ranks = sorted(e.rank for e in every if e.kind == kind)
        fixed = TABLE[kind].rank  # late-master's: the master, rank 0
        assert ranks == ([fixed] * 2 if fixed is not None else [0, pool_list.WORLD - 1]), kind
    assert {e.layout for e in every} == {"single", "per-rank"}
    assert {e.trainer for e in every} == {"harness", "fms"}
    for e in every:  # only where the kind applies, by its table entry
        assert TABLE[e.kind].why_not(e.layout, "isolated", e.trainer != "harness") is None, e


def test_the_docs_say_each_pooled_kinds_class_as_its_table_entry_does():
    """docs/faults.md's table of expected classes (kinds, then the class), and the flags the
    pool adds to a kind, in parentheses after it (`late-master (LATE=40, RDZV_TIMEOUT=10)`)."""
    section = (ROOT / "docs/faults.md").read_text().split("## The scored pool (`make pool`)")[1]
    rows = section.split("| kinds | expected class |")[1].split("\n\n")[0].splitlines()[2:]
    said, flags = {}, {}
    for row in rows:
        kinds_cell = row.split("|")[1]
        for kind, added in re.findall(r"([\w-]+)(?: \(([^)]*)\))?", kinds_cell):
            flags[kind] = added
        kinds, judged = (re.sub(r" ?\([^)]*\)", "", cell).strip() for cell in row.split("|")[1:3])
        said.update(dict.fromkeys(kinds.split(", "), judged))
    assert said == {name: TABLE[name].judged for name in pool_list.REGRESSION}

    def as_said(pool_flags: tuple[str, ...]) -> str:  # ("--late", "40") -> "LATE=40"
        pairs = zip(pool_flags[::2], pool_flags[1::2], strict=True)
        return ", ".join(f"{f.lstrip('-').upper().replace('-', '_')}={v}" for f, v in pairs)

    assert flags == {name: as_said(TABLE[name].pool_flags) for name in pool_list.REGRESSION}


def test_a_fresh_draw_varies_everything_and_holds_to_its_seed():
    drawn = [e for seed in (1, 2, 3) for e in pool_list.draw(seed)]
    assert pool_list.draw(7) == pool_list.draw(7) and pool_list.draw(7) != pool_list.draw(8)
    assert len(pool_list.draw(1)) == pool_list.DRAW_N >= 24
    assert {e.world for e in drawn} == set(range(2, 9))
    assert {e.trainer for e in drawn} == {"harness", "fms", "script"}
    assert {e.layout for e in drawn} == {"single", "per-rank"}
    # any rank, not only the first and the last
    assert any(0 < e.rank < e.world - 1 for e in drawn)
    assert {e.kind for e in drawn} <= {k.name for k in TABLE.values() if k.judged}
    for e in drawn:
        assert 0 <= e.rank < e.world and (TABLE[e.kind].rank in (None, e.rank)), e
        assert TABLE[e.kind].why_not(e.layout, "isolated", e.trainer != "harness") is None, e
        flags = e.flags()
        assert flags[flags.index("--nproc") + 1] == str(e.world)
        assert ("--timeout" in flags) != (e.trainer == "script"), e  # a script's is in ARGS


def test_pool_dry_run_lists_the_runs_as_typed_and_pick_is_checked():
    out = subprocess.run(
        [sys.executable, "-m", "tuning.harness", "pool", "--dry-run", "--pick", "3,24"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[2:] == [
        "  3  crash rank 0, single: make fault FAULT=crash RANK=0 LAYOUT=single NPROC=4 "
        "AT_STEP=8 TIMEOUT=20",
        " 24  mismatch rank 3, single, fms: make fault FAULT=mismatch RANK=3 LAYOUT=single "
        "NPROC=4 AT_STEP=4 TIMEOUT=20 TRAINER=fms",
    ]
    bad = subprocess.run(
        [sys.executable, "-m", "tuning.harness", "pool", "--pick", "0,99"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert bad.stderr == (
        f"harness: error: PICK='0,99': the pool's experiments are 1-{len(pool_list.experiments())} "
        "(`make pool DRY_RUN=1` lists them)\n"
    )


def test_a_desync_under_detail_on_fms_is_refused_at_or_after_its_first_save(tmp_path):
    """fms-demo.json saves first at step 10; under DETAIL gloo cannot gather that checkpoint,
    so AT_STEP 8 (the strike may land 2 steps later) is refused before anything starts, and
    7, the pool's own, is taken."""
    late = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuning.harness",
            "fault",
            "--fault",
            "mismatch-shape",
            "--trainer",
            "fms",
            "--at-step",
            "5",
            "--rank",
            "0",
            "--nproc",
            "4",
            "--layout",
            "per-rank",
            "--runs",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert late.returncode == 2, late.stdout
    assert "AT_STEP=5 is too late for this job: it saves first at step 10" in late.stderr
    assert "set AT_STEP=4 or lower" in late.stderr
    assert not list(tmp_path.iterdir())  # no run folder: nothing started
    fms_desyncs = [
        e
        for e in pool_list.experiments()
        if e.trainer == "fms" and e.kind in ("skip-collective", "mismatch", "mismatch-shape")
    ]
    assert [e.at_step for e in fms_desyncs] == [4, 4, 4]


def test_a_verdict_is_scored_against_what_was_injected():
    e = pool_list.experiments()[9]  # pause rank 3
    rec = {
        "outcome": "hung (detected)",
        "timeout_s": 20,
        "verdict": {
            "class": "stopped or frozen",
            "culprits": [3],
            "verdict_s": 11.2,
            "evidence": "rank 3 is frozen",
            "rule": "hand",
        },
    }
    row = pool.score(e, FaultRecord.from_json(rec))
    assert (row["right"], row["wrong_rank"], row["class_right"], row["before_timeout"]) == (
        True,
        False,
        True,
        True,
    )
    rec["verdict"] = {**rec["verdict"], "culprits": [2, 3], "class": "desync", "verdict_s": 25}
    row = pool.score(e, FaultRecord.from_json(rec))
    assert (row["right"], row["wrong_rank"], row["class_right"], row["before_timeout"]) == (
        False,
        True,
        False,
        False,
    )
    row = pool.score(e, FaultRecord.from_json({"status": "not injected"}))
    said = "no verdict (not injected)"
    assert (row["right"], row["wrong_rank"], row["verdict"]) == (False, False, said)


def test_steps_slowed_after_the_fault_are_told_apart_from_steps_as_before():
    def steps(times):
        return {0: [{"event": "step", "step": i + 1, "time": t} for i, t in enumerate(times)]}

    before = [0.3 * i for i in range(10)]  # 0.3 s a step until the fault at 3.0 s
    assert metric_lines.slowed(steps(before + [3.3, 3.6, 3.9, 4.2]), 3.0) is None
    slow = steps(before + [4.0, 5.0, 6.0, 7.0])  # 1 s a step: 3.3 x
    assert round(metric_lines.slowed(slow, 3.0), 1) == 3.3
    assert metric_lines.slowed(steps(before + [4.0, 5.0]), 3.0) is None  # too few steps yet


def test_a_slowed_group_is_seen_when_every_rank_logs_its_steps():
    """The pool's seed-2 run 18 (slow rank 4 of 7, per-rank, a script): every rank logs each
    step, ms apart; read side by side their times gave no step's interval, and the slowdown
    (4.4 x) was never seen, so no stacks were taken while it lasted."""
    times = [0.3 * i for i in range(10)] + [4.0, 5.0, 6.0, 7.0]  # 3.3 x after the fault at 3.0
    metrics = {
        r: [{"event": "step", "step": i + 1, "time": t + r * 0.002} for i, t in enumerate(times)]
        for r in range(7)
    }
    assert round(metric_lines.slowed(metrics, 3.0), 1) == 3.3


def test_every_rank_named_is_cannot_tell_not_a_wrong_rank():
    """A verdict that names both ranks of two cannot tell them apart: neither right nor a
    wrong rank (seed 3's run 23 named both); naming two of three is a wrong rank."""
    two = next(e for e in pool_list.draw(3) if e.world == 2)
    rec = {"verdict": {"class": "desync", "culprits": [0, 1], "evidence": "", "rule": "hand"}}
    row = pool.score(two, FaultRecord.from_json(rec))
    assert (row["right"], row["cannot_tell"], row["wrong_rank"]) == (False, True, False)
    assert "1 cannot tell" in pool.tally([row]) and "0 wrong rank" in pool.tally([row])
    three = next(e for e in pool_list.draw(4) if e.world == 3)
    other = next(r for r in range(3) if r != three.rank)
    rec["verdict"]["culprits"] = [three.rank, other]
    row = pool.score(three, FaultRecord.from_json(rec))
    assert (row["cannot_tell"], row["wrong_rank"]) == (False, True)


def test_a_seed_whose_runs_were_read_is_seen():
    assert pool.seen(1) and pool.seen(None) == pool.seen(pool_list.SEED)
    assert pool.seen(4) is None  # never read: a fresh draw
    for seed, said in (("2", "seen: a regression run"), ("9", "fresh: no rule was fit")):
        out = subprocess.run(
            [sys.executable, "-m", "tuning.harness", "pool", "--dry-run", "--seed", seed],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert said in out.stdout.splitlines()[0], out.stdout[:300]
