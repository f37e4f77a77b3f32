"""What a test session checks when it ends (tests/conftest.py's pytest_sessionfinish): nothing a
test started outlives it, on this machine or on the engine."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from support import own_runs


def strays() -> dict[int, str]:
    """Processes this session started that are still alive: pid -> its command line and the
    test that started it. /proc/<pid>/environ is the environment a process started with, so
    pytest and what ran it (set before pytest_configure) never carry the marker."""
    mine = f"HARNESS_TEST_SESSION={os.environ['HARNESS_TEST_SESSION']}".encode()
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone, or not ours to read
            continue
        if mine in env:
            test = next(
                (
                    e.split(b"=", 1)[1].decode()
                    for e in env
                    if e.startswith(b"PYTEST_CURRENT_TEST=")
                ),
                "?",
            )
            found[int(d.name)] = f"{cmd.strip()[:120]} (from {test})"
    return found


def no_strays(session) -> None:
    """Nothing a test started may outlive the session (a killed torchrun agent once left its two
    hung ranks running after CI): name them, kill them, and the run is red."""
    deadline = time.monotonic() + 10  # time to finish exiting
    while (found := strays()) and time.monotonic() < deadline:
        time.sleep(0.5)
    if not found:
        return
    print(f"\n{len(found)} process(es) outlived the tests that started them (killed now):")
    for pid, what in found.items():
        print(f"  pid {pid}: {what}")
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    session.exitstatus = 1


def no_leftover_runs(session, basetemp: Path | None) -> None:
    """Runs of this session's tests (RUNS under its base temp, `basetemp`: None when no container
    test ran) left on the engine: a test leaked them. Named, removed (only those: tests remove
    only what they started), red."""
    left = own_runs.sweep(basetemp) if basetemp else []
    if left:
        print(f"\n{len(left)} thing(s) of this session's runs left on the engine (removed now):")
        print("\n".join(f"  {x}" for x in left))
        session.exitstatus = 1
