"""Who the ranks run as, and whether they can read what they are given.

A harness run by a user (not root) runs its ranks' containers as that user's uid:gid, so what
they write under runs/ is the user's own to read and delete. The image needs no entry for that
uid: its root is read-only, HOME is /tmp, and the caches (HF_HOME=/tmp/hf, torch's, triton's)
live under it. USER and LOGNAME carry the name for `getpass.getuser()`, which otherwise reads
the image's /etc/passwd and raises KeyError for a uid it lacks (torch's minifier and draft
export call it; inductor falls back to uid_<n> by itself).

Under root the ranks run as the image's own user, 1000:1000, as today and as the rendered
Kubernetes pods do (runAsNonRoot): the harness gives them the run's output folder, and MODEL
and DATA must be readable by that uid (checked here, before anything starts). LAYOUT=host runs
the ranks as the harness's own process, whoever that is.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from tuning.harness.contract.container import CONTAINER_UID
from tuning.harness.errors import HarnessError


def ids(user: str) -> tuple[int, int]:
    uid, gid = (int(x) for x in user.split(":"))
    return uid, gid


def for_ranks(kind: str) -> dict[str, str | None]:
    """Layout's `user` and `login` for a run started by this process: ours unless we are root
    and the ranks run in containers (the image's user then)."""
    uid, gid = os.geteuid(), os.getegid()
    if uid == 0 and kind != "host":
        return {"user": CONTAINER_UID, "login": None}
    return {"user": f"{uid}:{gid}", "login": login_name(uid)}


def login_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid the host has no name for (a container's user): its number
        return str(uid)


def _can_read(st: os.stat_result, uid: int, gids: set[int]) -> bool:
    """By the mode bits, as the kernel checks them for a process without capabilities (ACLs
    are not read): the owner's bits, else the group's, else the others'. A folder must be
    listable and enterable (r and x)."""
    if uid == 0:
        return True
    shift = 6 if st.st_uid == uid else 3 if st.st_gid in gids else 0
    need = (stat.S_IROTH | stat.S_IXOTH) if stat.S_ISDIR(st.st_mode) else stat.S_IROTH
    return (st.st_mode >> shift) & need == need


def check_readable(name: str, raw: str | None, user: str, kind: str) -> None:
    """MODEL or DATA (`raw`, resolved) readable by the ranks, itself and all under it, by the
    mode bits: refused before anything starts, naming the path, its mode and owner, the ranks'
    uid:gid and the fix. In a container only the mounted path and what is under it count: the
    engine (root) resolves the bind's source, so its parents' modes (a 0750 home) never reach
    the ranks. On the host (LAYOUT=host) the ranks are this process: its own access counts."""
    if not raw:
        return
    uid, gid = ids(user)
    gids = {gid, *os.getgroups()} if kind == "host" else {gid}
    path = first_unreadable(Path(raw), uid, gids)
    if path is not None:
        raise HarnessError(_refusal(name, raw, path, path.stat(), user, kind))


def first_unreadable(top: Path, uid: int, gids: set[int]) -> Path | None:
    """The first file or folder of `top` (itself, then all under it) that uid with `gids`
    cannot read by the mode bits; None when every one can be read."""
    for path in [top, *sorted(top.rglob("*"))] if top.is_dir() else [top]:
        if not _can_read(path.stat(), uid, gids):
            return path
    return None


def _refusal(name: str, raw: str, path: Path, st: os.stat_result, user: str, kind: str) -> str:
    what = "folder" if stat.S_ISDIR(st.st_mode) else "file"
    mode = f"{stat.S_IMODE(st.st_mode):04o}"
    owner = f"{login_name(st.st_uid)} ({st.st_uid}:{st.st_gid})"
    bits = "o+rX" if what == "folder" else "o+r"
    chmod = f"`chmod -R o+rX {raw}`" if Path(raw).is_dir() else f"`chmod {bits} {path}`"
    if kind != "host" and os.geteuid() == 0:
        who = f"running as {user} (the image's user: the harness runs as root)"
        fix = chmod
        if st.st_uid:  # a user's file: their own run reads it (the ranks then run as them)
            fix += f", or run the harness as {login_name(st.st_uid)} (no sudo)"
    else:
        who = f"running as you ({user}, in a container with your primary group only)"
        fix = f"{chmod} (its owner can), or copy it into a folder of yours"
    return (
        f"{name}={raw}: the {what} {path} is mode {mode}, owned by {owner}; the ranks, {who}, "
        f"cannot read it. Fix: {fix}"
    )
