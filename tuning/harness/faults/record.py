"""What a fault run leaves on record: fault.json's facts (fault_json.py's FaultRecord;
faults/write.py writes them, and fault.md, the same, readable).

Per rank: its last step, when it ended, exit code, signal, OOM flag and the error signature
found in its end line or its log. For the run: the outcome, fault-to-end time against the
bound (TIMEOUT + 15 s), what a cluster's default timeouts would make of it, what was left
behind, which checkpoints survive, and its timeouts checked against what it measured before
the fault (checks/timeouts.py, as `make up` checks them). What a kind adds (its signatures,
facts, goal, cluster line) is its own (faults/kinds/).
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from tuning.container.rank import torn
from tuning.harness.checks import timeouts
from tuning.harness.faults import verdicts
from tuning.harness.faults.fault_json import Checkpoint, FaultRecord, RankEnd
from tuning.harness.faults.kinds import TABLE
from tuning.harness.run_files import metric_lines
from tuning.harness.run_files.status import ENDED_WELL, Status
from tuning.harness.stacks import hung

SIGABRT = 6  # std::terminate, as gloo's size check ends a rank
SLACK_S = 15  # a fault must end (or be detected as a hang) within TIMEOUT + this

# (label, pattern) in the order they are looked for; the first match is a rank's signature:
# the kinds' own (an injected crash, ENOSPC), then what any fault can leave.
INJECTED = [sig for kind in TABLE.values() for sig in kind.signatures]  # the injectors' own words
SIGNATURES = [
    *INJECTED,
    # gloo's own size check aborting a rank that received more than it expected: a peer ran
    # another collective or another shape (a desync), not this rank's fault
    ("gloo size check", r"gloo::EnforceNotMet|enforce fail at [^\n]*gloo"),
    ("process-group timeout", r"wait timeout after \d+ms, keys"),
    (
        "rendezvous timeout",
        r"RendezvousTimeoutError|waiting for clients|DistStoreError|client socket has timed out",
    ),
    ("collective timeout", r"Timed out waiting|Application timeout|timed out|Timeout"),
    ("Connection reset by peer", r"Connection reset by peer"),
    ("Connection closed by peer", r"Connection closed by peer"),
    ("Broken pipe", r"Broken pipe"),
    ("Network is unreachable", r"Network is unreachable"),
    ("No route to host", r"No route to host"),
    ("Connection refused", r"Connection refused"),
    ("SIGKILL", r"Signal 9 \(SIGKILL\)|SIGKILL"),
    ("SIGTERM", r"Signal 15 \(SIGTERM\)|SIGTERM"),
]
TIMEOUTS = ("rendezvous timeout", "process-group timeout", "collective timeout")
_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
CLUSTER = {"collective": "NCCL 10 min, gloo 30 min", "rendezvous": "torchrun's join timeout 600 s"}


def signature(text: str, injected: bool = True) -> str | None:
    """The first label whose pattern the text shows; `injected=False`: only what a user's run
    would show too (not a kind's own words, such as the desync injector's line)."""
    for label, pattern in SIGNATURES if injected else SIGNATURES[len(INJECTED) :]:
        if re.search(pattern, text):
            return label
    return None


def is_timeout(text: str) -> bool:
    return signature(text) in TIMEOUTS


def build(
    base: FaultRecord, follow, summary: dict, layout, run_dir: Path, leftovers: dict
) -> FaultRecord:
    """`base`: what was asked (commands/fault.py); the record adds what happened."""
    t0, fault_at = follow.t0, follow.injected_at
    metrics = metric_lines.read_metrics(run_dir / "output")
    if base.steps is None:  # ENTRY with ARGS: the steps its Trainer said it runs
        base = replace(base, steps=metric_lines.trainer_max_steps(metrics))
    logs = {p.stem: p.read_text(errors="replace") for p in (run_dir / "logs").glob("*.log")}
    node_rows = {r["node"]: r for r in summary.get("ranks", [])}
    ranks = []
    for node in layout.nodes():
        d = node_rows.get(node.name, {})
        log = logs.get(node.name, "")
        failures = {int(r): int(c) for r, c in _FAILURE.findall(log)}
        for r in node.ranks:
            ranks.append(_rank(r, node, d, log, failures, metrics.get(r, []), follow, t0))
    job_end = max([*follow.ended.values(), follow.finished_at or 0]) or None
    outcome = _outcome(follow, ranks, fault_at, job_end, base.timeout_s)
    restarts = summary.get("restarts") or []
    if outcome == "finished" and restarts and summary.get("status") == Status.SUCCEEDED:
        outcome = "recovered"  # MAX_RESTARTS: the group came back from a checkpoint and ended
    bound = base.timeout_s + SLACK_S
    fault_to_end = round(job_end - fault_at, 2) if fault_at and job_end else None
    detect = round(follow.detected_at - fault_at, 2) if follow.detected_at and fault_at else None
    left = [
        f"{kind[:-1]} {getattr(o, 'name', None) or o.id}"
        for kind, objs in leftovers.items()
        for o in objs
    ]
    record = replace(
        base,
        status="done" if fault_at else "not injected",
        how=follow.how,
        injected_t=round(fault_at - t0, 2) if fault_at else None,
        injected_step=follow.inject_step,
        stopped_by=follow.stopped_by,
        outcome=outcome,
        fault_to_end_s=fault_to_end,
        hang_detected_s=detect,
        ranks_ended_s=round(max(x.end_t for x in ranks) + t0 - fault_at, 2)
        if fault_at and ranks and all(x.end_t for x in ranks)
        else None,
        bound_s=bound,
        run_status=summary.get("status"),
        restarts=restarts,
        steps_reached=max((x for x, _ in summary.get("losses") or []), default=None),
        ranks=ranks,
        timeline=follow.timeline,
        leftovers=left,
        checkpoints=_checkpoints(run_dir / "output", metrics, fault_at),
        on_a_cluster=follow.kind.cluster or _cluster_cost(ranks, base),
        timeouts=_timeouts(base, metrics, fault_at, run_dir.name),
    )
    timed_out = any(x.signature in TIMEOUTS for x in ranks)
    record = replace(record, **hung.record(follow, timed_out))  # a hang's stacks (dumps.py)
    if follow.kind.facts:  # what the kind adds: its save, volume, late master, step times
        seen = SimpleNamespace(
            output=run_dir / "output", ranks=ranks, logs=logs, metrics=metrics, job_end=job_end
        )
        record = replace(record, own=follow.kind.facts(follow, seen))
    verdict = verdicts.final(record, follow, run_dir, follow.hang_stacks.taken)
    record = replace(record, verdict=verdict)
    return replace(record, goal_met=follow.kind.met(record))


def _rank(r, node, d, log, failures, lines, follow, t0) -> RankEnd:
    steps = metric_lines.steps(lines)
    end = next((x for x in reversed(lines) if x.get("event") == "end"), None)
    own_log = "\n".join(x for x in log.splitlines() if x.startswith(f"[rank{r}]"))
    ended = follow.ended.get(node.name)
    if node.nproc == 1:  # a container per rank: its exit is the rank's (None: still running)
        code = d.get("exit_code") if ended else None
        sig = code - 128 if code and code > 128 else None
        if sig is None and failures.get(r, 0) < 0:  # the launcher outlived its worker
            sig = -failures[r]
        own_log = log
    elif r in failures:  # torchrun's failure table in the node's log
        code = failures[r]
        sig = -code if code < 0 else None
    elif end is not None:
        code = 0 if end.get("status") in ENDED_WELL else 1
        sig = None
    else:
        code, sig = None, None
    text = "\n".join([(end or {}).get("error") or "", own_log])
    found, seen = signature(text), signature(text, injected=False)
    if found is None and sig == SIGABRT and node.nproc > 1:
        found = _aborted(r, node, log, failures)
    if sig == 9 and found is None or (sig == 9 and not (end or {}).get("error")):
        found = "SIGKILL"
    if sig == 9 and seen is None or (sig == 9 and not (end or {}).get("error")):
        seen = "SIGKILL"
    if seen is None and sig == SIGABRT and node.nproc > 1:
        seen = _aborted(r, node, log, failures)
    oom = bool(d.get("oom_killed"))
    if oom and r == follow.rank:
        found = "OOM-killed"
    end_t = end["time"] if end else ended
    return RankEnd(
        rank=r,
        node=node.name,
        last_step=steps[-1]["step"] if steps else None,
        last_step_t=round(steps[-1]["time"] - t0, 2) if steps else None,
        end_t=round(end_t - t0, 2) if end_t else None,
        ended_by="itself" if ended else "harness teardown",
        end_status=(end or {}).get("status"),
        exit_code=code,
        node_exit_code=d.get("exit_code") if ended else None,
        signal=sig,
        oom_killed=oom,
        signature=found,
        seen_signature=seen,
        error=((end or {}).get("error") or "")[:300] or None,
    )


def _aborted(r: int, node, log: str, failures: dict) -> str | None:
    """A C++ abort (gloo's size check: std::terminate) prints without torchrun's [rankN] prefix:
    in a node of several ranks its unprefixed lines are this rank's signature when it alone of
    them died of SIGABRT."""
    aborted = [x for x in node.ranks if failures.get(x) == -SIGABRT]
    if aborted != [r]:
        return None
    return signature("\n".join(x for x in log.splitlines() if not x.startswith("[rank")))


def _outcome(follow, ranks, fault_at, job_end, timeout) -> str:
    if fault_at is None:
        return f"not injected ({follow.stopped_by or 'the run ended first'})"
    if follow.stopped_by == "hang detected":
        return "hung (detected)"
    if follow.stopped_by == "deadline":
        return "hung until the deadline"
    statuses = {x.end_status for x in ranks}
    if statuses == {"preempted"}:
        return "preempted"
    if statuses == {"completed"} or all(x.exit_code == 0 for x in ranks):
        return "finished"
    if job_end and job_end - fault_at <= timeout + SLACK_S:
        return "failed fast"
    return "failed slowly"


def _checkpoints(output: Path, metrics, fault_at) -> list[Checkpoint]:
    saved = {
        x["step"]: x["time"]
        for lines in metrics.values()
        for x in lines
        if x.get("event") == "checkpoint"
    }
    out = []
    for path in torn.checkpoints(output):
        step = int(path.name.split("-")[-1])
        at = saved.get(step)
        out.append(
            Checkpoint(
                name=path.name,
                step=step,
                complete=torn.missing(path) is None,
                before_fault=bool(at and fault_at and at < fault_at),
            )
        )
    return out


def _timeouts(base: FaultRecord, metrics: dict, fault_at: float | None, run_id: str) -> list | None:
    """timeouts.check's findings on what the run measured before the fault (None: no step came
    before it): what the fault does to steps, saves and a restart's rendezvous is no healthy
    wait. There is no stall watch here, so the check `make up` runs before the run has nothing
    to compare; said too (timeouts.say)."""
    t = timeouts.Timeouts(_collective_s(base), float(base.rdzv_timeout_s))
    with tempfile.TemporaryDirectory() as tmp:  # timeouts.measured reads a run's metrics files
        out = Path(tmp, run_id, "output", "metrics")
        out.mkdir(parents=True)
        for rank, lines in metrics.items():
            before = [x for x in lines if fault_at is None or x.get("time", 0) < fault_at]
            (out / f"rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in before))
        m = timeouts.measured(Path(tmp, run_id))
    if m is None:
        return None
    found = timeouts.check(t, m)
    timeouts.say(found, "what this run measured before the fault")
    return found


def _collective_s(base: FaultRecord) -> float:
    """TIMEOUT is the job's ddp_timeout; under ARGS the trainer's own --ddp_timeout is."""
    args = (base.trainer or {}).get("args")
    if args is None:
        return float(base.timeout_s)
    own = re.search(r"--ddp_timeout[= ](\d+(?:\.\d*)?)(?:\s|$)", " ".join(args))
    return float(own[1]) if own else float(timeouts.HF_DDP_TIMEOUT_S)


def _cluster_cost(ranks: list[RankEnd], base: FaultRecord) -> str:
    """What the same fault costs on a cluster with default timeouts, by the ranks' signatures
    (a kind whose cost does not follow from them says its own: Kind.cluster)."""
    sigs = {x.signature for x in ranks}
    if "rendezvous timeout" in sigs:
        return (
            f"peers gave up after RDZV_TIMEOUT={base.rdzv_timeout_s} s; with "
            f"{CLUSTER['rendezvous']} they would wait 10 min for the missing rank"
        )
    if "process-group timeout" in sigs:
        return (
            f"peers gave up building the process group after TIMEOUT={base.timeout_s} s "
            f"(that wait uses the collective timeout); with the defaults "
            f"({CLUSTER['collective']}) the same fault holds the job that long"
        )
    if "collective timeout" in sigs:
        return (
            f"peers gave up after TIMEOUT={base.timeout_s} s; with the defaults "
            f"({CLUSTER['collective']}) the same fault holds the job that long"
        )
    return "no timeout was involved: peers failed on the broken connection, as on a cluster"
