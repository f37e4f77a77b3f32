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
from tuning.harness.faults import record as fault_record
from tuning.harness.faults.inject import Injector
from tuning.harness.run_files import folders, metric_lines
from tuning.harness.watch import Stop

STEP_SLEEP_S = 0.2  # paces steps (HARNESS_STEP_SLEEP) so the kill lands near its step
START_DEADLINE_S = 300  # the target must reach its step by then
SLACK_S = 60  # after the kill: collective + rendezvous timeouts, then this, and it is cut


def rehearsal_env(pods: list, timeout: int, rdzv_timeout: int) -> list:
    """The pods with the rehearsal's own knobs added to their environment: a short static
    rendezvous timeout (torchrun's default is 600 s) and paced steps; nothing else changes."""
    extra = {"HARNESS_RDZV_TIMEOUT": str(rdzv_timeout), "HARNESS_STEP_SLEEP": str(STEP_SLEEP_S)}
    return [dataclasses.replace(p, env={**p.env, **extra}) for p in pods]


class Operator:
    """The on_tick of a killed-rank rehearsal: kill at the step, then act as the operator.

    It acts on pods: a pod has failed once every one of its containers (Compose services;
    one, except KIND=job's) has ended and one exited non-zero. `renew(pod)` gives a pod
    that is made again a new emptyDir /output (kube/rehearse.py; None: /output is a claim)."""

    tick_s = None  # the loop's own tick (watch.TICK_S)

    def __init__(
        self,
        kind: str,
        rules: dict,
        pods: list,
        rank: int,
        at_step: int,
        run_id: str,
        deadline_s: float,
        pod_of: dict[str, str] | None = None,
        renew=None,
    ):
        self.kind, self.rules, self.deadline_s = kind, rules, deadline_s
        self.target = next(p.name for p in pods if rank in p.ranks)
        self.pod_of = pod_of or {p.name: p.name for p in pods}
        self.members: dict[str, list[str]] = {}
        for node, pod in self.pod_of.items():
            self.members.setdefault(pod, []).append(node)
        self.renew = renew
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
        restarts = len(self.actions_of(*kube_restarts.RESTARTS))
        if self.kind == "TrainJob":
            return kube_restarts.v2_action(code, restarts, self.limit)
        if self.kind == "Job":
            return kube_restarts.job_action(code, restarts, self.limit)
        policy = self.rules["restartPolicy"]["Master" if "-master-" in pod else "Worker"]
        return kube_restarts.v1_action(policy, code, restarts, self.limit)

    def actions_of(self, *what: str) -> list[dict]:
        return [x for x in self.actions if x["action"] in what]

    def __call__(self, metrics, state, nodes):
        now = time.time()
        if not self.armed:  # the operator restarts here, never the harness on its own
            nodes.restarts_left = 0
            self.armed = True
        if self.killed_at is None:
            for how, step, when in self.inject.due(metrics, nodes, now):
                self.killed_at, self.kill_step, self.how = when, step, how
                self.event(f"killed at step {step}: {how}", when)
            if self.killed_at is None and now - self.t0 > START_DEADLINE_S:
                self.ended_by = "never reached the step"
                return Stop()
        ended = set()
        for node, code in state.items():
            was_running, self.running[node] = self.running.get(node, True), code is None
            if code is not None and was_running:
                ended.add(node)
                self.event(f"{node} exited {code}", now)
        for pod, members in self.members.items():
            codes = [state[n] for n in members]
            if not ended & set(members) or None in codes or not any(codes):
                continue  # nothing new; a container still running; or the pod succeeded
            code = next(c for c in codes if c)
            action = self.decide(pod, code)
            self.actions.append(
                {"t": round(now - self.t0, 2), "pod": pod, "exit_code": code, "action": action}
            )
            self.event(f"operator: {action} ({pod} exited {code})", now)
            if action == kube_restarts.FAIL:
                self.ended_at, self.ended_by = now, "the operator failed the job"
                return Stop()  # cleanPodPolicy Running: the pods still running are deleted
            if action in kube_restarts.RENEWS and self.renew:  # new pods: new emptyDirs
                for made in self.members if action == kube_restarts.RESTART_ALL else [pod]:
                    self.renew(made)
            if action == kube_restarts.RESTART_ALL:  # lifecycle.execute restarts every node now
                nodes.restarts_left = 1
                self.running = dict.fromkeys(state, True)
                return None
            for node in members:  # this pod alone: made again, or its container in place
                engine.compose(nodes.file, "start", node, capture=True)
                self.running[node] = True
        if all(code is not None for code in state.values()):
            self.ended_at = self.ended_at or now
        if self.killed_at and now - self.killed_at > self.deadline_s:
            self.event(f"deadline (kill + {self.deadline_s:.0f} s): stopping")
            self.ended_at, self.ended_by = now, "deadline"
            return Stop()
        return None


def _steps(folder: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in folder.glob("checkpoint-*"))


def record(op: Operator, summary: dict, layout, run_dir: Path, output: dict) -> dict:
    """restarts.json's facts: what was killed, each pod's exits, what the operator did, the
    outcome, kill to end, and the steps lost (kill step - the checkpoint training resumed
    from: 0 when it started again from step 0; or the newest one before the kill when the job
    failed). `output` says what /output was ("claim" or "emptyDir") and the host folders that
    stood in for it ("folders"; "lost": the emptyDirs that went with their pods)."""
    metrics = metric_lines.read_metrics(run_dir / "output")
    logs = {p.stem: p.read_text(errors="replace") for p in (run_dir / "logs").glob("*.log")}
    kept = {
        Path(f).name if output["claim"] else Path(f).parent.name: _steps(Path(f))
        for f in output["folders"]
    }
    lost = {f"{Path(f).parent.name}/{Path(f).name}": _steps(Path(f)) for f in output["lost"]}
    checkpoints = sorted({c for steps in (*kept.values(), *lost.values()) for c in steps})
    before = [c for c in checkpoints if op.kill_step is not None and c <= op.kill_step]
    ranks = []
    for node in layout.nodes():
        for r in node.ranks:
            tries = metric_lines.attempts(metrics.get(r, []))
            last = [metric_lines.steps(t) for t in tries]
            end = metric_lines.ends_seen(metrics).get(r, {})
            sig = fault_record.signature(end.get("error") or "") or fault_record.signature(
                logs.get(node.name, "")
            )
            ranks.append(
                {
                    "rank": r,
                    "pod": op.pod_of.get(node.name, node.name),
                    "container": node.name,
                    "starts": len(tries),
                    "last_step": max((s["step"] for s in sum(last, [])), default=0),
                    "resumed_at": [t[0]["step"] for t in last[1:] if t],
                    "end_status": end.get("status"),
                    "signature": sig,
                }
            )
    resumed = [s - 1 for x in ranks for s in x["resumed_at"]]
    end = op.ended_at or time.time()
    return {
        "kind": op.kind,
        "job": layout.name,
        "rules": op.rules,
        "killed": {
            "rank": op.rank,
            "pod": op.pod_of.get(op.target, op.target),
            "container": op.target,
            "at_step": op.at_step,
            "step": op.kill_step,
            "how": op.how,
            "t": op.killed_at and round(op.killed_at - op.t0, 2),
        },
        "pods": {n: {"exit_code": d.get("exit_code")} for n, d in _details(summary).items()},
        "actions": op.actions,
        "restarts": {
            "made": len(op.actions_of(*kube_restarts.RESTARTS)),
            "limit": op.limit,
        },
        "ranks": ranks,
        "outcome": summary.get("status"),
        "ended_by": op.ended_by,
        "kill_to_end_s": op.killed_at and round(end - op.killed_at, 1),
        "output": f"claim {output['claim']}" if output["claim"] else "emptyDir",
        "checkpoints": checkpoints,
        "checkpoints_kept": kept,  # where the job's /output still is: the claim, the pods' own
        "checkpoints_lost": lost,  # in emptyDirs that went with their pods
        "resumed_from": min(resumed) if resumed else None,
        "steps_lost": (op.kill_step - (min(resumed) if resumed else max(before, default=0)))
        if op.kill_step is not None
        else None,
        "final_loss": summary.get("final_loss"),
        "timeline": op.timeline,
    }


def _listed(where: dict) -> str:
    return "; ".join(f"{k}: {', '.join(map(str, v)) or 'none'}" for k, v in where.items()) or "none"


def _details(summary: dict) -> dict:
    return {r["node"]: r for r in summary.get("ranks", [])}


def write(run_dir: Path, rec: dict) -> None:
    folders.write_json(run_dir / "restarts.json", rec)
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
        f"- output: {rec['output']}; checkpoints saved: "
        f"{', '.join(map(str, rec['checkpoints'])) or 'none'}; lost with their pods: "
        f"{_listed(rec['checkpoints_lost'])}; resumed from {rec['resumed_from']} "
        f"(0: from the start); steps lost {rec['steps_lost']}; final loss {rec['final_loss']}",
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
        ),
        "",
        "## Timeline (s since start)",
        "",
        *(f"- {e['t']:7.2f}  {e['event']}" for e in rec["timeline"]),
    ]
    return "\n".join(lines) + "\n"
