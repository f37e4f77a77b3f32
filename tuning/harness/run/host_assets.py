"""The demo's model and data for LAYOUT=host (ranks on this machine, no image), made here once
by the container-side modules that make them in the image."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tuning.harness.errors import ROOT
from tuning.harness.layout.job_paths import HOST_ASSETS


def demo() -> None:
    host_asset(HOST_ASSETS / "tiny-model", "tuning.container.tiny_model", made="config.json")
    host_asset(HOST_ASSETS / "demo.jsonl", "tuning.container.demo_data")


def host_asset(out: Path, module: str, *args: str, made: str = "") -> Path:
    """`out`, made once here by ``python -m module --out ... args`` (a container-side module,
    run as a process: this side never imports it); `made` names the file inside a directory
    that says it is complete."""
    if not (out / made).is_file():  # written aside, then renamed: a reader sees all or none
        tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
        subprocess.run(
            [sys.executable, "-m", module, "--out", str(tmp), *args],
            check=True,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        if out.is_dir():
            shutil.rmtree(out)  # an earlier try's, incomplete
        os.replace(tmp, out)
    return out
