"""Layout -> Compose file: `render` writes every layout's services through `_service`."""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from tuning.container.shared import affinity
from tuning.harness.contract.container import (
    COMPOSE_NETWORK,
    JOB_DIR,
    LAUNCH_DIR,
    LAUNCHER,
    MODEL_DIR,
    OUTPUT_DIR,
    RUNS_LABEL,
    SRC_DIR,
    TMP_DIR,
    data_target,
    launch_files,
)
from tuning.harness.errors import ROOT
from tuning.harness.layout.layout import Layout, LayoutError, Node
from tuning.harness.layout.own_output import RUN_OUTPUT, OwnOutput
from tuning.harness.run_files.metric_lines import FMS_LOGS

CONTAINER = ROOT / "tuning/container"  # the launcher and rank recorder, bound in

SHM_SIZE = "2gb"  # Docker's 64 MB /dev/shm breaks NCCL (posix_fallocate); 1 GB is its advice


def render(
    layout: Layout, relative_to: str | Path | None = None, output: OwnOutput = RUN_OUTPUT
) -> dict:
    """The Compose file as a dict. Host paths are absolute, or relative to `relative_to`
    (the directory the file will be read from, as Compose resolves them). `output`: /output
    where a command puts it (fault disk-full, kube's rehearsal)."""
    if layout.topology.kind == "host":
        raise LayoutError("LAYOUT=host runs without containers; there is no Compose file for it")
    labels = layout.labels
    if relative_to is not None:  # a file read from elsewhere (the examples): as it is bound
        labels[RUNS_LABEL] = _bind(Path(layout.mounts.run_dir).parent, "", relative_to)["source"]
    nodes = layout.nodes()
    services = {node.name: _service(layout, node, relative_to, labels, output) for node in nodes}
    if layout.shared_namespaces:
        # Ranks join rank 0's network and IPC namespaces: loopback and one /dev/shm,
        # the fastest per-rank shape on one host (and what the containers of a pod share).
        first = nodes[0].name
        services[first]["ipc"] = "shareable"
        for node in nodes[1:]:
            svc = services[node.name]
            del svc["networks"], svc["hostname"], svc["shm_size"], svc["extra_hosts"]
            svc["network_mode"] = f"service:{first}"
            svc["ipc"] = f"service:{first}"
            svc["depends_on"] = [first]
    out = {
        "name": layout.project,
        "services": services,
        "networks": {COMPOSE_NETWORK: {"internal": True, "labels": labels}},
    }
    if output.volume:  # made and removed by its owner (fault disk-full), not by Compose
        out["volumes"] = {"output": {"external": True, "name": output.volume}}
    return out


def _service(
    layout: Layout, node: Node, rel: str | Path | None, labels: dict, moved: OwnOutput
) -> dict:
    m, entry = layout.mounts, layout.trainer.entry
    output = Path(m.run_dir, "output")
    volumes = [
        _bind(Path(m.run_dir, "job"), JOB_DIR, rel, read_only=True),
        _bind(output, OUTPUT_DIR, rel),
    ]
    own = moved.of(node.name)
    if moved.volume or own:  # the harness follows the ranks by their metrics: kept here
        volumes[1:] = [
            _bind(own, OUTPUT_DIR, rel)
            if own
            else {"type": "volume", "source": "output", "target": OUTPUT_DIR},
            _bind(output / "metrics", f"{OUTPUT_DIR}/metrics", rel),
        ]
        if entry:  # fms's steps: its own log, appended to (lifecycle makes the file)
            volumes.append(_bind(output / FMS_LOGS, f"{OUTPUT_DIR}/{FMS_LOGS}", rel))
    if m.model:
        volumes.append(_bind(m.model, MODEL_DIR, rel, read_only=True))
    if m.data:
        volumes.append(_bind(m.data, data_target(m.data), rel, read_only=True))
    if entry and m.launch_dir:  # kube's rehearsal: the launch ConfigMap's files
        volumes.append(_bind(m.launch_dir, LAUNCH_DIR, rel, read_only=True))
    elif entry:  # a user's image: our launcher and rank recorder come in read-only
        for name, source in launch_files(CONTAINER).items():
            volumes.append(_bind(source, f"{LAUNCH_DIR}/{name}", rel, read_only=True))
    if m.src:  # SRC: the user's code as it is now, so an edit needs no image rebuild
        volumes.append(_bind(m.src, SRC_DIR, rel, read_only=True))
    limits = layout.limits
    svc = {
        "image": layout.topology.plan.image,
        **({"entrypoint": ["python3", LAUNCHER]} if entry else {}),
        **({"command": layout.trainer_args} if layout.trainer_args else {}),
        # relative paths in ARGS mean what they mean in the user's folder (`python train.py`)
        **({"working_dir": SRC_DIR} if m.src else {}),
        "hostname": node.name,
        "user": layout.trainer.user,
        "environment": layout.container_env(node),
        "labels": {
            **labels,
            "harness.node": node.name,
            "harness.node-rank": str(node.node_rank),
            "harness.ranks": ",".join(str(r) for r in node.ranks),
        },
        "volumes": volumes,
        "networks": {COMPOSE_NETWORK: {"aliases": list(node.aliases)}}
        if node.aliases
        else [COMPOSE_NETWORK],
        # c10d looks up the name of each store client; a loopback client shows as
        # ::ffff:127.0.0.1, which /etc/hosts lacks, and Docker's DNS on an internal network
        # takes 10 s to fail that lookup (make bench: rendezvous 10 s in one container).
        "extra_hosts": {"localhost": "::ffff:127.0.0.1"},
        "shm_size": SHM_SIZE,
        # Training needs no capability; only the fault helper gets NET_ADMIN.
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        # Read-only root, as the PyTorchJob's: the trainer writes only to /output, /dev/shm
        # and /tmp (HOME points there). exec: torch.compile loads the kernels it builds there.
        "read_only": True,
        "tmpfs": [f"{TMP_DIR}:exec,mode=1777"],
        "stop_grace_period": "30s",
        "restart": "no",
        **({"mem_limit": limits.memory} if limits.memory else {}),
        **({"pids_limit": limits.pids} if limits.pids else {}),
    }
    cpus = affinity.union(dict(layout.trainer.extra_env).get(affinity.VAR, ""), node.ranks)
    if cpus:  # bench: the node's ranks' cores (each rank then pins itself to its own)
        svc["cpuset"] = cpus
    if node.gpu_ids:
        # NCCL pins host memory; unlimited memlock is its advice. CPU ranks (gloo) need
        # none, and sandboxed engines refuse to raise it.
        svc["ulimits"] = {"memlock": -1}
        svc["deploy"] = {
            "resources": {
                "reservations": {
                    "devices": [
                        {
                            "driver": "nvidia",
                            "device_ids": list(node.gpu_ids),
                            "capabilities": ["gpu"],
                        }
                    ]
                }
            }
        }
    return svc


def _bind(source: str | Path, target: str, rel: str | Path | None, read_only=False) -> dict:
    source = Path(source)
    if rel is None:
        path = str(source.resolve())
    else:
        path = os.path.relpath(source, rel)
        path = path if path.startswith(".") else f"./{path}"
    bind = {"type": "bind", "source": path, "target": target}
    if read_only:
        bind["read_only"] = True
    return bind


# Scalars YAML 1.2 (Compose's reader) takes for numbers, booleans or null, which PyYAML (YAML
# 1.1) would write bare: 3e-3 and 1e5 (a 1.1 float needs a dot), 0o17, .NaN. A bare one is then
# no string, and Compose refuses it ("command.15 must be a string": ARGS' --learning_rate 3e-3).
_NOT_A_STRING_IN_YAML_1_2 = re.compile(
    r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|0o[0-7]+|0x[0-9a-fA-F]+"
    r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)|null|Null|NULL|~|true|True|TRUE|false|False|FALSE|"
)


class _Dumper(yaml.SafeDumper):
    def represent_str(self, value: str):
        # Compose interpolates $NAME and ${NAME} in every value; a literal $ is written $$
        # (ARGS='--run_name a$HOME', a path with a $ in it reach the container as typed).
        value = value.replace("$", "$$")
        tag = "tag:yaml.org,2002:str"
        bare = self.resolve(yaml.ScalarNode, value, (True, False)) == tag  # else PyYAML quotes
        quoted = '"' if bare and _NOT_A_STRING_IN_YAML_1_2.fullmatch(value) else None
        return self.represent_scalar(tag, value, style=quoted)


_Dumper.add_representer(str, _Dumper.represent_str)


def dump(compose: dict) -> str:
    return yaml.dump(compose, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
