"""What the harness left on the Docker engine: its containers, networks and volumes, by label."""

from __future__ import annotations

import subprocess
from pathlib import Path


def leftovers(run_id: str | None = None, runs: Path | None = None) -> list[str]:
    """Containers, networks and volumes labelled by the harness (for one run, or any; of the
    RUNS folder `runs`, or of any)."""
    label = f"harness.run={run_id}" if run_id else "harness.run"
    also = ["--filter", f"label=harness.runs={Path(runs).resolve()}"] if runs else []
    found = []
    for kind in ("container", "network", "volume"):
        extra = ["-a"] if kind == "container" else []
        out = subprocess.run(
            ["docker", kind, "ls", *extra, "-q", "--filter", f"label={label}", *also],
            capture_output=True,
            text=True,
            check=True,
        )
        found += [f"{kind} {x}" for x in out.stdout.split()]
    return found
