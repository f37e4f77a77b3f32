"""kill, segv, term and preempt: a signal to one rank, or SIGTERM to every launcher at once.

SIGKILL ends the rank at once; its peers fail on the broken connection. SIGSEGV ends it as a
segfault in native code does (a CUDA kernel, a data loader's C extension: torchrun's exitcode
-11), with Python's faulthandler printing its stack where the trainer enabled it. SIGTERM is a
preemption: the ranks agree to stop at the next step and checkpoint
(tuning/container/sft/fault_hooks.py).
"""

from __future__ import annotations

from tuning.harness.faults.kinds.kind import FAILS, LONG, STOPS, Kind, Soak
from tuning.harness.faults.kinds.tools import sh, signal

# In a soak: a killed rank is held at the end of its step, so its own save never starts (the
# group resumes from the save before); a SIGTERM stops the group at the next step, saved
DIES = Soak("step", "before")
STOPS_SAVED = Soak("step", "next")
STOP_CLUSTER = (
    "the ranks agree to stop at the next step and checkpoint; Kubernetes gives a pod 30 s "
    "(terminationGracePeriodSeconds) before SIGKILL, so the step time plus the save must fit in "
    "it"
)


def kill(inj, nodes, ctr, pid) -> str:
    return signal(inj, ctr, pid, "KILL")


def segv(inj, nodes, ctr, pid) -> str:
    # to the worker in both layouts: a container's PID 1 has no handler for SIGSEGV, and the
    # kernel drops a signal sent to a namespace's init that it does not handle
    sh(ctr, f"kill -SEGV {pid}")
    return f"kill -SEGV rank {inj.rank}'s worker (pid {pid}) in {ctr.name}"


def term(inj, nodes, ctr, pid) -> str:
    return signal(inj, ctr, pid, "TERM")


def preempt(inj, nodes, ctr, pid) -> str:
    for c in nodes.all_containers():
        c.kill("SIGTERM")
    names = ", ".join(c.name for c in nodes.all_containers())
    return f"docker kill --signal SIGTERM {names} (every launcher, at once)"


KINDS = (
    Kind(
        "kill",
        10,
        inject=kill,
        expect=FAILS,
        recovers=True,
        judged="died",
        pool_place=1,
        soak=DIES,
    ),
    Kind(
        "segv",
        15,
        inject=segv,
        pid="always",
        expect=FAILS,
        recovers=True,
        judged="died",
    ),
    Kind(
        "term",
        40,
        inject=term,
        expect=STOPS,
        deadline=LONG,
        cluster=STOP_CLUSTER,
        judged="stopped from outside",
        soak=STOPS_SAVED,
    ),
    Kind(
        "preempt",
        50,
        inject=preempt,
        expect=STOPS,
        deadline=LONG,
        cluster=STOP_CLUSTER,
        soak=STOPS_SAVED,
    ),
)
