"""One fault kind, declared once (a frozen `Kind` in its own module of this package): its
knobs, where it applies, what it does to the ranks (its injector and what undoes it), what
it is expected to cause, how its record reads, how the scored pool runs it and how a soak
strikes it. commands/fault.py, faults/inject.py, faults/follow.py, faults/record.py,
faults/write.py, faults/pool_list.py and soak/ read only these fields; none names a kind.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tuning.harness.faults.fault_json import FaultRecord

# Where a kind may not apply: LAYOUT=single, per-rank with NETWORK=shared, a foreign trainer
WHERE = ("single", "shared", "foreign")
# When the injector needs the rank's worker pid (found with `docker exec`): only in LAYOUT=single
# (a per-rank kind acts on the container), always, or never
PID = ("single", "always", "never")
# How long the harness lets a run go on after the fault before it stops it
SHORT = "TIMEOUT + 15 s after the fault"  # the job must end or hang by then
LONG = "180 s after the fault"  # the job is expected to go on (or restart: MAX_RESTARTS)
SINCE_STEP = "180 s after the newest step"  # the job goes on, slower: never cut while it steps
STEP_SLEEP_S = 0.2  # HARNESS_STEP_SLEEP: paces steps so a fault lands near its step
# In a soak the struck rank waits at the end of its step, or inside the save at or after it
# (tuning/container/sft/fault_hooks.hold); the group resumes from the newest save before the step,
# from the save before the torn one, or at the next step (the stop saved it): soak/plan.strike
HOLDS = ("step", "save")
RESUMES = ("before", "torn", "next")


@dataclass(frozen=True)
class Knob:
    """A kind's own setting: fault.json's key, the flag (flags/flag_table.py) that sets it."""

    key: str
    flag: str
    default: int
    minimum: int = 1


@dataclass(frozen=True)
class Expect:
    """What a kind is expected to cause, and when its record says the goal was met."""

    name: str
    goal: Callable[[FaultRecord], bool]
    hangs: bool = False  # the follow watches for the hang (a timeout, or no step for TIMEOUT)


def _left(rec: FaultRecord) -> bool:
    return not rec.leftovers


FAILS = Expect(  # every rank ends, by itself, within TIMEOUT + 15 s of the fault
    "fails fast",
    lambda rec: _left(rec) and rec.outcome == "failed fast" and rec.fault_to_end_s <= rec.bound_s,
)
HANGS = Expect(  # peers wait: detected (a timeout, or no step for TIMEOUT) within the bound
    "hangs",
    lambda rec: (
        _left(rec)
        and rec.outcome in ("hung (detected)", "failed fast")
        and (rec.fault_to_end_s if rec.hang_detected_s is None else rec.hang_detected_s)
        <= rec.bound_s
    ),
    hangs=True,
)
STOPS = Expect(  # every rank stops at a step and a checkpoint is saved after the fault
    "stops and checkpoints",
    lambda rec: (
        _left(rec)
        and rec.outcome == "preempted"
        and any(not c.before_fault and c.complete for c in rec.checkpoints)
    ),
)
GOES_ON = Expect("goes on", lambda rec: _left(rec) and rec.outcome == "finished")


@dataclass(frozen=True)
class Soak:
    """How a kind fails a soak's group at a planned step, so that the group restarts."""

    hold: str  # HOLDS
    resumes: str  # RESUMES
    # (nodes, container) -> what undoes the fault; the group's next attempts run in the same
    # container (a fault run ends with its containers and needs none)
    undo: Callable[..., Callable[[], None]] | None = None

    def __post_init__(self) -> None:
        if self.hold not in HOLDS or self.resumes not in RESUMES:
            raise TypeError(f"a soak's hold takes {HOLDS}, resumes {RESUMES}")


@dataclass(frozen=True)
class Kind:
    name: str  # FAULT=<name>
    order: int  # its place in FAULT=?'s list and in FAULT=all's runs
    # --- what it does. `inject(inj, nodes, ctr, pid) -> how | None (not yet: the next tick)`
    # once the target rank is at AT_STEP (faults/inject.py Injector: inj.heals undo it);
    # `due(inj, metrics, nodes, now) -> [(how, step, when)]` instead, for a kind that does not
    # wait for the step (it strikes at the start) or that the rank carries out itself
    inject: Callable[..., str | None] | None = None
    due: Callable[..., list] | None = None
    ready: Callable[..., bool] | None = None  # (inj, nodes): checked before the pid is sought
    pid: str = "single"  # PID
    state: Callable[[str, dict], dict] | None = None  # (target, knobs) -> inj.state at start
    tick: Callable[..., None] | None = None  # (follow, metrics, nodes, now) after the fault
    # --- the run it needs
    knobs: tuple[Knob, ...] = ()
    rank: int | None = None  # the rank it always hits, whatever RANK (the pool's runs too)
    step_sleep_s: float = STEP_SLEEP_S
    # The ranks' environment: how a kind that acts inside the rank (our trainer's hooks, the rank
    # recorder) is told what to do: (knobs) -> {NAME: value}
    rank_env: Callable[[dict], dict[str, str]] | None = None
    held_back: bool = False  # per-rank: the target's node is left out of `compose up`
    staged: Callable[..., Any] | None = None  # (spec) -> a context around the run (a volume)
    # --- where it applies: WHERE -> why not there; `check(layout) -> why | None`: a probe of
    # this machine before the run (netem), recorded as "unsupported"
    not_here: Mapping[str, str] = field(default_factory=dict)
    check: Callable[..., str | None] | None = None
    # `refuse(layout, job, knobs) -> why | None`: knobs that would not show what the kind does on
    # this job (a bad input: `make fault` stops before any run; FAULT=all records it not applicable)
    refuse: Callable[..., str | None] | None = None
    # --- what it is expected to cause, and its record
    expect: Expect | None = None
    goal: Callable[[FaultRecord], bool | None] | None = None  # replaces expect.goal
    recovers: bool = False  # with MAX_RESTARTS the group comes back and finishes every step
    deadline: str = SHORT
    slow_exit: bool = False  # after training its launcher is slow to exit, not stuck
    signatures: tuple[tuple[str, str], ...] = ()  # (label, regex) it leaves in a rank's error
    cluster: str | None = None  # fault.md's "on a cluster" line; None: from the signatures
    facts: Callable[..., dict] | None = None  # (follow, seen) -> fault.json's own keys (`own`)
    lines: Callable[[FaultRecord], list[str]] | None = None  # fault.md, after the outcome
    table: Callable[[FaultRecord], list[str]] | None = None  # fault.md, after the ranks' table
    # --- the scored pool (faults/pool_list.py): the verdict's class a right verdict gives it
    # (None: the pool never draws it)
    judged: str | None = None
    # its place in the committed pool (seed 30), whose draws follow this order: a place added
    # or moved changes that list; None: only in fresh draws (SEED=n)
    pool_place: int | None = None
    pool_flags: tuple[str, ...] = ()  # the fault command's flags the pool adds for it
    # --- a soak (soak/plan.py) draws it only with this: it ends the group, which restarts;
    # None: a one-off experiment (it hangs, slows, or is set for the whole run, not struck)
    soak: Soak | None = None

    def __post_init__(self) -> None:
        bad = set(self.not_here) - set(WHERE)
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", self.name):  # FAULT=all's run ids
            raise TypeError(f"fault kind {self.name!r}: lower-case letters, digits and '-'")
        if (self.inject is None) == (self.due is None):
            raise TypeError(f"fault kind {self.name}: give exactly one of inject and due")
        if self.expect is None and self.goal is None:
            raise TypeError(f"fault kind {self.name}: give expect or goal (its record rule)")
        if self.pool_place is not None and not self.judged:
            raise TypeError(f"fault kind {self.name}: in the pool, so give judged (its class)")
        if bad or self.pid not in PID or self.deadline not in (SHORT, LONG, SINCE_STEP):
            raise TypeError(
                f"fault kind {self.name}: not_here takes {WHERE}, pid {PID}, "
                f"deadline SHORT, LONG or SINCE_STEP"
            )

    @property
    def hangs(self) -> bool:
        """The follow watches for the hang it causes."""
        return bool(self.expect and self.expect.hangs)

    def why_not(self, layout: str, network: str, foreign: bool) -> str | None:
        """Why it does not apply to this run (LAYOUT, NETWORK, a foreign trainer), if so."""
        here = {
            "single": layout == "single",
            "foreign": foreign,
            "shared": layout == "per-rank" and network == "shared",
        }
        return next((why for where, why in self.not_here.items() if here[where]), None)

    def met(self, rec: FaultRecord) -> bool | None:
        """fault.json's goal_met."""
        if rec.max_restarts and self.recovers:
            return _left(rec) and rec.outcome == "recovered" and rec.steps_reached == rec.steps
        return (self.goal or self.expect.goal)(rec)
