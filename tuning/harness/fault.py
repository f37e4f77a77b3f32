"""`make fault`: start a job, hit one rank at a chosen step, follow every rank to its end,
tear down, and record what happened (runs/<run-id>/fault.json and fault.md).

`python -m tuning.harness fault <run flags> --fault KIND [--rank i] [--at-step k]
[--rdzv-timeout s]`; `--fault all` runs every kind in both layouts and writes one matrix.
The fault lands when the target rank's own metrics show step k (on_tick, not a sleep).
What each kind does in each layout, and why some cannot apply: docs/faults.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import docker.errors

from . import engine, fault_record, images, runs, workload
from .cli import add_run_flags, spec_from, start
from .compose import LABEL, NETWORK
from .engine import HarnessError

KINDS = ("kill", "term", "preempt", "crash", "pause", "no-show", "partition", "oom", "slow",
         "delay", "loss")  # fmt: skip
LAYOUTS = ("single", "per-rank")
FAIL_KINDS = ("kill", "crash", "partition", "oom", "no-show")  # must end within TIMEOUT + 15 s
HANG_KINDS = ("pause", "delay", "loss")  # must be detected as a hang within TIMEOUT + 15 s
SLACK_S = 15
LINGER_S = 5  # every worker ended this long ago but a launcher still runs: stop it
DEFAULTS = {"timeout": 20, "steps": 60, "at_step": 12, "rank": 1}
STEP_SLEEP_S = 0.2  # paces steps (HARNESS_STEP_SLEEP) so a fault lands near its step
SLOW_STEP_SLEEP_S = 0.05  # slow: less padding, so the throttled compute shows in step times
START_DEADLINE_S = 300  # the target must reach its step by then
LONG_DEADLINE_S = 180  # kinds that let the job go on (slow, term, preempt): fault + this
SLOW_CPUS = 0.05  # slow: the target's share of a CPU
NETEM = {"delay": "delay 100ms", "loss": "loss 30%"}
OOM_HEADROOM = 256 << 20  # oom: limit = current usage + this; then memory is pushed past it

NOT_APPLICABLE = {
    ("partition", "single"): "every rank of a single container talks to the others over "
    "loopback inside one network namespace; there is no link between ranks to cut (cutting "
    "loopback cuts them all). Use LAYOUT=per-rank.",
}
FOREIGN_CRASH = ("crash raises inside this repo's trainer (HARNESS_CRASH_AT_STEP); a foreign "
                 "trainer (ENTRY, TRAINER=fms) has no such hook. Use kill or term.")  # fmt: skip
FOREIGN_STEPS = ("a foreign trainer (fms) logs steps from rank 0 only (training_logs.jsonl): the "
                 "fault lands when rank 0 shows the step (the group steps together), and ranks "
                 "other than 0 have no last step of their own")  # fmt: skip
SHARED_NET = "per-rank with NETWORK=shared puts every rank in rank 0's network namespace; "


def register(sub) -> None:
    p = sub.add_parser("fault", help="reproduce a cluster failure and record it")
    add_run_flags(p)
    p.add_argument("--fault", required=True, choices=[*KINDS, "all"])
    p.add_argument("--rank", help=f"the rank to hit (default {DEFAULTS['rank']})")
    p.add_argument("--at-step", help=f"hit it at this step (default {DEFAULTS['at_step']})")
    p.add_argument("--rdzv-timeout", help="rendezvous timeout in seconds (default: TIMEOUT)")
    p.set_defaults(fn=run)


def run(a: argparse.Namespace) -> int:
    if a.fault != "all" and a.layout not in LAYOUTS:
        raise HarnessError(f"fault runs in containers: LAYOUT=single or per-rank, not {a.layout}")
    kinds = KINDS if a.fault == "all" else (a.fault,)
    layouts = LAYOUTS if a.fault == "all" else (a.layout,)
    base = a.run_id or runs.new_run_id()
    records = []
    for layout in layouts:
        for kind in kinds:
            run_id = base if len(kinds) == 1 else f"{base}-{kind}-{layout}"
            records.append(run_one(a, kind, layout, run_id))
    if len(records) > 1:
        out = fault_record.write_matrix(Path(a.runs).resolve() / f"{base}-fault-matrix", records)
        print(f"harness: fault matrix: {out}")
    return 0 if all(r["goal_met"] is not False for r in records) else 1


def _knobs(a: argparse.Namespace, kind: str) -> dict:
    timeout = int(a.timeout or DEFAULTS["timeout"])
    return {
        "timeout_s": timeout,
        "rdzv_timeout_s": int(a.rdzv_timeout or timeout),
        "rank": int(a.rank if a.rank not in (None, "") else DEFAULTS["rank"]),
        "at_step": int(a.at_step or DEFAULTS["at_step"]),
        "steps": int(a.steps or DEFAULTS["steps"]),
    }


def run_one(a: argparse.Namespace, kind: str, layout_kind: str, run_id: str) -> dict:
    k = _knobs(a, kind)
    b = argparse.Namespace(**{**vars(a), "timeout": str(k["timeout_s"]),
                              "steps": str(k["steps"]), "resume": False})  # fmt: skip
    env = {
        "HARNESS_STEP_SLEEP": str(SLOW_STEP_SLEEP_S if kind == "slow" else STEP_SLEEP_S),
        "HARNESS_RDZV_TIMEOUT": str(k["rdzv_timeout_s"]),
    }
    if kind == "crash":
        env.update(HARNESS_CRASH_AT_STEP=str(k["at_step"]), HARNESS_CRASH_RANK=str(k["rank"]))
    spec = spec_from(b, run_id=run_id, kind=layout_kind, extra_env=tuple(env.items()))
    layout = spec.layout
    if not 0 <= k["rank"] < layout.world_size:
        raise HarnessError(f"RANK={k['rank']} is outside the {layout.world_size} rank(s)")
    sleep = float(env["HARNESS_STEP_SLEEP"])
    base = {"run_id": run_id, "kind": kind, "layout": layout_kind, **k,
            "max_restarts": layout.max_restarts, "world_size": layout.world_size,
            "step_sleep_s": sleep}  # fmt: skip
    reason = NOT_APPLICABLE.get((kind, layout_kind))
    if layout.entry:
        base["trainer"] = {"image": layout.image, "entry": layout.entry}
        base["steps_note"] = FOREIGN_STEPS
        base["step_sleep_s"] = None  # HARNESS_STEP_SLEEP paces this repo's trainer only
        if kind == "crash":
            reason = FOREIGN_CRASH
    if kind == "partition" and layout_kind == "per-rank" and layout.network == "shared":
        reason = SHARED_NET + "there is no link between ranks to cut. Use NETWORK=isolated."
    if reason is None and kind in NETEM:
        reason = _netem_unsupported(layout, kind)
        status = "unsupported"
    else:
        status = "not applicable"
    if reason:
        run_dir = runs.create(spec.runs_root, run_id)
        record = {**base, "status": status, "reason": reason, "outcome": status,
                  "goal_met": None, "leftovers": []}  # fmt: skip
        fault_record.write(run_dir, record)
        print(f"harness: fault {kind} ({layout_kind}): {status}: {reason}")
        return record
    target = next(n.name for n in layout.nodes() if k["rank"] in n.ranks)
    if kind == "no-show" and layout_kind == "per-rank":
        spec.services = [n.name for n in layout.nodes() if n.name != target]
    knobs = {**k, "world_size": layout.world_size, "max_restarts": layout.max_restarts,
             "group_steps": bool(layout.entry)}  # fmt: skip
    follow = Follow(kind, layout_kind, target, knobs, run_id)
    summary = start(spec, on_tick=follow)
    follow.finished_at = follow.finished_at or time.time()
    run_dir = spec.runs_root / run_id
    leftovers = engine.labelled(engine.client(), run_id)
    record = fault_record.build(base, follow, summary, layout, run_dir, leftovers)
    fault_record.write(run_dir, record)
    print(f"harness: fault {kind} ({layout_kind}): {record['outcome']}; "
          f"fault to end {record['fault_to_end_s']} s (bound {record['bound_s']} s); "
          f"{run_dir / 'fault.md'}")  # fmt: skip
    return record


def _netem_unsupported(layout, kind: str) -> str | None:
    """Try netem once in a throwaway helper (same image, NET_ADMIN, no network)."""
    c = engine.client()
    if layout.entry:  # a user's image is never built from our recipes
        workload.check_image(c, layout)
    else:
        images.ensure(c, layout.image, layout.device, log=lambda *_: None)
    try:
        c.containers.run(layout.image, ["-c", f"tc qdisc add dev lo root netem {NETEM[kind]}"],
                         entrypoint="sh", user="root", cap_add=["NET_ADMIN"], network_mode="none",
                         labels={LABEL: layout.run_id}, remove=True, stderr=True)  # fmt: skip
        return None
    except docker.errors.ContainerError as e:
        err = (e.stderr or b"").decode(errors="replace").strip() or str(e)
        return f"netem not supported by this kernel: {err}"
    finally:
        engine.remove_labelled(c, layout.run_id)


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


class Follow:
    """The on_tick of a fault run: waits for the step, injects, watches, decides when to stop."""

    def __init__(self, kind: str, layout_kind: str, target: str, knobs: dict, run_id: str):
        self.kind, self.layout_kind, self.target, self.run_id = kind, layout_kind, target, run_id
        self.rank, self.at_step, self.timeout = knobs["rank"], knobs["at_step"], knobs["timeout_s"]
        self.t0 = time.time()
        self.injected_at: float | None = None
        self.inject_step: int | None = None
        self.how = ""
        self.timeline: list[dict] = []
        self.ended: dict[str, float] = {}
        self.stopped_by: str | None = None
        self.finished_at: float | None = None
        self.detected_at: float | None = None
        self.pid: int | None = None
        self.heals: list = []
        self.last_step_seen = (0, self.t0)
        self.rank_ended: dict[int, float] = {}
        self.running: dict[str, bool] = {}
        self.world_size = knobs["world_size"]
        self.max_restarts = knobs.get("max_restarts", 0)  # the group may come back this often
        self.group_steps = knobs.get("group_steps", False)  # only rank 0 logs steps (fms)

    def event(self, what: str, when: float | None = None) -> None:
        when = when or time.time()
        self.timeline.append({"t": round(when - self.t0, 2), "event": what})
        print(f"harness: fault t={when - self.t0:6.1f}s {what}")

    def __call__(self, metrics, state, nodes):
        now = time.time()
        for name, code in state.items():
            if code is not None and (name not in self.ended or self.running.get(name)):
                self.ended[name] = now  # its latest exit (MAX_RESTARTS may start it again)
                self.event(f"{name} exited with {code}", now)
            self.running[name] = code is None
        for rank, lines in metrics.items():
            end = next((x for x in lines if x.get("event") == "end"), None)
            if end and rank not in self.rank_ended:
                self.rank_ended[rank] = end["time"]
                sig = fault_record.signature(end.get("error") or "")
                self.event(f"rank {rank} ended: {end['status']}" + (f" ({sig})" if sig else ""),
                           end["time"])  # fmt: skip
        # None again when the harness restarts the group (per-rank MAX_RESTARTS)
        self.finished_at = now if all(code is not None for code in state.values()) else None
        if self.injected_at is None:
            try:
                self.maybe_inject(metrics, nodes, now)
            except docker.errors.APIError as e:
                self.event(f"injection failed: {e.explanation or e}")
                self.stopped_by = "injection failed"
                return "stop"
            if self.injected_at is None and now - self.t0 > START_DEADLINE_S:
                self.stopped_by = "never reached the step"
                return "stop"
            return None
        return self.watch(metrics, state, nodes, now)

    # --- injection -------------------------------------------------------------------------
    def target_step(self, metrics) -> int:
        rank = 0 if self.group_steps else self.rank  # fms: the group's step, from rank 0
        return max((x["step"] for x in runs.steps(metrics.get(rank, []))), default=0)

    def maybe_inject(self, metrics, nodes, now: float) -> None:
        kind, per_rank = self.kind, self.layout_kind == "per-rank"
        if kind == "no-show":
            if per_rank:
                issued = getattr(nodes, "issued_at", None) or now
                self.injected(f"{self.target} never started (compose up without it)", 0, issued)
                return
            ctr = nodes.containers[self.target]
            pid = worker_pid(ctr, self.rank)
            if pid:  # frozen before it can join the process group
                t = time.time()
                sh(ctr, f"kill -STOP {pid}")
                self.pid = pid
                self.heals.append(lambda: sh(ctr, f"kill -CONT {pid}"))
                self.injected(
                    f"SIGSTOP rank {self.rank}'s worker (pid {pid}) before rendezvous", 0, t
                )
            return
        if kind == "crash":
            for x in metrics.get(self.rank, []):
                if x.get("event") == "end" and "injected crash" in (x.get("error") or ""):
                    step = self.target_step(metrics)
                    self.injected(f"rank {self.rank} raised: {x['error']}", step, x["time"])
            return
        step = self.target_step(metrics)
        if step < self.at_step:
            return
        ctr = nodes.containers[self.target]
        pid = None
        if not per_rank or kind == "oom":
            pid = worker_pid(ctr, self.rank)
            if pid is None:
                return  # not visible yet (or already gone); try on the next tick
        t = time.time()
        getattr(self, "inject_" + kind.replace("-", "_"))(nodes, ctr, pid, per_rank)
        self.injected(self.how, step, t)

    def injected(self, how: str, step: int, when: float | None = None) -> None:
        self.injected_at, self.inject_step, self.how = when or time.time(), step, how
        self.event(f"fault injected at step {step}: {how}", self.injected_at)

    def inject_kill(self, nodes, ctr, pid, per_rank):
        if per_rank:
            ctr.kill("SIGKILL")
            self.how = f"docker kill (SIGKILL) {ctr.name}"
        else:
            sh(ctr, f"kill -KILL {pid}")
            self.how = f"kill -KILL rank {self.rank}'s worker (pid {pid}) in {ctr.name}"

    def inject_term(self, nodes, ctr, pid, per_rank):
        if per_rank:
            ctr.kill("SIGTERM")
            self.how = f"docker kill --signal SIGTERM {ctr.name} (its launcher, PID 1)"
        else:
            sh(ctr, f"kill -TERM {pid}")
            self.how = f"kill -TERM rank {self.rank}'s worker (pid {pid}) in {ctr.name}"

    def inject_preempt(self, nodes, ctr, pid, per_rank):
        for c in nodes.containers.values():
            c.kill("SIGTERM")
        names = ", ".join(c.name for c in nodes.containers.values())
        self.how = f"docker kill --signal SIGTERM {names} (every launcher, at once)"

    def inject_pause(self, nodes, ctr, pid, per_rank):
        if per_rank:
            ctr.pause()
            self.heals.append(ctr.unpause)
            self.how = f"docker pause {ctr.name}"
        else:
            sh(ctr, f"kill -STOP {pid}")
            self.heals.append(lambda: sh(ctr, f"kill -CONT {pid}"))
            self.how = f"kill -STOP rank {self.rank}'s worker (pid {pid}) in {ctr.name}"

    def inject_slow(self, nodes, ctr, pid, per_rank):
        if per_rank:
            ctr.update(cpu_period=100_000, cpu_quota=int(100_000 * SLOW_CPUS))
            self.how = f"docker update --cpus {SLOW_CPUS} {ctr.name}"
        else:  # one cgroup holds every rank: duty-cycle the one process with STOP/CONT
            on = SLOW_CPUS * 0.1
            loop = (f"while kill -STOP {pid} 2>/dev/null; do sleep {0.1 - on:.3f}; "
                    f"kill -CONT {pid}; sleep {on:.3f}; done")  # fmt: skip
            sh(ctr, loop, detach=True)
            self.heals.append(lambda: sh(ctr, f"kill -CONT {pid}"))
            self.how = (f"rank {self.rank}'s worker (pid {pid}) stopped/continued on a 100 ms "
                        f"cycle, running {SLOW_CPUS:.0%} of it")  # fmt: skip

    def inject_partition(self, nodes, ctr, pid, per_rank):
        for name in list(ctr.attrs["NetworkSettings"]["Networks"]):
            if name.endswith(f"_{NETWORK}"):
                nodes.c.networks.get(name).disconnect(ctr, force=True)
                self.how = f"docker network disconnect {name} {ctr.name}"

    def inject_oom(self, nodes, ctr, pid, per_rank):
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
        self.how = (f"docker update --memory {limit >> 20}m {ctr.name} (usage + "
                    f"{OOM_HEADROOM >> 20} MiB), rank {self.rank}'s worker (pid {pid}) "
                    f"oom_score_adj=1000, then memory pushed past the limit beside it")  # fmt: skip

    def inject_delay(self, nodes, ctr, pid, per_rank):
        self._netem(nodes, ctr, per_rank)

    inject_loss = inject_delay

    def _netem(self, nodes, ctr, per_rank):
        dev = "eth0" if per_rank else "lo"
        rule = f"tc qdisc add dev {dev} root netem {NETEM[self.kind]}"
        helper = nodes.c.containers.run(
            ctr.image.id, ["-c", f"{rule} && exec sleep 100000"], entrypoint="sh", user="root",
            cap_add=["NET_ADMIN"], network_mode=f"container:{ctr.id}", detach=True,
            labels={LABEL: self.run_id, "harness.fault": self.kind},
            name=f"harness-{self.run_id}-fault-{self.kind}",
        )  # fmt: skip
        self.heals.append(lambda: helper.remove(force=True))
        self.how = f"helper {helper.name} (NET_ADMIN, network_mode container:{ctr.name}): {rule}"

    # --- after the fault -------------------------------------------------------------------
    def watch(self, metrics, state, nodes, now: float):
        if self.finished_at:
            return None
        newest = max(
            (x["step"] for lines in metrics.values() for x in runs.steps(lines)), default=0
        )
        if newest > self.last_step_seen[0]:
            self.last_step_seen = (newest, now)
        if self.kind == "no-show" and self.heals and self.peer_ended(metrics):
            # The peers gave up; thaw the frozen rank so its launcher can stop it (a frozen
            # process ignores SIGTERM, and torchrun would wait 30 s before SIGKILL).
            self.event("a peer gave up at rendezvous; the frozen rank is released")
            self.release()
        if self.kind in HANG_KINDS and self.detected_at is None:
            why = self.hang(metrics, now)
            if why:
                self.detected_at = now
                self.event(f"hang detected: {why}", now)
                self.stopped_by = "hang detected"
                return self.stop()
        done = self.done_ranks(metrics)
        if (
            self.kind != "slow"  # a throttled launcher is slow to exit, not stuck
            and len(done) == self.world_size
            and now - max(done.values()) > LINGER_S
        ):
            # Every worker is done but a launcher lingers: torchelastic's exit barrier waits
            # (300 s) for an agent that was signalled away.
            self.event(f"every rank ended {LINGER_S} s ago but a launcher still runs; stopping it")
            self.stopped_by = "launcher lingered"
            return self.stop()
        long = self.kind in ("slow", "term", "preempt") or self.max_restarts > 0
        deadline = self.injected_at + (LONG_DEADLINE_S if long else self.timeout + SLACK_S)
        if now > deadline:
            self.event(f"deadline (fault + {deadline - self.injected_at:.0f} s): stopping")
            self.stopped_by = "deadline"
            return self.stop()
        return None

    def done_ranks(self, metrics) -> dict[int, float]:
        """Ranks whose last line is their end and that will not come back: it completed, or
        its trainer already started more than MAX_RESTARTS times (the group restarts on a
        failure)."""
        out = {}
        for rank, lines in metrics.items():
            if not lines or lines[-1].get("event") != "end":
                continue
            starts = sum((x.get("event"), x.get("name")) == ("phase", "imports") for x in lines)
            if lines[-1].get("status") in ("completed", "preempted") or starts > self.max_restarts:
                out[rank] = lines[-1]["time"]
        return out

    def hang(self, metrics, now: float) -> str | None:
        for rank, lines in metrics.items():
            for x in lines:
                if x.get("event") == "end" and fault_record.is_timeout(x.get("error") or ""):
                    return f"rank {rank} timed out waiting for its peer"
        quiet = now - max(self.last_step_seen[1], self.injected_at)
        if quiet > self.timeout:
            return f"no rank made a step for {quiet:.0f} s"
        return None

    def peer_ended(self, metrics) -> bool:
        return any(x.get("event") == "end" for r, lines in metrics.items() if r != self.rank
                   for x in lines)  # fmt: skip

    def release(self) -> None:
        heals, self.heals = self.heals, []
        for heal in heals:
            try:
                heal()
            except docker.errors.APIError:
                pass

    def stop(self) -> str:
        self.release()
        self.finished_at = time.time()
        return "stop"
