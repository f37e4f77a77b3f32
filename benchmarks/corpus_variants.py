"""The variants of a cluster-log case (tests/cluster_logs/) that must keep its verdict
(benchmarks/repro_corpus.py): without pods.yaml, without timestamps, without `[rankN]:`
prefixes, the pods in another order (one `kubectl logs --prefix` file), and the pods named as
each operator names them (a PyTorchJob with a master, one of workers only, a TrainJob, an
indexed Job), each with and without pods.yaml."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import yaml

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z ", re.M)
RANK_PREFIX = re.compile(r"^((?:\d{4}-\d\d-\d\dT\S+Z )?)\[rank\d+\]: ?", re.M)
OPERATORS = ("pytorchjob", "workers", "trainjob", "job")


def _pod_of_file(name: str) -> tuple[str, str]:
    """(pod, the rest of the file name: `.log`, `.previous.log`)."""
    for tail in (".previous.log", ".log", ".txt"):
        if name.endswith(tail):
            return name[: -len(tail)], tail
    return name, ""


def _suffix(name: str) -> str:
    """A pod's random 5-character suffix, as a ReplicaSet or Job makes one: stable per name."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    digest = hashlib.sha256(name.encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:5])


def names(nodes: list[str], operator: str, job: str = "train") -> dict[str, str]:
    """Each pod's name as `operator` names the pod of that node rank."""
    out = {}
    for i, old in enumerate(nodes):
        if operator == "pytorchjob":
            new = f"{job}-master-0" if i == 0 else f"{job}-worker-{i - 1}"
        elif operator == "workers":
            new = f"{job}-worker-{i}"
        elif operator == "trainjob":
            new = f"{job}-node-0-{i}-{_suffix(old)}"
        else:
            new = f"{job}-{i}-{_suffix(old)}"
        out[old] = new
    return out


def write(dst: Path, logs: dict[str, str], pods: list[dict] | None) -> Path:
    dst.mkdir(parents=True)
    for name, text in logs.items():
        (dst / name).write_text(text)
    if pods is not None:
        doc = {"apiVersion": "v1", "kind": "List", "items": pods}
        (dst / "pods.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return dst


def variants(case) -> dict[str, tuple[dict[str, str], list[dict] | None]]:
    """name -> (logs, pods) of every variant the case must keep its verdict in."""
    logs, pods = case.logs(), case.pods()
    out = {"as reported": (logs, pods)}
    if pods is not None:
        out["no pods.yaml"] = (logs, None)
    if any(STAMP.search(t) for t in logs.values()):
        out["no timestamps"] = ({k: STAMP.sub("", t) for k, t in logs.items()}, pods)
    if any(RANK_PREFIX.search(t) for t in logs.values()):
        out["no [rankN]:"] = ({k: RANK_PREFIX.sub(r"\1", t) for k, t in logs.items()}, pods)
    if len(logs) > 1:
        container = {
            p["metadata"]["name"]: (p["spec"]["containers"][0].get("name") or "pytorch")
            for p in pods or []
        }
        joined = []
        for name in reversed(list(logs)):
            pod, tail = _pod_of_file(name)
            if tail == ".previous.log":
                continue  # kubectl logs --prefix gives the current attempt only
            ctr = container.get(pod, "pytorch")
            joined += [f"[pod/{pod}/{ctr}] {x}" for x in logs[name].splitlines()]
        previous = {k: t for k, t in logs.items() if k.endswith(".previous.log")}
        others = list(reversed(pods)) if pods is not None else None
        out["pods in another order"] = ({"pods.log": "\n".join(joined) + "\n", **previous}, others)
    nodes = case.meta.get("nodes") or []
    for op in OPERATORS:
        if not nodes:
            break
        renamed = names(nodes, op)
        new_logs = {}
        for name, text in logs.items():
            pod, tail = _pod_of_file(name)
            new_logs[renamed.get(pod, pod) + tail] = text
        new_pods = None
        if pods is not None:
            new_pods = json.loads(json.dumps(pods))
            for p in new_pods:
                p["metadata"]["name"] = renamed.get(p["metadata"]["name"], p["metadata"]["name"])
            out[f"named as {op}"] = (new_logs, new_pods)
        out[f"named as {op}, no pods.yaml"] = (new_logs, None)
    return out
