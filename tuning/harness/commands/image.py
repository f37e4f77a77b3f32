"""`make image`: build the harness's image (or fms's) if it is missing; --dry-run prints
the build commands."""

from __future__ import annotations

import argparse

from tuning.harness.backends import engine, images
from tuning.harness.errors import HarnessError
from tuning.harness.flags import trainers
from tuning.harness.machine import devices, image_recipes, nvidia
from tuning.harness.machine.image_recipes import IMAGE


def register(sub) -> None:
    # DEVICE, TRAINER, CUDA, IMAGE, REBUILD, DRY_RUN: flag_table
    p = sub.add_parser("image", help="build the image if it is missing")
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    if a.trainer not in (None, *trainers.TRAINERS):
        raise HarnessError(
            f"TRAINER={a.trainer} is unknown; use one of {', '.join(trainers.TRAINERS)}"
        )
    if a.device not in (None, "cpu", "gpu"):
        raise HarnessError(f"DEVICE={a.device} is unknown; use cpu or gpu")
    # DEVICE=cpu asks nothing of the driver (a broken one must not stop a CPU image)
    inv = nvidia.inventory() if a.device != "cpu" else nvidia.Inventory()
    seen = nvidia.visible(inv)
    device = a.device or ("gpu" if seen else "cpu")
    image = trainers.FMS_IMAGE if a.trainer == "fms" else (a.image or IMAGE)  # fms: its own
    tag = image_recipes.resolve(image, device, a.cuda)
    if device == "gpu":  # an image this host's driver cannot run is refused before its build
        devices.check_driver(inv.driver, seen, tag)
    if a.dry_run:
        print("\n".join(images.dry_run(tag, device)))
        return 0
    base = images.ensure(engine.client(), tag, device, rebuild=a.rebuild)
    print(f"harness: image {tag} ({device}, base {base})")
    return 0
