"""`python -m tuning.harness <command>`: what the Makefile's targets call. The parser and
the commands only: flags become values in options.py, and lifecycle.py runs them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tuning.harness.backends import engine, images
from tuning.harness.commands import bench, examples, fault, kube
from tuning.harness.errors import HarnessError
from tuning.harness.run import leftovers, lifecycle
from tuning.harness.spec import devices, image_recipes, nvidia, options, preflight, trainers
from tuning.harness.spec.flags import RunFlags


def cmd_up(a: argparse.Namespace) -> int:
    spec = options.spec_from(RunFlags.of(a))
    if a.dry_run:
        if spec.plan and spec.plan.chosen:
            print(f"# gpus: {spec.plan.describe()}; driver {spec.plan.driver}")
        if spec.user_config:  # as a real run checks it, with accelerate's own loader
            preflight.check_accelerate_config(spec.accelerate_config, None)
        lifecycle.dry_run(spec.layout, spec.accelerate_config)
        return 0
    summary = lifecycle.start(spec)
    return lifecycle.EXIT_CODES.get(summary["status"], 1)


def cmd_down(a: argparse.Namespace) -> int:
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


def cmd_ps(a: argparse.Namespace) -> int:
    found = engine.labelled(engine.client())
    for ctr in found["containers"]:
        print(f"{ctr.labels.get('harness.run')}  {ctr.name}  {ctr.status}")
    for net in found["networks"]:
        print(f"{net.attrs['Labels'].get('harness.run')}  network {net.name}")
    if not any(found.values()):
        print("harness: nothing running")
    return 0


def cmd_logs(a: argparse.Namespace) -> int:
    run_dir = Path(a.runs) / (options.checked_run_id(a.run_id) if a.run_id else "latest")
    compose_file = run_dir / "compose.yaml"
    c = engine.client()
    if compose_file.is_file() and engine.labelled(c, run_dir.resolve().name)["containers"]:
        return engine.compose(compose_file, "logs", "--follow", check=False).returncode
    logs = sorted((run_dir / "logs").glob("*.log"))
    if not logs:
        raise HarnessError(f"no logs under {run_dir}; start a run with `make up`")
    for log in logs:
        print(f"==> {log} <==\n{log.read_text(errors='replace')}")
    return 0


def cmd_image(a: argparse.Namespace) -> int:
    # DEVICE=cpu asks nothing of the driver (a broken one must not stop a CPU image)
    inv = nvidia.inventory() if a.device != "cpu" else nvidia.Inventory()
    seen = nvidia.visible(inv)
    device = a.device or ("gpu" if seen else "cpu")
    if a.trainer == "fms":  # fms-hf-tuning's own image (trainers.py)
        a.image = trainers.FMS_IMAGE
    tag = image_recipes.resolve(a.image, device, a.cuda)
    if device == "gpu":  # an image this host's driver cannot run is refused before its build
        devices.check_driver(inv.driver, seen, tag)
    if a.dry_run:
        print("\n".join(images.dry_run(tag, device)))
        return 0
    base = images.ensure(engine.client(), tag, device, rebuild=a.rebuild)
    print(f"harness: image {tag} ({device}, base {base})")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tuning.harness")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="train one layout to the end")
    options.add_run_flags(up)
    up.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    for ext in (bench, fault, kube, examples, devices):
        ext.register(sub)  # each adds its subcommand, with add_run_flags where it runs jobs
    for s in sub.choices.values():
        options.add_common_flags(s)
    for name, fn, text in (("down", cmd_down, "remove everything labelled by the harness"),
                           ("ps", cmd_ps, "list the harness's containers and networks"),
                           ("logs", cmd_logs, "follow (or show) the latest run's logs"),
                           ("image", cmd_image, "build the image if it is missing")):  # fmt: skip
        s = sub.add_parser(name, help=text)
        options.add_common_flags(s)
        s.add_argument("--run-id")
        s.set_defaults(fn=fn)
    sub.choices["image"].add_argument("--rebuild", action="store_true")
    sub.choices["image"].add_argument("--cuda", help="DEVICE=gpu: 13.0 (default) or 12.8")
    sub.choices["image"].add_argument("--dry-run", action="store_true",
                                      help="print the build commands, build nothing")  # fmt: skip
    sub.choices["image"].add_argument("--trainer", default="harness", choices=trainers.TRAINERS)
    sub.choices["image"].add_argument(
        "--device", choices=("cpu", "gpu"), help="which image (default: gpu when GPUs are visible)"
    )
    up.set_defaults(fn=cmd_up)
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    options.load_env_file()
    try:
        return a.fn(a)
    except HarnessError as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
