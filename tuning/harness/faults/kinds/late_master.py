"""The late-master fault: rank 0's node starts LATE seconds after the others (per-rank).

Like a master pod whose DNS name is not yet published (pytorch issue 73682): the other nodes'
torchrun connects to MASTER_ADDR for the static rendezvous (torch's
distributed/elastic/rendezvous/static_tcp_rendezvous.py: a TCPStore client), and until rank 0's
container is up its name does not resolve; once it is, the port refuses until rank 0's
torchrun listens. The client retries until the rendezvous timeout (RDZV_TIMEOUT, torchrun's
--rdzv_conf timeout): LATE below it recovers, LATE above it fails with torch's "The client
socket has timed out ... while trying to connect to (rank0, 29500)".

The harness leaves rank 0's service out of `compose up` and starts it LATE s later
(nodes.ComposeNodes.start_late), unless every other node has already ended. torch retries a
name that does not resolve yet (EAI_AGAIN) and a refused port in silence at its default log
level and says nothing until it gives up; so besides counting what each other node's log shows
(c10d's warnings), the harness asks from a waiting node's container what it sees, once a
second: the name not resolved, the port refused, then accepted. The record holds each change
and when the job ended or made its first step.
"""

from __future__ import annotations

import re
import time

import docker.errors

from tuning.harness.faults.fault_json import FaultRecord
from tuning.harness.faults.kinds.kind import LONG, Kind, Knob

KIND = "late-master"
ACCEPTS = "port accepts"  # the probe's last answer: the master's torchrun listens
PROBE_S = 1.0  # how often the harness asks, from a waiting node, what it sees of the master
LATE_S = 10  # default: well below the fault's default RDZV_TIMEOUT (TIMEOUT, 20 s)
# The scored pool's: LATE well past RDZV_TIMEOUT, so the others give up before rank 0 starts
POOL_LATE_S, POOL_RDZV_TIMEOUT_S = 40, 10
SINGLE = (
    "late-master needs a node per rank: LAYOUT=single runs every rank in one container "
    "behind one launcher, so there is no master node to start late (and no name to "
    "resolve: the ranks meet on 127.0.0.1). Use LAYOUT=per-rank."
)
SHARED = (
    "late-master with NETWORK=shared: every rank lives in rank 0's network namespace, so "
    "no rank can start before it. Use NETWORK=isolated."
)
# torch 2.13's defaults (torch/distributed/elastic/rendezvous): static_tcp_rendezvous.py
# _default_timeout_seconds = 600; dynamic_rendezvous.py (c10d backend) join timeout 600 s
CLUSTER = (
    "the other pods retry the master's name and port for torchrun's rendezvous timeout: 600 s "
    "by default (static rendezvous's _default_timeout_seconds, and the c10d backend's join "
    "timeout, both 600 s in torch 2.13); a master that comes up within it costs only the wait, "
    "a later one fails every pod, and restartPolicy OnFailure starts them again to wait anew"
)
# What a waiting node's log shows by default (torch 2.13's c10d socket.cpp and TCPStore.cpp
# warnings), counted per node; a refused port is logged only at TORCH_DISTRIBUTED_DEBUG=DETAIL
SEEN = {
    "name not resolved": r"cannot be retrieved \(gai error: -?\d+ - [^)]*\)",
    "connection refused": r"Connection refused",
    "connect retries": r"TCP client failed to connect/validate to host \S+ - retrying",
    "connect timeouts": r"\] \[c10d\] The client socket has timed out after \d+ms",
}
# Run in a waiting node's container: what it sees of the master torchrun connects to (its env)
_PROBE = """
import os, socket
host = os.environ.get("PET_MASTER_ADDR") or os.environ.get("MASTER_ADDR")
port = int(os.environ.get("PET_MASTER_PORT") or os.environ.get("MASTER_PORT") or 29500)
try:
    addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
except socket.gaierror as e:
    addr, saw = None, f"name not resolved ({e.strerror})"
if addr:
    s = socket.socket(addr[0], socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(addr[4])
        saw = "port accepts"
    except OSError as e:
        saw = f"connection refused ({e.strerror})" if e.errno == 111 else f"no connection ({e})"
print(saw)
"""


class Late:
    """Holds rank 0's node back (it is left out of `compose up`) and starts it LATE s later."""

    def __init__(self, target: str, late_s: int):
        self.target, self.late_s = target, late_s
        self.started_at: float | None = None
        self.seen: list[tuple[float, str]] = []  # (when, what a waiting node saw), on change
        self.probed_at = 0.0

    def due(self, nodes, now: float) -> list[tuple[str, int, float]]:
        issued = nodes.issued_at or now
        return [(f"{self.target} held back: it starts {self.late_s} s after the others", 0, issued)]

    def tick(self, nodes, now: float) -> str | None:
        """Start the held node once LATE s have passed (the follow stops first when every other
        node has ended: the job failed before its master came); until the master's port
        accepts, ask a waiting node what it sees."""
        started = None
        if self.started_at is None and time.time() - (nodes.issued_at or now) >= self.late_s:
            nodes.start_late(self.target)  # before a probe: an exec takes seconds under load
            self.started_at = time.time()
            started = f"{self.target} started, {self.started_at - nodes.issued_at:.1f} s late"
        if now - self.probed_at >= PROBE_S and not (self.seen and self.seen[-1][1] == ACCEPTS):
            self.probed_at = now
            self.probe(nodes)
        return started

    def probe(self, nodes) -> None:
        peer = next(c for name, c in nodes.containers.items() if name != self.target)
        try:
            out = peer.exec_run(["python3", "-c", _PROBE])
        except docker.errors.APIError:
            return  # the node is gone: nothing to see
        saw = out.output.decode(errors="replace").strip().splitlines()[-1:]
        if saw and (not self.seen or self.seen[-1][1] != saw[0]):  # none: the node has ended
            self.seen.append((time.time(), saw[0]))


def facts(late: Late, t0: float, logs: dict[str, str], metrics: dict, job_end) -> dict:
    """fault.json's "late": when the master came, what each other node saw meanwhile, and how
    long until the job made its first step (recovered) or ended."""
    seen = {}
    for node, log in sorted(logs.items()):
        if node == late.target:
            continue
        counts = {k: len(re.findall(p, log)) for k, p in SEEN.items()}
        first = next((m.group(0) for m in re.finditer(SEEN["name not resolved"], log)), None)
        seen[node] = {**counts, "first_resolve_error": first}
    steps = [x["time"] for lines in metrics.values() for x in lines if x.get("event") == "step"]
    return {
        "late_s": late.late_s,
        "master_started_t": round(late.started_at - t0, 2) if late.started_at else None,
        "first_step_t": round(min(steps) - t0, 2) if steps else None,
        "job_end_t": round(job_end - t0, 2) if job_end else None,
        "peers_saw": seen,
        "waiting_node_saw": [{"t": round(t - t0, 2), "saw": x} for t, x in late.seen],
    }


def goal(rec: FaultRecord) -> bool:
    """LATE below RDZV_TIMEOUT: the run finishes every step; above: the peers end by the
    rendezvous timeout."""
    left = not rec.leftovers
    if rec.own["late"]["late_s"] < rec.rdzv_timeout_s:
        return left and rec.outcome == "finished" and rec.steps_reached == rec.steps
    peers = [x for x in rec.ranks if x.node != "rank0"]
    return left and all(x.signature == "rendezvous timeout" for x in peers)


def lines(rec: FaultRecord) -> list[str]:
    """fault.md's lines on the late master."""
    late = rec.own.get("late")
    if not late:
        return []
    came = (
        f"started at t={late['master_started_t']} s"
        if late["master_started_t"] is not None
        else "never started: the other nodes had given up"
    )
    saw = "; ".join(
        f"{node}: " + ", ".join(f"{v} {k}" for k, v in c.items() if k in SEEN and v)
        for node, c in late["peers_saw"].items()
    )
    then = (
        f"first step at t={late['first_step_t']} s"
        if late["first_step_t"] is not None
        else f"the job ended at t={late['job_end_t']} s without a step"
    )
    probes = "; then ".join(f"{x['saw']} (t={x['t']} s)" for x in late["waiting_node_saw"])
    return [
        f"- late master: {late['late_s']} s late (RDZV_TIMEOUT={rec.rdzv_timeout_s} s); "
        f"rank0 {came}; {then}",
        f"- the other nodes' logs: {saw or 'nothing (torch retries in silence)'}",
        f"- a waiting node saw: {probes or 'nothing (not asked)'}",
    ]


def tick(follow, metrics, nodes, now: float) -> None:
    if started := follow.inject.state["late"].tick(nodes, now):
        follow.event(started)


KINDS = (
    Kind(
        KIND,
        90,
        rank=0,  # the master: the node the others connect to
        held_back=True,
        knobs=(Knob("late_s", "LATE", LATE_S),),
        judged="never arrived",
        pool_place=9,
        pool_flags=("--late", str(POOL_LATE_S), "--rdzv-timeout", str(POOL_RDZV_TIMEOUT_S)),
        state=lambda target, knobs: {"late": Late(target, knobs["late_s"])},
        due=lambda inj, metrics, nodes, now: inj.state["late"].due(nodes, now),
        tick=tick,
        not_here={"single": SINGLE, "shared": SHARED},
        goal=goal,
        deadline=LONG,
        cluster=CLUSTER,
        lines=lines,
        facts=lambda follow, seen: {
            "late": facts(
                follow.inject.state["late"], follow.t0, seen.logs, seen.metrics, seen.job_end
            )
        },
    ),
)
