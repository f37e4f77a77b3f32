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
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from tuning.harness.clusterlogs import cluster, log_lines, read

OBJECT_SUFFIXES = (".yaml", ".yml", ".json")
ATTEMPT = re.compile(r"^(?P<pod>.+?)(?:\.(?P<attempt>previous|prev|\d+))?(?:\.log|\.txt)?$")
KUBECTL_PREFIX = re.compile(r"^\[pod/([^/\]]+)/([^\]]+)\] ", re.M)
# tuning/container/launch.py's own line: "harness-launch: accelerate launch ... --num_processes 4
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
    world_stated: bool = False  # a line or object says it (else a floor: the ranks seen)
    files: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    before_newest: bool = False  # the attempts before the newest are read (earlier_attempts)


BIG = 8 << 20  # a file this large is said as it is read


def earlier_attempts(got: Read) -> Read:
    """The run as the pods' attempts before their newest ended: where the newest attempts
    failed in nothing (the pods restarted and run on), the restart is what failed. Each pod's
    attempt before its newest (`kubectl logs --previous`), its object as that attempt ended
    (lastState); a pod with no earlier attempt as it is."""
    before = {}
    for c in got.earlier:
        before.setdefault(c.name, c)  # read in attempt order: the one just before the newest
    containers = [before.get(c.name, c) for c in got.containers]
    pods = {n: cluster.as_earlier(p) if p.earlier else p for n, p in got.pods.items()}
    return replace(got, containers=containers, pods=pods, earlier=[], before_newest=True)


def load(folder: Path, say=None) -> Read:
    """`folder`: a folder of logs and objects, or one log file. `say`: told of each large file
    as it is read."""
    out = Read()
    texts: dict[tuple[str, int], str] = {}  # (pod, attempt: 0 newest) -> text
    paths = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in paths)
    done = 0
    for path in paths:
        rel = path.name if path == folder else str(path.relative_to(folder))
        raw = path.read_bytes()
        done += len(raw)
        if say and len(raw) >= BIG:
            say(f"reading {rel} ({len(raw) >> 20} MB; {done >> 20} of {total >> 20} MB)")
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


def _lines_place(c: read.Container) -> tuple[int | None, int | None]:
    """(node rank, ranks per node) as a container's own lines say them: its launcher's words
    (torchrun's group_rank and global_ranks, DeepSpeed's node_rank and num_local_procs), the
    workers its launcher named and stopped, the global ranks its lines name."""
    nproc = c.nproc_said
    if nproc is None:
        counts = [
            max(c.locals_seen) + 1 if c.locals_seen else 0,
            # torchrun stops (SIGTERM) the workers still running once one failed
            sum(f["exit"] != -15 for f in c.failures.values()) + len(c.stopped),
        ]
        if c.globals_seen:
            lo, hi = min(c.globals_seen), max(c.globals_seen)
            counts.append(hi - lo + 1 if len(c.globals_seen) > 1 else 1)
        nproc = max(counts) or None
    node = c.node_said
    if node is None and nproc:
        locals_ = [(r, f["local"]) for r, f in c.failures.items() if "local" in f]
        if locals_:
            rank, local = locals_[0]
            node = (rank - local) // nproc
        elif c.globals_seen:
            node = min(c.globals_seen) // nproc
    return node, nproc


def _containers(out: Read, texts: dict[tuple[str, int], str]) -> Read:
    # 1. each log read once for where it sits (its lines' words), then placed: its object,
    #    its lines, its name (with the offset its family of names shows), the one slot left
    scanned = {key: log_lines.scan(text) for key, text in texts.items()}
    first = {key: read.read(lines, key[0], None, 0) for key, lines in scanned.items()}
    said = {}
    for key, c in first.items():
        node, nproc = _lines_place(c)
        ours = OURS.search(texts[key])
        if ours:
            nnodes, nprocs = int(ours.group(2)), int(ours.group(1))
            node, nproc = int(ours.group(3)), max(1, nprocs // nnodes)
        said[key] = (node, nproc)
    nprocs = [p.nproc for p in out.pods.values() if p.nproc] + [n for _, n in said.values() if n]
    common = max(set(nprocs), key=nprocs.count) if nprocs else None
    places: dict[tuple[str, int], tuple[int | None, int]] = {}
    for key, (node, nproc) in said.items():
        pod = out.pods.get(key[0])
        nproc = (pod.nproc if pod and pod.nproc else None) or nproc or common
        if nproc is None:
            nproc = 1
            out.notes.append(
                f"{key[0]}: its ranks per node are not in its lines or objects; taken as 1"
            )
        if pod is not None and pod.node_rank is not None:
            node = pod.node_rank
        elif node is None and first[key].globals_seen:
            node = min(first[key].globals_seen) // nproc
        places[key] = (node, nproc)
    _by_names(out, places)
    for (name, attempt), lines in sorted(scanned.items(), key=lambda kv: kv[0][1]):
        node, nproc = places[(name, attempt)]
        if node is None:
            out.notes.append(
                f"{name}: which node it was is in neither its name, its lines nor "
                "its object; its log is left out"
            )
            continue
        c = read.read(lines, name, node, nproc)
        (out.earlier if attempt else out.containers).append(c)
    out.world, out.world_stated = _world(out, first)
    return out


def _by_names(out: Read, places: dict) -> None:
    """Pods the objects and lines left unplaced, by their names: each family of names
    (`<job>-worker-<i>`, `<job>-node-0-<i>-<x>`, ...) takes the offset its placed members
    show, else its operator's (a worker is node i + 1 beside a master, i in a job of
    workers only); the last pod left takes the last node left."""
    names = [key[0] for key in places] + list(out.pods)
    family = {key: cluster.name_index(key[0], names) for key in places}
    offsets: dict[tuple, set] = {}
    for key, (node, _) in places.items():
        f = family[key]
        if f and node is not None:
            offsets.setdefault(f.family, set()).add(node - f.index)
    for pod in out.pods.values():
        f = cluster.name_index(pod.name, names)
        if f and pod.node_rank is not None:
            offsets.setdefault(f.family, set()).add(pod.node_rank - f.index)
    for key, (node, nproc) in list(places.items()):
        f = family[key]
        if node is not None or f is None:
            continue
        learned = offsets.get(f.family) or set()
        if len(learned) == 1:
            offset = next(iter(learned))
        else:
            offset = f.offset
            if f.assumed:
                out.notes.append(f"{key[0]}: {f.assumed}")
        places[key] = (f.index + offset, nproc)
    unplaced = [key for key, (node, _) in places.items() if node is None]
    taken = {node for node, _ in places.values() if node is not None}
    taken |= {p.node_rank for p in out.pods.values() if p.node_rank is not None}
    nodes = len({key[0] for key in places} | set(out.pods))
    free = sorted(set(range(nodes)) - taken)
    if len({key[0] for key in unplaced}) == 1 and len(free) == 1:
        for key in unplaced:
            places[key] = (free[0], places[key][1])
        out.notes.append(
            f"{unplaced[0][0]}: its name and lines say nothing of its node; it is the one "
            f"pod left, so node {free[0]}"
        )


def _world(out: Read, first: dict) -> tuple[int, bool]:
    """(the world size, whether a line or object states it). Stated: the pods' environment
    (PET_NNODES x PET_NPROC_PER_NODE, WORLD_SIZE), what launchers and trainers print of it
    (torchrun's, DeepSpeed's, accelerate's, NCCL's init, the HF Trainer's batch sizes). Else a
    floor: the highest rank any line names, the nodes times their ranks. Never the count of
    ranks that printed."""
    stated = [p.world for p in out.pods.values() if p.world]
    for c in list(first.values()) + out.containers:
        stated += [x for x in (c.world_said, read.hf_world(c)) if x]
    sizes = [c.nproc * (c.node_rank + 1) for c in out.containers + out.earlier]
    sizes += [r + 1 for c in out.containers for r in c.ranks]
    for c in list(first.values()) + out.containers:
        sizes += [r + 1 for r in c.globals_seen]
    for pod in out.pods.values():  # a pod with no log at all still has its ranks
        if pod.node_rank is not None:
            sizes.append((pod.node_rank + 1) * (pod.nproc or 1))
    world = max(sizes + stated, default=0)
    return world, bool(stated) and max(stated) == world
