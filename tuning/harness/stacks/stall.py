"""`make up`'s stall watch: when no rank has made progress for the stall time, every live rank's
stack summary (stacks/dumps.py) and the verdict across ranks (verdict/rules.py: the culprit, the
class, the evidence), kept in the run (output/stacks/, and summary.json's "stall" and
"verdict"); and a hang that outlasts the job's own collective timeout is ended here.

Progress is a new line in any rank's metrics (a step, a replayed step after a restart, a
phase before the first step); a node's log output is not (c10d prints rendezvous retries while
a peer is missing). Exited nodes are past watching; the live ones stay watched.

The stall time: where the ranks log steps, 10 times the median time between logged steps, at
least 12 s (a hang in a run of one-second steps is named within 15 s of its stall, the dump
and the verdict included); before the second step,
or for a script that logs none, 60 s (the first step, a model's load, a script's own loop run
that long unwatched). STALL=s sets it. A dump that finds the ranks in a slow phase (a save, an
evaluation, a model's load, the data) with no rank waiting on another outside one is no stall:
it is said in one line and the watch looks again.

The end: a collective stuck past the job's own timeout (ddp_timeout: what each rank's process
group was given, else TIMEOUT or ARGS' --ddp_timeout, else torch's default) is ended by NCCL's
watchdog on a cluster, but gloo does not always end it (a rank waited in all_reduce #131 for
468 s past a 120 s timeout). When every rank is still without progress HANG_GRACE_S after that
timeout, the harness ends the run itself: the stacks and the verdict kept, "hung past its
timeout" recorded, the run failed. HANG=wait leaves it running (a debugger to attach).
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timedelta
from typing import Protocol

from tuning.harness.run_files import metric_lines
from tuning.harness.stacks import dumps, stack_text
from tuning.harness.watch import Stop

FLOOR_S = 60.0  # the stall time before the ranks' step times are known
# ... and once they are: the floor of 10 x the median step, 12 s so that the dump and the
# verdict (1-3 s on 2 cores) are said within 15 s of the stall
FAST_FLOOR_S = 12.0
STEPS_PER_STALL = 10  # the stall time is this many median gaps between logged steps
HANG_GRACE_S = 30.0  # after the job's collective timeout, before the harness ends a hang
# the phases a dump may find a rank in that are slow but healthy (stack_text.PHASES)
SLOW_BUT_HEALTHY = ("saving a checkpoint", "evaluating", "loading the model", "preparing the data")


def default_limit(step_times: list[float]) -> float:
    """max(FAST_FLOOR_S, STEPS_PER_STALL x the median of `step_times`: the wall time between
    two logged steps, which is N steps' time for a trainer that logs every N steps); FLOOR_S
    before there is a step time to go by."""
    if not step_times:
        return FLOOR_S
    return max(FAST_FLOOR_S, STEPS_PER_STALL * statistics.median(step_times))


def step_gaps(metrics) -> list[float]:
    """Seconds between successive step lines of each rank (a trainer logging every N steps,
    fms's logging_steps, shows N steps' time between its lines)."""
    gaps = []
    for lines in metrics.values():
        times = [s["time"] for s in metric_lines.steps(lines) if s.get("time") is not None]
        gaps += [b - a for a, b in zip(times, times[1:], strict=False) if b > a]
    return gaps


def group_timeout(metrics) -> float | None:
    """What the ranks' process groups were given: their rendezvous lines (the rank recorder
    reads init_process_group's own timeout argument, else torch's default for the backend)."""
    seen = [
        x["timeout_s"]
        for lines in metrics.values()
        for x in lines
        if x.get("event") == "phase" and x.get("name") == "rendezvous" and x.get("timeout_s")
    ]
    return float(max(seen)) if seen else None


def collective_timeout(metrics, job_s: float | None, said: str) -> tuple[float, str]:
    """(seconds, where from): the job's own, where its files state one (TIMEOUT, ARGS'
    --ddp_timeout: what the user asked for); else what the ranks' groups were given; else
    torch's default. Where the groups got another than the job's, it is said: transformers
    drops ddp_timeout on CPU ranks (TrainingArguments._setup_devices passes PartialState no
    timeout with use_cpu), so a user's 120 s is torch's 1800 s there."""
    group = group_timeout(metrics)
    if job_s is not None:
        if group is not None and group != job_s:
            said += f"; the ranks' process group got {group:.0f} s"
        return float(job_s), said
    if group is not None:
        return group, "the ranks' process group"
    return 1800.0, "torch's default"


class Found(Protocol):
    """What the watch reads of a verdict (verdict/record.py's Verdict): its culprits, and its
    JSON for summary.json."""

    culprits: list[int]

    def to_json(self) -> dict: ...


class Verdict(Protocol):
    """What the watch asks of a verdict (verdict/live.py): one on the ranks as they are."""

    def judge_live(self, nodes, metrics: dict, taken: dict) -> Found: ...

    def said(self, found: Found) -> list[str]: ...


class StallWatch:
    """lifecycle's on_tick for `up`: `summary_extra` gets "stall" (and "hang" where it ended
    one). `timeout_s`, `timeout_said`: the job's collective timeout as its files say it (the
    ranks' own, once they report it, wins); `hang`: "end" or "wait"."""

    def __init__(
        self,
        limit_s: float | None,
        summary_extra: dict,
        clock=time.monotonic,
        timeout_s: float | None = None,
        timeout_said: str = "",
        hang: str = "end",
        backend: str = "gloo",
        *,
        verdict: Verdict,
    ):
        self.limit_s, self.extra = limit_s, summary_extra  # limit None: the default
        self.clock = clock
        self.mark: tuple | None = None  # what progress looked like last
        self.last = clock()  # when it last changed
        self.looked = None  # when a dump last looked in this quiet spell
        self.reported = False  # this quiet spell's stall said
        self.slow_said = False  # ... or its slow phase
        self.job_timeout = (timeout_s, timeout_said)
        self.hang, self.backend = hang, backend
        self.verdict = verdict  # verdict/live.py: this layer sits below the verdict's
        self.newest: Found | None = None  # the verdict said last (summary.json's "verdict")
        self.stop_reason: str | None = None
        self.tick_s = None

    def limit(self, metrics) -> float:
        return self.limit_s if self.limit_s is not None else default_limit(step_gaps(metrics))

    def timeout(self, metrics) -> tuple[float, str]:
        return collective_timeout(metrics, *self.job_timeout)

    def progressed(self, metrics) -> bool:
        """Progress is a new line in any rank's metrics: a step (a step replayed after a
        restart counts: it is new work), or before the first step a phase (imports,
        rendezvous, model loaded, data ready). A node's log output is not: c10d prints its
        rendezvous retries for as long as a peer is missing. Until a rank has written its
        first line the nodes are starting (containers, the launcher), not yet watched."""
        mark = tuple(sorted((r, len(lines)) for r, lines in metrics.items()))
        moved = mark != self.mark or not any(n for _, n in mark)
        self.mark = mark
        return moved

    def due(self, metrics, state) -> float | None:
        """The quiet time when a look is due now (None: not yet): the stall time after the
        last progress, and again a stall time after each look that found a slow phase.
        Exited nodes are past watching; the live ones are watched still."""
        now = self.clock()
        alive = [n for n, code in state.items() if code is None]
        # every rank's trainer returned: the launchers are leaving (the follow's GRACE watches
        # a process hung on its way out), no rank is to be found stuck
        done = len(metric_lines.returned_now(metrics)) == len(metrics) > 0
        if self.progressed(metrics) or not alive or done:
            self.last, self.looked, self.reported, self.slow_said = now, None, False, False
            return None
        quiet = now - self.last
        since = now - (self.looked if self.looked is not None else self.last)
        if since < self.limit(metrics):
            return None
        self.looked = now
        return quiet

    def __call__(self, metrics, state, nodes):
        ended = self._hung_past_timeout(metrics, state, nodes)
        if ended:
            return ended
        quiet = self.due(metrics, state)
        if quiet is None:
            return None
        # taken quietly: said as a stall (its line, then the stacks), as a slow phase, or, on a
        # later look of the spell, not at all unless the verdict moved
        taken = dumps.take(nodes, f"no progress for {quiet:.0f} s", say=False)
        if taken is None:
            return None
        found = self.verdict.judge_live(nodes, metrics, taken)  # may take a while (fr_check)
        busy = stack_text.slow_phases(taken)
        if self._slow_phase(found, taken):
            if not self.slow_said:  # once a quiet spell
                print(
                    f"harness: no progress for {quiet:.0f} s, in a slow phase, not a hang: {busy}"
                )
            self.slow_said = True
        elif not self.reported:
            self._report(quiet, self.limit(metrics), taken, found, busy, metrics, nodes)
        elif found.culprits != (self.newest.culprits if self.newest else None):
            print(f"harness: {quiet:.0f} s without progress; the verdict changed:")
            print("\n".join(self.verdict.said(found)))
            self.newest = found
            self.extra["verdict"] = found.to_json()  # summary.json's: the newest
        return None

    def _slow_phase(self, found: Found, taken: dict) -> bool:
        """The dump found a healthy slow phase: its culprits (or, with none, some rank) in a
        save, an evaluation, a model's load or the data, as its stack shows."""
        ranks = taken.get("ranks") or {}
        phases = {
            int(r): p[0]
            for r, x in ranks.items()
            if x.get("threads") and (p := stack_text.phase(x))
        }
        slow = {r for r, name in phases.items() if name in SLOW_BUT_HEALTHY}
        culprits = set(found.culprits)
        return bool(slow) and (culprits <= slow if culprits else True)

    def _report(self, quiet, limit, taken, found, busy, metrics, nodes) -> None:
        how = (
            "set by STALL"
            if self.limit_s is not None
            else f"max({FAST_FLOOR_S:.0f} s, {STEPS_PER_STALL} x the median time between "
            f"logged steps; {FLOOR_S:.0f} s before there are steps)"
        )
        timeout, said = self.timeout(metrics)
        end_at = datetime.now() + timedelta(seconds=max(0.0, timeout + HANG_GRACE_S - quiet))
        ends = (
            f"if every rank is still without progress at {timeout + HANG_GRACE_S:.0f} s (about "
            f"{end_at:%H:%M:%S}), the harness ends the run and keeps the stacks (HANG=wait "
            "leaves it running)"
            if self.hang == "end"
            else "HANG=wait: the harness leaves it running; Ctrl-C stops it"
        )
        who = (
            "NCCL's watchdog ends a collective stuck that long"
            if self.backend == "nccl"
            else "gloo does not always end a collective stuck that long"
        )
        print(
            f"harness: no rank has logged progress for {quiet:.0f} s (stall time {limit:.0f} s, "
            f"{how}); the ranks' stacks follow. The job's collective timeout is {timeout:.0f} s "
            f"({said}): {who}; {ends}."
        )
        dumps.said(taken, nodes.run_dir / "output/stacks")
        if busy:
            print(f"harness: a slow phase, not necessarily a hang: {busy}")
        first = self.extra.get("stall")
        record = {
            "quiet_s": round(quiet, 1),
            "stall_s": round(limit, 1),
            "set_by": how,
            "time": taken["time"],
            "dump_s": taken["dump_s"],
            "summaries": taken["summaries"],
            "phases": busy,
            "stacks_dir": "output/stacks",
            "verdict": found.to_json(),
            "timeout_s": timeout,
        }
        self.extra["stall"] = first or record  # the first spell's, and how many there were
        self.extra["stall"]["spells"] = self.extra["stall"].get("spells", 0) + 1
        self.newest = found
        self.extra["verdict"] = found.to_json()  # summary.json's: the newest
        print("\n".join(self.verdict.said(found)))
        # from the last progress to the verdict said: the quiet time, the dump, the judging
        self.extra["stall"].setdefault("verdict_after_s", round(self.clock() - self.last, 1))
        self.reported = True

    def _hung_past_timeout(self, metrics, state, nodes) -> Stop | None:
        """A Stop once every rank has been without progress past the collective timeout and
        HANG_GRACE_S, and none has exited: the run is ended here."""
        if self.hang != "end" or not self.reported:
            return None
        if any(code is not None for code in state.values()):
            return None  # a node ended: its peers will (the follow's GRACE)
        quiet = self.clock() - self.last
        timeout, said = self.timeout(metrics)
        if quiet < timeout + HANG_GRACE_S:
            return None
        self.stop_reason = (
            f"hung past its timeout ({timeout:.0f} s, {said}): no rank logged progress for "
            f"{quiet:.0f} s; the harness ended the run (HANG=wait leaves it running)"
        )
        taken = dumps.take(nodes, f"hung past its timeout, {quiet:.0f} s without progress")
        self.extra["hang"] = {
            "timeout_s": timeout,
            "timeout_from": said,
            "quiet_s": round(quiet, 1),
            "ended_after_timeout_s": round(quiet - timeout, 1),
            "summaries": (taken or {}).get("summaries"),
        }
        print(f"harness: {self.stop_reason}")
        return Stop(self.stop_reason)
