"""The verdict from recorded facts alone (no ranks run): which ended first by themselves, and
which ended because a peer did. The facts are those of the scored pool's run 2 (kill rank 3,
single, fms, 4 ranks), where the verdict named ranks 0 and 2."""

from __future__ import annotations

from tuning.harness.verdict import facts, rules

PEER_LOST = (
    "SystemExit(203) from RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:535]"
    " Read error [172.19.0.2]:1964: Connection reset by peer"
)


def _end(error: str) -> list[dict]:
    end = {"event": "end", "status": "failed", "exit_code": 203, "error": error}
    return [{"event": "phase", "name": "rendezvous"}, end]


def _killed_rank_3(error: str) -> dict:
    # rank 3's SIGKILL is known only when its node exits (21.42 s); its peers end at 19.96 s
    metrics = {
        0: _end(error),
        1: [{"event": "phase", "name": "rendezvous"}],
        2: _end(error),
        3: [{"event": "phase", "name": "rendezvous"}],
    }
    exits = {
        0: {"code": 203, "t": 19.96, "by_itself": True},
        2: {"code": 203, "t": 19.96, "by_itself": True},
        3: {"code": -9, "signal": 9, "signature": "SIGKILL", "t": 21.42, "by_itself": True},
    }
    return rules.judge(facts.gather(4, metrics, exits=exits))


def test_peers_that_exit_on_a_lost_connection_are_not_the_culprit():
    v = _killed_rank_3(PEER_LOST)
    assert (v.kind, v.culprits) == ("died", [3]), v
    assert v.evidence.startswith("rank 3 was killed (SIGKILL, exit -9)"), v


def test_a_rank_that_exits_on_its_own_error_is_still_named():
    v = _killed_rank_3("SystemExit(203) from ValueError: the batch has no labels")
    assert (v.kind, v.culprits) == ("died", [0, 2]), v


def test_a_rank_in_slow_mains_work_under_an_fsdp_hook_never_arrived():
    """The pool's run 20 (slow-main on rank 3, fms's FSDP2): rank 3's work runs under FSDP's
    post-backward hook in torch/distributed/fsdp; it was read as waiting like the others."""
    from support.stack_texts import BUSY, WAITING
    from tuning.harness.stacks import stack_text

    dumped = {
        r: {**stack_text.parse(BUSY if r == 3 else WAITING), "state": "dumped"} for r in range(4)
    }
    metrics = {r: [{"event": "phase", "name": "rendezvous"}] for r in range(4)}
    v = rules.judge(facts.gather(4, metrics, {"ranks": dumped}))
    assert (v.kind, v.culprits) == ("never arrived", [3]), v


# The pool's run 21 (skip-collective on rank 0, single, our trainer, 4 ranks, DETAIL on): the
# skip landed in a save. Rank 0 skipped the metrics' all_gather and waits in the model's
# gather, recorded as #185; ranks 1-3 wait in the metrics' all_gather, not recorded yet (torch's
# DETAIL check runs before it). Every recorded number agrees; the callers do not.
_SP = "/opt/venv/lib/python3.11/site-packages"
_FR = 'flight recorder: {{"op": "{op}", "backend": "gloo", "seq": {seq}, "pg": {pg}, "state": '
_FR += '"{state}", "in": {size}, "out": {size}, "t": 1796436560.1}}\n'
_RECORDED = _FR.format(op="all_gather", seq=736, pg=1, state="done", size="[[7]]") + _FR.format(
    op="all_reduce", seq=184, pg=0, state="done", size="[[1]]"
)
_SKIPPED = f"""Current thread 0x00007f04395eb040 (most recent call first):
  File "{_SP}/torch/distributed/_functional_collectives.py", line 142 in wait_tensor
  File "{_SP}/torch/distributed/tensor/_api.py", line 731 in redistribute
  File "{_SP}/torch/distributed/checkpoint/state_dict.py", line 1221 in get_model_state_dict
  File "{_SP}/accelerate/accelerator.py", line 3973 in get_state_dict
  File "{_SP}/transformers/trainer.py", line 4107 in save_model
  File "/opt/harness/tuning/container/sft/atomic_save.py", line 49 in _save_checkpoint
{_RECORDED}{_FR.format(op="all_gather", seq=185, pg=0, state="pending", size="[[88, 64]]")}"""
_WAITED = f"""Current thread 0x00007f04395eb041 (most recent call first):
  File "{_SP}/torch/distributed/distributed_c10d.py", line 4280 in all_gather
  File "{_SP}/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "/opt/harness/tuning/container/rank/desync.py", line 100 in call
  File "/opt/harness/tuning/container/rank/desync.py", line 175 in wrapper
  File "{_SP}/transformers/trainer_pt_utils.py", line 290 in distributed_broadcast_scalars
  File "/opt/harness/tuning/container/sft/atomic_save.py", line 49 in _save_checkpoint
{_RECORDED}"""


def _skip_in_a_save(world: int) -> dict:
    from tuning.harness.stacks import stack_text

    dumped = {
        r: {**stack_text.parse(_SKIPPED if r == 0 else _WAITED), "state": "dumped"}
        for r in range(world)
    }
    metrics = {r: [{"event": "phase", "name": "rendezvous"}] for r in range(world)}
    return rules.judge(facts.gather(world, metrics, {"ranks": dumped}))


def test_a_skip_in_a_save_is_named_by_where_each_rank_called_its_collective():
    v = _skip_in_a_save(4)
    assert (v.kind, v.culprits) == ("desync", [0]), v
    assert v.evidence == (
        "ranks 1, 2 and 3 called all_gather from transformers/trainer_pt_utils.py:290 "
        "(distributed_broadcast_scalars); rank 0 called all_gather from "
        "accelerate/accelerator.py:3973 (get_state_dict), each as collective #185: rank 0 "
        "called it from elsewhere than the others"
    ), v.evidence


def test_with_two_ranks_both_callers_are_named():
    v = _skip_in_a_save(2)
    assert (v.kind, v.culprits) == ("desync", [0, 1]), v


def _fp(seq: int, op: str, shape: str) -> str:
    return (
        f"CollectiveFingerPrint(SequenceNumber={seq}, OpType={op}, TensorShape=[{shape}], "
        "TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), "
        "device=cpu))"
    )


def test_torchs_mismatch_check_is_read_through_fms_exit_203():
    """The pool's run 24 (mismatch on rank 3, single, fms): every rank's DETAIL error, caught
    by fms and turned into SystemExit(203); the recorder keeps what was caught."""
    theirs, odd = _fp(209, "_ALLGATHER_BASE", "9248"), _fp(209, "ALLREDUCE", "1")
    mine = {r: (theirs, odd) if r < 3 else (odd, theirs) for r in range(4)}
    metrics = {
        r: _end(
            f"SystemExit(203) from RuntimeError: Detected mismatch between collectives "
            f"on ranks. Rank {r} is running collective: {mine[r][0]}, but Rank "
            f"{0 if r == 3 else 3} is running collective: {mine[r][1]}"
        )
        for r in range(4)
    }
    exits = {r: {"code": 203, "t": 19.9, "by_itself": True} for r in range(4)}
    v = rules.judge(facts.gather(4, metrics, exits=exits))
    assert (v.kind, v.culprits, v.rule) == ("desync", [3], "torch"), v


def test_every_rank_failing_alike_names_no_rank():
    """The pool's run 25 (fms per-rank under DETAIL): every rank raised the same error at once,
    before the fault mattered. No rank caused it: none is named."""
    error = (
        "SystemExit(203) from RuntimeError: Backend gloo does not support "
        "allgather_into_tensor_coalesced"
    )
    metrics = {r: _end(error) for r in range(4)}
    exits = {r: {"code": 1, "t": 30.3, "by_itself": True} for r in range(4)}
    v = rules.judge(facts.gather(4, metrics, exits=exits))
    assert (v.kind, v.culprits) == ("died", []), v
    assert v.evidence.startswith("every rank raised SystemExit(203) from RuntimeError: "), v


def test_a_rank_that_never_registered_never_arrived():
    """The pool's run 15 (no-show: rank 0 stopped before it ran, single): the others wait in
    the process group's setup; rank 0 wrote nothing and has no pid file."""
    wait = f"""Current thread 0x00007f04395eb042 (most recent call first):
  File "{_SP}/torch/distributed/distributed_c10d.py", line 2169 in _new_process_group_helper
  File "/opt/harness/tuning/container/sft_trainer.py", line 154 in main
"""
    from tuning.harness.stacks import stack_text

    dumped = {0: {"state": "not registered"}}
    dumped |= {r: {**stack_text.parse(wait), "state": "dumped"} for r in (1, 2, 3)}
    metrics = {r: [{"event": "phase", "name": "imports"}] for r in (1, 2, 3)}
    v = rules.judge(facts.gather(4, metrics, {"ranks": dumped}))
    assert (v.kind, v.culprits) == ("never arrived", [0]), v
    assert v.evidence.startswith("rank 0 never started (its process wrote nothing"), v


def test_a_rank_with_no_node_never_arrived_while_the_others_wait_to_register():
    """The pool's runs 16-18 (no-show of rank 3, late-master of rank 0; per-rank, fms): one rank
    has no container; the others' workers wait in torchrun's rendezvous, before the rank
    recorder, so none registered. That is no sign against them: the rank with no node is named."""
    dumped = {r: {"state": "not registered"} for r in (0, 1, 2)}
    dumped[3] = {"state": "not started (no container or process holds it)"}
    v = rules.judge(facts.gather(4, {}, {"ranks": dumped}))
    assert (v.kind, v.culprits) == ("never arrived", [3]), v
    assert v.evidence.startswith("rank 3 never started (no container or process ever held"), v


def test_a_throttled_rank_is_named_slow_though_the_machine_delays_others_too():
    """The pool's run 11 (slow rank 0, per-rank, 5 % of a CPU): the creation times of the 8
    collectives every rank finished, after the first caller. Ranks 1 and 3 were 0.1 s late at
    the one rank 0 was 0.29 s late to; rank 0's mean lateness came out 4.99 times theirs, and a
    rule on lateness named no one. The group waited for rank 0 alone."""
    after_first = {  # seq: (rank 0, 1, 2, 3), seconds (to 0.1 ms, as recorded)
        317: (0.0935, 0.0013, 0.0002, 0.0),
        318: (0.0, 0.0, 0.0026, 0.0012),
        319: (0.0, 0.0, 0.0031, 0.0031),
        320: (0.0049, 0.0, 0.0035, 0.0032),
        321: (0.0981, 0.0, 0.005, 0.0033),
        322: (0.0015, 0.0002, 0.0028, 0.0),
        323: (0.0845, 0.0022, 0.0007, 0.0),
        324: (0.287, 0.102, 0.0, 0.1033),
    }
    ranks = {
        r: {
            "fr": [
                {"seq": seq, "op": "all_gather", "state": "done", "t": 100 + ts[r]}
                for seq, ts in after_first.items()
            ]
        }
        for r in range(4)
    }
    v = rules.judge({"world": 4, "progressing": True, "ranks": ranks})
    assert (v.kind, v.culprits) == ("slow", [0]), v
    assert v.waited_s["0"] > 0.05 and max(v.waited_s[r] for r in "123") < 0.002, v


def _paused_rank_6(tmp_path, teardown_at):
    """The pool's seed-1 run 6 (pause rank 6 of 7, single, fms): the hang's stacks showed rank 6
    stopped and the rest waiting; then the harness's teardown SIGTERMed every rank (the rank
    recorder wrote each one's "signal" line) and the verdict read a stop from outside."""
    from support.stack_texts import WAITING
    from tuning.harness.stacks import stack_text
    from tuning.harness.verdict import live

    dumped = {r: {**stack_text.parse(WAITING), "state": "dumped"} for r in range(6)}
    dumped[6] = {"state": "stopped (SIGSTOP: it cannot dump)"}
    signal = {"event": "signal", "name": "SIGTERM", "source": "harness_rank"}
    metrics = {
        r: [
            {"event": "phase", "name": "rendezvous"},
            {**signal, "time": 1000.3 + r / 100, "pid": 9 + r},
        ]
        for r in range(7)
    }
    (tmp_path / "trainer.log").write_text("harness-launch: accelerate launch ...\n")
    kept = live.from_outside(metrics, tmp_path, teardown_at)
    return rules.judge(facts.gather(7, kept, {"ranks": dumped}))


def test_the_harnesss_own_teardown_is_no_stop_from_outside(tmp_path):
    v = _paused_rank_6(tmp_path, teardown_at=1000.0)
    assert (v.kind, v.culprits) == ("stopped or frozen", [6]), v
    # a SIGTERM before the harness began stopping the run is a stop from outside, as it was
    v = _paused_rank_6(tmp_path, teardown_at=1001.0)
    assert v.kind == "stopped from outside", v
