"""A run's output dir, readied for its ranks: theirs to write.

The ranks run as the invoking user (contract/ranks_user.py), who made the folder: it is theirs
already. Under root they run as the image's user, 1000:1000, and are given it here. When
/output is elsewhere (own_output.OwnOutput: fault disk-full's volume, the rehearsal's folders),
what the harness follows the ranks by (their metrics, fms's step log) is still bound from here,
so it is made here first.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tuning.container.rank import torn
from tuning.harness.contract.ranks_user import ids
from tuning.harness.layout.layout import Layout
from tuning.harness.layout.own_output import RUN_OUTPUT, OwnOutput
from tuning.harness.run_files.metric_lines import FMS_LOGS


def prepare(output: Path, layout: Layout, moved: OwnOutput = RUN_OUTPUT) -> None:
    """`output` (runs/<id>/output) and what is bound from it, given to the ranks' user; and
    the folders `moved` puts at /output (kube's rehearsal)."""
    for own in dict.fromkeys(folder for _, folder in moved.nodes):
        Path(own).mkdir(parents=True, exist_ok=True)
        give(Path(own), layout)
    if moved:
        (output / "metrics").mkdir(exist_ok=True)
        (output / FMS_LOGS).touch()  # bound as a file: it must exist
        give(output / "metrics", layout)
        give(output / FMS_LOGS, layout)
    give(output, layout)


def owner(layout: Layout) -> tuple[int | None, int | None]:
    """The ranks' uid and gid when the harness must give them files: they are not the harness's
    own, and the harness is root (the only one who can; a user's runs are the user's)."""
    uid, gid = ids(layout.trainer.user)
    if uid == os.geteuid() or os.geteuid() != 0:
        return None, None
    return uid, gid


def give(path: Path, layout: Layout) -> None:
    uid, gid = owner(layout)
    if uid is not None:
        os.chown(path, uid, gid)


def take_checkpoints(previous: Path, output: Path, layout: Layout) -> None:
    """RESUME: the previous run's checkpoints into this run's output, where the trainer's
    resume_from_checkpoint=true finds the newest. A file is hard-linked when the ranks' user
    owns it already, else copied (and the copy given to them under root): the earlier run's own
    files never change owner or mode (a link shares both), and what lands in this run is the
    ranks' (a user's run: the user's, to delete)."""
    ranks = ids(layout.trainer.user)[0]
    uid, gid = owner(layout)
    for ckpt in torn.checkpoints(previous / "output"):
        shutil.copytree(
            ckpt, output / ckpt.name, copy_function=lambda s, d: _take(s, d, ranks, uid, gid)
        )
        for d in [output / ckpt.name, *(p for p in (output / ckpt.name).rglob("*") if p.is_dir())]:
            if uid is not None:
                os.chown(d, uid, gid)  # new directories, this run's own


def _take(src: str, dst: str, ranks: int, uid: int | None, gid: int | None) -> None:
    if os.stat(src).st_uid == ranks:
        try:
            return os.link(src, dst)
        except OSError:
            pass  # another file system: copy
    shutil.copy2(src, dst)
    if uid is not None:
        os.chown(dst, uid, gid)
