"""What this test session left on the engine, and only that: the harness's containers, networks
and volumes whose RUNS folder (their `harness.runs` label) lies under the session's base temp
folder, where every test's tmp_path is. Each test removes its own runs; one found here leaked,
and is named and removed (it is this session's: another checkout's or another user's run, or a
run of this checkout's runs/, never is), and the session is red."""

from __future__ import annotations

import os
from pathlib import Path

RUNS_LABEL = "harness.runs"  # tuning/harness/spec/layout.py


def sweep(basetemp: Path) -> list[str]:
    """Remove what runs under `basetemp` left; returns what it removed, in words."""
    try:
        import docker

        client = docker.from_env(timeout=60)
        client.ping()
    except Exception:  # no engine: no container test ran, nothing can be left
        return []
    base = str(basetemp.resolve())
    flt = {"label": RUNS_LABEL}
    found = []
    for kind, objs in (("container", client.containers.list(all=True, filters=flt)),
                       ("network", client.networks.list(filters=flt)),
                       ("volume", client.volumes.list(filters=flt))):  # fmt: skip
        for obj in objs:
            labels = (obj.labels if kind == "container" else obj.attrs.get("Labels")) or {}
            runs = labels.get(RUNS_LABEL, "")
            if runs != base and not runs.startswith(base + os.sep):
                continue
            found.append(f"{kind} {obj.name} (run {labels.get('harness.run')}, RUNS={runs})")
            try:
                obj.remove() if kind == "network" else obj.remove(force=True)
            except docker.errors.NotFound:
                pass
    return found


if __name__ == "__main__":  # .ci/run: what CI's tests left, when pytest could not sweep it
    import sys

    for line in sweep(Path(sys.argv[1])):
        print(f"ci: removed {line}")
