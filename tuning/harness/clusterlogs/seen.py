"""What the logs and objects showed of each rank (source.py), as the inputs the live runs give
the verdict's `facts.gather`: metrics lines (joined, ended and how), exits (code,
signal, OOM, what ended it, when), nodes (started at all) and each failed rank's collective at
failure. No rule of its own decides a culprit: the verdict's do (verdict/rules.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tuning.harness.clusterlogs.read import Container, Rank, consequence
from tuning.harness.clusterlogs.source import Read

# a container's exit code past 128 is 128 + the signal that ended it (the shell's, the
# runtime's); torchrun reports a worker a signal ended as minus the signal
SIGNALS = {9: "SIGKILL", 15: "SIGTERM", 6: "SIGABRT", 7: "SIGBUS", 11: "SIGSEGV"}
# ranks waiting in one collective time out within seconds of each other (at most 5.2 s apart in
# tests/cluster_logs): a job that ran this long past one rank's timeout gave the others theirs
GAP_S = 30.0
# a pod whose history begins this long after another's, as that one's attempt ended, was created
# anew mid-job (_replaced): a job's pods start within a minute or two of each other (scheduling,
# image pulls), a re-created one when the pod before it is gone
REPLACED_S = 120.0


@dataclass
class Inputs:
    world: int
    metrics: dict[int, list[dict]] = field(default_factory=dict)
    exits: dict[int, dict] = field(default_factory=dict)
    nodes: dict[int, dict] = field(default_factory=dict)
    failed: dict[int, dict] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)  # ranks with no line and no object
    step: int | None = None  # the last step any rank's progress showed
    max_steps: int | None = None
    known: int = 0  # lines a producer's pattern read (0: not torch's logs)
    untold: list[str] = field(default_factory=list)  # what a rule lacked to name a rank


def container_of(got: Read, rank: int) -> Container | None:
    return next(
        (c for c in got.containers if c.node_rank * c.nproc <= rank < (c.node_rank + 1) * c.nproc),
        None,
    )


def pod_of(got: Read, rank: int, c: Container | None):
    if c is not None and c.name in got.pods:
        return got.pods[c.name]
    for pod in got.pods.values():
        nproc = pod.nproc or (c.nproc if c else 1)
        if (
            pod.node_rank is not None
            and pod.node_rank * nproc <= rank < (pod.node_rank + 1) * nproc
        ):
            return pod
    return None


def inputs(got: Read) -> Inputs:
    out = Inputs(got.world)
    # the others' timeouts: where a rank that printed none was elsewhere
    waits = [
        w
        for c in got.containers
        for r in c.ranks.values()
        if (w := waited(r)) and r.lost == "collective timeout"
    ]
    silent: list[int] = []  # ranks that ran and printed no timeout where others did
    for rank in range(got.world):
        c = container_of(got, rank)
        pod = pod_of(got, rank, c)
        seen = c.ranks.get(rank) if c else None
        said = ((c.failures.get(rank) if c else None) or {}).get("error")
        if said and not (seen and (seen.exception or seen.lost or seen.detail)):
            # torchrun's summary holds the worker's own exception (@record's error file)
            seen = seen or c.ranks.setdefault(rank, Rank(rank))
            lost = consequence(said)
            seen.lost, seen.exception = (lost, None) if lost else (None, said)
        if seen is None and pod is None and (c is None or c.empty):
            out.missing.append(rank)
        if seen:
            out.step = max(out.step or 0, seen.step or 0) or out.step
            out.max_steps = out.max_steps or seen.max_steps
        out.metrics[rank] = _lines(seen, _returned(rank, seen, c))
        out.nodes[rank] = _started(seen, pod, c)
        out.exits[rank] = _exit(rank, seen, pod, c)
        if seen and (w := waited(seen)):
            entry = {"seq": w["seq"], "op": w["op"], "state": "scheduled"}
            out.failed[rank] = {"collectives": [entry]}
        elif waits and _ran(rank, seen, c) and not (seen and seen.completed):
            # the others wait in a collective (so it joined), and it printed no timeout there
            silent.append(rank)
            out.failed[rank] = {"collectives": [], "busy": _outside(seen, waits[0])}
    if silent and 2 * len(waits) <= got.world:
        # as many printed no timeout as printed one: the first rank's timeout ends the job
        # (NCCL's watchdog aborts it; its launcher stops the others), often before the other
        # waiting ranks print theirs. Silence says where a rank was only where most spoke
        for rank in silent:
            del out.failed[rank]
    out.known = sum(c.known for c in got.containers)
    _alone(got, out)
    _behind(got, out)
    _outside_stops(got, out)
    _replaced(got, out)
    _late(got, out)
    return out


def _behind(got: Read, out: Inputs) -> None:
    """Ranks that timed out in one process group at unlike sequence numbers are not alike: a
    collective completes on no rank until every rank has called it, so the ranks at the lowest
    number, where they are fewer than the rest, are behind: they never called the collective
    the others wait in (NCCL's watchdog times out a rank's oldest unfinished work)."""
    seen = {r: c.ranks[r] for c in got.containers for r in c.ranks if c.ranks[r].waiting}
    for pg in {x.waiting.get("pg") for x in seen.values()}:
        group = {r: x.waiting for r, x in seen.items() if x.waiting.get("pg") == pg}
        seqs = sorted({w["seq"] for w in group.values()})
        if len(seqs) < 2:
            continue
        low = [r for r, w in group.items() if w["seq"] == seqs[0]]
        if 2 * len(low) >= len(group):
            continue  # the most are behind: which side is odd is not known
        ahead = max(group.values(), key=lambda w: w["seq"])
        for r in low:
            w = group[r]
            out.failed[r] = {
                "collectives": [],
                "busy": f"behind: it timed out in {w['op']} #{w['seq']}, a collective the "
                f"others had finished (they wait in {ahead['op']} #{ahead['seq']})",
            }


def _alone(got: Read, out: Inputs) -> None:
    """Fewer ranks timed out in a collective than ran on without a timeout: the others did not
    wait in it. NCCL's watchdog times out every rank waiting in a collective on the process
    group's one timeout (ProcessGroupNCCL, torch 1.10 to 2.9), and a waiting rank's timeout says
    its whole world joined the group. Ranks waiting in one collective entered it about together
    and time out together (at most 5.2 s apart in every case of tests/cluster_logs), so where
    the job ran on GAP_S past the first timeout, with nothing ended but the waiting ranks' own
    aborts, not one of the others printed a timeout the same timeout gave them too: they
    finished that collective (with other sizes) or never called it. The fewer side is the odd
    one, as with ranks behind (_behind). Logs taken before the others' timeouts came would read
    the same: said. Counting the others takes the world size, and a job that ended takes the
    lines' times: where the logs lack them, that is said instead."""
    waiting = [r for r, f in out.failed.items() if f.get("collectives")]
    if not waiting or len(out.failed) > len(waiting) or out.missing:
        return
    if any(out.failed[r]["collectives"][0]["seq"] is None for r in waiting):
        return  # a gloo call's timeout: its own timeout per call, no world joined said
    others = [r for r in range(got.world) if r not in waiting]
    ran_on = _ran_on(got, waiting)
    if ran_on is False or any(_ended(out, r) for r in others):
        return
    first = out.failed[waiting[0]]["collectives"][0]
    what = f"{first['op']} #{first['seq']}"
    who = f"rank(s) {', '.join(map(str, waiting))} timed out in {what} and no other rank did"
    if not got.world_stated:
        out.untold.append(
            f"{who}: naming a rank here takes the world size, which no line here states (add "
            "pods.yaml: its PET_NNODES and PET_NPROC_PER_NODE)"
        )
        return
    if 2 * len(waiting) >= got.world:
        return
    if ran_on is None:
        out.untold.append(
            f"{who}, then their own abort ended the job: naming a rank here takes the lines' "
            "times, to know the others had their timeout's time (kubectl logs --timestamps)"
        )
        return
    for r in others:
        out.failed[r] = {
            "collectives": [],
            "passed": f"none printed a timeout in {what}, {ran_on}: they did not wait in it",
        }


def _ran_on(got: Read, waiting: list[int]) -> str | bool | None:
    """How the job went on after the waiting ranks' timeouts: nothing of it ended (no rank's
    exit or abort, no launcher's summary, no pod's end), or only their own aborts did, GAP_S or
    more after (by the lines' times and the pods' ends). False: something else ended, or it
    ended sooner; None: only their aborts ended it, and no times say when."""
    ranks = {r: x for c in got.containers for r, x in c.ranks.items()}
    own = [r for r in waiting if ranks.get(r) and ranks[r].aborted]
    for c in got.containers:
        if c.stopped or c.stopped_all or c.agent_error or (c.node_failed and not own):
            return False
        if set(c.failures) - set(waiting):
            return False
        if any(f.get("exit") != -6 for r, f in c.failures.items()):
            return False  # a waiting rank that ended otherwise than by its watchdog's abort
    if any(x.aborted for r, x in ranks.items() if r not in waiting):
        return False
    pods_ended = [p for p in got.pods.values() if p.exit_code is not None or p.finished]
    if any(p.exit_code not in (134, None) or p.reason == "OOMKilled" for p in pods_ended):
        return False  # 134: SIGABRT, the watchdog's abort
    failed = any(c.failures for c in got.containers)
    if not (own or failed or pods_ended):
        return (
            "and nothing of the job ended (no rank's exit or abort, no launcher's summary, "
            "no pod's end)"
        )
    timed = [ranks[r].t for r in waiting if ranks.get(r) and ranks[r].t]
    ends = [ranks[r].aborted_t for r in own if ranks[r].aborted_t]
    ends += [f["t"] for c in got.containers for f in c.failures.values() if f.get("t")]
    ends += [p.finished for p in pods_ended if p.finished]
    if not timed or not ends:
        return None
    gap = max(ends) - max(timed)
    if gap < GAP_S:
        return False
    return f"though the job ran on {gap:.0f} s after it, until the waiting ranks' own abort"


def _ended(out: Inputs, rank: int) -> bool:
    return out.exits[rank]["code"] is not None or any(
        y.get("event") == "end" for y in out.metrics[rank]
    )


def _late(got: Read, out: Inputs) -> None:
    """The static rendezvous gave up on the master: a pod whose container started only after
    that, or never, never arrived (its object's startedAt, or its first timestamped line)."""
    master = next((c for c in got.containers if c.rdzv_wait), None)
    if master is None:
        return
    pod0 = got.pods.get(master.name)
    gave_up = (pod0.finished if pod0 else None) or master.last_t
    for c in got.containers:
        pod = got.pods.get(c.name)
        start = (pod.started_at if pod else None) or c.first_t
        if c is master or not (gave_up and start and start > gave_up):
            continue
        for rank in range(c.node_rank * c.nproc, (c.node_rank + 1) * c.nproc):
            out.nodes[rank] = {
                "started": False,
                "why_absent": f"its pod {c.name} started "
                f"{start - gave_up:.0f} s after the master gave up waiting "
                f"({master.rdzv_wait})",
            }


def waited(seen: Rank) -> dict | None:
    """The collective a rank waited in when it failed: its watchdog's (NCCL: op and sequence
    number), or the torch.distributed call its traceback ended in with a timeout or a lost
    peer (gloo: no sequence number)."""
    if seen.waiting:
        return seen.waiting
    if seen.lost and seen.call:  # the torch.distributed call it was in when a peer failed
        return {"op": seen.call, "seq": None}
    return None


def _ran(rank: int, seen: Rank | None, c: Container | None) -> bool:
    """Its lines, or torchrun's summary of its node, show it ran (a rank that prints nothing
    of its own is still in its launcher's table of the workers it stopped)."""
    # torchrun's summary, its SIGTERMs, DeepSpeed's kills: the launcher ran all its workers
    return seen is not None or bool(c and (c.failures or c.stopped or c.stopped_all))


def _returned(rank: int, seen: Rank | None, c: Container | None) -> bool:
    """torchrun's summary lists every worker that failed: a rank of its node it leaves out
    returned 0 (its script ended), where its own lines show no error and its launcher stopped
    none of its workers (torchrun's "Sending process N closing signal SIGTERM": those were
    stopped, not completed)."""
    listed = bool(c and c.failures) and rank not in c.failures
    if c is not None and (c.stopped or c.stopped_all):
        return False
    return listed and not (seen and (seen.exception or seen.lost or seen.detail))


def _lines(seen: Rank | None, returned: bool = False) -> list[dict]:
    if seen is None:
        return [{"event": "end", "status": "completed"}] if returned else []
    out = [{"event": "phase", "name": "rendezvous"}] if seen.joined else []
    if seen.step:
        out.append({"event": "step", "step": seen.step})
    if seen.completed or returned:
        out.append({"event": "end", "status": "completed"})
    elif seen.exception or seen.detail or seen.lost:
        out.append(
            {
                "event": "end",
                "status": "failed",
                "error": seen.detail or seen.exception or seen.lost,
            }
        )
    return out


def _started(seen: Rank | None, pod, c: Container | None) -> dict:
    if pod is not None and pod.started is False:
        return {
            "started": False,
            "why_absent": f"its pod {pod.name} never ran its container ({pod.waiting})",
        }
    if c is not None and c.unresolved and not (seen and seen.joined):
        # the name did not resolve from this pod. A connect that timed out names no side: the
        # master may never have listened (make repro says so, and names nobody for it)
        return {
            "started": True,
            "net": f"its pod {c.name} could not resolve the master's name ({c.unresolved})",
        }
    return {"started": True}  # a rank not seen at all is not known to have never started


def _exit(rank: int, seen: Rank | None, pod, c: Container | None) -> dict:
    """code, signal, oom, signature (a consequence), t, by_itself: as faults/verdicts.py's exits."""
    code = signal = None
    failure = (c.failures.get(rank) if c else None) or {}
    if c is not None and c.node_failed and c.nproc == 1 and not failure:
        failure = c.node_failed  # DeepSpeed's launcher of one worker: that worker's code
    if "exit" in failure:  # torchrun's summary: minus the signal for a signal's death
        code = failure["exit"]
        signal = -code if code < 0 else None
    alone = (pod.nproc if pod and pod.nproc else (c.nproc if c else 1)) == 1
    own = bool(seen and (seen.exception or seen.lost or seen.detail))
    stopped = False
    if c is not None and c.failures and rank not in c.failures:
        # torchrun lists every worker that failed; the others returned 0, or, where it
        # stopped its workers (its SIGTERMs, DeepSpeed's kills), were stopped by it
        stopped = bool(c.stopped or c.stopped_all) and not (seen and seen.completed)
        code, signal = (-15, 15) if stopped else (0, None)
    launcher_failed = bool(c and c.agent_error)  # the pod's exit is its launcher's own
    if pod is not None and pod.exit_code is not None and not stopped and not launcher_failed:
        # the pod's exit is its launcher's, shared by its ranks: it is one rank's only where
        # the pod holds that one rank and it printed something. A SIGKILL of the pod (137: the
        # kubelet, the kernel's OOM killer, a node lost) ends every process in it at once, so
        # every rank that had no end of its own; another signal (134, 139) is one process's
        # own crash, which of them not said
        killed = pod.exit_code > 128 or pod.signal
        sig = pod.signal or (pod.exit_code - 128 if pod.exit_code > 128 else None)
        if (pod.reason == "OOMKilled" or sig == 9) and not own and code is None:
            code, signal = pod.exit_code, sig or 9
        elif code is None and alone and seen is not None:
            code, signal = pod.exit_code, sig if killed else None
    lost = seen.lost if seen else None
    if c is not None and c.aborted and signal == 6 and not lost:
        sixes = [r for r, f in c.failures.items() if f.get("exit") == -6]
        lost = c.aborted if sixes == [rank] or (alone and not c.failures) else None
    if lost and signal == 6:  # the watchdog takes the process down: its timeout, not a cause
        signal = None
    oom = bool(pod is not None and pod.reason == "OOMKilled")
    if oom and not alone and signal != 9 and failure:
        oom = False  # torchrun names which rank the kernel killed: not this one
    t = (seen.t if seen else None) or failure.get("t") or (pod.finished if pod and alone else None)
    return {
        "code": code,
        "signal": signal,
        "oom": oom,
        "signature": lost or ("SIGTERM" if stopped else None),
        "t": t or 0.0,
        "by_itself": code is not None or bool(seen and (seen.exception or seen.lost)),
    }


def _outside(seen: Rank | None, wait: dict) -> str:
    """What a rank that printed no timeout was doing when the others timed out."""
    at = f" (its progress bar last showed step {seen.step})" if seen and seen.step else ""
    what = f"{wait['op']} #{wait['seq']}" if wait.get("seq") is not None else wait["op"]
    return (
        f"outside {what} by its log: it printed no timeout there, as a rank waiting in it would{at}"
    )


def _replaced(got: Read, out: Inputs) -> None:
    """A pod created anew mid-job: its container's history (the earliest startedAt its object
    holds) begins REPLACED_S or more after another pod's, just as that pod's attempt ended. An
    operator re-creates a deleted or evicted pod under its name with a fresh history, and
    `kubectl logs --previous` reads a pod's own restarts only: the pod before it was lost from
    outside (kubectl delete, an eviction, its node) and left no log, and the other pod failed
    on the lost peer. Its ranks are named stopped from outside, with what the objects show."""
    starts = {n: p.first_started for n, p in got.pods.items() if p.first_started}
    if len(starts) < 2:
        lost = [r for c in got.containers for r, x in c.ranks.items() if x.lost]
        if got.before_newest and lost and not got.pods:
            out.untold.append(
                f"the pods restarted and rank(s) {', '.join(map(str, lost))} lost a peer: naming "
                "a rank here takes the pods' objects, whose start times show a pod made anew "
                "(kubectl get pods -o yaml > pods.yaml)"
            )
        return
    for c in got.containers:
        pod = got.pods.get(c.name)
        if not pod or c.name not in starts:
            continue
        began = starts[c.name]
        near = [
            q
            for n, q in got.pods.items()
            if n != c.name
            and n in starts
            and began - starts[n] >= REPLACED_S
            and q.finished
            and abs(q.finished - began) <= REPLACED_S
        ]
        if not near:
            continue
        why = (
            f"its pod {c.name} began anew {began - starts[near[0].name]:.0f} s after "
            f"{near[0].name}, as that pod's attempt ended: the pod before it was lost from "
            "outside (deleted, evicted, its node) and left no log"
        )
        for rank in range(c.node_rank * c.nproc, (c.node_rank + 1) * c.nproc):
            ex = out.exits[rank]
            ex.update(signature=None, outside=why, by_itself=True, signal=ex["signal"] or 15)
            ex["t"] = began - 1.0  # gone before its new pod began, as the other failed


def _outside_stops(got: Read, out: Inputs) -> None:
    """A pod stopped from outside: its object says so (Evicted; a DisruptionTarget condition:
    preempted, evicted through the API, its node shutting down), or its launcher logged the
    signal (torchrun's "Received 15 death signal") before any other rank failed, by the lines'
    times. An operator deleting the pods still running after the job failed sends the same
    signal, later: without times to order them, only the pod's object counts. The verdict
    names the first (verdict/rules.py, stopped from outside), where no rank died by itself."""
    failed_t = [
        r.t for c in got.containers for r in c.ranks.values() if r.t and (r.lost or r.exception)
    ]
    for c in got.containers:
        pod = got.pods.get(c.name)
        why, t = (pod.evicted, pod.finished) if pod and pod.evicted else (None, None)
        early = c.death_signal_t and all(c.death_signal_t < x for x in failed_t)
        if why is None and c.death_signal and early:
            why, t = f"its launcher got {c.death_signal} from outside", c.death_signal_t
        if not why:
            continue
        for rank in range(c.node_rank * c.nproc, (c.node_rank + 1) * c.nproc):
            ex = out.exits[rank]
            ex.update(signature=None, outside=why, by_itself=True, signal=ex["signal"] or 15)
            ex["t"] = t or ex["t"] or c.last_t or 0.0
