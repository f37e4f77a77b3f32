"""What every container of a run finds, and what marks it: the rendezvous port, the ranks' user,
where the job, output, model, data and code live inside, the files a foreign trainer gets beside
its launcher, the labels, and the environment a Kubeflow PyTorchJob replica is given (Training
Operator pkg/controller.v1/pytorch/envvar.go), so the image's entrypoint runs the same
everywhere."""

from __future__ import annotations

from pathlib import Path

PORT = 29500  # the rendezvous port under Compose and on the host
CONTAINER_UID = "1000:1000"  # the image's `tuner` user

# Where things live inside every container.
JOB_DIR = "/job"
OUTPUT_DIR = "/output"
MODEL_DIR = "/model"
DATA_DIR = "/data"  # DATA is mounted here under its own name: a file, or a directory
TMP_DIR = "/tmp"  # the one writable path besides /output and /dev/shm (HOME, HF_HOME, caches)
IMAGE_MODEL = "/opt/harness/assets/tiny-model"
IMAGE_DATA = "/opt/harness/assets/demo.jsonl"
# A foreign trainer (ENTRY: a module in the user's image, such as fms-hf-tuning's
# tuning.sft_trainer) gets the launcher and the rank recorder bound read-only here, and its
# job as JSON (fms's SFT_TRAINER_CONFIG_JSON_PATH) instead of `--config job.yaml`.
LAUNCH_DIR = "/opt/harness-launch"
LAUNCHER = f"{LAUNCH_DIR}/harness_launch.py"  # tuning/container/launch.py, under a name of its own
RANK_RECORD = f"{LAUNCH_DIR}/harness_rank.py"  # tuning/container/rank/rank_record.py
TORN = f"{LAUNCH_DIR}/torn.py"  # tuning/container/rank/torn.py, beside launcher and rank recorder
# tuning/container/rank/: the rank recorder and the modules mounted beside it, which it loads by
# file (standard library only at import: tests/unit/trainers/test_rank_folder.py): FSDP on gloo, no
# silent CPU, torn checkpoints, stack dumps, batch dumps, plain ENOSPC, an HF Trainer's step lines,
# desync faults, and torch's flight recorder analysis over the ranks' dumps. A module added there is
# mounted with the others.
RANK_FOLDER = Path(__file__).resolve().parents[2] / "container" / "rank"
BESIDE_RECORDER = tuple(
    sorted(
        p.name for p in RANK_FOLDER.glob("*.py") if p.name not in ("__init__.py", "rank_record.py")
    )
)
SRC_DIR = "/src"  # SRC (your code's folder), read-only; the ranks' working directory


def launch_files(container: Path) -> dict[str, Path]:
    """What a foreign trainer finds in LAUNCH_DIR: each file's name there -> the file of
    `container` (tuning/container/) it is (Compose binds each; kube puts them in a ConfigMap)."""
    return {
        Path(LAUNCHER).name: container / "launch.py",
        Path(RANK_RECORD).name: container / "rank" / "rank_record.py",
        **{name: container / "rank" / name for name in BESIDE_RECORDER},
    }


LABEL = "harness.run"  # on every container, network and volume of a run: its run id
# ... and the RUNS folder it belongs to (its resolved path): `make down` and the reaper act on
# one checkout's runs only (ALL=1: every folder's), so two checkouts, or two users, never
# remove each other's runs, even under one run id.
RUNS_LABEL = "harness.runs"
COMPOSE_NETWORK = "train"  # the Compose network of the isolated layouts (<project>_train)


def runs_key(runs_root: str | Path) -> str:
    """The RUNS_LABEL value of runs under `runs_root`: its resolved path."""
    return str(Path(runs_root).resolve())


def data_target(host_path: str) -> str:
    """DATA inside a container: /data/<its name>, so its suffix picks its reader (fms's too)."""
    return f"{DATA_DIR}/{Path(host_path).name}"


def output_dir_of(kind: str, run_dir: str) -> str:
    """Where a rank writes: /output in a container; the run directory's output on the host."""
    return str(Path(run_dir, "output")) if kind == "host" else OUTPUT_DIR


def contract_env(master: str, port: int, nnodes: int, nproc: int, node_rank: int) -> dict[str, str]:
    """The variables the Kubeflow Training Operator injects into a PyTorchJob replica."""
    return {
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": master,
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(nnodes * nproc),
        "RANK": str(node_rank),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(port),
        "PET_NNODES": str(nnodes),
        "PET_NPROC_PER_NODE": str(nproc),
        "PET_NODE_RANK": str(node_rank),
    }
