"""The verdict on the facts of fresh draws it got wrong (`make pool SEED=n`), each from the run's
own dump: the draws are runs the rules were never fit to."""

from __future__ import annotations

from support.draw_seed2_run18 import CALLED_MS
from support.stack_texts import IN_ALL_GATHER, IN_FSDP_POST_BACKWARD
from tuning.harness.stacks import stack_text
from tuning.harness.verdict import facts, rules

GATHER_358 = {"op": "all_gather", "backend": "gloo", "seq": 358, "pg": 0, "in": [[11296]]}


def _dump(text: str, pending: bool) -> dict:
    done = [{**GATHER_358, "seq": s, "state": "done", "t": 100.0 + s} for s in range(350, 358)]
    tail = [{**GATHER_358, "state": "pending", "t": 458.0}] if pending else []
    return {**stack_text.parse(text), "collectives": done + tail, "state": "dumped"}


def test_a_rank_in_fsdps_own_python_with_nothing_pending_is_busy_not_waiting():
    """Seed 2, run 24 (slow rank 1 of 2): rank 1 was read as calling a collective from FSDP's
    post_backward, against rank 0's all_gather #358, and both ranks were named a desync."""
    busy, waiting = _dump(IN_FSDP_POST_BACKWARD, False), _dump(IN_ALL_GATHER, True)
    assert stack_text.position(busy)["call"] is None
    assert stack_text.summary(1, busy) == "rank 1: in main at /src/train_sft.py:69"
    # the same frames with a collective pending: FSDP's Python waits in it (its work.wait())
    assert stack_text.position(_dump(IN_FSDP_POST_BACKWARD, True))["call"] == "post_backward"
    metrics = {r: [{"event": "phase", "name": "rendezvous"}] for r in range(2)}
    f = facts.gather(2, metrics, {"ranks": {0: waiting, 1: busy}}, progressing=True)
    assert "waiting" not in f["ranks"][1] and f["ranks"][1]["busy"], f["ranks"][1]
    v = rules.judge(f)
    assert v.kind != "desync" and 0 not in v.culprits, v


def test_a_throttled_rank_among_seven_on_two_cores_is_named_slow():
    """Seed 2, run 18 (slow rank 4 of 7): the machine slowed all seven; the group waited for
    rank 4 alone 9.8 ms a collective, for any other at most 0.2 ms; the rule's floor of 20 ms
    named none ("unknown"). The dump then showed 16 entries a rank, of which the seven shared
    5: it shows torch's 64 now."""
    ranks = {
        r: {
            "fr": [
                {"seq": s, "op": "all_gather", "state": "done", "t": 100 + ms[r] / 1000}
                for s, ms in CALLED_MS.items()
            ]
        }
        for r in range(7)
    }
    v = rules.judge({"world": 7, "progressing": True, "ranks": ranks})
    assert (v.kind, v.culprits) == ("slow", [4]), v
    assert v.waited_s["4"] > 0.009 and max(v.waited_s[str(r)] for r in (0, 1, 2, 3, 5, 6)) < 0.0005
    # the 54 collectives the seven shared above need the dump's depth: a dump shows every entry
    # torch keeps (64), not 16
    from tuning.container.rank import stack_dump

    assert stack_dump.FR_SHOWN == int(stack_dump.FR_BUFFER) >= len(CALLED_MS)


def test_a_rooted_collectives_root_side_is_no_desync():
    """A stall watch's dump of 64 entries a rank reached the data loader's scatter #10, whose
    inputs only the root records: rank 0 was named a desync while it worked alone before
    all_gather #73, where the others waited (tests/unit/verdict/test_verdict_up.py's run)."""
    scatter = {"op": "scatter", "seq": 10, "state": "done", "out": [[8, 64]]}
    gather = {"op": "all_gather", "seq": 73, "in": [[1]], "out": [[4, 1]]}
    ranks = {
        r: {
            "fr": [
                {**scatter, "in": [[4, 8, 64]] if r == 0 else []},
                {**gather, "state": "done" if r else "pending"},
            ],
            **({"busy": "in _train at sft_trainer.py:241"} if r == 0 else {}),
            **({} if r == 0 else {"waiting": {**gather, "call": "all_gather", "site": None}}),
        }
        for r in range(4)
    }
    v = rules.judge({"world": 4, "ranks": ranks})
    assert (v.kind, v.culprits) == ("never arrived", [0]), v
