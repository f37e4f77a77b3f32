"""A run's output dir, readied for its ranks: theirs to write.

The ranks run as the invoking user (spec/ranks_user.py), who made the folder: it is theirs
already. Under root they run as the image's user, 1000:1000, and are given it here. When
/output is a Docker volume instead (fault disk-full: Layout.output_volume), what the harness
follows the ranks by (their metrics, fms's step log) is still bound from here, so it is made
here first.
"""

from __future__ import annotations

import os
from pathlib import Path

from tuning.harness.rundirs.runs import FMS_LOGS
from tuning.harness.spec.layout import Layout
from tuning.harness.spec.ranks_user import ids


def prepare(output: Path, layout: Layout) -> None:
    """`output` (runs/<id>/output) and what is bound from it, given to the ranks' user."""
    if layout.output_volume:
        (output / "metrics").mkdir(exist_ok=True)
        (output / FMS_LOGS).touch()  # bound as a file: it must exist
        give(output / "metrics", layout)
        give(output / FMS_LOGS, layout)
    give(output, layout)


def owner(layout: Layout) -> tuple[int | None, int | None]:
    """The ranks' uid and gid when the harness must give them files: they are not the harness's
    own, and the harness is root (the only one who can; a user's runs are the user's)."""
    uid, gid = ids(layout.user)
    if uid == os.geteuid() or os.geteuid() != 0:
        return None, None
    return uid, gid


def give(path: Path, layout: Layout) -> None:
    uid, gid = owner(layout)
    if uid is not None:
        os.chown(path, uid, gid)
