"""The rank recorder (tuning/container/rank/rank_record.py, mounted as harness_rank) around a
foreign trainer that returns with its process group still open, as fms 3.2.2 does: real torch, real
gloo groups. The recorder destroys the group after a trainer that returned 0 only (on a failure its
peers may still be inside a collective), and ends the process without finalizing the
interpreter (leaving.py, leave): a gloo thread that lets go of the trainer's tensors while
Python 3.11 finalizes aborts the rank after a completed training (SIGABRT, "terminate called
without an active exception", seen twice in CI with fms's torch 2.8)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from support.launch import free_port, recorder
from support.metrics import read_metrics

TRAINER = """import atexit, os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(4))
# runs at interpreter exit, after the recorder returned: is the group still there?
atexit.register(lambda: print("initialized at exit:", dist.is_initialized(), flush=True))
if os.environ.get("FAIL"):
    sys.exit(3)
"""


@pytest.mark.parametrize("fail, closed", [("", True), ("1", False)])
def test_a_group_left_open_is_destroyed_after_a_trainer_that_returned_0(
    mounted, tmp_path, fail, closed
):
    _, env = mounted
    (tmp_path / "user/foreign_trainer.py").write_text(TRAINER)
    env = {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "FAIL": fail}
    proc = recorder(env, "cpu")
    assert proc.returncode == (3 if fail else 0), proc.stderr[-3000:]
    assert f"initialized at exit: {not closed}" in proc.stdout, proc.stdout
    end = read_metrics(tmp_path / "out", 0)[-1]
    assert end["event"] == "end" and end["closed_group"] is closed
    assert end["status"] == ("failed" if fail else "completed")


def test_no_group_no_close(mounted, tmp_path):
    """A trainer that never joined a group (one process): nothing to destroy, nothing said."""
    marker, env = mounted
    assert recorder(env, "cpu").returncode == 0 and marker.exists()
    assert read_metrics(tmp_path / "out", 0)[-1]["closed_group"] is False


# Rank 0's last collective is still in gloo's hands when its trainer returns, and gloo's worker
# thread holds the only references to its tensors (fms: the all_gather of transformers'
# Trainer.store_flos, seen not yet retired at return). Made certain instead of likely: rank 1
# joins that all_gather only once rank 0 runs its exit handlers, and the last of them keeps the
# GIL (foreign calls through ctypes.PyDLL keep it; a 30 s switch interval asks for it late), so
# the gloo thread, done, waits for the GIL to free the tensors while the interpreter would be
# finalized next (its decref: pytorch/pytorch#190489's AsyncAllgatherWork path).
LATE_RELEASE = """import atexit, ctypes, os, sys, time
import torch, torch.distributed as dist
marks = os.environ["MARKS"]
sys.setswitchinterval(30)
dist.init_process_group("gloo")
held = dist.group.WORLD  # held elsewhere, as FSDP2 holds fms's group: destroy cannot free it
if dist.get_rank() == 0:
    outs = [torch.zeros(4), torch.zeros(4)]
    work = dist.all_gather(outs, torch.ones(4), async_op=True)
    del outs, work  # gloo's work holds the only references to these tensors now
    libc = ctypes.PyDLL(None)

    def exiting():
        print("exit handlers ran", flush=True)
        open(os.path.join(marks, "exiting"), "w").close()
        while libc.access(os.path.join(marks, "joined").encode(), os.F_OK):
            pass
        libc.usleep(500000)  # keeps the GIL while the gloo thread asks for it

    atexit.register(exiting)
else:
    while not os.path.exists(os.path.join(marks, "exiting")):
        time.sleep(0.01)
    dist.all_gather([torch.zeros(4), torch.zeros(4)], torch.ones(4))
    open(os.path.join(marks, "joined"), "w").close()
"""


def test_a_gloo_thread_still_holding_tensors_at_exit_does_not_abort_the_rank(mounted, tmp_path):
    _, env = mounted
    (tmp_path / "user/foreign_trainer.py").write_text(LATE_RELEASE)
    (tmp_path / "marks").mkdir()
    env = {
        **env,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
        "MARKS": str(tmp_path / "marks"),
        "HARNESS_DEVICE": "cpu",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "harness_rank"],
            env={**env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    (out0, err0), (_, err1) = outs
    assert "terminate called" not in err0, err0[-3000:]
    assert [p.returncode for p in procs] == [0, 0], err0[-3000:] + err1[-3000:]
    assert "exit handlers ran" in out0  # the trainer's atexit handlers still run
    for rank in (0, 1):
        end = read_metrics(tmp_path / "out", rank)[-1]
        assert (end["event"], end["status"], end["closed_group"]) == ("end", "completed", True)


def test_an_exit_from_an_except_keeps_what_was_caught(mounted, tmp_path):
    """fms 3.2.2 catches a rank's error and exits 203 from its except: the end line keeps the
    caught error (a peer's lost connection here), which the verdict reads as no cause."""
    _, env = mounted
    (tmp_path / "user/foreign_trainer.py").write_text(
        "import sys\ntry:\n    raise RuntimeError('Read error [172.19.0.2]:1964: Connection "
        "reset by peer')\nexcept Exception:\n    sys.exit(203)\n"
    )
    assert recorder(env, "cpu").returncode == 203
    end = read_metrics(tmp_path / "out", 0)[-1]
    assert end["error"] == (
        "SystemExit(203) from RuntimeError: Read error [172.19.0.2]:1964: Connection reset by peer"
    )


# A trainer that returned, then a SIGTERM while the recorder is still closing its group (its
# launcher stopping every worker because another failed, as torchrun does): the window is made
# certain by a destroy_process_group that sends it.
STOPPED_WHILE_LEAVING = """import os, signal, sys, time, types
fake = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                             destroy_process_group=lambda: (os.kill(os.getpid(), signal.SIGTERM),
                                                            time.sleep(5)))
sys.modules["torch.distributed"] = fake
"""


def test_a_sigterm_after_the_trainer_returned_keeps_its_completed_end_line(mounted, tmp_path):
    _, env = mounted
    (tmp_path / "user/foreign_trainer.py").write_text(STOPPED_WHILE_LEAVING)
    proc = recorder(env, "cpu")
    assert proc.returncode == -15, proc.stderr[-3000:]  # the SIGTERM still ends it
    lines = read_metrics(tmp_path / "out", 0)
    assert [x["event"] for x in lines[-2:]] == ["signal", "end"], lines
    assert lines[-1]["status"] == "completed" and lines[-1]["exit_code"] == 0


# Both ranks blocked in gloo for an hour: rank 0 in an all_reduce, rank 1 in an all_gather.
BLOCKED = """import os, torch, torch.distributed as dist
from datetime import timedelta
dist.init_process_group("gloo", timeout=timedelta(hours=1))
dist.all_reduce(torch.ones(4)) if dist.get_rank() == 0 else dist.all_gather(
    [torch.zeros(4), torch.zeros(4)], torch.ones(4))
open(os.environ["MARK"] + str(dist.get_rank()), "w").close()  # never: the peers disagree
"""


def test_a_sigterm_ends_a_rank_blocked_in_a_collective_as_the_default_would(mounted, tmp_path):
    """Python runs a signal handler only between bytecodes of its main thread, and a gloo wait
    never returns to it: a rank hung in a collective outlived its SIGTERM until torchrun's
    SIGKILL 30 s later (kubelet's: the pod's grace), where without the recorder SIGTERM ends it
    at once. The recorder sees it at once (leaving.watch_sigterm), writes it down with what the
    rank waited in, and ends the rank by SIGTERM."""
    _, env = mounted
    (tmp_path / "user/foreign_trainer.py").write_text(BLOCKED)
    env = {
        **env,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
        "HARNESS_DEVICE": "cpu",
        "MARK": str(tmp_path / "returned"),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "harness_rank"],
            env={**env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    metrics = tmp_path / "out/metrics"
    try:
        for r in (0, 1):  # both in their collective: rendezvous passed, nothing returned
            while not (metrics / f"rank{r}.jsonl").is_file() or not any(
                x.get("name") == "rendezvous" for x in read_metrics(tmp_path / "out", r)
            ):
                assert procs[r].poll() is None, procs[r].communicate()[1][-3000:]
                time.sleep(0.2)
        time.sleep(1)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=60) for p in procs]  # before the fix: an hour, gloo's timeout
    finally:
        for p in procs:
            p.kill()
    assert codes == [-signal.SIGTERM, -signal.SIGTERM]
    for r in (0, 1):
        said = [x for x in read_metrics(tmp_path / "out", r) if x["event"] == "signal"]
        assert [x["name"] for x in said] == ["SIGTERM"]
        assert (tmp_path / f"out/stacks/rank{r}.failed.json").is_file()  # what it waited in
    assert not list(tmp_path.glob("returned*"))
