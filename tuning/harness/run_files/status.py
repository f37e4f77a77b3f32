"""A run's status, from its nodes' exits and its ranks' end lines: one value for every command
(summary.json's `status`), and the exit code a command returns for it."""

from __future__ import annotations

from enum import StrEnum

from tuning.harness.run_files.metric_lines import ends_seen


class Status(StrEnum):
    """summary.json's `status` (a str: JSON and comparisons with text keep working)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"  # a rank stopped early on SIGTERM and checkpointed
    INTERRUPTED = "interrupted"  # the harness was told to stop (Ctrl-C, SIGTERM)


# A rank's end line (the rank recorder's `end` event) says how its trainer stopped.
ENDED_WELL = ("completed", "preempted")

EXIT_CODES = {Status.SUCCEEDED: 0, Status.INTERRUPTED: 130, Status.PREEMPTED: 143}  # else 1


def status_of(
    exits: dict[str, int | None], metrics: dict[int, list[dict]]
) -> tuple[Status, str | None]:
    """A run's status once every node exited, and why when it is not `succeeded`. Exit codes
    alone lie: a rank stopped by SIGTERM checkpoints and exits 0, and a run whose nodes never
    started has no exit code that failed. The rules (docs/design.md):
      failed     no node ran; or a rank's end line says failed/refused; or a node exited
                 non-zero; or a rank that logged anything ended without an end line
      preempted  some rank stopped early on SIGTERM (and checkpointed), none failed
      succeeded  every node exited 0 and every rank that logged ended `completed`"""
    if not exits:
        return Status.FAILED, "no node ran (no container or process was started)"
    ends = ends_seen(metrics)
    broken = sorted(r for r, e in ends.items() if e.get("status") not in ENDED_WELL)
    stopped = sorted(r for r, e in ends.items() if e.get("status") == "preempted")
    if stopped and not broken:
        return Status.PREEMPTED, (
            f"rank(s) {_ranks(stopped)} stopped early on SIGTERM and "
            "checkpointed; RESUME=1 continues from there"
        )
    if broken:
        first = ends[broken[0]]  # its own words (e.g. the GPU guard's), so the summary says why
        why = f": {first['error']}" if first.get("error") else ""
        return Status.FAILED, f"rank(s) {_ranks(broken)} ended {first.get('status')}{why}"
    bad = {n: c for n, c in exits.items() if c != 0}
    silent = sorted(r for r, lines in metrics.items() if lines and r not in ends)
    if bad:
        why = ", ".join(f"{n} exited {c}" for n, c in bad.items())
        if ends and not silent:  # each trainer returned; a process died later, on its way out
            why += (
                " after every rank's trainer returned (end lines: completed): a rank's "
                "process died on its way out; the node's log names the rank and signal"
            )
        return Status.FAILED, why
    if silent:
        return Status.FAILED, f"rank(s) {_ranks(silent)} exited 0 with no end line (killed?)"
    return Status.SUCCEEDED, None


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))
