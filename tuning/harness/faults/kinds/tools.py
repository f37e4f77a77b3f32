"""What the kinds' injectors share: finding a rank's worker in its container, a shell there,
a signal to a rank and a freeze that its heal thaws. `inj` is the run's Injector (faults/inject.py)
(its rank, whether each rank has its own container, the heals)."""

from __future__ import annotations

import docker.errors

# kill and term on a container per rank: the signal goes to its launcher (PID 1)
DOCKER_KILL = {
    "KILL": "docker kill (SIGKILL) {}",
    "TERM": "docker kill --signal SIGTERM {} (its launcher, PID 1)",
}

# Finding a rank's worker inside a container: torchrun gives each worker RANK=<global rank>
# and LOCAL_RANK; the agent (PID 1) has neither LOCAL_RANK nor, in general, the right RANK.
_FIND = (
    'for d in /proc/[0-9]*; do e=$(tr "\\0" "\\n" < $d/environ 2>/dev/null) || continue; '
    'case "$e" in *LOCAL_RANK=*) printf "%s\\n" "$e" | grep -qx "RANK=$R" && echo ${d#/proc/};; '
    "esac; done"
)


def worker_pid(ctr, rank: int) -> int | None:
    try:
        out = ctr.exec_run(["sh", "-c", _FIND], environment={"R": str(rank)})
    except docker.errors.APIError:
        return None
    pids = [int(x) for x in out.output.decode().split() if x.isdigit()]
    return min(pids) if pids else None


def sh(ctr, script: str, detach=False, user="") -> str:
    out = ctr.exec_run(["sh", "-c", script], detach=detach, user=user)
    return "" if detach else out.output.decode(errors="replace").strip()


def freeze(inj, ctr, pid: int) -> None:
    """SIGSTOP the worker; its heal sends SIGCONT."""
    sh(ctr, f"kill -STOP {pid}")
    inj.heals.append(lambda: sh(ctr, f"kill -CONT {pid}"))


def signal(inj, ctr, pid, sig: str) -> str:
    """SIG<sig> to the rank: its container's launcher in per-rank, else its worker."""
    if inj.per_rank:
        ctr.kill(f"SIG{sig}")
        return DOCKER_KILL[sig].format(ctr.name)
    sh(ctr, f"kill -{sig} {pid}")
    return f"kill -{sig} rank {inj.rank}'s worker (pid {pid}) in {ctr.name}"
