"""GPU locks between users (issue 28, part 5), with a real second user made here and removed
after (a mocked uid proves nothing about the kernel's rules): the lock folder is one for the
machine whatever $TMPDIR says, and a lock that the other user made is taken once released,
also under fs.protected_regular=2, which refuses O_CREAT opens of another user's file in a
sticky world-writable folder. Needs root (useradd); skipped, saying so, otherwise."""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from support.paths import ROOT
from support.users import user_tool

USER, UID = "harness-gpu2", 1600  # not the uid 1500 that the second-user tests make
USER_PYTHON = Path("/usr/bin/python3")  # the venv's lives under /root (mode 0700)
PROTECTED = Path("/proc/sys/fs/protected_regular")
SOURCE = ROOT  # where the processes import tuning from: readable_tuning's copy

# take: lock GPU argv[3] as run argv[2] in folder argv[1]; "hold" keeps it until stdin closes
LOCK = """
import sys
from pathlib import Path
from tuning.harness.errors import HarnessError
from tuning.harness.machine import gpu_locks
try:
    held = gpu_locks.take([sys.argv[3]], sys.argv[2], Path(sys.argv[1]))
except HarnessError as e:
    print("refused:", e, flush=True)
    sys.exit(0)
print("took", flush=True)
if sys.argv[4] == "hold":
    sys.stdin.read()
held.release()
"""


@pytest.fixture(scope="module")
def readable_tuning():
    """A copy of the package every user can read: the checkout may sit under a folder the
    second user cannot enter (a 0700 home such as /root, or a `mktemp -d` folder), where
    PYTHONPATH=<checkout> would give them "No module named 'tuning'"."""
    folder = Path(tempfile.mkdtemp(prefix="harness-gpu2-src-", dir="/tmp"))
    try:
        shutil.copytree(
            ROOT / "tuning", folder / "tuning", ignore=shutil.ignore_patterns("__pycache__")
        )
        for p in (folder, *folder.rglob("*")):
            p.chmod(0o755 if p.is_dir() else 0o644)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def second_user(readable_tuning):
    global SOURCE
    SOURCE = readable_tuning
    if os.geteuid() != 0:
        pytest.skip("making a second user (useradd) needs root")
    if not (shutil.which("useradd") and shutil.which("runuser") and USER_PYTHON.exists()):
        pytest.skip(f"needs useradd, runuser and {USER_PYTHON}")
    try:
        existing = pwd.getpwnam(USER)
    except KeyError:
        existing = None
    if existing and existing.pw_uid != UID:
        pytest.fail(f"user {USER} exists with uid {existing.pw_uid}, not {UID}")
    made = existing is None  # another session's test may have made it: theirs to remove
    if made:
        out = user_tool(
            "useradd",
            "--no-create-home",
            "--no-user-group",
            "--uid",
            str(UID),
            "--shell",
            "/usr/sbin/nologin",
            USER,
        )
        assert out.returncode == 0, f"useradd {USER}: {out.stderr}"
    yield USER
    if made:
        user_tool("userdel", USER)


def run(who: str, *args: str, tmpdir: str | None = None) -> subprocess.Popen:
    """The lock script (or a -c of its own) as `who` ("root" or the second user)."""
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(SOURCE),
        "PYTHONDONTWRITEBYTECODE": "1",
        **({"TMPDIR": tmpdir} if tmpdir else {}),
    }
    runuser = shutil.which("runuser") or "runuser"
    python = [sys.executable] if who == "root" else [runuser, "-u", who, "--", str(USER_PYTHON)]
    return subprocess.Popen(
        [*python, *args],
        env=env,
        cwd="/",
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def lock(who: str, folder: Path, run_id: str, gpu: str, hold=False) -> subprocess.Popen:
    return run(who, "-c", LOCK, str(folder), run_id, gpu, "hold" if hold else "once")


def said(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline().strip()
    assert line, proc.stderr.read()
    return line


@contextlib.contextmanager
def protected_regular(value: str | None):
    """fs.protected_regular set to `value` for the block (None: as the machine has it), and
    restored: it is the whole machine's."""
    if value is None:
        yield
        return
    try:
        before = PROTECTED.read_text().strip()
        PROTECTED.write_text(value)
    except OSError as e:
        pytest.skip(f"this machine does not let a test set fs.protected_regular ({e})")
    try:
        yield
    finally:
        PROTECTED.write_text(before)


def test_the_lock_folder_is_one_for_the_machine_whatever_tmpdir_says(second_user, tmp_path):
    show = "from tuning.harness.machine import gpu_locks; print(gpu_locks.LOCK_DIR)"
    seen = {}
    for who in ("root", second_user):
        tmpdir = Path(f"/tmp/{who}-tmpdir-{secrets.token_hex(3)}")  # a per-user TMPDIR
        tmpdir.mkdir()
        try:
            proc = run(who, "-c", show, tmpdir=str(tmpdir))
            seen[who] = Path(said(proc))
            assert tmpdir not in seen[who].parents
        finally:
            tmpdir.rmdir()
    assert seen["root"] == seen[second_user], seen
    parent = seen["root"].parent.stat()
    assert parent.st_mode & 0o1777 == 0o1777, "every user must be able to make locks there"


@pytest.mark.parametrize("sysctl", [None, "2"], ids=["protected-as-is", "protected-2"])
@pytest.mark.parametrize("maker", ["root", "user2"])
def test_a_lock_another_user_made_is_taken_once_released(second_user, maker, sysctl):
    maker, other = ("root", second_user) if maker == "root" else (second_user, "root")
    folder = Path(f"/tmp/harness-gpu-locks-{secrets.token_hex(4)}")  # /tmp: both reach it
    try:
        # The maker's first lock makes the folder (theirs, 1777); the other user makes GPU 3's
        # lock file and holds it: a file that is neither the folder's owner's nor the maker's.
        first = lock(maker, folder, "first", "0")
        assert said(first) == "took"
        first.wait(30)
        assert folder.stat().st_uid == (0 if maker == "root" else pwd.getpwnam(USER).pw_uid)
        assert folder.stat().st_mode & 0o7777 == 0o1777
        holder = lock(other, folder, "theirs", "3", hold=True)
        assert said(holder) == "took"
        uid = 0 if other == "root" else pwd.getpwnam(USER).pw_uid
        assert (folder / "gpu3.lock").stat().st_uid == uid
        assert (folder / "gpu3.lock").stat().st_mode & 0o777 == 0o666
        while_held = lock(maker, folder, "mine", "3")
        refusal = said(while_held)
        assert refusal.startswith(
            f"refused: GPU 3 is in use by run theirs (harness pid "
            f"{_python_pid(holder)}, uid {uid}); wait for it"
        )
        holder.communicate("", timeout=30)  # released
        with protected_regular(sysctl):
            after = lock(maker, folder, "mine", "3")
            assert said(after) == "took", after.stderr.read()
            after.wait(30)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _python_pid(proc: subprocess.Popen) -> int:
    """The lock-holding Python's pid: runuser's child when run as the second user."""
    if not proc.args[0].endswith("runuser"):
        return proc.pid
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return int(children[0]) if children else proc.pid
