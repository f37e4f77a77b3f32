"""The one layout model. Every backend (Compose single, Compose per-rank, host, PyTorchJob)
is rendered from a `Layout`: the ranks, ports and GPU ids of its nodes are worked out here,
from the values it is made with (which GPUs: devices.GpuPlan; LAYOUT=host's free port:
options.layout_from).

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
    CONTAINER_UID,
    JOB_DIR,
    LABEL,
    LAUNCH_DIR,
    PORT,
    RUNS_LABEL,
    SRC_DIR,
    TMP_DIR,
    contract_env,
    output_dir_of,
    runs_key,
)
from tuning.harness.machine.devices import device_of
from tuning.harness.machine.image_recipes import IMAGE

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


def off_network(layout: Layout, attached: list[str]) -> bool:
    """A container of this layout attached to the networks `attached` has lost the run's: in
    per-rank isolated every node has an interface on the run's network (<project>_train);
    other layouts give a rank none of its own to lose."""
    own = layout.kind == "per-rank" and layout.network == "isolated"
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
    kind: str = "single"
    gpus: int = 0  # GPUs used; 0 = CPU ranks on gloo
    gpu_ids: tuple[str, ...] = ()  # the host GPUs (devices.GpuPlan); () = 0..gpus-1
    gpu_uuids: tuple[str, ...] = ()  # the same GPUs' UUIDs, where nvidia-smi was asked
    nproc: int = 2  # CPU ranks when gpus == 0
    run_id: str = "example"
    image: str = IMAGE
    port: int = PORT
    network: str = "isolated"  # per-rank: own network/IPC per rank, or shared with rank 0
    model: str | None = None  # host path of a model dir; None = the image's tiny model
    data: str | None = None  # host path of a data file or directory; None = the demo data
    run_dir: str = "runs/example"  # host path; job/ and output/ live under it
    user: str = CONTAINER_UID  # the ranks' uid:gid (contract/ranks_user.py: who runs the harness)
    login: str | None = None  # their name (USER, LOGNAME) when the image may not know the uid
    max_restarts: int = 0
    extra_env: tuple[tuple[str, str], ...] = ()  # harness variables for the ranks
    # Secrets (HF_TOKEN, ...) travel by NAME: rendered files say `NAME: null`, and Compose
    # (or the host launcher) takes the value from the harness's environment at start.
    secrets: tuple[str, ...] = ()
    entry: str | None = None  # a foreign trainer's module, or its script as the ranks see it
    # (/src/train.py); None: this repo's tuning.sft_trainer
    args: tuple[str, ...] | None = None  # ARGS: ENTRY's own command line (None: a JSON job)
    src: str | None = None  # SRC: a host folder bound read-only at SRC_DIR
    recorder_steps: bool = True  # ENTRY's HF Trainer steps logged by the rank recorder (not fms)
    memory: str | None = None  # per container (Compose mem_limit, e.g. "8g"); None: no limit
    pids: int | None = None  # processes per container (Compose pids_limit); None: no limit
    # A Docker volume mounted at /output instead of the run's output dir, metrics still on the
    # host (fault disk-full: a size-limited tmpfs the fault makes and copies out); None: none
    output_volume: str | None = None
    # (node, host folder) bound at /output instead of the run's output dir, metrics still bound
    # from it (kube's rehearsal: a claim's stand-in, shared; a pod's emptyDir, its own)
    node_outputs: tuple[tuple[str, str], ...] = ()
    launch_dir: str | None = None  # ENTRY: a folder bound at LAUNCH_DIR instead of tuning/'s files

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise LayoutError(f"LAYOUT={self.kind!r} is unknown; use one of {', '.join(KINDS)}")
        if self.network not in NETWORKS:
            raise LayoutError(f"network {self.network!r} is unknown; use isolated or shared")
        if self.gpus < 0:
            raise LayoutError(f"GPUS={self.gpus} is negative; use 0 for CPU ranks or a GPU count")
        if self.nproc < 1:
            raise LayoutError(f"NPROC={self.nproc} must be at least 1")
        if self.gpu_ids and len(self.gpu_ids) != self.gpus:
            raise LayoutError(f"GPUS={self.gpus} but {len(self.gpu_ids)} GPU ids were given")
        if self.gpu_uuids and len(self.gpu_uuids) != len(self.gpu_ids):
            raise LayoutError(f"{len(self.gpu_ids)} GPU ids but {len(self.gpu_uuids)} UUIDs")
        if self.entry and self.kind == "host":
            raise LayoutError(
                f"ENTRY={self.entry} runs in a container (IMAGE, or the harness's "
                "with SRC); LAYOUT=host runs this repo's trainer only. Use "
                "LAYOUT=single or per-rank"
            )

    @property
    def device(self) -> str:
        return device_of(self.gpus)

    @property
    def world_size(self) -> int:
        return self.gpus or self.nproc

    def record(self) -> dict:
        """What summary.json says of the layout."""
        return {
            "layout": self.kind,
            "network": self.network,
            "device": self.device,
            "world_size": self.world_size,
            "ranks_user": self.user,
        }

    @property
    def shared_namespaces(self) -> bool:
        """The nodes after the first live in its network and IPC namespaces (loopback, one
        /dev/shm): per-rank shared here; the containers of one pod on Kubernetes."""
        return self.kind == "per-rank" and self.network == "shared"

    def output_of(self, node: str) -> str | None:
        """The host folder a node has at /output when it is not the run's output dir."""
        return dict(self.node_outputs).get(node)

    @property
    def project(self) -> str:
        return f"harness-{self.run_id}"

    @property
    def labels(self) -> dict[str, str]:
        """What everything this run makes on the engine carries: its id and its RUNS folder."""
        return {LABEL: self.run_id, RUNS_LABEL: runs_key(Path(self.run_dir).parent)}

    def nodes(self) -> list[Node]:
        n = self.world_size
        ids = self.gpu_ids or tuple(str(i) for i in range(self.gpus))
        if self.kind == "per-rank":
            shape = [(f"rank{i}", i, 1, (ids[i],) if self.gpus else ()) for i in range(n)]
            master = "rank0"
        else:
            name = "host" if self.kind == "host" else "trainer"
            shape = [(name, 0, n, ids)]
            master = "127.0.0.1"
        nnodes = len(shape)
        return [
            Node(name, rank, nproc, ids, self.node_env(master, nnodes, nproc, rank))
            for name, rank, nproc, ids in shape
        ]

    def node_env(self, master: str, nnodes: int, nproc: int, node_rank: int) -> dict:
        env = contract_env(master, self.port, nnodes, nproc, node_rank)
        env.update(
            HARNESS_DEVICE=self.device,
            HARNESS_RUN_ID=self.run_id,
            ACCELERATE_CONFIG=f"{self.job_dir}/accelerate.yaml",
        )
        if self.kind == "host" and self.gpus:
            env.update(self.host_gpu_env())
        if self.max_restarts and self.kind != "per-rank":  # per-rank: the harness restarts
            env["HARNESS_MAX_RESTARTS"] = str(self.max_restarts)  # every container instead
        if self.entry:
            env.update(self.foreign_env())
        env.update(self.nccl_env())
        env.update(self.extra_env)
        env.update(dict.fromkeys(self.secrets))
        return env

    def host_gpu_env(self) -> dict[str, str]:
        """LAYOUT=host: the ranks see the GPUs this run took, and no other. By UUID: the
        indices nvidia-smi (and the locks) use follow PCI bus order, CUDA's own are fastest
        first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so an index could name another GPU."""
        ids = self.gpu_uuids or self.gpu_ids or tuple(str(i) for i in range(self.gpus))
        return {"CUDA_VISIBLE_DEVICES": ",".join(ids), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def nccl_env(self) -> dict[str, str]:
        """What NCCL needs when each container sees one GPU (per-rank on GPUs). Isolated: the
        ranks are different hosts to NCCL (host hash = hostname + boot_id, NCCL
        src/misc/utils.cc getHostHash), so they talk over the bridge, which is eth0 in the
        container (NCCL skips lo and docker* by itself). Shared: rank 0's hostname, boot_id
        and /dev/shm make them one host, and NCCL tries P2P with a GPU this container cannot
        see (src/transport/p2p.cc p2pCanConnect; CUDA IPC then fails, NVIDIA/nccl#324): no
        P2P, so SHM through the shared /dev/shm. One container (single): P2P/NVLink as is."""
        if self.kind != "per-rank" or not self.gpus:
            return {}
        if self.network == "shared":
            return {"NCCL_P2P_DISABLE": "1"}
        return {"NCCL_SOCKET_IFNAME": "eth0"}

    def container_env(self, node: Node) -> dict[str, str]:
        """The node's environment in its container. per-rank with NETWORK=shared: the ranks
        after rank 0 live in rank 0's network namespace and reach it on loopback. HOME is
        /tmp: the root is read-only (caches: ~/.cache, ~/.triton). USER and LOGNAME: the
        ranks' name, for getpass.getuser() under a uid the image's /etc/passwd lacks."""
        env = {**node.env, "HOME": TMP_DIR}
        if self.login:
            env["USER"] = env["LOGNAME"] = self.login
        if self.kind == "per-rank" and self.network == "shared" and node.node_rank:
            env["MASTER_ADDR"] = env["PET_MASTER_ADDR"] = "127.0.0.1"
        return env

    def foreign_env(self) -> dict[str, str]:
        """A foreign trainer runs under the rank recorder (tuning/rank/rank_record.py), which
        records the process group each rank joined and how it ended, then runs ENTRY."""
        env = {
            "HARNESS_ENTRY": "harness_rank",
            "HARNESS_WRAPPED_ENTRY": self.entry,
            "HARNESS_OUTPUT_DIR": self.output_dir,
            "PYTHONPATH": f"{LAUNCH_DIR}:{SRC_DIR}" if self.src else LAUNCH_DIR,
            "HF_HOME": "/tmp/hf",
            "HF_HUB_OFFLINE": "1",
        }
        if self.args is None:  # ARGS: the command line is the whole job
            env["SFT_TRAINER_CONFIG_JSON_PATH"] = f"{self.job_dir}/{self.job_file}"
        if not self.recorder_steps:
            env["HARNESS_STEP_LINES"] = "0"  # fms logs its own (training_logs.jsonl)
        return env

    @property
    def job_file(self) -> str:
        return "job.json" if self.entry else "job.yaml"

    @property
    def trainer_args(self) -> list[str]:
        """What the launcher passes on to the trainer: ARGS to ENTRY; else a foreign one reads
        its JSON job from SFT_TRAINER_CONFIG_JSON_PATH, as fms-hf-tuning does."""
        if self.entry:
            return list(self.args or ())
        return ["--config", f"{self.job_dir}/{self.job_file}"]

    # Paths as the ranks see them: inside the container, or on the host for LAYOUT=host.
    @property
    def job_dir(self) -> str:
        return str(Path(self.run_dir, "job")) if self.kind == "host" else JOB_DIR

    @property
    def output_dir(self) -> str:
        return output_dir_of(self.kind, self.run_dir)
