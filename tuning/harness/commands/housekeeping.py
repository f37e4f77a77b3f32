"""`make down`, `make ps` and `make logs`: what the engine and the run directories hold of
the harness's runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from tuning.harness.backends import engine
from tuning.harness.errors import HarnessError
from tuning.harness.run import leftovers
from tuning.harness.spec import options


def register(sub) -> None:
    down = sub.add_parser("down", help="remove everything labelled by the harness")
    down.set_defaults(fn=down_)
    sub.add_parser("ps", help="list the harness's containers and networks").set_defaults(fn=ps)
    logs_ = sub.add_parser("logs", help="follow (or show) the latest run's logs")
    logs_.set_defaults(fn=logs)


def down_(a: argparse.Namespace) -> int:
    """Every harness run's containers, networks and volumes; RUN_ID=x: that run's only."""
    run_id = options.checked_run_id(a.run_id) if a.run_id else None
    c = engine.client()
    gone = leftovers.reap(c, Path(a.runs), only=run_id)  # dead runs: logs, summary first
    for rid, things in engine.remove_labelled(c, run_id).items():
        gone.setdefault(rid, []).extend(things)
    for rid, things in gone.items():
        print(f"harness: removed run {rid}: {', '.join(things)}")
    if not gone:
        which = f"run {run_id}" if run_id else "any harness run"
        print(f"harness: nothing to remove: no container, network or volume of {which}")
    return 0


def ps(a: argparse.Namespace) -> int:
    found = engine.labelled(engine.client())
    for ctr in found["containers"]:
        print(f"{ctr.labels.get('harness.run')}  {ctr.name}  {ctr.status}")
    for net in found["networks"]:
        print(f"{net.attrs['Labels'].get('harness.run')}  network {net.name}")
    if not any(found.values()):
        print("harness: nothing running")
    return 0


def logs(a: argparse.Namespace) -> int:
    run_dir = Path(a.runs) / (options.checked_run_id(a.run_id) if a.run_id else "latest")
    compose_file = run_dir / "compose.yaml"
    c = engine.client()
    if compose_file.is_file() and engine.labelled(c, run_dir.resolve().name)["containers"]:
        return engine.compose(compose_file, "logs", "--follow", check=False).returncode
    found = sorted((run_dir / "logs").glob("*.log"))
    if not found:
        raise HarnessError(f"no logs under {run_dir}; start a run with `make up`")
    for log in found:
        print(f"==> {log} <==\n{log.read_text(errors='replace')}")
    return 0
