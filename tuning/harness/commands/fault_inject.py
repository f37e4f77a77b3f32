"""The injection half of a fault run: wait for the target rank's step, then hit it (a
signal, a freeze, a throttle, a cut link, netem, memory), and undo what must be undone
before teardown (`release`). The watching half, and the command, are in fault.py.

It reaches the run's containers only through the backend's accessors (`container`,
`all_containers`, `client`, `issued_at`, `layout`: nodes.py).
"""

from __future__ import annotations

import time

import docker.errors

from tuning.harness.commands import fault_disk, fault_late
from tuning.harness.commands.fault_save import KIND as SAVE_KILL
from tuning.harness.commands.fault_save import files_in, under_way
from tuning.harness.rundirs import runs
from tuning.harness.spec.layout import NETWORK

SLOW_CPUS = 0.05  # slow: the target's share of a CPU
NETEM = {"delay": "delay 100ms", "loss": "loss 30%"}
OOM_HEADROOM = 256 << 20  # oom: limit = current usage + this; then memory is pushed past it
# kill and term on a container per rank: the signal goes to its launcher (PID 1)
DOCKER_KILL = {"KILL": "docker kill (SIGKILL) {}",
               "TERM": "docker kill --signal SIGTERM {} (its launcher, PID 1)"}  # fmt: skip

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


class Injector:
    """One fault of `kind` on rank `rank` (node `target`) at step `at_step`. `due()` is
    called on every tick until it returns what it did: [(how, step, when)]."""

    def __init__(self, kind: str, layout_kind: str, target: str, knobs: dict, run_id: str):
        self.kind, self.per_rank, self.target = kind, layout_kind == "per-rank", target
        self.rank, self.at_step, self.run_id = knobs["rank"], knobs["at_step"], run_id
        self.group_steps = knobs.get("group_steps", False)  # only rank 0 logs steps (fms)
        self.heals: list = []  # what undoes the fault (thaw, unpause, remove the helper)
        self.saving = None  # save-kill: the checkpoint being written when it struck
        self.at_kill: dict | None = None  # save-kill: that checkpoint's files at the kill
        self.filled: dict | None = None  # disk-full: the fill (fault_disk.fill)
        self.late = fault_late.Late(target, knobs["late_s"]) if kind == fault_late.KIND else None

    def target_step(self, metrics) -> int:
        rank = 0 if self.group_steps else self.rank  # fms: the group's step, from rank 0
        return max((x["step"] for x in runs.steps(metrics.get(rank, []))), default=0)

    def due(self, metrics, nodes, now: float) -> list[tuple[str, int, float]]:
        """Inject if it is time: [(how, step, when)] once injected, else []."""
        kind = self.kind
        if self.late:
            return self.late.due(nodes, now)
        if kind == "no-show":
            if self.per_rank:
                issued = nodes.issued_at or now
                return [(f"{self.target} never started (compose up without it)", 0, issued)]
            ctr = nodes.container(self.target)
            pid = worker_pid(ctr, self.rank)
            if not pid:
                return []
            t = time.time()  # frozen before it can join the process group
            self._freeze(ctr, pid)
            return [(f"SIGSTOP rank {self.rank}'s worker (pid {pid}) before rendezvous", 0, t)]
        if kind == "crash":  # the trainer raises by itself (HARNESS_CRASH_AT_STEP)
            return [(f"rank {self.rank} raised: {x['error']}", self.target_step(metrics), x["time"])
                    for x in metrics.get(self.rank, []) if x.get("event") == "end"
                    and "injected crash" in (x.get("error") or "")]  # fmt: skip
        step = self.target_step(metrics)
        if step < self.at_step:
            return []
        if kind == fault_disk.KIND:  # once a checkpoint is complete; the volume is every rank's
            self.filled = fault_disk.fill(nodes.container(self.target))
            return [(fault_disk.how(self.filled), step, time.time())] if self.filled else []
        if kind == SAVE_KILL:
            self.saving = under_way(nodes.run_dir / "output")
            if self.saving is None:
                return []  # the next save after the step
        ctr = nodes.container(self.target)
        pid = None
        if not self.per_rank or kind == "oom":
            pid = worker_pid(ctr, self.rank)
            if pid is None:
                return []  # not visible yet (or already gone); try on the next tick
        t = time.time()
        how = getattr(self, "inject_" + kind.replace("-", "_"))(nodes, ctr, pid)
        return [(how, step, t)]

    def _freeze(self, ctr, pid: int) -> None:
        sh(ctr, f"kill -STOP {pid}")
        self.heals.append(lambda: sh(ctr, f"kill -CONT {pid}"))

    def _signal(self, ctr, pid, sig: str) -> str:
        if self.per_rank:
            ctr.kill(f"SIG{sig}")
            return DOCKER_KILL[sig].format(ctr.name)
        sh(ctr, f"kill -{sig} {pid}")
        return f"kill -{sig} rank {self.rank}'s worker (pid {pid}) in {ctr.name}"

    def inject_kill(self, nodes, ctr, pid) -> str:
        return self._signal(ctr, pid, "KILL")

    def inject_save_kill(self, nodes, ctr, pid) -> str:
        self.at_kill = {"checkpoint": self.saving.name, "files": files_in(self.saving)}
        how = self._signal(ctr, pid, "KILL")
        return f"{how}, while {self.saving.name} was being written"

    def inject_term(self, nodes, ctr, pid) -> str:
        return self._signal(ctr, pid, "TERM")

    def inject_preempt(self, nodes, ctr, pid) -> str:
        for c in nodes.all_containers():
            c.kill("SIGTERM")
        names = ", ".join(c.name for c in nodes.all_containers())
        return f"docker kill --signal SIGTERM {names} (every launcher, at once)"

    def inject_pause(self, nodes, ctr, pid) -> str:
        if self.per_rank:
            ctr.pause()
            self.heals.append(ctr.unpause)
            return f"docker pause {ctr.name}"
        self._freeze(ctr, pid)
        return f"kill -STOP rank {self.rank}'s worker (pid {pid}) in {ctr.name}"

    def inject_slow(self, nodes, ctr, pid) -> str:
        if self.per_rank:
            ctr.update(cpu_period=100_000, cpu_quota=int(100_000 * SLOW_CPUS))
            return f"docker update --cpus {SLOW_CPUS} {ctr.name}"
        # one cgroup holds every rank: duty-cycle the one process with STOP/CONT
        on = SLOW_CPUS * 0.1
        loop = (f"while kill -STOP {pid} 2>/dev/null; do sleep {0.1 - on:.3f}; "
                f"kill -CONT {pid}; sleep {on:.3f}; done")  # fmt: skip
        sh(ctr, loop, detach=True)
        self.heals.append(lambda: sh(ctr, f"kill -CONT {pid}"))
        return (f"rank {self.rank}'s worker (pid {pid}) stopped/continued on a 100 ms "
                f"cycle, running {SLOW_CPUS:.0%} of it")  # fmt: skip

    def inject_partition(self, nodes, ctr, pid) -> str:
        how = ""
        for name in list(ctr.attrs["NetworkSettings"]["Networks"]):
            if name.endswith(f"_{NETWORK}"):
                nodes.client.networks.get(name).disconnect(ctr, force=True)
                how = f"docker network disconnect {name} {ctr.name}"
        return how

    def inject_oom(self, nodes, ctr, pid) -> str:
        # The kernel's OOM killer picks the process with the highest badness in the cgroup;
        # oom_score_adj=1000 makes that rank's worker (raising it needs no capability).
        sh(ctr, f"echo 1000 > /proc/{pid}/oom_score_adj")
        usage = ctr.stats(stream=False)["memory_stats"].get("usage") or (2 << 30)
        limit = int(usage + OOM_HEADROOM)
        ctr.update(mem_limit=limit, memswap_limit=limit)
        # Grow 16 MiB at a time while the worker lives (a zombie counts as gone), then stop,
        # so the OOM killer has no reason to take anything else.
        push = (
            "import time\nb = []\ndef alive():\n    try:\n"
            f"        return open('/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0] != 'Z'\n"
            "    except OSError:\n        return False\n"
            "while alive() and len(b) < 256:\n    b.append(b'x' * (16 << 20)); time.sleep(0.02)\n"
        )
        ctr.exec_run(["python3", "-c", push], detach=True)
        return (f"docker update --memory {limit >> 20}m {ctr.name} (usage + "
                f"{OOM_HEADROOM >> 20} MiB), rank {self.rank}'s worker (pid {pid}) "
                f"oom_score_adj=1000, then memory pushed past the limit beside it")  # fmt: skip

    def inject_delay(self, nodes, ctr, pid) -> str:
        dev = "eth0" if self.per_rank else "lo"
        rule = f"tc qdisc add dev {dev} root netem {NETEM[self.kind]}"
        helper = nodes.client.containers.run(
            ctr.image.id, ["-c", f"{rule} && exec sleep 100000"], entrypoint="sh", user="root",
            cap_add=["NET_ADMIN"], network_mode=f"container:{ctr.id}", detach=True,
            labels={**nodes.layout.labels, "harness.fault": self.kind},
            name=f"harness-{self.run_id}-fault-{self.kind}",
        )  # fmt: skip
        self.heals.append(lambda: helper.remove(force=True))
        return f"helper {helper.name} (NET_ADMIN, network_mode container:{ctr.name}): {rule}"

    inject_loss = inject_delay

    def release(self) -> None:
        heals, self.heals = self.heals, []
        for heal in heals:
            try:
                heal()
            except docker.errors.APIError:
                pass
