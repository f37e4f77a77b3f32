"""repro.md, and the lines `make repro` prints: the verdict, what the logs could not tell, the
replay (its `make fault` line, and with RUN=1 whether its verdict matched)."""

from __future__ import annotations

from tuning.harness.clusterlogs.repro_json import Hung, LogsRead, ReproRecord
from tuning.harness.verdict.record import Verdict

COLLECT = (
    "collect per pod: `kubectl logs --timestamps <pod> > <pod>.log`, `kubectl logs --timestamps "
    "--previous <pod> > <pod>.previous.log`, and `kubectl get pods -l "
    "training.kubeflow.org/job-name=<job> -o yaml > pods.yaml` (exit codes, OOMKilled, "
    "evictions); for hangs and desyncs run the job with TORCH_NCCL_TRACE_BUFFER_SIZE=2000, "
    "TORCH_NCCL_DUMP_ON_TIMEOUT=1 and TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/output/nccl_trace_rank_ "
    "(flight recorder dumps on a claim) or TORCH_DISTRIBUTED_DEBUG=DETAIL"
)


def world(read: LogsRead) -> str:
    """ "8", or "at least 2" where no line or object says the world size."""
    n = read.world_size
    return str(n) if read.world_stated else f"at least {n}"


def _who(v: Verdict) -> str:
    return ", ".join(map(str, v.culprits)) or "none named"


def hung_commands(h: Hung) -> list[str]:
    """How to get each rank's stack and flight recorder from pods still running."""
    out = []
    for pod, ctr in zip(h.pods, h.containers, strict=True):
        out += [
            f"kubectl debug -it {pod} --image=python:3.11-slim --target={ctr} "
            "--profile=sysadmin -- sh -c 'pip install -q py-spy && for p in $(pgrep -f "
            "python); do py-spy dump --pid $p; done'   # every process's Python stack",
            f"kubectl exec {pod} -c {ctr} -- sh -c 'for f in /tmp/nccl_trace_rank_*.pipe; do "
            "echo 1 > $f; done'   # a flight recorder dump of each rank, where the job runs "
            "with TORCH_NCCL_TRACE_BUFFER_SIZE=2000, TORCH_NCCL_DEBUG_INFO_TEMP_FILE="
            "/tmp/nccl_trace_rank_ and TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/tmp/nccl_trace_rank_",
            f"kubectl cp {pod}:/tmp ./{pod}-dumps -c {ctr}   # then: python -m "
            "torch.distributed.flight_recorder.fr_trace ./*-dumps/nccl_trace_rank_",
        ]
    return out


def said(rec: ReproRecord) -> list[str]:
    v = rec.verdict
    out = [f"repro: not read: {x}" for x in rec.read.unread]
    out += [f"repro: note: {x}" for x in rec.read.notes]
    if rec.named:
        out.append(f"repro: {v.kind}, culprit rank(s) {_who(v)} of {world(rec.read)}: {v.evidence}")
        out += [f"repro: how sure: {why}" for why in rec.caveats]
    else:
        out += [f"repro: the logs cannot tell: {why}" for why in rec.could_not_tell]
    r = rec.replay
    if r:
        out.append(f"repro: replay here: {r.command}")
        out.append(f"repro:   {r.plan.why}")
        if r.run:
            out.append(f"repro: to run it and compare the verdicts: {r.run}")
    elif rec.no_replay:
        out.append(f"repro: {rec.no_replay}")
    elif rec.hung:
        out.append("repro: each rank's stack and flight recorder, from the running pods:")
        out += [f"repro:   {x}" for x in hung_commands(rec.hung)]
    else:
        out.append(f"repro: {COLLECT}")
    run = rec.run
    if run:
        here = run.verdict
        word = "matches" if run.matches else "does not match"
        out.append(
            f"repro: the replay's verdict {word} the cluster's: {here.kind if here else None}, "
            f"culprit rank(s) {_who(here) if here else 'none'} here "
            f"({', '.join(run.roles_here) or 'no role'}; run {run.run_id})"
        )
    return out


def markdown(rec: ReproRecord) -> str:
    read = rec.read
    lines = [
        f"# repro {rec.run_id}",
        "",
        f"From `{rec.from_folder}`: {len(read.files)} file(s) read "
        f"({', '.join(read.files) or 'none'}); pods {', '.join(read.pods) or 'none'}; "
        f"world size {world(read)}; the last step the logs show: "
        f"{read.step if read.step else 'none'}.",
        "",
    ]
    if read.unread or read.notes:
        lines += [f"- {x}" for x in read.unread + read.notes] + [""]
    v = rec.verdict
    if v:
        lines += [
            f"- **verdict: {v.kind}; culprit rank(s): {_who(v)}**",
            f"- evidence: {v.evidence}",
        ]
    if rec.named:
        lines += [f"- how sure: {why}" for why in rec.caveats]
    else:
        lines += [f"- the logs cannot tell: {why}" for why in rec.could_not_tell]
    r = rec.replay
    if r:
        lines += ["", "## The replay here", "", "```sh", r.command, "```", "", r.plan.why]
    elif rec.no_replay:
        lines += ["", f"No replay: {rec.no_replay}."]
    elif rec.hung:
        lines += ["", "Each rank's stack and flight recorder, from the running pods:", ""]
        lines += ["```sh", *hung_commands(rec.hung), "```"]
    else:
        lines += ["", f"To collect next: {COLLECT}."]
    run = rec.run
    if run:
        last = said(rec)[-1].removeprefix("repro: ")
        lines += ["", "## Replayed (RUN=1)", "", f"- {last}"]
    return "\n".join(lines) + "\n"
