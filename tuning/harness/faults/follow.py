"""The on_tick of a fault run (commands/fault.py): wait for the target rank's step, inject, watch
every rank, and decide when the run has shown what it shows and must stop."""

from __future__ import annotations

import time

import docker.errors

from tuning.harness.faults import record, verdicts
from tuning.harness.faults.inject import Injector
from tuning.harness.faults.kinds.kind import SHORT, SINCE_STEP
from tuning.harness.faults.record import SLACK_S
from tuning.harness.run_files import metric_lines
from tuning.harness.run_files.status import ENDED_WELL
from tuning.harness.stacks.hung import HangStacks
from tuning.harness.watch import Stop

LINGER_S = 5  # every worker ended this long ago but a launcher still runs: stop it
# The harness's tick while it waits for the step of a trainer it cannot pace (fms: 0.05-0.1 s a
# step on 2 ranks): at the default 0.5 s it saw AT_STEP=4 as late as step 8, and a desync told
# at step 9 met fms's first save at 10, where DETAIL on gloo kills every rank (make pool SEED=3,
# run 23: none named)
WAIT_TICK_S = 0.1
START_DEADLINE_S = 300  # the target must reach its step this long after the first tick
LONG_DEADLINE_S = 180  # kinds that let the job go on (kind.LONG, SINCE_STEP): fault + this


class Follow:
    """The on_tick of a fault run: waits for the step, injects, watches, decides when to stop.
    What it does for each kind is the kind's (faults/kinds/): `kind` names one."""

    def __init__(self, kind: str, layout_name: str, target: str, knobs: dict, run_id: str):
        self.rank, self.timeout = knobs["rank"], knobs["timeout_s"]
        self.inject = Injector(kind, layout_name, target, knobs, run_id)
        self.kind = self.inject.kind
        self.t0 = time.time()
        self.first_tick: float | None = None  # the nodes are up (an image build came before)
        self.injected_at: float | None = None
        self.inject_step: int | None = None
        self.how = ""
        self.timeline: list[dict] = []
        self.ended: dict[str, float] = {}
        self.stopped_by: str | None = None
        self.finished_at: float | None = None
        self.detected_at: float | None = None
        self.last_step_seen = (0, self.t0)
        self.rank_ended: dict[int, float] = {}
        self.running: dict[str, bool] = {}
        self.world_size = knobs["world_size"]
        self.max_restarts = knobs.get("max_restarts", 0)  # the group may come back this often
        self.nodes = None  # stacks of a hang go through it (stacks/hung.py)
        self.hang_stacks = HangStacks(self.timeout)
        self.verdicts = verdicts.Verdicts()  # judged at each dump, and at the end
        self.metrics: dict = {}

    @property
    def tick_s(self) -> float | None:
        """The lifecycle's tick: short while it waits for an unpaced trainer's step."""
        return WAIT_TICK_S if self.inject.group_steps and self.injected_at is None else None

    def event(self, what: str, when: float | None = None) -> None:
        when = when or time.time()
        self.timeline.append({"t": round(when - self.t0, 2), "event": what})
        print(f"harness: fault t={when - self.t0:6.1f}s {what}")

    def __call__(self, metrics, state, nodes):
        now = time.time()
        self.first_tick = self.first_tick or now
        self.nodes, self.metrics = nodes, metrics  # stop() dumps the ranks' stacks through it
        for name, code in state.items():
            if code is not None and (name not in self.ended or self.running.get(name)):
                self.ended[name] = now  # its latest exit (MAX_RESTARTS may start it again)
                self.event(f"{name} exited with {code}", now)
            self.running[name] = code is None
        for rank, lines in metrics.items():
            end = next((x for x in lines if x.get("event") == "end"), None)
            if end and rank not in self.rank_ended:
                self.rank_ended[rank] = end["time"]
                sig = record.signature(end.get("error") or "")
                self.event(
                    f"rank {rank} ended: {end['status']}" + (f" ({sig})" if sig else ""),
                    end["time"],
                )
        # None again when the harness restarts the group (per-rank MAX_RESTARTS)
        self.finished_at = now if all(code is not None for code in state.values()) else None
        if self.injected_at is None:
            try:
                for how, step, when in self.inject.due(metrics, nodes, now):
                    self.injected(how, step, when)
            except docker.errors.APIError as e:
                self.event(f"injection failed: {e.explanation or e}")
                self.stopped_by = "injection failed"
                return Stop()
            if self.injected_at is None and now - self.first_tick > START_DEADLINE_S:
                self.stopped_by = "never reached the step"
                return Stop()
            return None
        return self.watch(metrics, state, nodes, now)

    def injected(self, how: str, step: int, when: float | None = None) -> None:
        self.injected_at, self.inject_step, self.how = when or time.time(), step, how
        self.event(f"fault injected at step {step}: {how}", self.injected_at)

    # --- after the fault -------------------------------------------------------------------
    def watch(self, metrics, state, nodes, now: float):
        if self.finished_at:
            return None
        if self.kind.tick:  # the kind's own work after the fault (start a held node, thaw)
            self.kind.tick(self, metrics, nodes, now)
        newest = max(
            (x["step"] for lines in metrics.values() for x in metric_lines.steps(lines)), default=0
        )
        if newest > self.last_step_seen[0]:
            self.last_step_seen = (newest, now)
        self.hang_stacks.tick(self, nodes, now)
        if self.kind.hangs and self.detected_at is None:
            why = self.hang(metrics, now)
            if why:
                self.detected_at = now
                self.event(f"hang detected: {why}", now)
                self.stopped_by = "hang detected"
                return self.stop()
        done = self.done_ranks(metrics)
        if (
            not self.kind.slow_exit
            and len(done) == self.world_size
            and now - max(done.values()) > LINGER_S
        ):
            # Every worker is done but a launcher lingers: torchelastic's exit barrier waits
            # (300 s) for an agent that was signalled away.
            self.event(f"every rank ended {LINGER_S} s ago but a launcher still runs; stopping it")
            self.stopped_by = "launcher lingered"
            return self.stop()
        long = self.kind.deadline != SHORT or self.max_restarts > 0
        since = self.injected_at
        if self.kind.deadline == SINCE_STEP:  # the run goes on, slower: from its newest step
            since = max(self.injected_at, self.last_step_seen[1])
        deadline = since + (LONG_DEADLINE_S if long else self.timeout + SLACK_S)
        if now > deadline:
            self.event(f"deadline (fault + {deadline - self.injected_at:.0f} s): stopping")
            self.stopped_by = "deadline"
            return self.stop()
        return None

    def done_ranks(self, metrics) -> dict[int, float]:
        """Ranks whose last line is their end and that will not come back: it completed, or
        its trainer already started more than MAX_RESTARTS times (the group restarts on a
        failure)."""
        out = {}
        for rank, lines in metrics.items():
            if not lines or lines[-1].get("event") != "end":
                continue
            starts = sum(map(metric_lines.is_start, lines))
            if lines[-1].get("status") in ENDED_WELL or starts > self.max_restarts:
                out[rank] = lines[-1]["time"]
        return out

    def hang(self, metrics, now: float) -> str | None:
        for rank, lines in metrics.items():
            for x in lines:
                if x.get("event") == "end" and record.is_timeout(x.get("error") or ""):
                    return f"rank {rank} timed out waiting for its peer"
        quiet = now - max(self.last_step_seen[1], self.injected_at)
        if quiet > self.timeout:
            return f"no rank made a step for {quiet:.0f} s"
        return None

    def peer_ended(self, metrics) -> bool:
        return any(
            x.get("event") == "end" for r, lines in metrics.items() if r != self.rank for x in lines
        )

    def stop(self) -> Stop:
        self.hang_stacks.at_stop(self, self.nodes)  # before a heal (unpause, thaw)
        self.inject.release()
        self.finished_at = time.time()
        return Stop()
