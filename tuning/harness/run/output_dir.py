"""A run's output dir, readied for its ranks: theirs to write, as the image's user.

The ranks run as the image's non-root user and must write their output there. When /output is
a Docker volume instead (fault disk-full: Layout.output_volume), what the harness follows the
ranks by (their metrics, fms's step log) is still bound from here, so it is made here first.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tuning import torn
from tuning.harness.rundirs.runs import FMS_LOGS
from tuning.harness.spec.layout import Layout


def prepare(output: Path, layout: Layout) -> None:
    """`output` (runs/<id>/output) and what is bound from it, given to the ranks' user."""
    for own in dict.fromkeys(folder for _, folder in layout.node_outputs):  # kube rehearsal
        Path(own).mkdir(parents=True, exist_ok=True)
        give(Path(own), layout)
    if layout.output_volume or layout.node_outputs:
        (output / "metrics").mkdir(exist_ok=True)
        (output / FMS_LOGS).touch()  # bound as a file: it must exist
        give(output / "metrics", layout)
        give(output / FMS_LOGS, layout)
    give(output, layout)


def owner(layout: Layout) -> tuple[int | None, int | None]:
    """The ranks' uid and gid when the harness must give them files (root, containers)."""
    if layout.kind == "host" or os.geteuid() != 0:
        return None, None
    uid, gid = (int(x) for x in layout.user.split(":"))
    return uid, gid


def give(path: Path, layout: Layout) -> None:
    uid, gid = owner(layout)
    if uid is not None:
        os.chown(path, uid, gid)


def take_checkpoints(previous: Path, output: Path, layout: Layout) -> None:
    """RESUME: the previous run's checkpoints into this run's output, where the trainer's
    resume_from_checkpoint=true finds the newest. A file is hard-linked when the ranks' user
    owns it already, else copied and the copy given to them: the earlier run's own files never
    change owner or mode (a link shares both)."""
    uid, gid = owner(layout)
    for ckpt in torn.checkpoints(previous / "output"):
        shutil.copytree(
            ckpt, output / ckpt.name, copy_function=lambda src, dst: _take(src, dst, uid, gid)
        )
        for d in [output / ckpt.name, *(p for p in (output / ckpt.name).rglob("*") if p.is_dir())]:
            if uid is not None:
                os.chown(d, uid, gid)  # new directories, this run's own


def _take(src: str, dst: str, uid: int | None, gid: int | None) -> None:
    if uid is None or os.stat(src).st_uid == uid:
        try:
            return os.link(src, dst)
        except OSError:
            pass  # another file system: copy
    shutil.copy2(src, dst)
    if uid is not None:
        os.chown(dst, uid, gid)
