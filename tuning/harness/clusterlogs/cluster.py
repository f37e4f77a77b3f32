"""What the Kubernetes objects a user copied say (`kubectl get pods -o yaml`, a List of them,
a PyTorchJob, TrainJob or JobSet): each pod's node rank and ranks, and how its training
container ended. Field names are the API's (core/v1 Pod: status.containerStatuses[].state |
lastState.terminated {exitCode, signal, reason, finishedAt, startedAt, message}, restartCount,
status.phase, status.reason, status.conditions[] of type DisruptionTarget); a field that is
not there is left unknown.

Without the objects a pod's place comes from its name, as the operators make it: the Training
Operator's `<job>-master-0` and `<job>-worker-<i>` (node ranks 0 and i + 1), JobSet's
`<job>-<replicatedJob>-<job index>-<pod index>` (Trainer v2: `<job>-node-0-<i>`, node rank i)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

TRAINING = ("pytorch", "node", "trainer")  # the operators' training container names
HARNESS_RANK = re.compile(r"^rank(\d+)$")  # the harness's own per-rank services


@dataclass
class Pod:
    name: str
    node_rank: int | None = None
    nproc: int | None = None  # PET_NPROC_PER_NODE
    world: int | None = None  # WORLD_SIZE (PyTorchJob) or nodes x nproc
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None  # OOMKilled, Error, Completed, ...
    message: str | None = None  # terminationMessagePath's text (fms writes its error there)
    finished: float | None = None
    started_at: float | None = None
    started: bool | None = None  # the container ever ran (a startedAt), None: not known
    waiting: str | None = None  # state.waiting.reason (ContainerCreating, ImagePullBackOff, ...)
    evicted: str | None = None  # status.reason Evicted, or a DisruptionTarget condition
    restarts: int = 0
    running: bool = False  # its training container is running now (state.running)
    first_started: float | None = None  # its container's earliest start its object holds
    earlier: dict | None = None  # lastState's end where it runs again: an earlier attempt's
    container: str = "pytorch"  # its training container's name (kubectl exec -c)


def _time(raw) -> float | None:
    if not raw:
        return None
    if isinstance(raw, datetime):
        return raw.timestamp()
    return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class NameIndex:
    """What a pod's name says of its node: the index in it, the family of names it belongs to,
    and the offset its operator gives (node rank = index + offset), with what was assumed."""

    family: tuple
    index: int
    offset: int
    assumed: str | None = None


# The operators' pod names (each the controller's own naming):
# - the Training Operator's PyTorchJob (pkg/controller.v1/common, GenGeneralName):
#   `<job>-master-0`, `<job>-worker-<i>`; beside a master, worker i is node i + 1; a job of
#   workers only (elastic) has worker i as node i
# - JobSet (Trainer v2's TrainJob): a Job `<jobset>-<replicatedJob>-<job index>`, whose indexed
#   pods are `<job>-<completion index>-<5 random>`: `<job>-node-0-<i>-x7k2p`, node rank i
# - an indexed Job: `<job>-<completion index>-<5 random>`; a StatefulSet: `<name>-<i>`
# - the harness's own per-rank services: `rank<i>`
MASTER = re.compile(r"^(?P<job>.+)-master-(?P<i>\d+)$")
WORKER = re.compile(r"^(?P<job>.+)-worker-(?P<i>\d+)$")
JOBSET = re.compile(r"^(?P<job>.+-[a-z][a-z0-9]*-\d+)-(?P<i>\d+)(?:-[a-z0-9]{5})?$")
INDEXED = re.compile(r"^(?P<job>.+)-(?P<i>\d+)-[a-z0-9]{5}$")
PLAIN = re.compile(r"^(?P<job>.*?)(?P<i>\d+)$")


def name_index(name: str, names: list[str] | None = None) -> NameIndex | None:
    """What `name` says of its pod's node, among the other pods' `names`, or None."""
    names = names or [name]
    if m := MASTER.match(name):
        return NameIndex((m["job"], "master"), int(m["i"]), 0)
    if m := WORKER.match(name):
        job = m["job"]
        if any(MASTER.match(n) and MASTER.match(n)["job"] == job for n in names):
            return NameIndex((job, "worker beside a master"), int(m["i"]), 1)
        return NameIndex(
            (job, "worker"),
            int(m["i"]),
            0,
            "no master pod among the files or objects: taken as a PyTorchJob of workers only "
            "(worker i is node i)",
        )
    if m := JOBSET.match(name):
        return NameIndex((m["job"], "jobset"), int(m["i"]), 0)
    if m := INDEXED.match(name):
        return NameIndex((m["job"], "indexed"), int(m["i"]), 0)
    if m := HARNESS_RANK.match(name):
        return NameIndex(("", "rank"), int(m.group(1)), 0)
    if m := PLAIN.match(name):
        kin = [int(x["i"]) for n in names if (x := PLAIN.match(n)) and x["job"] == m["job"]]
        if len(kin) < 2:
            return None  # one name with a number in it says nothing of a node
        low = min(kin)
        return NameIndex(
            (m["job"], "plain"),
            int(m["i"]),
            -low,
            f"the number in its name taken as its node, counted from {low}",
        )
    return None


def node_rank_of(name: str, names: list[str] | None = None) -> int | None:
    """A pod's node rank from its name alone (the operators' naming), or None."""
    found = name_index(name, names)
    return None if found is None else found.index + found.offset


def pods_of(objects: list[dict]) -> dict[str, Pod]:
    """Every Pod among the objects (items of a List included), by name."""
    out: dict[str, Pod] = {}
    for obj in objects:
        if not isinstance(obj, dict):
            continue
        if obj.get("kind") == "List" or "items" in obj:
            out.update(pods_of(obj.get("items") or []))
        elif obj.get("kind") == "Pod":
            pod = pod_of(obj)
            out[pod.name] = pod
    for pod in out.values():  # no rank in its environment: its name, among its job's
        if pod.node_rank is None:
            pod.node_rank = node_rank_of(pod.name, list(out))
    return out


def pod_of(obj: dict) -> Pod:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    pod = Pod(meta.get("name") or "?")
    ctrs = spec.get("containers") or []
    ctr = next((c for c in ctrs if c.get("name") in TRAINING), ctrs[0] if ctrs else {})
    env = {e.get("name"): e.get("value") for e in ctr.get("env") or []}
    labels = meta.get("labels") or {}
    rank = (
        env.get("PET_NODE_RANK")
        or env.get("RANK")
        or labels.get("batch.kubernetes.io/job-completion-index")
    )
    pod.node_rank = int(rank) if str(rank or "").isdigit() else None
    nproc = env.get("PET_NPROC_PER_NODE")
    pod.nproc = int(nproc) if str(nproc or "").isdigit() else None
    nnodes, world = env.get("PET_NNODES"), env.get("WORLD_SIZE")
    if str(world or "").isdigit():
        pod.world = int(world)
    elif str(nnodes or "").isdigit() and pod.nproc:
        pod.world = int(nnodes) * pod.nproc
    statuses = status.get("containerStatuses") or []
    cs = next(
        (s for s in statuses if s.get("name") == ctr.get("name")), statuses[0] if statuses else {}
    )
    pod.restarts = int(cs.get("restartCount") or 0)
    pod.container = ctr.get("name") or pod.container
    state = cs.get("state") or {}
    last = (cs.get("lastState") or {}).get("terminated")
    # a container running again: its lastState is the attempt before (kubectl logs --previous)
    ended = state.get("terminated") or (None if "running" in state else last)
    if last and "running" in state:
        pod.earlier = last
    starts = [_time(x.get("startedAt")) for x in (state.get("running"), ended, last) if x]
    pod.first_started = min((t for t in starts if t), default=None)
    if ended:
        pod.exit_code, pod.signal = ended.get("exitCode"), ended.get("signal")
        pod.reason, pod.message = ended.get("reason"), ended.get("message")
        pod.finished = _time(ended.get("finishedAt"))
        pod.started_at = _time(ended.get("startedAt"))
    if "running" in state:
        pod.running = True
    if (state.get("running") or {}).get("startedAt"):
        pod.started_at = _time(state["running"]["startedAt"])
    if ended or state.get("running") or cs.get("lastState", {}).get("terminated"):
        pod.started = True
    elif state.get("waiting") or status.get("phase") == "Pending":
        pod.started = False
        pod.waiting = (state.get("waiting") or {}).get("reason") or "Pending"
    if status.get("reason") == "Evicted":
        pod.evicted = f"Evicted: {status.get('message') or 'no message'}"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and str(cond.get("status")) == "True":
            pod.evicted = (
                pod.evicted or f"{cond.get('reason')}: {cond.get('message') or ''}".strip()
            )
    return pod


def as_earlier(pod: Pod) -> Pod:
    """The pod as its earlier attempt ended (its lastState), for reading that attempt."""
    last = pod.earlier or {}
    out = Pod(**{**pod.__dict__})
    out.running, out.earlier = False, None
    out.exit_code, out.signal = last.get("exitCode"), last.get("signal")
    out.reason, out.message = last.get("reason"), last.get("message")
    out.finished, out.started_at = _time(last.get("finishedAt")), _time(last.get("startedAt"))
    return out
