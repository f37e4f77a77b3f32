"""`make down`, `make ps` and `make logs`: what the engine and the run directories hold of
the harness's runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from tuning.harness.backends import engine
from tuning.harness.contract.container import LABEL, RUNS_LABEL, runs_key
from tuning.harness.errors import HarnessError
from tuning.harness.layout import options
from tuning.harness.run import leftovers


def register(sub) -> None:
    down = sub.add_parser("down", help="remove this checkout's runs (ALL=1: every harness run)")
    down.set_defaults(fn=down_)
    sub.add_parser("ps", help="list the harness's containers and networks").set_defaults(fn=ps)
    logs_ = sub.add_parser("logs", help="follow (or show) the latest run's logs")
    logs_.set_defaults(fn=logs)


def scope(a: argparse.Namespace) -> tuple[str | None, str]:
    """Which runs a command acts on: this RUNS folder's (its label value), or with ALL=1 every
    folder's (None), and the words for it."""
    if a.all:
        return None, "every RUNS folder on this engine"
    runs = runs_key(a.runs)
    return runs, f"RUNS={runs}"


def down_(a: argparse.Namespace) -> int:
    """This RUNS folder's runs' containers, networks and volumes (RUN_ID=x: that run's only);
    ALL=1: every harness run's on the engine, another checkout's or another user's too."""
    run_id = options.checked_run_id(a.run_id) if a.run_id else None
    runs, where = scope(a)
    c = engine.client()
    gone = leftovers.reap(c, Path(a.runs), only=run_id, every=a.all)  # dead runs: logs first
    for rid, things in engine.remove_labelled(c, run_id, runs=runs).items():
        gone.setdefault(rid, []).extend(things)
    for rid, things in gone.items():
        print(f"harness: removed run {rid}: {', '.join(things)}")
    if not gone:
        which = f"run {run_id}" if run_id else "any harness run"
        print(f"harness: nothing to remove: no container, network or volume of {which} of {where}")
    if runs is not None:
        _say_others(c, run_id, runs)
    return 0


def _say_others(c, run_id: str | None, runs: str) -> None:
    """Other folders' runs are left alone, said so (a run id of theirs may match this one's)."""
    others = [
        x
        for x in engine.labelled(c, run_id, runs=None)["containers"]
        if x.labels.get(RUNS_LABEL) != runs
    ]
    if others:
        print(
            f"harness: left {len(others)} container(s) of other RUNS folders (other "
            "checkouts or users) alone; `make ps ALL=1` lists them, `make down ALL=1` "
            "removes them"
        )


def ps(a: argparse.Namespace) -> int:
    runs, where = scope(a)
    found = engine.labelled(engine.client(), runs=runs)
    for ctr in found["containers"]:
        folder = f"  {ctr.labels.get(RUNS_LABEL, '?')}" if runs is None else ""
        print(f"{ctr.labels.get(LABEL)}  {ctr.name}  {ctr.status}{folder}")
    for net in found["networks"]:
        print(f"{net.attrs['Labels'].get(LABEL)}  network {net.name}")
    if not any(found.values()):
        print(f"harness: nothing running of {where}")
    return 0


def logs(a: argparse.Namespace) -> int:
    run_dir = Path(a.runs) / (options.checked_run_id(a.run_id) if a.run_id else "latest")
    compose_file = run_dir / "compose.yaml"
    c = engine.client()
    live = engine.labelled(c, run_dir.resolve().name, runs=runs_key(a.runs))["containers"]
    if compose_file.is_file() and live:
        return engine.compose(compose_file, "logs", "--follow", check=False).returncode
    found = sorted((run_dir / "logs").glob("*.log"))
    if not found:
        raise HarnessError(f"no logs under {run_dir}; start a run with `make up`")
    for log in found:
        print(f"==> {log} <==\n{log.read_text(errors='replace')}")
    return 0
