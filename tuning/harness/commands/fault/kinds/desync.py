"""Desync kinds: the target rank itself breaks the order of the group's collectives, through
the wrapper around torch.distributed's calls (tuning/rank/desync.py; our trainer loads it, and the
rank recorder for fms or any ENTRY). The ranks are told the kind in their environment; the
harness strikes at AT_STEP by making a file the target rank looks for, and the rank's next
collective is the one it changes (its metrics then say which, with the call site):
- slow-main: the rank works TIMEOUT + 30 s before that collective, as a tokenization on the
  main process only does: its peers wait in the collective until their timeout;
- skip-collective: the rank does not call it; its later calls meet the peers' earlier ones;
- mismatch: it calls another collective there (mismatch-shape: the same one, another shape).
skip-collective and the mismatches run with TORCH_DISTRIBUTED_DEBUG=DETAIL: torch checks each
collective's op and shapes across ranks before it runs and stops every rank at the first that
differs, naming both fingerprints (run/verdict_torch.py reads them). Without it gloo aborts a
peer of the odd rank on a size it did not expect, and names no one. slow-main leaves the peers
waiting in the collective: the verdict names the rank that never arrived."""

from __future__ import annotations

from tuning.harness.commands.fault.kinds.kind import HANGS, Kind
from tuning.harness.commands.fault.kinds.tools import sh
from tuning.harness.spec.layout import TMP_DIR

GO = f"{TMP_DIR}/harness-desync-go"  # in the target's container: the ranks' /tmp
SLOW_EXTRA_S = 30  # slow-main's work outlasts the peers' collective timeout by this much


def strike(inj, nodes, ctr, pid) -> str:
    sh(ctr, f"touch {GO}")
    return f"told rank {inj.rank} to {inj.kind.name} at its next collective (touch {GO})"


def _env(kind: str, how: str = "op"):
    def env(knobs: dict) -> dict[str, str]:
        out = {"HARNESS_DESYNC": kind, "HARNESS_DESYNC_RANK": str(knobs["rank"]),
               "HARNESS_DESYNC_S": str(knobs["timeout_s"] + SLOW_EXTRA_S),
               "HARNESS_DESYNC_HOW": how, "HARNESS_DESYNC_WHEN": GO}  # fmt: skip
        if kind != "slow-main":  # torch's own op and shape check stops every rank at the odd
            out["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"  # call (verdict_torch.py), before gloo
        return out  # aborts a peer on a size it did not expect, with no word of whose it was

    return env


def _kind(name: str, order: int, desync: str, how: str = "op") -> Kind:
    return Kind(name, order, inject=strike, pid="never", rank_env=_env(desync, how),
                expect=HANGS, signatures=(("desync", r"harness desync: "),))  # fmt: skip


KINDS = (
    _kind("slow-main", 160, "slow-main"),
    _kind("skip-collective", 170, "skip-collective"),
    _kind("mismatch", 180, "mismatch"),
    _kind("mismatch-shape", 190, "mismatch", "shape"),
)
