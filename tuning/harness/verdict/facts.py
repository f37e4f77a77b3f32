"""What each rank showed, gathered for the verdict (rules.py): from a dump of the ranks'
stacks and flight recorders (stacks/dumps.py), the ranks' metrics (phases, steps, end lines),
their exits where a fault run recorded them (faults/record.py), and their nodes (started at
all, on the run's network). Never what was injected: a fault run and a stalled `make up` give
the same kind of facts.
"""

from __future__ import annotations

import re

from tuning.harness.run_files.status import ENDED_WELL
from tuning.harness.stacks import stack_text

# An end these say the rank failed because a peer did, or waited too long: not a cause
from tuning.harness.verdict.rules import CONSEQUENCES

# gloo's and c10d's errors from inside a collective: a timeout, a peer lost
_IN_A_COLLECTIVE = re.compile(
    r"Timed out waiting|Connection (closed|reset) by peer|Broken pipe"
    r"|Application timeout|wait timeout after"
)


def gather(
    world: int,
    metrics: dict,
    taken: dict | None = None,
    exits: dict | None = None,
    nodes: dict | None = None,
    progressing: bool = False,
    fr_check: dict | None = None,
    failed: dict | None = None,
) -> dict:
    """facts for verdict.judge. metrics: {rank: [lines]}; taken: stacks.dump's result; exits:
    {rank: {"code", "signal", "oom", "signature", "t", "by_itself", "outside"}} (outside: why
    it was stopped from outside, where its pod said); nodes: {rank: {"started", "net"}} (net:
    what is wrong with its node's network, else None); failed: stacks.failed's (each failed
    rank's flight recorder when it failed: used where no dump shows the rank; make repro adds
    "busy", what a rank's log says it did instead)."""
    dumped = (taken or {}).get("ranks") or {}
    # Did any rank get as far as the rank recorder? Where none did (fms's per-rank workers wait
    # for torchrun's rendezvous before they exist), an unregistered rank is no sign of anything
    registered = any(
        metrics.get(r) or not _state(dumped, r).startswith(("not registered", "not started"))
        for r in range(world)
    )
    ranks = {}
    for r in range(world):
        lines = metrics.get(r) or []
        d = dumped.get(r) or dumped.get(str(r)) or {}
        node = (nodes or {}).get(r) or {}
        end = next((y for y in reversed(lines) if y.get("event") == "end"), None)
        x = {
            "joined": any(
                x.get("event") == "phase" and x.get("name") == "rendezvous" for x in lines
            )
        }
        state = _state(dumped, r)
        x["started"] = node.get("started", bool(lines) or not state.startswith("not started"))
        x["why_absent"] = node.get("why_absent") or "no container or process ever held it"
        if x["started"] and registered and not lines and state.startswith("not registered"):
            # its process may exist (stopped before it ran: no-show), but it never got as far as
            # the rank recorder's first line
            x["started"] = False
            x["why_absent"] = (
                "its process wrote nothing and never registered: no metrics line, no pid file"
            )
        if state.startswith("paused"):
            x["frozen"] = "is frozen (its container is paused: it cannot run or dump)"
        elif state.startswith("stopped"):
            x["frozen"] = "is stopped (SIGSTOP: it cannot run or dump)"
        if d.get("threads"):
            _position(x, d)
        elif (failed or {}).get(r):
            _at_failure(x, failed[r]["collectives"], (end or {}).get("error") or "")
            if not x.get("waiting") and failed[r].get("busy"):  # a log's word (make repro)
                x["busy"] = failed[r]["busy"]
            if failed[r].get("passed"):  # ... or that it did not wait where others timed out
                x["passed"] = failed[r]["passed"]
        x["error"] = (end or {}).get("error") or ""
        x["completed"] = (end or {}).get("status") == "completed"
        _ended(x, (exits or {}).get(r), end)
        _sigterm(x, lines, (exits or {}).get(r))
        if node.get("net"):
            x["net"] = node["net"]
        ranks[r] = x
    return {"world": world, "progressing": progressing, "ranks": ranks, "fr_check": fr_check}


def _state(dumped: dict, r: int) -> str:
    """The stack dump's word on rank r ("dumped", "not registered", "not started (...)", ...)."""
    return (dumped.get(r) or dumped.get(str(r)) or {}).get("state") or ""


def _position(x: dict, d: dict) -> None:
    """Waiting in a collective (its pending flight recorder entry), or busy outside any."""
    x["fr"] = d.get("collectives") or []
    pos = stack_text.position(d, d.get("main_thread"))
    if pos is None:
        return
    if pos["call"]:
        p = stack_text.pending(d) or {}
        c = pos["caller"]
        x["waiting"] = {
            "call": pos["call"],
            "op": p.get("op") or pos["call"],
            "seq": p.get("seq"),
            "in": p.get("in"),
            "out": p.get("out"),
            "site": stack_text.where(pos["user"]) if pos["user"] else None,
            "caller": f"{c['file'].split('-packages/')[-1]}:{c['line']} ({c['func']})"
            if c
            else None,
        }
        return
    top, user = pos["top"], pos["user"]
    said = f"in {top['func']} at {stack_text.where(top)}"
    if user and user is not top:
        said += f", called from {stack_text.where(user)}"
    phase = stack_text.phase(d, d.get("main_thread"))
    x["busy"] = f"{phase[0]} ({said})" if phase else said


def _at_failure(x: dict, entries: list[dict], error: str) -> None:
    """No dump of this rank: what its flight recorder held when it failed. A collective that
    failed is retired ("done") like one that completed: the newest entry is the one it failed
    in when its error is a collective's (a timeout, a lost peer)."""
    x["fr"] = entries
    p = stack_text.pending({"collectives": entries})
    if p is None and entries and _IN_A_COLLECTIVE.search(error):
        p = entries[-1]
    if p:
        x["waiting"] = {
            "call": p["op"],
            "op": p["op"],
            "seq": p.get("seq"),
            "in": p.get("in"),
            "out": p.get("out"),
            "at_failure": True,
        }


def _sigterm(x: dict, lines: list[dict], ex: dict | None) -> None:
    """x["sigterm"] = {"t", "why"}: this rank got a SIGTERM, by its own record (its "signal"
    line: the rank recorder writes it at once, our trainer at its end with the time it came)
    or, from a cluster's logs, by its pod (evicted, preempted, its launcher told to stop)."""
    got = next(
        (y for y in lines if y.get("event") == "signal" and y.get("name") == "SIGTERM"), None
    )
    if got is not None:
        x["sigterm"] = {
            "t": got.get("at") or got.get("time") or 0.0,
            "why": "SIGTERM, by its own record",
        }
    elif ex and ex.get("outside"):
        x["sigterm"] = {"t": ex.get("t") or 0.0, "why": ex["outside"]}


def _ended(x: dict, ex: dict | None, end: dict | None) -> None:
    """x["died"]: how it ended first by itself, when that was no peer's doing; else
    x["ended_by"]: what ended it (a peer's failure, a timeout)."""
    if not ex or not ex.get("by_itself"):
        return
    sig, signature, error = ex.get("signal"), ex.get("signature"), (end or {}).get("error")
    code = ex.get("code")
    how = None
    if ex.get("outside"):  # evicted, preempted, deleted: the verdict's stopped-from-outside
        x["ended_by"] = "SIGTERM"
        return
    if sig == 9 and ex.get("oom"):
        how = f"was killed by the kernel's OOM killer (exit {code}, its container OOMKilled)"
    elif sig == 9:
        how = f"was killed (SIGKILL, exit {code})"
    elif sig and sig != 15:
        how = f"was killed by signal {sig} (exit {code})"
    elif signature in CONSEQUENCES or (end or {}).get("status") in ENDED_WELL:
        x["ended_by"] = signature or (end or {}).get("status")
        return
    elif peer := next((c for c in CONSEQUENCES if c in (error or "")), None):
        x["ended_by"] = peer  # its own error says a peer's failure (fms: SystemExit(203) from it)
        return
    elif error:
        how = f"raised {error.strip().splitlines()[-1][:200]}"
    elif code not in (0, None) and sig != 15:
        how = f"exited {code} with no error of its own"
    if how:
        x["died"] = {"how": how, "t": ex.get("t") or 0.0}
    elif sig == 15:
        x["ended_by"] = "SIGTERM"
