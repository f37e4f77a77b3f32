"""oom: the kernel's OOM killer takes the rank's worker. Its container's memory limit is set
just above its usage and a process beside the worker pushes past it while the worker lives.

In LAYOUT=single the container holds every rank. The kernel may kill a second process before the
first one's memory is back (pool run 6: rank 3, then rank 1 7 ms later, both "Memory cgroup out
of memory" in the kernel log), so the pusher marks itself next in line (oom_score_adj 1000, and
less memory than a rank holds: the worker, at the same score, goes first); a second kill takes
the pusher, never another rank."""

from __future__ import annotations

from tuning.harness.faults.kinds.kind import FAILS, Kind, Soak
from tuning.harness.faults.kinds.tools import sh

# limit = usage + this, then pushed past it: the pusher stays smaller than a rank
OOM_HEADROOM = 128 << 20


def oom(inj, nodes, ctr, pid) -> str:
    # The kernel's OOM killer picks the process with the highest badness in the cgroup;
    # oom_score_adj=1000 makes that rank's worker (raising it needs no capability).
    sh(ctr, f"echo 1000 > /proc/{pid}/oom_score_adj")
    usage = ctr.stats(stream=False)["memory_stats"].get("usage") or (2 << 30)
    limit = int(usage + OOM_HEADROOM)
    ctr.update(mem_limit=limit, memswap_limit=limit)
    # Grow 16 MiB at a time while the worker lives (a zombie counts as gone), then stop,
    # so the OOM killer has no reason to take anything else.
    push = (
        "import time\nopen('/proc/self/oom_score_adj', 'w').write('1000')\n"
        "b = []\ndef alive():\n    try:\n"
        f"        return open('/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0] != 'Z'\n"
        "    except OSError:\n        return False\n"
        "while alive() and len(b) < 256:\n    b.append(b'x' * (16 << 20)); time.sleep(0.02)\n"
    )
    ctr.exec_run(["python3", "-c", push], detach=True)
    return (
        f"docker update --memory {limit >> 20}m {ctr.name} (usage + "
        f"{OOM_HEADROOM >> 20} MiB), rank {inj.rank}'s worker (pid {pid}) "
        f"oom_score_adj=1000, then memory pushed past the limit beside it"
    )


def memory_back(nodes, name: str):
    """In a soak the group's next attempts run in the same container, its memory limit lowered:
    this puts the limit back (none: the host's memory)."""
    ctr = nodes.container(name)
    host = ctr.attrs["HostConfig"]
    mem, swap = host.get("Memory") or 0, host.get("MemorySwap") or 0

    def undo() -> None:
        ctr.update(
            mem_limit=mem or nodes.client.info()["MemTotal"], memswap_limit=swap if mem else -1
        )

    return undo


KINDS = (
    Kind(
        "oom",
        110,
        inject=oom,
        pid="always",
        expect=FAILS,
        judged="died",
        pool_place=3,
        # in a soak, as a kill: the rank dies at the end of its held step
        soak=Soak("step", "before", undo=memory_back),
    ),
)
