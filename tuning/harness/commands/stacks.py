"""`make stacks`: every rank's Python stacks of a running run, on demand (stacks/dumps.py), with
a one-line summary each; the dumps are kept in the run's output/stacks/."""

from __future__ import annotations

import argparse
from pathlib import Path

from tuning.harness.contract.container import runs_key
from tuning.harness.errors import HarnessError
from tuning.harness.layout import options
from tuning.harness.stacks import dumps


def register(sub) -> None:
    p = sub.add_parser("stacks", help="dump every rank's stacks of a running run")
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    name = options.checked_run_id(a.run_id) if a.run_id else "latest"
    run_dir = Path(a.runs) / name
    if not run_dir.is_dir():
        raise HarnessError(f"no run {name} under {a.runs}; `make ps` lists what runs")
    run_dir = run_dir.resolve()
    places = _places(run_dir)
    if not places:
        ended = (run_dir / "summary.json").is_file()
        raise HarnessError(
            f"run {run_dir.name} is not running"
            + (" (it ended: see its summary.json)" if ended else "")
            + "; `make stacks RUN_ID=<id>` takes a running one (`make ps` lists them)"
        )
    taken = dumps.dump(run_dir / "output", places, "on demand")
    print(
        f"harness: stacks of run {run_dir.name} ({taken['dump_s']} s); every thread's in "
        f"{run_dir / 'output/stacks'}:"
    )
    for line in taken["summaries"]:
        print(f"  {line}")
    return 0


def _places(run_dir: Path) -> list[dumps.Node]:
    """The run's live nodes: its running (or paused) containers; for LAYOUT=host, the host
    while a rank it registered still lives."""
    if (run_dir / "compose.yaml").is_file():
        from tuning.harness.backends import engine  # only where a run has containers

        found = engine.labelled(engine.client(), run_dir.name, runs=runs_key(run_dir.parent))
        found = found["containers"]
        return dumps.from_containers([c for c in found if c.status in ("running", "paused")])
    alive = [r for r, x in dumps.registered(run_dir / "output").items() if _alive(x)]
    return [dumps.Node("host", alive)] if alive else []


def _alive(info: dict) -> bool:
    """The registered process still lives (same pid, same start time: not a reused pid)."""
    try:
        stat = Path(f"/proc/{int(info['pid'])}/stat").read_text()
        return info.get("start_ticks") in (None, int(stat.rsplit(")", 1)[1].split()[19]))
    except (OSError, ValueError, IndexError):
        return False
