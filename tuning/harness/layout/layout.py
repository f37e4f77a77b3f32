"""The one layout model. Every backend (Compose single, Compose per-rank, host, PyTorchJob)
is rendered from a `Layout`: the ranks, ports and GPU ids of its nodes are worked out here,
from the parts it is made of (topology.py with the GpuPlan, mounts.py, trainer.py, limits.py;
made from the flags by options.layout_from, LAYOUT=host's free port included).

A layout is a set of nodes. A node is what one container (or pod, or the host) runs: one
`accelerate launch` with `nproc` ranks. Each node gets the environment a Kubeflow
PyTorchJob injects (Training Operator pkg/controller.v1/pytorch/envvar.go), so the image's
entrypoint runs the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tuning.harness.contract.container import (
    COMPOSE_NETWORK,
    JOB_DIR,
    LABEL,
    LAUNCH_DIR,
    RUNS_LABEL,
    SRC_DIR,
    TMP_DIR,
    contract_env,
    output_dir_of,
    runs_key,
)
from tuning.harness.layout.limits import Limits
from tuning.harness.layout.mounts import Mounts
from tuning.harness.layout.topology import Topology
from tuning.harness.layout.trainer import Trainer

NETWORKS = ("isolated", "shared")


@dataclass(frozen=True)
class Shape:
    """A named layout: its LAYOUT kind and, per-rank, its NETWORK."""

    name: str
    kind: str
    network: str = "isolated"

    @property
    def in_containers(self) -> bool:  # fault and the Compose examples run in containers only
        return self.kind != "host"


# The one table of layout names. LAYOUT takes the kinds; bench's report, fault and the examples
# name the shapes; a Kubeflow job (kube) is one of JOB_KINDS, rendered from a JobLayout.
SHAPES = {
    s.name: s
    for s in (
        Shape("single", "single"),
        Shape("per-rank-isolated", "per-rank", "isolated"),
        Shape("per-rank-shared", "per-rank", "shared"),
        Shape("host", "host"),
    )
}
KINDS = tuple(dict.fromkeys(s.kind for s in SHAPES.values()))  # single, per-rank, host
CONTAINER_KINDS = tuple(dict.fromkeys(s.kind for s in SHAPES.values() if s.in_containers))
# Training Operator V1's PyTorchJob, Trainer v2's TrainJob, and a batch/v1 Job of one pod with a
# container per rank (option 2: the shape of per-rank-shared)
JOB_KINDS = ("pytorchjob", "trainjob", "job")


def nccl_env(t: Topology) -> dict[str, str]:
    """What NCCL needs when each container sees one GPU (per-rank on GPUs). Isolated: the
    ranks are different hosts to NCCL (host hash = hostname + boot_id, NCCL
    src/misc/utils.cc getHostHash), so they talk over the bridge, which is eth0 in the
    container (NCCL skips lo and docker* by itself). Shared: rank 0's hostname, boot_id
    and /dev/shm make them one host, and NCCL tries P2P with a GPU this container cannot
    see (src/transport/p2p.cc p2pCanConnect; CUDA IPC then fails, NVIDIA/nccl#324): no
    P2P, so SHM through the shared /dev/shm. One container (single): P2P/NVLink as is."""
    if t.kind != "per-rank" or t.device != "gpu":
        return {}
    if t.network == "shared":
        return {"NCCL_P2P_DISABLE": "1"}
    return {"NCCL_SOCKET_IFNAME": "eth0"}


def off_network(layout: Layout, attached: list[str]) -> bool:
    """A container of this layout attached to the networks `attached` has lost the run's: in
    per-rank isolated every node has an interface on the run's network (<project>_train);
    other layouts give a rank none of its own to lose."""
    own = layout.topology.kind == "per-rank" and layout.topology.network == "isolated"
    return own and not any(n.endswith(f"_{COMPOSE_NETWORK}") for n in attached)


class LayoutError(ValueError):
    """A layout that cannot be built; the message says what and how to fix it."""


@dataclass(frozen=True)
class Node:
    name: str  # service / pod / host name
    node_rank: int
    nproc: int
    gpu_ids: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()  # more names it answers to (a TrainJob pod's FQDN)

    @property
    def ranks(self) -> range:
        start = self.node_rank * self.nproc
        return range(start, start + self.nproc)


@dataclass(frozen=True)
class Layout:
    """A run's layout, by concern: where its ranks run (topology, with the GPU plan), what is
    bound into them (mounts), what they run (trainer) and within what (limits)."""

    run_id: str = "example"
    topology: Topology = field(default_factory=Topology)
    mounts: Mounts = field(default_factory=Mounts)
    trainer: Trainer = field(default_factory=Trainer)
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        if self.topology.kind not in KINDS:
            raise LayoutError(
                f"LAYOUT={self.topology.kind!r} is unknown; use one of {', '.join(KINDS)}"
            )
        self.check()

    def check(self) -> None:
        """The checks of every layout, a job's (JobLayout, its own kinds) included."""
        t = self.topology
        if t.network not in NETWORKS:
            raise LayoutError(f"network {t.network!r} is unknown; use isolated or shared")
        if t.gpus < 0:
            raise LayoutError(f"GPUS={t.gpus} is negative; use 0 for CPU ranks or a GPU count")
        if t.nproc < 1:
            raise LayoutError(f"NPROC={t.nproc} must be at least 1")
        if t.plan.ids and len(t.plan.ids) != t.gpus:
            raise LayoutError(f"GPUS={t.gpus} but {len(t.plan.ids)} GPU ids were given")
        if t.plan.chosen and len(t.plan.chosen) != len(t.plan.ids):
            raise LayoutError(f"{len(t.plan.ids)} GPU ids but {len(t.plan.chosen)} UUIDs")
        if self.trainer.entry and t.kind == "host":
            raise LayoutError(
                f"ENTRY={self.trainer.entry} runs in a container (IMAGE, or the harness's "
                "with SRC); LAYOUT=host runs this repo's trainer only. Use "
                "LAYOUT=single or per-rank"
            )

    def record(self) -> dict:
        """What summary.json says of the layout."""
        return {
            "layout": self.topology.kind,
            "network": self.topology.network,
            "device": self.topology.device,
            "world_size": self.topology.world_size,
            "ranks_user": self.trainer.user,
        }

    @property
    def shared_namespaces(self) -> bool:
        """The nodes after the first live in its network and IPC namespaces (loopback, one
        /dev/shm): per-rank shared here; the containers of one pod on Kubernetes."""
        return self.topology.kind == "per-rank" and self.topology.network == "shared"

    @property
    def project(self) -> str:
        return f"harness-{self.run_id}"

    @property
    def labels(self) -> dict[str, str]:
        """What everything this run makes on the engine carries: its id and its RUNS folder."""
        return {LABEL: self.run_id, RUNS_LABEL: runs_key(Path(self.mounts.run_dir).parent)}

    def nodes(self) -> list[Node]:
        t = self.topology
        n, ids = t.world_size, t.gpu_ids
        if t.kind == "per-rank":
            shape = [(f"rank{i}", i, 1, (ids[i],) if t.device == "gpu" else ()) for i in range(n)]
            master = "rank0"
        else:
            name = "host" if t.kind == "host" else "trainer"
            shape = [(name, 0, n, ids)]
            master = "127.0.0.1"
        nnodes = len(shape)
        return [
            Node(name, rank, nproc, ids, self.node_env(master, nnodes, nproc, rank))
            for name, rank, nproc, ids in shape
        ]

    def device_ids(self) -> list[str]:
        """The host GPUs this run's nodes take (what gpu_locks holds for it), sorted."""
        return sorted({g for n in self.nodes() for g in n.gpu_ids})

    def node_env(self, master: str, nnodes: int, nproc: int, node_rank: int) -> dict:
        t = self.topology
        env = contract_env(master, t.port, nnodes, nproc, node_rank)
        env.update(
            HARNESS_DEVICE=t.device,
            HARNESS_RUN_ID=self.run_id,
            ACCELERATE_CONFIG=f"{self.job_dir}/accelerate.yaml",
        )
        if t.kind == "host" and t.device == "gpu":
            env.update(t.host_gpu_env())
        restarts = self.limits.max_restarts
        if restarts and t.kind != "per-rank":  # per-rank: the harness restarts
            env["HARNESS_MAX_RESTARTS"] = str(restarts)  # every container instead
        if self.trainer.entry:
            env.update(self.foreign_env())
        env.update(nccl_env(t))
        env.update(self.trainer.extra_env)
        env.update(dict.fromkeys(self.trainer.secrets))
        return env

    def container_env(self, node: Node) -> dict[str, str]:
        """The node's environment in its container. per-rank with NETWORK=shared: the ranks
        after rank 0 live in rank 0's network namespace and reach it on loopback. HOME is
        /tmp: the root is read-only (caches: ~/.cache, ~/.triton). USER and LOGNAME: the
        ranks' name, for getpass.getuser() under a uid the image's /etc/passwd lacks."""
        env = {**node.env, "HOME": TMP_DIR}
        if self.trainer.login:
            env["USER"] = env["LOGNAME"] = self.trainer.login
        t = self.topology
        if t.kind == "per-rank" and t.network == "shared" and node.node_rank:
            env["MASTER_ADDR"] = env["PET_MASTER_ADDR"] = "127.0.0.1"
        return env

    def foreign_env(self) -> dict[str, str]:
        """A foreign trainer runs under the rank recorder (tuning/container/rank/rank_record.py),
        which records the process group each rank joined and how it ended, then runs ENTRY."""
        env = {
            "HARNESS_ENTRY": "harness_rank",
            "HARNESS_WRAPPED_ENTRY": self.trainer.entry,
            "HARNESS_OUTPUT_DIR": self.output_dir,
            "PYTHONPATH": f"{LAUNCH_DIR}:{SRC_DIR}" if self.mounts.src else LAUNCH_DIR,
            "HF_HOME": "/tmp/hf",
            "HF_HUB_OFFLINE": "1",
        }
        if self.trainer.args is None:  # ARGS: the command line is the whole job
            env["SFT_TRAINER_CONFIG_JSON_PATH"] = f"{self.job_dir}/{self.trainer.job_file}"
        if not self.trainer.recorder_steps:
            env["HARNESS_STEP_LINES"] = "0"  # fms logs its own (training_logs.jsonl)
        return env

    @property
    def trainer_args(self) -> list[str]:
        """What the launcher passes on to the trainer: ARGS to ENTRY; else a foreign one reads
        its JSON job from SFT_TRAINER_CONFIG_JSON_PATH, as fms-hf-tuning does."""
        if self.trainer.entry:
            return list(self.trainer.args or ())
        return ["--config", f"{self.job_dir}/{self.trainer.job_file}"]

    # Paths as the ranks see them: inside the container, or on the host for LAYOUT=host.
    @property
    def job_dir(self) -> str:
        return str(Path(self.mounts.run_dir, "job")) if self.topology.kind == "host" else JOB_DIR

    @property
    def output_dir(self) -> str:
        return output_dir_of(self.topology.kind, self.mounts.run_dir)
