"""The save-kill fault: SIGKILL a rank while a checkpoint is being written, and prove it.

A save is under way while the output holds an incomplete checkpoint (tuning/container/rank/torn.py's
rule): our trainer's staging dir `tmp-checkpoint-N`, or a foreign trainer's `checkpoint-N` before
its trainer_state.json. Our trainer holds every save HARNESS_SAVE_SLEEP seconds after the weights
(tuning/container/sft/atomic_save.py), and the rank recorder holds a foreign HF Trainer's (fms) the
same way (library_patches.hold_saves), so the harness, polling twice a second, finds it every time;
the default demo never sets it. What the directory held at the kill goes on record.
"""

from __future__ import annotations

from pathlib import Path

from tuning.container.rank import torn
from tuning.harness.faults.fault_json import FaultRecord
from tuning.harness.faults.kinds.kind import FAILS, Kind, Soak
from tuning.harness.faults.kinds.tools import signal

KIND = "save-kill"
SAVE_SLEEP_S = 4  # HARNESS_SAVE_SLEEP for this fault: the window a kill lands in
CLUSTER = (
    "the HF Trainer writes checkpoint-N in place, so a kill inside the save leaves it torn under "
    "its final name; transformers' get_last_checkpoint takes the highest number, so on a "
    "PyTorchJob every restart (restartPolicy OnFailure) loads it and dies the same way until "
    "backoffLimit ends the job (fms-hf-tuning issue #432). Here the torn checkpoint is moved "
    "aside before every start: a restart loses the steps since the newest complete one"
)


def under_way(output: Path) -> Path | None:
    """The checkpoint being written (the newest incomplete one), if any."""
    found = torn.incomplete(output)
    return max((p for p, _ in found), key=_step, default=None)


def _step(path: Path) -> int:
    tail = path.name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def files_in(path: Path) -> list[str]:
    """Every file under `path`, relative to it, by name."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def facts(at_kill: dict | None, output: Path, fault_step: int | None) -> dict:
    """fault.json's "save": what the checkpoint held at the kill, what was moved aside, the
    newest complete checkpoint before it (where a restart resumes) and the steps lost."""
    if not at_kill:
        return {}
    step = _step(Path(at_kill["checkpoint"]))
    complete = [_step(p) for p in torn.checkpoints(output) if torn.missing(p) is None]
    before = max((s for s in complete if s < step), default=0)
    return {
        **at_kill,
        "step": step,
        "moved_aside": torn.moved(output),
        "resumed_from_step": before,
        "steps_lost": (fault_step or step) - before,
    }


def lines(rec: FaultRecord) -> list[str]:
    """fault.md's lines on the save."""
    save = rec.own.get("save")
    if not save:
        return []
    return [
        f"- save: SIGKILL landed while `{save['checkpoint']}` was being written; files there at "
        f"the kill: {', '.join(save['files']) or 'none'}",
        f"- moved aside before the restart: {', '.join(save['moved_aside']) or 'nothing'}; "
        f"resumed from step {save['resumed_from_step']}, {save['steps_lost']} step(s) lost",
    ]


def _saving(inj, nodes) -> bool:
    """Past AT_STEP, the kill waits for the next save to be under way."""
    inj.state["saving"] = under_way(nodes.run_dir / "output")
    return inj.state["saving"] is not None


def inject(inj, nodes, ctr, pid) -> str:
    saving = inj.state["saving"]
    inj.state["at_kill"] = {"checkpoint": saving.name, "files": files_in(saving)}
    how = signal(inj, ctr, pid, "KILL")
    return f"{how}, while {saving.name} was being written"


KINDS = (
    Kind(
        KIND,
        20,
        inject=inject,
        ready=_saving,
        expect=FAILS,
        recovers=True,
        cluster=CLUSTER,
        judged="died",
        pool_place=4,
        # in a soak: held inside the save at or after its step, which is torn; the group
        # resumes from the save before it
        soak=Soak("save", "torn"),
        # our trainer holds each save open this long (atomic_save.py; the recorder: fms's)
        rank_env=lambda knobs: {"HARNESS_SAVE_SLEEP": str(SAVE_SLEEP_S)},
        facts=lambda follow, seen: {
            "save": facts(follow.inject.state.get("at_kill"), seen.output, follow.inject_step)
        },
        lines=lines,
    ),
)
