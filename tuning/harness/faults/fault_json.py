"""fault.json as a type: `FaultRecord`, one fault run's record (commands/fault.py starts it with
what was asked, faults/record.py adds what happened), with each rank's end (`RankEnd`) and the
checkpoints the run left (`Checkpoint`). `to_json` is the one writer of fault.json's dict
(faults/write.py writes it), `from_json` the one reader (make pool, make repro RUN=1); no other
module reads its keys. What is not the harness's own stays in the owner's words: a kind's facts
(`own`: Kind.facts' keys, read by that kind), the hang's stacks (stacks/dumps.py), a foreign
trainer (run/foreign.py) and the timeline's events (faults/follow.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tuning.harness.verdict.record import Verdict


@dataclass(frozen=True)
class RankEnd:
    """How one rank ended: its last step, when it ended and by whom, its exit and signal, the
    OOM flag, and the error signature found (`seen_signature`: one a user's run would show too,
    never a kind's own words: what the verdict reads)."""

    rank: int
    node: str
    last_step: int | None
    last_step_t: float | None
    end_t: float | None
    ended_by: str
    end_status: str | None
    exit_code: int | None
    node_exit_code: int | None
    signal: int | None
    oom_killed: bool
    signature: str | None
    seen_signature: str | None
    error: str | None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> RankEnd:
        return cls(**d)


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint the run left: complete or torn, saved before the fault or after it."""

    name: str
    step: int
    complete: bool
    before_fault: bool

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Checkpoint:
        return cls(**d)


@dataclass(frozen=True)
class FaultRecord:
    """One fault run. A run that never started (the kind does not apply here, or this machine
    cannot do it) has a `reason` and, past what was asked, only its status and outcome."""

    # --- what was asked (commands/fault.py)
    run_id: str = ""
    kind: str = ""
    layout: str | None = None
    timeout_s: float | None = None
    rdzv_timeout_s: float | None = None
    rank: int | None = None
    at_step: int | None = None
    steps: int | None = None  # None under ARGS until its Trainer says
    knobs: dict[str, int] = field(default_factory=dict)  # the kinds' own knobs (LATE: late_s)
    max_restarts: int | None = None
    world_size: int | None = None
    step_sleep_s: float | None = None  # None: a foreign trainer's steps, not paced
    trainer: dict | None = None  # a foreign trainer (run/foreign.py trainer_record)
    steps_note: str | None = None
    args_note: str | None = None
    # --- what happened (faults/record.py)
    status: str | None = None
    reason: str | None = None  # why it did not run
    how: str | None = None
    injected_t: float | None = None
    injected_step: int | None = None
    stopped_by: str | None = None
    outcome: str | None = None
    fault_to_end_s: float | None = None
    hang_detected_s: float | None = None
    ranks_ended_s: float | None = None
    bound_s: float | None = None
    run_status: str | None = None
    restarts: list[dict] = field(default_factory=list)  # summary.json's
    steps_reached: int | None = None
    ranks: list[RankEnd] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    on_a_cluster: str | None = None
    timeouts: list[str] | None = None  # None: no step came before the fault to check them by
    stacks: dict | None = None  # kept for a hang (stacks/hung.py)
    own: dict[str, Any] = field(default_factory=dict)  # the kind's facts (Kind.facts)
    verdict: Verdict | None = None
    goal_met: bool | None = None

    def to_json(self) -> dict:
        """fault.json's dict, keyed and ordered as the record was always written."""
        out: dict[str, Any] = {
            "run_id": self.run_id,
            "kind": self.kind,
            "layout": self.layout,
            "timeout_s": self.timeout_s,
            "rdzv_timeout_s": self.rdzv_timeout_s,
            "rank": self.rank,
            "at_step": self.at_step,
            "steps": self.steps,
            **self.knobs,
            "max_restarts": self.max_restarts,
            "world_size": self.world_size,
            "step_sleep_s": self.step_sleep_s,
        }
        for key in ("trainer", "steps_note", "args_note"):  # a foreign trainer's only
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.reason is not None:
            return {
                **out,
                "status": self.status,
                "reason": self.reason,
                "outcome": self.outcome,
                "goal_met": self.goal_met,
                "leftovers": self.leftovers,
            }
        out.update(
            status=self.status,
            how=self.how,
            injected_t=self.injected_t,
            injected_step=self.injected_step,
            stopped_by=self.stopped_by,
            outcome=self.outcome,
            fault_to_end_s=self.fault_to_end_s,
            hang_detected_s=self.hang_detected_s,
            ranks_ended_s=self.ranks_ended_s,
            bound_s=self.bound_s,
            run_status=self.run_status,
            restarts=self.restarts,
            steps_reached=self.steps_reached,
            ranks=[x.to_json() for x in self.ranks],
            timeline=self.timeline,
            leftovers=self.leftovers,
            checkpoints=[c.to_json() for c in self.checkpoints],
            on_a_cluster=self.on_a_cluster,
            timeouts=self.timeouts,
        )
        if self.stacks is not None:
            out["stacks"] = self.stacks
        out.update(self.own)
        out["verdict"] = self.verdict.to_json() if self.verdict else None
        out["goal_met"] = self.goal_met
        return out

    @classmethod
    def from_json(cls, d: dict) -> FaultRecord:
        """The record of fault.json's dict (a missing or half-written file's {}: an empty one).
        Keys that are no field are the kinds': their knobs where commands/fault.py puts them
        (between "steps" and "max_restarts"), their facts anywhere else."""
        keys = list(d)
        lo = keys.index("steps") + 1 if "steps" in d else len(keys)
        hi = keys.index("max_restarts") if "max_restarts" in d else 0
        theirs = [k for k in keys if k not in _FIELDS]
        knobs = {k: d[k] for k in theirs if lo <= keys.index(k) < hi}
        plain = {k: d[k] for k in keys if k in _FIELDS and k not in _NESTED}
        return cls(
            **plain,
            knobs=knobs,
            own={k: d[k] for k in theirs if k not in knobs},
            ranks=[RankEnd.from_json(x) for x in d.get("ranks") or []],
            checkpoints=[Checkpoint.from_json(c) for c in d.get("checkpoints") or []],
            verdict=Verdict.from_json(d["verdict"]) if d.get("verdict") else None,
        )


_NESTED = {"ranks", "checkpoints", "verdict"}
_FIELDS = {f.name for f in fields(FaultRecord)} - {"knobs", "own"}  # fault.json's own keys
