"""Runs whose harness died (kill -9, a closed terminal, a crashed host session) while their
ranks ran: found, stopped, recorded.

Every run writes `harness.json` (the harness's pid, its start time and the boot) before its
nodes start, and `summary.json` when it ends. A run with the first and not the second whose
harness is no longer that process is dead. The choice here is to clean up, never to refuse:
its containers keep GPUs and ports from every later run, and nobody is left to follow them.
So the next `make up` (and `make down`) saves their logs, removes them and writes the dead
run a summary marked `interrupted`, saying so. Host ranks die with their harness by
themselves (nodes.HostNodes: PR_SET_PDEATHSIG); their run gets the same summary.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import docker.errors

from tuning.harness.backends import engine
from tuning.harness.contract.container import OUTPUT_DIR, runs_key
from tuning.harness.run_files import folders, metric_lines
from tuning.harness.run_files.status import Status

OWNER = "harness.json"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def claim(run_dir: Path) -> None:
    """This process owns the run, until summary.json says it ended."""
    folders.write_json(
        run_dir / OWNER,
        {
            "pid": os.getpid(),
            "started": _started(os.getpid()),
            "boot_id": _boot_id(),
            "time": time.time(),
        },
    )


def alive(run_dir: Path) -> bool:
    """Whether the harness that claimed `run_dir` is still that process (a pid may be reused:
    its start time and the boot must match too)."""
    owner = folders.read_json(run_dir / OWNER)
    return (
        bool(owner)
        and owner.get("boot_id") == _boot_id()
        and _started(owner["pid"]) == owner.get("started")
    )


def reap(
    client, runs_root: Path, only: str | None = None, log=print, every: bool = False
) -> dict[str, list[str]]:
    """Clean up after every dead run (or run `only`) under `runs_root`: those with containers
    left (a container's /output mount names its run) and those with a run directory there.
    every=True (`make down ALL=1`): dead runs of every RUNS folder on the engine too; else
    another checkout's (another user's) runs are theirs to clean up, never this one's.
    Returns what it removed (run id -> ["container <name>", ...]), as engine.remove_labelled."""
    dirs: dict[Path, list] = {}
    folder = None if every else runs_key(runs_root)
    for ctr in engine.labelled(client, runs=folder)["containers"] if client else ():
        # /output names the run dir; a volume there (fault disk-full): its metrics bind does
        binds = {
            m.get("Destination"): Path(m["Source"])
            for m in ctr.attrs.get("Mounts", [])
            if m.get("Type") == "bind"
        }
        metrics = binds.get(f"{OUTPUT_DIR}/metrics")
        out = binds.get(OUTPUT_DIR) or (metrics and metrics.parent)
        if out:  # helpers (fault's netem check) mount nothing and remove themselves
            dirs.setdefault(Path(out).parent.resolve(), []).append(ctr)
    for owned in runs_root.glob(f"*/{OWNER}") if runs_root.is_dir() else ():
        dirs.setdefault(owned.parent.resolve(), [])  # runs/latest is one of them again
    dead: dict[str, list[str]] = {}
    for run_dir, containers in dirs.items():
        if only and run_dir.name != only:
            continue
        if (run_dir / "summary.json").is_file() and not containers or alive(run_dir):
            continue  # ended and cleaned up, or still followed by its harness
        dead[run_dir.name] = _bury(client, run_dir, containers, log)
    return dead


def _bury(client, run_dir: Path, containers: list, log) -> list[str]:
    run_id = run_dir.name
    names = ", ".join(c.name for c in containers) or "no container"
    left = (
        f"its containers ({names}) still ran; saving their logs, removing them"
        if containers
        else "its ranks are gone too"
    )
    log(f"harness: run {run_id}'s harness is gone (killed?); {left}; recording the run interrupted")
    for ctr in containers:
        node = ctr.labels.get("harness.node", ctr.name)
        try:
            (run_dir / f"logs/{node}.log").write_bytes(ctr.logs())
        except (OSError, docker.errors.APIError):
            pass  # its run directory or the container's log may be gone; remove it anyway
    folder = runs_key(run_dir.parent)
    gone = engine.remove_labelled(client, run_id, runs=folder).get(run_id, []) if client else []
    if run_dir.is_dir() and not (run_dir / "summary.json").is_file():
        owner = folders.read_json(run_dir / OWNER)
        metrics = metric_lines.read_metrics(run_dir / "output")
        folders.write_json(
            run_dir / "summary.json",
            {
                "run_id": run_id,
                "status": Status.INTERRUPTED,
                "reason": f"its harness (pid {owner.get('pid', '?')}) died while the ranks ran; "
                f"found and cleaned up at {time.strftime('%Y-%m-%dT%H:%M:%S')} by a later "
                f"harness (pid {os.getpid()}), which removed {names}",
                **metric_lines.summarize(metrics, owner.get("time", time.time())),
            },
        )
    return gone


def _started(pid: int) -> int | None:
    """A process's start time (clock ticks since boot, /proc/<pid>/stat field 22)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return None
