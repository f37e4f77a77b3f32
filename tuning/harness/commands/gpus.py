"""`python -m tuning.harness gpus`: this host's GPUs as the harness sees them (hidden, MIG,
busy with work that is not the harness's), and with --check-driver the driver check alone
(machine/devices.py holds the rules)."""

from __future__ import annotations

import argparse

from tuning.harness.machine import image_recipes, nvidia
from tuning.harness.machine.devices import busy_why, check_driver
from tuning.harness.machine.image_recipes import IMAGE


def register(sub) -> None:
    p = sub.add_parser("gpus", help="list this host's GPUs; --check-driver: refuse an old driver")
    p.add_argument(
        "--check-driver",
        action="store_true",
        help="exit 2 when the driver is too old for the GPU image",
    )
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    inv = nvidia.inventory()
    if not inv.gpus:
        print("gpus: none (no nvidia-smi on PATH); nothing to check")
        return 0
    seen = nvidia.visible(inv)
    apps = nvidia.compute_apps()
    print(f"gpus: driver {inv.driver}")
    for g in inv.gpus:
        busy = busy_why(g, apps)
        flags = ["MIG" if g.mig else "", "" if g in seen else "hidden", busy and f"busy: {busy}"]
        extra = ", ".join(f for f in flags if f)
        print(
            f"  {g.index} {g.uuid} {g.name} compute {g.compute_cap[0]}.{g.compute_cap[1]}"
            + (f" ({extra})" if extra else "")
        )
    if a.check_driver:
        tag = image_recipes.resolve(a.image or IMAGE, "gpu", a.cuda)
        check_driver(inv.driver, seen, tag)
        recipe = image_recipes.named(tag)
        print(
            f"gpus: driver {inv.driver} runs {tag} (CUDA {recipe.cuda})"
            if recipe
            else f"gpus: {tag} is not an image of this harness; not checked"
        )
    return 0
