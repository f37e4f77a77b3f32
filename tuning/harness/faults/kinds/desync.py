"""Desync kinds: the target rank itself breaks the order of the group's collectives, through
the wrapper around torch.distributed's calls (tuning/container/rank/desync.py; our trainer loads it,
and the rank recorder for fms or any ENTRY). The ranks are told the kind in their environment; the
harness strikes at AT_STEP by making a file the target rank looks for, and the rank's next
collective is the one it changes (its metrics then say which, with the call site):
- slow-main: the rank works TIMEOUT + 30 s before that collective, as a tokenization on the
  main process only does: its peers wait in the collective until their timeout;
- skip-collective: the rank does not call it; its later calls meet the peers' earlier ones;
- mismatch: it calls another collective there (mismatch-shape: the same one, another shape).
skip-collective and the mismatches run with TORCH_DISTRIBUTED_DEBUG=DETAIL: torch checks each
collective's op and shapes across ranks before it runs and stops every rank at the first that
differs, naming both fingerprints (run/torch_check.py reads them). Without it gloo aborts a
peer of the odd rank on a size it did not expect, and names no one. slow-main leaves the peers
waiting in the collective: the verdict names the rank that never arrived.
On CPU ranks, a job that gathers its FSDP checkpoint (fms: accelerate's get_state_dict) cannot
save under DETAIL: torch's checking wrapper around gloo asks it for
allgather_into_tensor_coalesced, which gloo lacks, so every rank dies at the first save whatever
the fault. Those kinds refuse an AT_STEP the strike may not reach before that save."""

from __future__ import annotations

from tuning.harness.contract.container import TMP_DIR
from tuning.harness.faults.kinds.kind import HANGS, Kind
from tuning.harness.faults.kinds.tools import sh

GO = f"{TMP_DIR}/harness-desync-go"  # in the target's container: the ranks' /tmp
SLOW_EXTRA_S = 30  # slow-main's work outlasts the peers' collective timeout by this much


def strike(inj, nodes, ctr, pid) -> str:
    sh(ctr, f"touch {GO}")
    return f"told rank {inj.rank} to {inj.kind.name} at its next collective (touch {GO})"


def _env(kind: str, how: str = "op"):
    def env(knobs: dict) -> dict[str, str]:
        out = {
            "HARNESS_DESYNC": kind,
            "HARNESS_DESYNC_RANK": str(knobs["rank"]),
            "HARNESS_DESYNC_S": str(knobs["timeout_s"] + SLOW_EXTRA_S),
            "HARNESS_DESYNC_HOW": how,
            "HARNESS_DESYNC_WHEN": GO,
        }
        if kind != "slow-main":  # torch's own op and shape check stops every rank at the odd
            out["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"  # call (torch_check.py), before gloo
        return out  # aborts a peer on a size it did not expect, with no word of whose it was

    return env


# The strike reaches the rank some steps after AT_STEP shows: the harness reads rank 0's log (every
# 0.1 s while it waits: faults/follow.py), then the rank looks for the GO file at most every 50 ms
# (tuning/container/rank/desync.py). fms's unpaced steps on 2 ranks take 0.05-0.1 s: at 2 steps'
# room a strike told at step 9 for AT_STEP=7 met the save at 10 (make pool SEED=3, run 23)
STRIKE_LAG_STEPS = 5


def last_at_step(first_save: int) -> int:
    """The latest AT_STEP whose strike lands before a save at step `first_save`."""
    return first_save - STRIKE_LAG_STEPS - 1


def before_first_save(layout, job: dict, knobs: dict) -> str | None:
    """Why AT_STEP is too late for a foreign trainer's job under DETAIL on gloo, if it is."""
    on_gpus = layout.topology.device == "gpu"
    if not layout.trainer.entry or on_gpus or job.get("save_strategy") != "steps":
        return None  # ours saves without gathering; NCCL has the coalesced all-gather
    first, at = job.get("save_steps"), knobs["at_step"]
    if not isinstance(first, int) or at <= last_at_step(first):
        return None
    return (
        f"AT_STEP={at} is too late for this job: it saves first at step {first} "
        f"(save_steps), and under TORCH_DISTRIBUTED_DEBUG=DETAIL, which this kind needs, "
        f"gloo cannot gather that checkpoint (allgather_into_tensor_coalesced): every rank "
        f"would die at the save, whatever the fault. The strike lands up to "
        f"{STRIKE_LAG_STEPS} steps after AT_STEP: set AT_STEP={last_at_step(first)} "
        f"or lower"
    )


def _kind(name: str, order: int, pool_place: int, desync: str, how: str = "op") -> Kind:
    detail = desync != "slow-main"
    # slow-main never enters the collective; the others call another one: torch's DETAIL check
    judged = "desync" if detail else "never arrived"
    return Kind(
        name,
        order,
        inject=strike,
        pid="never",
        rank_env=_env(desync, how),
        expect=HANGS,
        signatures=(("desync", r"harness desync: "),),
        judged=judged,
        pool_place=pool_place,
        refuse=before_first_save if detail else None,
    )


KINDS = (
    _kind("slow-main", 160, 10, "slow-main"),
    _kind("skip-collective", 170, 11, "skip-collective"),
    _kind("mismatch", 180, 12, "mismatch"),
    _kind("mismatch-shape", 190, 13, "mismatch", "shape"),
)
