"""The host paths a layout binds into its ranks' containers (or hands the host's ranks)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mounts:
    run_dir: str = "runs/example"  # host path; job/ and output/ live under it
    model: str | None = None  # a model dir; None = the image's tiny model
    data: str | None = None  # a data file or directory; None = the demo data
    src: str | None = None  # SRC: a folder bound read-only at SRC_DIR
    launch_dir: str | None = None  # ENTRY: a folder bound at LAUNCH_DIR instead of tuning/'s files
