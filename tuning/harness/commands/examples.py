"""The checked-in Compose examples (compose/examples/), rendered by the same layout model.

`python -m tuning.harness examples` rewrites them; a test keeps them equal to the render.
Run one by hand from the repository root (the ranks run as uid 1000 and write ./run/output):
  install -d -o 1000 -g 1000 compose/examples/run/output
  docker compose -f compose/examples/single-4gpu.yaml up
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from tuning.harness.backends import compose
from tuning.harness.errors import ROOT
from tuning.harness.flags import trainers
from tuning.harness.layout.job_files import job_of_file
from tuning.harness.layout.layout import CONTAINER_KINDS, Layout
from tuning.harness.layout.mounts import Mounts
from tuning.harness.layout.topology import Topology
from tuning.harness.machine import devices

DIR = ROOT / "compose/examples"
GPU_COUNTS = (2, 4, 8)
KINDS = CONTAINER_KINDS


def layouts() -> dict[str, Layout]:
    """Each example's layout, from the plan of GPUs 0..N-1 (its image: the GPU one)."""
    out = {}
    for kind in KINDS:
        for gpus in GPU_COUNTS:
            out[f"{kind}-{gpus}gpu.yaml"] = Layout(
                run_id="example",
                topology=Topology(kind, devices.assumed(gpus)),
                mounts=Mounts(str(DIR / "run")),
            )
    return out


def rendered() -> dict[Path, str]:
    """Every example file and its content: the Compose files and the job they mount."""
    files = {
        DIR / name: compose.dump(compose.render(lay, relative_to=DIR))
        for name, lay in layouts().items()
    }
    any_gpu = next(iter(layouts().values()))
    job = job_of_file(any_gpu, trainers.DEFAULT_JOB)
    files[DIR / "run/job/job.yaml"] = yaml.safe_dump(job, sort_keys=False)
    files[DIR / "run/job/accelerate.yaml"] = devices.accelerate_default("gpu").read_text()
    return files


def register(sub) -> None:
    p = sub.add_parser("examples", help="rewrite the checked-in Compose examples")
    p.set_defaults(fn=run)


def run(a: argparse.Namespace) -> int:
    for path, text in rendered().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0
