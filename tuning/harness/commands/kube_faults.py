"""`make kube REHEARSE=1 KILL=<rank>`: a rank's pod is killed (SIGKILL, as a lost node or the
OOM killer does) at a step, and the harness then does what the object's operator would, read
from the rendered object's own fields (kube_restarts.py): restart that pod alone (V1), recreate
every pod (V2), or fail the job and delete the pods still running (V1 cleanPodPolicy Running;
V2 past maxRestarts). Recorded as `make fault` records its runs: restarts.json and
restarts.md in the run directory.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from tuning.harness.backends import engine, kube_restarts
from tuning.harness.commands import fault_record
from tuning.harness.commands.fault_inject import Injector
from tuning.harness.rundirs import runs

STEP_SLEEP_S = 0.2  # paces steps (HARNESS_STEP_SLEEP) so the kill lands near its step
START_DEADLINE_S = 300  # the target must reach its step by then
SLACK_S = 60  # after the kill: collective + rendezvous timeouts, then this, and it is cut


def rehearsal_env(pods: list, timeout: int, rdzv_timeout: int) -> list:
    """The pods with the rehearsal's own knobs added to their environment: a short static
    rendezvous timeout (torchrun's default is 600 s) and paced steps; nothing else changes."""
    extra = {"HARNESS_RDZV_TIMEOUT": str(rdzv_timeout), "HARNESS_STEP_SLEEP": str(STEP_SLEEP_S)}
    return [dataclasses.replace(p, env={**p.env, **extra}) for p in pods]


class Operator:
    """The on_tick of a killed-rank rehearsal: kill at the step, then act as the operator."""

    def __init__(self, kind: str, rules: dict, pods: list, rank: int, at_step: int,
                 run_id: str, deadline_s: float):  # fmt: skip
        self.kind, self.rules, self.deadline_s = kind, rules, deadline_s
        self.target = next(p.name for p in pods if rank in p.ranks)
        knobs = {"rank": rank, "at_step": at_step}
        self.inject = Injector("kill", "per-rank", self.target, knobs, run_id)
        self.rank, self.at_step = rank, at_step
        self.t0 = time.time()
        self.killed_at: float | None = None
        self.kill_step: int | None = None
        self.how = ""
        self.timeline: list[dict] = []
        self.actions: list[dict] = []
        self.running: dict[str, bool] = {}
        self.ended_at: float | None = None
        self.ended_by = "every pod ended"
        self.armed = False

    @property
    def limit(self) -> int:
        return self.rules.get("backoffLimit", self.rules.get("failurePolicy.maxRestarts", 0))

    def event(self, what: str, when: float | None = None) -> None:
        when = when or time.time()
        self.timeline.append({"t": round(when - self.t0, 2), "event": what})
        print(f"harness: kube t={when - self.t0:6.1f}s {what}", file=sys.stderr)

    def decide(self, pod: str, code: int) -> str:
        restarts = len(self.actions_of(kube_restarts.RESTART_POD, kube_restarts.RESTART_ALL))
        if self.kind == "TrainJob":
            return kube_restarts.v2_action(code, restarts, self.limit)
        policy = self.rules["restartPolicy"]["Master" if "-master-" in pod else "Worker"]
        return kube_restarts.v1_action(policy, code, restarts, self.limit)

    def actions_of(self, *what: str) -> list[dict]:
        return [x for x in self.actions if x["action"] in what]

    def __call__(self, metrics, state, nodes):
        now = time.time()
        if not self.armed:  # the operator restarts here, never the harness on its own
            nodes.restarts_left = self.limit if self.kind == "TrainJob" else 0
            self.armed = True
        if self.killed_at is None:
            for how, step, when in self.inject.due(metrics, nodes, now):
                self.killed_at, self.kill_step, self.how = when, step, how
                self.event(f"killed at step {step}: {how}", when)
            if self.killed_at is None and now - self.t0 > START_DEADLINE_S:
                self.ended_by = "never reached the step"
                return "stop"
        for pod, code in state.items():
            was_running, self.running[pod] = self.running.get(pod, True), code is None
            if code is None or not was_running:
                continue
            self.event(f"{pod} exited {code}", now)
            if code == 0:
                continue
            action = self.decide(pod, code)
            self.actions.append({"t": round(now - self.t0, 2), "pod": pod, "exit_code": code,
                                 "action": action})  # fmt: skip
            self.event(f"operator: {action} ({pod} exited {code})", now)
            if action == kube_restarts.FAIL:
                self.ended_at, self.ended_by = now, "the operator failed the job"
                return "stop"  # cleanPodPolicy Running: the pods still running are deleted
            if action == kube_restarts.RESTART_POD:
                engine.compose(nodes.file, "start", pod, capture=True)
                self.running[pod] = True
            else:  # every pod: run.execute restarts the group (nodes.restarts_left > 0)
                self.running = dict.fromkeys(state, True)
                return None
        if all(code is not None for code in state.values()):
            self.ended_at = self.ended_at or now
        if self.killed_at and now - self.killed_at > self.deadline_s:
            self.event(f"deadline (kill + {self.deadline_s:.0f} s): stopping")
            self.ended_at, self.ended_by = now, "deadline"
            return "stop"
        return None


def record(op: Operator, summary: dict, layout, run_dir: Path) -> dict:
    """restarts.json's facts: what was killed, each pod's exits, what the operator did, the
    outcome, kill to end, and the steps lost (kill step - the checkpoint training resumed
    from, or the newest one before the kill when the job failed)."""
    metrics = runs.read_metrics(run_dir / "output")
    logs = {p.stem: p.read_text(errors="replace") for p in (run_dir / "logs").glob("*.log")}
    checkpoints = sorted(
        int(p.name.split("-")[1]) for p in (run_dir / "output").glob("checkpoint-*")
    )  # fmt: skip
    before = [c for c in checkpoints if op.kill_step is not None and c <= op.kill_step]
    ranks = []
    for node in layout.nodes():
        for r in node.ranks:
            tries = runs.attempts(metrics.get(r, []))
            last = [runs.steps(t) for t in tries]
            end = runs.ends_seen(metrics).get(r, {})
            sig = fault_record.signature(end.get("error") or "") or fault_record.signature(
                logs.get(node.name, "")
            )  # fmt: skip
            ranks.append({"rank": r, "pod": node.name, "starts": len(tries),
                          "last_step": max((s["step"] for s in sum(last, [])), default=0),
                          "resumed_at": [t[0]["step"] for t in last[1:] if t],
                          "end_status": end.get("status"), "signature": sig})  # fmt: skip
    resumed = [s - 1 for x in ranks for s in x["resumed_at"]]
    end = op.ended_at or time.time()
    return {
        "kind": op.kind,
        "job": layout.name,
        "rules": op.rules,
        "killed": {
            "rank": op.rank,
            "pod": op.target,
            "at_step": op.at_step,
            "step": op.kill_step,
            "how": op.how,
            "t": op.killed_at and round(op.killed_at - op.t0, 2),
        },
        "pods": {n: {"exit_code": d.get("exit_code")} for n, d in _details(summary).items()},
        "actions": op.actions,
        "restarts": {
            "made": len(op.actions_of(kube_restarts.RESTART_POD, kube_restarts.RESTART_ALL)),
            "limit": op.limit,
        },
        "ranks": ranks,
        "outcome": summary.get("status"),
        "ended_by": op.ended_by,
        "kill_to_end_s": op.killed_at and round(end - op.killed_at, 1),
        "checkpoints": checkpoints,
        "resumed_from": min(resumed) if resumed else None,
        "steps_lost": (op.kill_step - (min(resumed) if resumed else max(before, default=0)))
        if op.kill_step is not None
        else None,
        "final_loss": summary.get("final_loss"),
        "timeline": op.timeline,
    }


def _details(summary: dict) -> dict:
    return {r["node"]: r for r in summary.get("ranks", [])}


def write(run_dir: Path, rec: dict) -> None:
    runs.write_json(run_dir / "restarts.json", rec)
    (run_dir / "restarts.md").write_text(markdown(rec))


def markdown(rec: dict) -> str:
    k = rec["killed"]
    lines = [
        f"# {rec['kind']} {rec['job']}: rank {k['rank']}'s pod killed",
        "",
        f"- rules: {', '.join(f'{a} {b}' for a, b in rec['rules'].items())}",
        f"- killed: {k['how']} at t={k['t']} s (step {k['step']}, asked for {k['at_step']})",
        f"- **outcome: {rec['outcome']}** ({rec['ended_by']}); kill to end "
        f"{rec['kill_to_end_s']} s; restarts {rec['restarts']['made']} "
        f"of {rec['restarts']['limit']}",
        f"- checkpoints: {', '.join(map(str, rec['checkpoints'])) or 'none'}; resumed from "
        f"{rec['resumed_from']}; steps lost {rec['steps_lost']}; final loss {rec['final_loss']}",
        "",
        "| t s | pod | exit | operator |",
        "| --- | --- | --- | --- |",
        *(f"| {a['t']} | {a['pod']} | {a['exit_code']} | {a['action']} |" for a in rec["actions"]),
        "",
        "| rank | pod | starts | last step | resumed at | end | signature |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *(
            f"| {r['rank']} | {r['pod']} | {r['starts']} | {r['last_step']} | {r['resumed_at']} "
            f"| {r['end_status']} | {r['signature']} |"
            for r in rec["ranks"]
        ),  # fmt: skip
        "",
        "## Timeline (s since start)",
        "",
        *(f"- {e['t']:7.2f}  {e['event']}" for e in rec["timeline"]),
    ]
    return "\n".join(lines) + "\n"
