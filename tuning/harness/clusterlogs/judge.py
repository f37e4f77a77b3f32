"""A cluster's logs judged: what the folder shows (source.py, seen.py), the verdict the live
runs' rules give on those facts (verdict/facts.py, verdict/rules.py), and what the logs could not
tell, said with it. `make repro` (commands/repro.py) and `make up`'s kube view read it.
"""

from __future__ import annotations

from pathlib import Path

from tuning.harness.clusterlogs import seen, source
from tuning.harness.clusterlogs.repro_json import Hung, LogsRead, ReproRecord
from tuning.harness.verdict import facts, rules
from tuning.harness.verdict.record import Verdict


def judge(
    folder: Path,
    records: dict | None = None,
    metrics: dict | None = None,
    say=None,
) -> tuple[ReproRecord, seen.Inputs, source.Read]:
    """(the record: what the folder shows, the verdict, what the logs could not tell; the
    inputs the verdict was given; what was read). `records`: a harness run's own flight
    recorder of each rank that failed (stacks/dumps.py failed), and `metrics` its ranks' own
    lines (how each ended, the SIGTERMs from outside), where it has them. `say`: told of each
    large file as it is read."""
    got = source.load(folder, say)
    inp = seen.inputs(got)
    restarted = None
    if got.earlier and not records and (why := cannot_read(got, inp)) and got.containers:
        # the pods restarted and their newest attempts failed in nothing: judge the attempt
        # before, which did fail
        restarted = f"the newest attempts show no failure ({why}): the attempt before is judged"
        got = source.earlier_attempts(got)
        inp = seen.inputs(got)
    for rank, rec in (records or {}).items():  # a harness run's own: each failed rank's flight
        inp.failed[rank] = {**inp.failed.get(rank, {}), **rec}  # recorder, beside what logs say
    for rank, lines in (metrics or {}).items():  # ... and its ranks' own lines (ends, signals)
        if rank in inp.metrics and any(y.get("event") == "end" for y in lines):
            inp.metrics[rank] = lines
    read = LogsRead(
        files=got.files,
        unread=got.unread,
        notes=got.notes,
        world_size=got.world,
        world_stated=got.world_stated,
        pods=[c.name for c in got.containers],
        missing_ranks=inp.missing,
        step=inp.step,
    )
    why = cannot_read(got, inp)
    if why:
        stuck = hung(got, inp) if why.startswith("hung") else None
        return ReproRecord(read, could_not_tell=[why, *launchers(got)], hung=stuck), inp, got
    found = facts.gather(
        inp.world, inp.metrics, None, inp.exits, inp.nodes, False, None, inp.failed
    )
    v = rules.judge(found)
    told = [restarted] if restarted else []
    if v.culprits:  # named: what the logs could not tell only qualifies it
        return ReproRecord(read, v, caveats=told + limits(v, inp, got)), inp, got
    could_not_tell = [f"the logs name no culprit: {v.evidence}", *told, *limits(v, inp, got)]
    return ReproRecord(read, v, could_not_tell=could_not_tell), inp, got


def hung(got: source.Read, inp: seen.Inputs) -> Hung | None:
    """Pods still running with no rank failed: the job is hung, nothing failed yet. How to get
    each rank's stack and flight recorder from the running pods."""
    running = [p for p in got.pods.values() if p.running]
    if not running:
        return None
    return Hung([p.name for p in running], [p.container for p in running])


def cannot_read(got: source.Read, inp: seen.Inputs) -> str | None:
    if not got.files:
        return "the folder holds no log (one file a pod: kubectl logs <pod> > <pod>.log)"
    if not got.containers:
        return "no log in the folder could be placed on a node: " + "; ".join(
            got.notes or got.unread
        )
    if not inp.known:
        return (
            "no line of these logs is torch's, torchrun's or the HF Trainer's: another "
            "framework's logs, or not a training job's"
        )
    ended = [x for x in inp.exits.values() if x["code"] not in (None, 0) or x["signature"]]
    failed = [
        r for r, lines in inp.metrics.items() if any(y.get("status") == "failed" for y in lines)
    ]
    if not ended and not failed and not any(x.get("outside") for x in inp.exits.values()):
        running = [p.name for p in got.pods.values() if p.running]
        failed = [p.name for p in got.pods.values() if p.exit_code not in (None, 0)]
        if running and not failed:
            return (
                f"hung, nothing failed yet: pod(s) {', '.join(running)} are still running and "
                "no rank failed in their logs"
            )
        if any(r.completed for c in got.containers for r in c.ranks.values()):
            return "the run succeeded: its logs end in a finished training, no rank failed"
        if failed:
            return (
                f"no rank failed in these logs, but pod(s) {', '.join(failed)} ended with an "
                "error: their launcher's, before or beside the ranks"
            )
        return "no rank failed in these logs: every one that logged ended without an error"
    return None


def limits(v: Verdict, inp: seen.Inputs, got: source.Read) -> list[str]:
    """What these logs could not tell, said with the verdict."""
    out = []
    if inp.missing:
        out.append(
            f"no log and no object of rank(s) {', '.join(map(str, inp.missing))}: "
            "nothing is known of them"
        )
    if v.kind in ("never arrived", "desync", "unknown") and v.rule != "torch":
        out.append(
            "no flight recorder dump: a rank that never entered a collective cannot be "
            "told from one in another collective (a desync) by the logs alone"
        )
    if any("nothing of the job ended" in (f.get("passed") or "") for f in inp.failed.values()):
        out.append(
            "the job had not ended when these logs were taken: logs taken before the others' "
            "own timeouts came would read the same (take them again, or each rank's stack)"
        )
    out += inp.untold + launchers(got)
    if not inp.step:
        out.append("no progress bar in the logs: the step it happened at is not known")
    return out


def launchers(got: source.Read) -> list[str]:
    """What the pods' launchers said of themselves: a master they could not reach, their own
    failure (torchrun's agent: its rendezvous, its store)."""
    out = []
    for c in got.containers:
        if c.unreachable:
            out.append(
                f"{c.name} could not reach the master at {c.unreachable}: the master may never "
                "have listened, or the network dropped it; the logs do not say which side"
            )
        if c.agent_error:
            out.append(
                f"{c.name}'s launcher (torchrun's agent) failed by itself: {c.agent_error[:200]}"
                " (its rendezvous or its store: no rank of it had started)"
            )
    return out
