"""The folder a user copied off a cluster (FROM=...), read: its logs, one file a container and
attempt, and its Kubernetes objects, into containers whose ranks are known.

- A log is any text file that is not an object: `<pod>.log` (`kubectl logs <pod>`), an earlier
  attempt `<pod>.previous.log` (`kubectl logs --previous`) or `<pod>.<n>.log`; one file of
  `kubectl logs --prefix` lines (`[pod/<pod>/<container>] ...`) is split by pod. A harness run
  folder's `logs/<service>.log` reads the same way.
- An object is a `.yaml`, `.yml` or `.json` file holding Kubernetes objects (cluster.py).
- A pod's node rank: its object's environment (PET_NODE_RANK), else its name (cluster.py),
  else the launcher's line of this harness (`--machine_rank`), else torchrun's summary.
  Its ranks per node: PET_NPROC_PER_NODE, else the ranks its lines name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tuning.harness.commands.repro import cluster, log_lines, read

OBJECT_SUFFIXES = (".yaml", ".yml", ".json")
ATTEMPT = re.compile(r"^(?P<pod>.+?)(?:\.(?P<attempt>previous|prev|\d+))?(?:\.log|\.txt)?$")
KUBECTL_PREFIX = re.compile(r"^\[pod/([^/\]]+)/([^\]]+)\] ", re.M)
# tuning/launch.py's own line: "harness-launch: accelerate launch ... --num_processes 4
# --num_machines 2 --machine_rank 1 ..." (the harness's containers and pods)
OURS = re.compile(
    r"harness-launch: accelerate launch .*?--num_processes (\d+) --num_machines (\d+)"
    r" --machine_rank (\d+)"
)


@dataclass
class Read:
    """Everything read: the containers (the newest attempt of each pod; earlier ones apart),
    the pods' objects, the world size, and what could not be read."""

    containers: list[read.Container] = field(default_factory=list)
    earlier: list[read.Container] = field(default_factory=list)
    pods: dict[str, cluster.Pod] = field(default_factory=dict)
    world: int = 0
    files: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def load(folder: Path) -> Read:
    out = Read()
    texts: dict[tuple[str, int], str] = {}  # (pod, attempt: 0 newest) -> text
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = str(path.relative_to(folder))
        raw = path.read_bytes()
        if b"\x00" in raw[:4096]:
            out.unread.append(f"{rel} (binary: not a log or an object)")
            continue
        text = raw.decode("utf-8", errors="replace")
        if path.suffix in OBJECT_SUFFIXES:
            objects = _objects(text)
            if objects is None:
                out.unread.append(f"{rel} (not YAML or JSON)")
            else:
                out.pods.update(cluster.pods_of(objects))
                out.files.append(rel)
            continue
        out.files.append(rel)
        if KUBECTL_PREFIX.search(text):
            for pod, part in _by_prefix(text).items():
                texts[(pod, 0)] = texts.get((pod, 0), "") + part
            continue
        m = ATTEMPT.match(path.name)
        attempt = {"previous": 1, "prev": 1}.get(m.group("attempt"), m.group("attempt"))
        texts[(m.group("pod"), int(attempt or 0))] = text
    return _containers(out, texts)


def _objects(text: str) -> list | None:
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError:
        try:
            return [json.loads(text)]
        except ValueError:
            return None


def _by_prefix(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = KUBECTL_PREFIX.match(line)
        if m:
            out[m.group(1)] = out.get(m.group(1), "") + line[m.end() :] + "\n"
    return out


def _place(name: str, text: str, pod: cluster.Pod | None) -> tuple[int | None, int | None]:
    """(node rank, ranks per node) of a container, from its object, name or lines."""
    node = pod.node_rank if pod else cluster.node_rank_of(name)
    nproc = pod.nproc if pod else None
    ours = OURS.search(text)
    if ours:
        nnodes, nprocs = int(ours.group(2)), int(ours.group(1))
        node = int(ours.group(3)) if node is None else node
        nproc = nproc or max(1, nprocs // nnodes)
    seen, locals_ = set(), {}
    for x in log_lines.split(text):
        if x.rank is not None:
            seen.add(x.rank)
        if m := log_lines.FAILURE_RANK.match(
            x.text
        ):  # torchrun's summary: "rank : 3 (local_rank: 1)"
            locals_[int(m.group(1))] = int(m.group(2))
        elif (m := log_lines.WATCHDOG.search(x.text)) and m.group(1):
            seen.add(int(m.group(1)))
    seen |= set(locals_)
    if nproc is None and seen:
        nproc = max(len(seen), max(locals_.values(), default=-1) + 1)
    if node is None and locals_ and nproc:
        rank, local = next(iter(locals_.items()))
        node = (rank - local) // nproc
    if node is None and seen and nproc:
        node = min(seen) // nproc
    return node, nproc


def _containers(out: Read, texts: dict[tuple[str, int], str]) -> Read:
    places = {}
    for (name, attempt), text in texts.items():
        node, nproc = _place(name, text, out.pods.get(name))
        places[(name, attempt)] = (node, nproc)
    # a pod the logs and objects give no place: the only one left, or said and skipped
    known = [p for p in places.values() if p[0] is not None]
    nproc_all = {p[1] for p in known if p[1]}
    for key, (node, nproc) in places.items():
        if nproc is None:
            nproc = nproc_all.pop() if len(nproc_all) == 1 else 1
            out.notes.append(
                f"{key[0]}: its ranks per node are not in its lines or objects; taken as {nproc}"
            )
            places[key] = (node, nproc)
        if node is None and len(places) == 1:
            places[key] = (0, places[key][1])
    for (name, attempt), text in sorted(texts.items(), key=lambda kv: kv[0][1]):
        node, nproc = places[(name, attempt)]
        if node is None:
            out.notes.append(
                f"{name}: which node it was is in neither its name, its lines nor "
                "its object; its log is left out"
            )
            continue
        c = read.read(text, name, node, nproc)
        (out.earlier if attempt else out.containers).append(c)
    sizes = [c.nproc * (c.node_rank + 1) for c in out.containers]
    sizes += [p.world for p in out.pods.values() if p.world]
    sizes += [r + 1 for c in out.containers for r in c.ranks]
    for pod in out.pods.values():  # a pod with no log at all still has its ranks
        if pod.node_rank is not None:
            sizes.append((pod.node_rank + 1) * (pod.nproc or 1))
    out.world = max(sizes, default=0)
    return out
