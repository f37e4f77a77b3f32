"""fault.json and fault.md of one fault run, and the matrix of `--fault all`, from the
records faults/record.py builds; a kind's own lines are its (faults/kinds/: Kind.lines, table)."""

from __future__ import annotations

import shlex
from pathlib import Path

from tuning.harness.faults import verdicts
from tuning.harness.faults.fault_json import FaultRecord
from tuning.harness.faults.kinds import TABLE
from tuning.harness.run_files import folders
from tuning.harness.stacks import dumps


def write(run_dir: Path, record: FaultRecord) -> None:
    folders.write_json(run_dir / "fault.json", record.to_json())
    (run_dir / "fault.md").write_text(markdown(record))


def trainer_line(rec: FaultRecord) -> str:
    """fault.md's line on a foreign trainer: what ran, from where, and whose steps count."""
    t = rec.trainer
    said = [f"`{t['entry']}` in `{t['image']}`" + (f" from `{t['src']}`" if t.get("src") else "")]
    if t.get("args") is not None:
        said.append(f"ARGS `{shlex.join(t['args'])}`")
    said += [note for note in (rec.steps_note, rec.args_note) if note]
    return "- trainer: " + "; ".join(said)


def timeouts_line(rec: FaultRecord) -> str:
    """fault.md's line on the run's timeouts against what it measured before the fault
    (faults/record.py: checks/timeouts.py's check, as `make up` runs it)."""
    found = rec.timeouts
    if found is None:
        return "- timeouts: not checked (no step was measured before the fault)"
    if not found:
        return "- timeouts: fit what the run measured before the fault"
    return "- timeouts, against what the run measured before the fault: " + "; ".join(found)


def markdown(rec: FaultRecord) -> str:
    head = f"# Fault `{rec.kind}` on rank {rec.rank}, layout {rec.layout}\n\n"
    if rec.reason:
        return head + f"**{rec.status}**: {rec.reason}\n"
    kind = TABLE[rec.kind]
    lines = [
        head + f"- run `{rec.run_id}`, {rec.world_size} ranks, TIMEOUT={rec.timeout_s} s, "
        f"RDZV_TIMEOUT={rec.rdzv_timeout_s} s, "
        + (
            f"step paced to >= {rec.step_sleep_s} s"
            if rec.step_sleep_s is not None
            else "steps not paced (a foreign trainer)"
        ),
        f"- fault: {rec.how} at t={rec.injected_t} s (step {rec.injected_step}, "
        f"asked for step {rec.at_step})",
        f"- **outcome: {rec.outcome}**; fault to end {rec.fault_to_end_s} s, "
        + (
            "no hang detected"
            if rec.hang_detected_s is None
            else f"hang detected after {rec.hang_detected_s} s"
        )
        + f", bound {rec.bound_s} s; goal met: {rec.goal_met}",
        *verdicts.lines(rec),
        *(kind.lines(rec) if kind.lines else []),
        f"- on a cluster: {rec.on_a_cluster}",
        timeouts_line(rec),
        *([trainer_line(rec)] if rec.trainer else []),
        f"- left behind: {', '.join(rec.leftovers) or 'nothing'}",
        "- checkpoints: "
        + (
            ", ".join(f"{c.name}{'' if c.complete else ' (incomplete)'}" for c in rec.checkpoints)
            or "none"
        ),
        "",
        "| rank | node | last step (t s) | ended t s | by | exit | signal | OOM | status "
        "| signature |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for x in rec.ranks:
        lines.append(
            f"| {x.rank} | {x.node} | {x.last_step} ({x.last_step_t}) | "
            f"{x.end_t} | {x.ended_by} | {x.exit_code} | {x.signal} | "
            f"{x.oom_killed} | {x.end_status} | {x.signature} |"
        )
    lines += kind.table(rec) if kind.table else []
    lines += dumps.markdown(rec.stacks) if rec.stacks else []
    lines += ["", "## Timeline (s since start)", ""]
    lines += [f"- {e['t']:7.2f}  {e['event']}" for e in rec.timeline]  # faults/follow.py's
    return "\n".join(lines) + "\n"


def write_matrix(out: Path, records: list[FaultRecord]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    folders.write_json(out / "fault.json", [r.to_json() for r in records])
    lines = [
        "# Fault matrix",
        "",
        "| kind | layout | outcome | fault to end s | hang detected s | bound s | goal met | "
        "signatures (rank: sig) | left behind | run / reason |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        sigs = ", ".join(f"{x.rank}: {x.signature}" for x in r.ranks)
        note = r.reason or r.run_id
        lines.append(
            f"| {r.kind} | {r.layout} | {r.outcome} | {r.fault_to_end_s} "
            f"| {r.hang_detected_s} | {r.bound_s} | {r.goal_met} | "
            f"{sigs} | {', '.join(r.leftovers) or 'nothing'} | {note} |"
        )
    (out / "fault.md").write_text("\n".join(lines) + "\n")
    return out / "fault.md"
