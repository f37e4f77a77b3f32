"""The desync faults (tuning/container/rank/desync.py) in real gloo ranks under torchrun and the
rank recorder, as a foreign ENTRY runs (support/entries/desync_entry.py: a training loop's
collectives), and the verdict the host reads from what the ranks show: their stacks, their
flight recorders (with torch's own analysis, tuning/container/rank/fr_check.py, run with this
project's Python as for LAYOUT=host), their ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.desync_ranks import ENTRY, Ranks
from support.launch import recorder
from support.paths import ROOT
from tuning.harness.verdict import facts, rules

AT = 9  # the collective struck: the 5th step's all_reduce (two collectives a step)


def _line(marker: str) -> int:
    return next(i for i, x in enumerate(ENTRY.read_text().splitlines(), 1) if marker in x)


def _struck(r: Ranks, rank: int):
    return lambda: next((x for x in r.metrics().get(rank, []) if x.get("event") == "fault"), None)


def _ends(r: Ranks, n: int):
    """A wait_for condition: every rank's end line, once all n wrote one."""

    def ends():
        found = [x for lines in r.metrics().values() for x in lines if x["event"] == "end"]
        return found if len(found) == n else None

    return ends


def _all_in(taken: dict, ranks) -> bool:
    return all(taken["ranks"][r]["summary"].startswith(f"rank {r}: waiting in ") for r in ranks)


REDUCE, GATHER = f"{ENTRY}:{_line('# STEP_ALL_REDUCE')}", f"{ENTRY}:{_line('# STEP_GATHER')}"


@pytest.mark.parametrize(
    "kind, how, rank, klass, evidence",
    [
        (
            "skip-collective",
            None,
            3,
            "left a collective",
            "rank 3 skipped all_reduce of [4] #9, where ranks 0, 1 and 2 wait, and went on to "
            f"all_gather of [1] (at {GATHER}), the collective that follows it "
            "(its sequence numbers are shifted by one from there on)",
        ),
        (
            "mismatch",
            "op",
            0,
            "desync",
            f"rank 0 called broadcast of [1] (at {REDUCE}) as collective #9, "
            "where ranks 1, 2 and 3 called all_reduce of [4] and wait in it",
        ),
        # gloo lets the peers finish an all_reduce of 4 floats against one of 5 (rank 3 waits)
        (
            "mismatch",
            "shape",
            3,
            "desync",
            f"rank 3 called all_reduce of [5] (at {REDUCE}) as collective #9, where ranks 0, 1 and "
            "2 called all_reduce of [4], finished it and wait in all_gather of [1] #10",
        ),
    ],
)
def test_a_desync_is_named_by_its_rank_and_its_two_collectives(
    ranks, kind, how, rank, klass, evidence
):
    r = ranks(
        4,
        HARNESS_DESYNC=kind,
        HARNESS_DESYNC_RANK=str(rank),
        HARNESS_DESYNC_AT=str(AT),
        **({"HARNESS_DESYNC_HOW": how} if how else {}),
    )
    line = r.wait_for(_struck(r, rank), "fault line")
    assert (line["kind"], line["op"], line["collective"]) == (kind, "all_reduce", AT)
    assert line["site"].startswith(f"{ENTRY}:{_line('# STEP_ALL_REDUCE')} ")
    v, taken = r.judged(lambda t: _all_in(t, range(4)))
    assert (v.kind, v.culprits, v.rule) == (klass, [rank], "hand"), v
    assert v.evidence == evidence
    # torch's own analysis of the four flight recorders finds the same collective
    assert v.fr_trace.ran and v.fr_trace.agrees is True, v.fr_trace
    assert v.fr_trace.flagged["seq"] == AT
    # what the culprit's recorder holds at that sequence number, beside a peer's
    peer = 1 if rank != 1 else 0
    at = {
        x: next(c for c in taken["ranks"][x]["collectives"] if c["seq"] == AT) for x in (rank, peer)
    }
    assert at[peer]["op"] == "all_reduce" and at[peer]["in"] == [[4]]
    assert (at[rank]["op"], at[rank]["in"]) == {
        "skip-collective": ("all_gather", [[1]]),
        "op": ("broadcast", [[1]]),
        "shape": ("all_reduce", [[5]]),
    }[how or kind]


def test_slow_main_is_the_rank_the_others_wait_for(ranks):
    r = ranks(
        4,
        HARNESS_DESYNC="slow-main",
        HARNESS_DESYNC_RANK="0",
        HARNESS_DESYNC_AT=str(AT),
        HARNESS_DESYNC_S="300",
    )
    r.wait_for(_struck(r, 0), "fault line")
    v, taken = r.judged(lambda t: _all_in(t, (1, 2, 3)))
    assert (v.kind, v.culprits) == ("never arrived", [0]), v
    assert v.evidence.startswith(
        "rank 0 never entered all_reduce #9, where ranks 1, 2 and 3 wait; rank 0 is in "
        f"main_process_work at {ROOT / 'tuning/container/rank/desync.py'}:"
    ), v.evidence
    assert v.evidence.endswith(f", called from {ENTRY}:{_line('# STEP_ALL_REDUCE')}")
    assert v.fr_trace.flagged["missing"] == [0] and v.fr_trace.agrees is True


def test_with_two_ranks_a_desync_names_both_and_says_so(ranks):
    r = ranks(
        2, HARNESS_DESYNC="skip-collective", HARNESS_DESYNC_RANK="1", HARNESS_DESYNC_AT=str(AT)
    )
    r.wait_for(_struck(r, 1), "fault line")
    v, _ = r.judged(lambda t: _all_in(t, (0, 1)))
    assert (v.kind, v.culprits) == ("desync", [0, 1]), v
    assert "with no majority there is no odd one out, so every rank is named" in v.evidence
    assert "rank 1 may have skipped it" in v.evidence


def test_torch_detail_check_names_the_odd_rank(ranks):
    """TORCH_DISTRIBUTED_DEBUG=DETAIL: torch's own check stops every rank at the mismatch; its
    messages, in the ranks' end lines, name the odd one."""
    r = ranks(
        4,
        HARNESS_DESYNC="mismatch",
        HARNESS_DESYNC_RANK="3",
        HARNESS_DESYNC_AT=str(AT),
        TORCH_DISTRIBUTED_DEBUG="DETAIL",
    )

    ends = r.wait_for(_ends(r, 4), "end lines")
    assert all("Detected mismatch between collectives on ranks" in e["error"] for e in ends)
    v = rules.judge(facts.gather(4, r.metrics()))
    assert (v.kind, v.culprits, v.rule) == ("desync", [3], "torch"), v
    assert v.evidence == (
        "torch's TORCH_DISTRIBUTED_DEBUG=DETAIL check stopped the ranks: rank 3 ran BROADCAST [1] "
        f"where ranks 0, 1 and 2 ran ALLREDUCE [4] (their collective #{AT - 1})"
    )  # DETAIL's own sequence numbers count from 0


def _shape_strike_on_rank_3(ranks, gather_only: str) -> tuple[dict, dict]:
    """A shape strike on rank 3 of 4 under DETAIL, in a step of gathers only: (its fault
    line, the verdict once every rank ended)."""
    r = ranks(
        4,
        HARNESS_DESYNC="mismatch",
        HARNESS_DESYNC_HOW="shape",
        HARNESS_DESYNC_RANK="3",
        HARNESS_DESYNC_AT=str(AT),
        TORCH_DISTRIBUTED_DEBUG="DETAIL",
        DESYNC_ENTRY_GATHER_ONLY=gather_only,
    )
    line = r.wait_for(_struck(r, 3), "fault line")
    r.wait_for(_ends(r, 4), "end lines")
    return line, rules.judge(facts.gather(4, r.metrics()))


def test_a_shape_strike_takes_an_all_gather_into_tensor_where_no_all_reduce_comes(ranks):
    """fms's step calls no all_reduce of its own (the pool's run 25 never struck); its loss
    gather is an all_gather_into_tensor: the shape strike takes that, and DETAIL names rank 3."""
    line, v = _shape_strike_on_rank_3(ranks, "1")
    assert (line["op"], line["collective"]) == ("all_gather_into_tensor", AT), line
    assert line["did"] == "called all_gather_into_tensor on [5] instead of [4]"
    assert (v.kind, v.culprits, v.rule) == ("desync", [3], "torch"), v


def test_a_shape_strike_takes_a_list_all_gather_as_accelerate_gathers_on_gloo(ranks):
    """A user's HF Trainer on CPU ranks gathers its loss with a list all_gather (accelerate's
    gather on gloo) and calls no all_reduce or all_gather_into_tensor in a step: the shape
    strike never came in 30 steps (make pool SEED=3, run 6). It takes that all_gather now."""
    line, v = _shape_strike_on_rank_3(ranks, "list")
    assert (line["op"], line["collective"]) == ("all_gather", AT), line
    assert line["did"] == "called all_gather on [5] instead of [4]"
    assert (v.kind, v.culprits) == ("desync", [3]), v


def test_desync_is_not_loaded_unless_asked_and_a_wrong_setting_stops_the_rank(mounted):
    marker, env = mounted
    probe = "import sys; open({!r}, 'w').write(str('harness_desync' in sys.modules))\n"
    (Path(env["PYTHONPATH"].split(os.pathsep)[1]) / "foreign_trainer.py").write_text(
        probe.format(str(marker))
    )
    assert recorder(env, "cpu").returncode == 0
    assert marker.read_text() == "False"
    out = recorder({**env, "HARNESS_DESYNC": "skip"}, "cpu")
    assert out.returncode == 2
    assert (
        "harness desync: HARNESS_DESYNC='skip': use one of slow-main, skip-collective, "
        "mismatch" in out.stderr
    )
    out = recorder({**env, "HARNESS_DESYNC": "slow-main"}, "cpu")
    assert out.returncode == 2 and "slow-main needs HARNESS_DESYNC_S > 0" in out.stderr
    assert marker.read_text() == "False"  # the trainer never ran


def test_fr_check_reports_why_when_it_cannot_read(tmp_path):
    (tmp_path / "fr").mkdir()
    fr_check = str(ROOT / "tuning/container/rank/fr_check.py")
    out = subprocess.run(
        [sys.executable, fr_check, str(tmp_path / "fr")], capture_output=True, text=True
    )
    assert out.returncode == 0
    said = json.loads(out.stdout)
    assert said["ok"] is False and "no files loaded" in said["error"]
