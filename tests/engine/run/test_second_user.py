"""A second user, made here for real: uid 1500 in the docker group, a home of mode 0750 (as
Ubuntu makes them), a clone of this repository in it. As them, `make up` trains in both layouts;
every file it wrote under runs/ is theirs, and they delete the run without sudo. MODEL and DATA
that only they can read (0700, 0600) train, and the same MODEL is refused before anything
starts when root runs it (the ranks are then uid 1000). One container test of the suite runs as
them through `make test`, in their own environment.

It needs root (useradd, su) and the engine: CI runs as root. The user is removed at the end.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from support.harness import harness
from support.paths import ROOT
from support.users import user_tool  # useradd/userdel, retried while another holds the lock

pytestmark = [pytest.mark.docker, pytest.mark.slow]
NAME, UID = "harness-second", 1500
TIMES: dict[str, float] = {}  # seconds per step, printed at the end (CI's budget)
# The container test run as them: it inspects the running ranks' uid, in each container.
CONTAINER_TEST = "tests/engine/run/test_leaks.py::test_running_containers_are_locked_down_and_ctrl_c_cleans_up[single-1]"  # noqa: E501


def as_user(cmd: str, step: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """`cmd` in a login shell of the user, as they would type it. The pip settings this session
    installs with go along (a local mirror here), and so does the test session's marker, so a
    process of theirs that outlives the tests is found (conftest.no_strays)."""
    keep = [k for k in os.environ if k.startswith("PIP_")] + ["HARNESS_TEST_SESSION", "CI"]
    t0 = time.monotonic()
    out = subprocess.run(
        ["su", "-", NAME, "-w", ",".join(keep), "-c", cmd],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    TIMES[step] = round(time.monotonic() - t0, 1)
    return out


def _their_processes() -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and d.stat().st_uid == UID:
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def _remove_user() -> None:
    """userdel -r: the user, their home and everything in it. Processes of theirs still alive
    are this test's (nothing else runs as a user it made): named, killed, then the user goes."""
    t0, left = time.monotonic(), _their_processes()
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    user_tool("userdel", "-r", NAME)
    TIMES["userdel -r"] = round(time.monotonic() - t0, 1)
    for p in Path("/tmp").iterdir():  # what they left outside their home
        if p.lstat().st_uid != UID:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    assert not left, f"processes of {NAME} outlived their commands: {left}"


def _clone(home: Path) -> Path:
    """`git clone` of this checkout, as CI's clean clone of main would be cloned. A working
    tree with changes not yet committed (a developer's) gets them copied over the clone, so its
    files equal the tree's: the image digest (tuning/, docker/, configs/) is then the one this
    session built, and `make up` as the user finds the image instead of rebuilding it."""
    dst = home / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dst)], check=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        src, to = ROOT / name, dst / name
        if src.is_file():
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, to)
        elif to.is_file():  # deleted in the tree, not yet committed
            to.unlink()
    return dst


def _pip_config(home: Path) -> None:
    """The per-user pip settings this session has (here a local mirror), given to the user."""
    for rel in (".config/pip/pip.conf", ".pip/pip.conf"):
        src = Path.home() / rel
        if src.is_file():
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, home / rel)


@pytest.fixture(scope="module")
def second_user(harness_image, tiny_model, demo_data):
    """The user, their clone, their environment (`make .venv/.train`, what `make test` needs;
    `make up` needs only part of it), and a model and data only they can read."""
    if os.geteuid() != 0:
        pytest.fail(
            "making a second user needs root (useradd, su); run the tests as root, as CI does"
        )
    try:
        grp.getgrnam("docker")
    except KeyError:
        pytest.fail("no `docker` group: the engine's socket group (the docker.io package makes it)")
    try:
        taken = pwd.getpwuid(UID).pw_name
    except KeyError:
        taken = None
    if taken == NAME:  # left by a killed run of this test
        _remove_user()
    elif taken:
        pytest.fail(f"uid {UID} is taken by {taken}: this test makes its own user with it")
    made = user_tool("useradd", "-m", "-u", str(UID), "-G", "docker", "-s", "/bin/bash", NAME)
    assert made.returncode == 0, f"useradd {NAME}: {made.stderr}"
    try:
        home = Path(pwd.getpwnam(NAME).pw_dir)
        home.chmod(0o750)
        t0 = time.monotonic()
        clone = _clone(home)
        _pip_config(home)
        shutil.copytree(tiny_model, home / "models/tiny")
        (home / "data").mkdir()
        shutil.copy(demo_data, home / "data/demo.jsonl")
        subprocess.run(["chown", "-R", f"{NAME}:{NAME}", str(home)], check=True)
        for path in [
            home / "models",
            home / "data",
            *(home / "models").rglob("*"),
            *(home / "data").rglob("*"),
        ]:
            path.chmod(0o700 if path.is_dir() else 0o600)  # only they can read them
        TIMES["user, clone"] = round(time.monotonic() - t0, 1)
        out = as_user("cd ~/clone && make --no-print-directory .venv/.train", "venv (.train)")
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        yield home, clone
    finally:
        _remove_user()
        print(f"\nsecond user: seconds per step: {TIMES}")


def make_up(layout: str, run_id: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    args = shlex.join(
        [f"LAYOUT={layout}", "GPUS=0", "NPROC=2", "STEPS=5", f"RUN_ID={run_id}", *extra]
    )
    out = as_user(f"cd ~/clone && make --no-print-directory up {args}", f"make up {layout}")
    summary = Path(pwd.getpwnam(NAME).pw_dir, "clone/runs", run_id, "summary.json")
    assert summary.is_file(), f"exit {out.returncode}:\n{out.stdout}{out.stderr}"
    return out, json.loads(summary.read_text())


@pytest.mark.parametrize("layout", ["single", "per-rank"])
def test_make_up_as_a_second_user_and_what_it_wrote_is_theirs(second_user, layout):
    home, clone = second_user
    # per-rank trains their own model and data, which only they can read.
    extra = [f"MODEL={home}/models/tiny", f"DATA={home}/data/demo.jsonl"] * (layout == "per-rank")
    out, summary = make_up(layout, f"u2-{layout}", *extra)
    assert out.returncode == 0, out.stdout + out.stderr
    # the image this session built: no rebuild as them (their clone is this tree)
    assert "image: tuning-harness:latest present" in out.stdout, out.stdout
    assert summary["status"] == "succeeded" and summary["steps"] == 5
    assert [r["world_size_seen"] for r in summary["ranks"]] == [2, 2]
    assert summary["ranks_user"] == f"{UID}:{UID}"
    run = clone / "runs" / summary["run_id"]
    if extra:
        job = (run / "job/job.yaml").read_text()
        assert "model_name_or_path: /model" in job and "/data/demo.jsonl" in job, job
    not_theirs = [
        str(p) for p in [clone / "runs", *(clone / "runs").rglob("*")] if p.lstat().st_uid != UID
    ]
    assert not_theirs == [], not_theirs
    gone = as_user(f"rm -rf {shlex.quote(str(run))}", f"rm -rf run {layout}")
    assert gone.returncode == 0 and not run.exists(), gone.stderr


def test_root_is_refused_their_model_before_anything_starts(second_user, tmp_path):
    """Root runs the ranks as uid 1000, which cannot read the user's 0700 model: refused, the
    path, mode, owner and fix named. o+rX on the model's own folder is enough: the engine
    mounts it, and the 0700 folder above and the 0750 home never reach the ranks."""
    home, _ = second_user
    model = home / "models/tiny"
    out = harness("up", "--dry-run", "--gpus", "0", "--model", str(model), runs=tmp_path / "runs")
    assert out.returncode == 2, out.stdout + out.stderr
    assert (
        f"MODEL={model}: the folder {model} is mode 0700, owned by {NAME} ({UID}:{UID}); "
        "the ranks, running as 1000:1000"
    ) in out.stderr, out.stderr
    assert f"chmod -R o+rX {model}" in out.stderr and not (tmp_path / "runs").exists()
    subprocess.run(["chmod", "-R", "o+rX", str(model)], check=True)
    try:
        out = harness(
            "up", "--dry-run", "--gpus", "0", "--model", str(model), runs=tmp_path / "runs"
        )
        assert out.returncode == 0, out.stdout + out.stderr
    finally:
        subprocess.run(["chmod", "-R", "o-rwx", str(model)], check=True)


def test_a_container_test_as_the_second_user(second_user):
    """One test of the suite, as them: their `make test`, their clone, their environment."""
    args = shlex.quote(f"--basetemp=tmp-tests -p no:cacheprovider {CONTAINER_TEST}")
    out = as_user(f"cd ~/clone && make --no-print-directory test PYTEST_ARGS={args}", "make test")
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout[-5000:] + out.stderr
