"""`make image`: build the harness's image (or fms's) if it is missing; --dry-run prints
the build commands."""

from __future__ import annotations

import argparse

from tuning.harness.backends import engine, images
from tuning.harness.spec import devices, image_recipes, nvidia, trainers


def register(sub) -> None:
    p = sub.add_parser("image", help="build the image if it is missing")
    p.add_argument("--rebuild", action="store_true")
    p.add_argument("--cuda", help="DEVICE=gpu: 13.0 (default) or 12.8")
    p.add_argument("--dry-run", action="store_true", help="print the build commands, build nothing")
    p.add_argument("--trainer", default="harness", choices=trainers.TRAINERS)
    p.add_argument(
        "--device", choices=("cpu", "gpu"), help="which image (default: gpu when GPUs are visible)"
    )
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    # DEVICE=cpu asks nothing of the driver (a broken one must not stop a CPU image)
    inv = nvidia.inventory() if a.device != "cpu" else nvidia.Inventory()
    seen = nvidia.visible(inv)
    device = a.device or ("gpu" if seen else "cpu")
    image = trainers.FMS_IMAGE if a.trainer == "fms" else a.image  # fms's own image (trainers.py)
    tag = image_recipes.resolve(image, device, a.cuda)
    if device == "gpu":  # an image this host's driver cannot run is refused before its build
        devices.check_driver(inv.driver, seen, tag)
    if a.dry_run:
        print("\n".join(images.dry_run(tag, device)))
        return 0
    base = images.ensure(engine.client(), tag, device, rebuild=a.rebuild)
    print(f"harness: image {tag} ({device}, base {base})")
    return 0
