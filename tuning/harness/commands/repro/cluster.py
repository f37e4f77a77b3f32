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
MASTER = re.compile(r"-master-(\d+)$")
WORKER = re.compile(r"-worker-(\d+)$")
JOBSET = re.compile(r"-node-\d+-(\d+)$")
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


def _time(raw) -> float | None:
    if not raw:
        return None
    if isinstance(raw, datetime):
        return raw.timestamp()
    return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()


def node_rank_of(name: str) -> int | None:
    """A pod's node rank from its name alone (the operators' naming), or None."""
    for pattern, offset in ((MASTER, 0), (WORKER, 1), (JOBSET, 0), (HARNESS_RANK, 0)):
        m = pattern.search(name)
        if m:
            return int(m.group(1)) + offset
    return None


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
    pod.node_rank = int(rank) if str(rank or "").isdigit() else node_rank_of(pod.name)
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
    state = cs.get("state") or {}
    ended = state.get("terminated") or (cs.get("lastState") or {}).get("terminated")
    if ended:
        pod.exit_code, pod.signal = ended.get("exitCode"), ended.get("signal")
        pod.reason, pod.message = ended.get("reason"), ended.get("message")
        pod.finished = _time(ended.get("finishedAt"))
        pod.started_at = _time(ended.get("startedAt"))
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
