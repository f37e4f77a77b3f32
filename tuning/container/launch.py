"""The image's entrypoint: the environment a PyTorchJob (or Compose) gives -> `accelerate launch`.

Pure Python on purpose (no torch, no docker at import): the host imports `command()` for
`--dry-run`, so what a dry run prints is exactly what a rank runs. Every mapping from the
environment to accelerate's (and so torchrun's) arguments is in `command()`, in one place.

Environment read (the Kubeflow Training Operator's PyTorchJob env, V1; and Trainer v2's TrainJob):
  PET_MASTER_ADDR | MASTER_ADDR     rendezvous host (rank 0's service / master pod)
  PET_MASTER_PORT | MASTER_PORT     rendezvous port
  PET_NNODES                        number of nodes (containers, pods)
  PET_NPROC_PER_NODE                ranks in this node
  PET_NODE_RANK | RANK              this node's rank (RANK is a NODE rank in a PyTorchJob)
  HARNESS_NODE_RANK                 read before both: a container's own node rank where the
                                    containers of one pod are nodes (make kube KIND=job); an
                                    operator appends PET_NODE_RANK and RANK to every container
                                    of a pod alike, and the last of a repeated name wins
Harness extras, all optional:
  ACCELERATE_CONFIG                 accelerate config fixture (default: by device)
  HARNESS_DEVICE                    cpu | gpu (default: detected, see `device()`)
  HARNESS_MAX_RESTARTS              torchrun --max-restarts
  HARNESS_RDZV_TIMEOUT              seconds the static rendezvous waits for every node
                                    (torchrun --rdzv_conf timeout=s; its default is 600)
  HARNESS_ENTRY                     module to run (default tuning.sft_trainer; bench:
  tuning.container.probe) HARNESS_ENTRY_ARGS                that module's arguments (shell words),
                                    in place of the trainer's (bench: the probe's --out, --max-bytes
  ...) HARNESS_OUTPUT_DIR                where node 0 moves torn checkpoints aside before it
                                    starts the group (default /output;
tuning/container/rank/torn.py) Set for the ranks: HARNESS_DISTRIBUTED_TYPE, what the accelerate
config asks for (FSDP, ...): the trainer fails when accelerate sets up something else. For the probe
on GPUs (the bench, the GPU check) also NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS, unless set: NCCL's
log then names the transport of every channel (P2P, SHM, NET), which the host reads. Training runs
stay quiet.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "accelerate"
DEFAULT_PORT = 29500
# NCCL prints each channel's transport at INFO under INIT (NCCL src/transport/p2p.cc, shm.cc,
# net.cc); the other three add how P2P/SHM/NET were set up (or why not).
NCCL_TRANSPORT_LOG = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,P2P,SHM,NET"}


def _get(env: Mapping[str, str], *names: str, default: str | None = None) -> str | None:
    for name in names:
        if env.get(name):
            return env[name]
    return default


def _int(env: Mapping[str, str], *names: str, default: int) -> int:
    name = next((n for n in names if env.get(n)), names[0])  # the one read, in messages
    raw = _get(env, *names, default=str(default))
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"launch: {name}={raw!r} is not an integer") from None
    if value < 0:
        raise SystemExit(f"launch: {name}={value} must not be negative")
    return value


NODE_RANK = ("HARNESS_NODE_RANK", "PET_NODE_RANK", "RANK")  # in the order they are read


# What the NVIDIA container runtime writes into NVIDIA_VISIBLE_DEVICES for "no GPU".
_NO_GPUS = ("", "none", "void")


def gpu_nodes(dev_root: str | Path = "/dev") -> list[str]:
    """The GPU device nodes in this container: nvidia0, nvidia5, ... (not nvidiactl and
    nvidia-uvm). A container or pod keeps the host's names: one given GPU 5 sees nvidia5 only."""
    return sorted(p.name for p in Path(dev_root).glob("nvidia[0-9]*"))


def device(env: Mapping[str, str], dev_root: str | Path = "/dev") -> str:
    """HARNESS_DEVICE when set; else gpu when a GPU device node is visible, or when the NVIDIA
    runtime's NVIDIA_VISIBLE_DEVICES names GPUs (a PyTorchJob pod gets no HARNESS_DEVICE);
    else cpu."""
    chosen = env.get("HARNESS_DEVICE")
    if not chosen:
        visible = env.get("NVIDIA_VISIBLE_DEVICES", "").strip().lower()
        chosen = "gpu" if gpu_nodes(dev_root) or visible not in _NO_GPUS else "cpu"
    if chosen not in ("cpu", "gpu"):
        raise SystemExit(f"launch: HARNESS_DEVICE={chosen!r}; use cpu or gpu")
    return chosen


def _nproc(env: Mapping[str, str], dev: str, dev_root: str | Path = "/dev") -> int:
    # PyTorchJob allows nprocPerNode "auto"; like fms's entrypoint, that means one rank per
    # visible GPU (one rank on CPU), counted as `device()` finds them.
    if env.get("PET_NPROC_PER_NODE", "auto") != "auto":
        return _int(env, "PET_NPROC_PER_NODE", default=1)
    if dev == "cpu":
        return 1
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        visible = env.get(name, "").strip()
        if visible and visible.lower() not in ("all", *_NO_GPUS):
            return len(visible.split(","))
    return max(1, len(gpu_nodes(dev_root)))


def distributed_type(config: str) -> str:
    """What an accelerate config asks for (FSDP, MULTI_GPU, ...), as accelerate reads it."""
    import yaml  # here, not at import: the launcher stays importable with the stdlib alone

    try:
        data = yaml.safe_load(Path(config).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SystemExit(f"launch: cannot read accelerate config {config}: {exc}") from None
    if not isinstance(data, dict):
        raise SystemExit(f"launch: accelerate config {config} is not a mapping")
    kind = data.get("distributed_type", "NO")
    return "NO" if kind is False else str(kind).upper()  # YAML reads a bare NO as false


def command(
    env: Mapping[str, str],
    trainer_args: list[str],
    config_file: str | None = None,
    dev_root: str | Path = "/dev",
) -> tuple[list[str], dict[str, str]]:
    """Return (argv, extra environment) for this node. `config_file` is where to read the
    accelerate config when it is not at its path in the node yet (the host, rendering);
    `dev_root` where to look for GPU device nodes."""
    dev = device(env, dev_root)
    nnodes = _int(env, "PET_NNODES", default=1)
    nproc = _nproc(env, dev, dev_root)
    node_rank = _int(env, *NODE_RANK, default=0)
    if nnodes < 1 or nproc < 1:
        raise SystemExit(f"launch: PET_NNODES={nnodes} and PET_NPROC_PER_NODE={nproc} must be >= 1")
    if node_rank >= nnodes:
        raise SystemExit(f"launch: node rank {node_rank} is outside PET_NNODES={nnodes}")
    addr = _get(env, "PET_MASTER_ADDR", "MASTER_ADDR", default="127.0.0.1")
    port = _int(env, "PET_MASTER_PORT", "MASTER_PORT", default=DEFAULT_PORT)
    default_cfg = CONFIG_DIR / ("fsdp-cpu.yaml" if dev == "cpu" else "fsdp.yaml")
    config = _get(env, "ACCELERATE_CONFIG", default=str(default_cfg))

    # accelerate's num_processes is the WORLD size; it passes nproc_per_node =
    # num_processes // num_machines, nnodes, node_rank and master addr/port to torchrun.
    argv = [
        "accelerate", "launch",
        "--config_file", config,
        "--num_processes", str(nnodes * nproc),
        "--num_machines", str(nnodes),
        "--machine_rank", str(node_rank),
        "--main_process_ip", addr,
        "--main_process_port", str(port),
        "--rdzv_backend", "static",
        "--same_network",
    ]  # fmt: skip
    asked = distributed_type(config_file or config)
    # The trainer fails when the ranks do not run what the config asked for (no silent DDP).
    extra: dict[str, str] = {"PYTHONUNBUFFERED": "1", "HARNESS_DISTRIBUTED_TYPE": asked}
    if dev == "cpu":
        # gloo ranks: the config's own mode (MULTI_GPU, FSDP) plus this variable. accelerate
        # 1.16 on CPU starts ONE process for MULTI_CPU or NO, so those become --multi_gpu;
        # a flag never replaces FSDP, which --multi_gpu would (ranks silently on DDP).
        extra["ACCELERATE_USE_CPU"] = "1"
        if asked in ("MULTI_CPU", "NO"):
            argv.append("--multi_gpu")
    entry = env.get("HARNESS_ENTRY") or "tuning.sft_trainer"
    if dev == "gpu" and entry == "tuning.container.probe":
        extra.update({k: v for k, v in NCCL_TRANSPORT_LOG.items() if not env.get(k)})
    restarts = _int(env, "HARNESS_MAX_RESTARTS", default=0)
    if restarts:
        argv += ["--max_restarts", str(restarts)]
    rdzv_timeout = _int(env, "HARNESS_RDZV_TIMEOUT", default=0)
    if rdzv_timeout:
        argv += ["--rdzv_conf", f"timeout={rdzv_timeout}"]
    argv += ["-m", entry]
    if env.get("HARNESS_ENTRY_ARGS"):
        trainer_args = shlex.split(env["HARNESS_ENTRY_ARGS"])
    return argv + list(trainer_args), extra


def sweep_torn(env: Mapping[str, str]) -> None:
    """Before this node's group starts (a restarted container or pod, the kube rehearsal),
    node 0 moves torn checkpoints in the output dir aside: torn.py, beside this file in a
    user's image (/opt/harness-launch), or in rank/ beside it in ours; loaded by path (fms has
    its own `tuning`)."""
    here = Path(__file__).parent
    path = next((p for p in (here / "torn.py", here / "rank" / "torn.py") if p.is_file()), here)
    if _int(env, *NODE_RANK, default=0) or not path.is_file():
        return
    spec = importlib.util.spec_from_file_location("harness_torn", path)
    torn = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(torn)
    torn.before_start(env.get("HARNESS_OUTPUT_DIR") or "/output", 0)


def main() -> None:
    argv, extra = command(os.environ, sys.argv[1:])
    sweep_torn(os.environ)
    env = {**os.environ, **extra}
    print("harness-launch:", shlex.join(argv), flush=True)
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    main()
