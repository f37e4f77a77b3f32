"""One run of a layout, start to end: render, start, follow, tear down, record.

The backends differ only in how nodes start, report their exit and stop: `ComposeNodes`
(Compose starts and stops, the SDK watches) and `HostNodes` (processes on the host).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tuning import launch

from . import compose as compose_mod
from . import engine, runs, workload
from .layout import Layout
from .progress import Progress

ROOT = engine.ROOT
HOST_ASSETS = ROOT / "build/assets"


class Interrupted(Exception):
    pass


def _raise_interrupted(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


class ComposeNodes:
    def __init__(self, layout: Layout, run_dir: Path, client, services: list[str] | None = None):
        self.layout, self.run_dir, self.c = layout, run_dir, client
        self.services = list(services or [])  # Compose services to start; empty: every one
        self.file = run_dir / "compose.yaml"
        self.containers: dict[str, object] = {}
        self.issued_at: float | None = None
        # per-rank MAX_RESTARTS: the harness restarts the whole group (torchrun does in single)
        self.restarts_left = layout.max_restarts if layout.kind == "per-rank" else 0
        self.restarts: list[dict] = []

    def start(self) -> None:
        self.issued_at = time.time()  # the moment `compose up` is issued (bench: container start)
        engine.compose(self.file, "up", "--detach", "--no-build", "--pull", "never",
                       "--quiet-pull", *self.services, capture=True)  # fmt: skip
        for ctr in self.c.containers.list(
            all=True, filters={"label": f"{compose_mod.LABEL}={self.layout.run_id}"}
        ):
            self.containers[ctr.labels["harness.node"]] = ctr

    def poll(self) -> dict[str, int | None]:
        state = {}
        for name, ctr in self.containers.items():
            ctr.reload()
            s = ctr.attrs["State"]
            ended = s["Status"] in ("exited", "dead") or (s["Status"] == "created" and s["Error"])
            state[name] = (
                (s["ExitCode"] or 128)
                if ended and s["Error"]
                else (s["ExitCode"] if ended else None)
            )
        return state

    def restart(self, state: dict[str, int | None]) -> None:
        """A node failed: stop every rank container, start them all again (as a JobSet
        recreates every pod); the trainers resume from the newest checkpoint in /output."""
        self.restarts_left -= 1
        failed = {name: code for name, code in state.items() if code not in (None, 0)}
        t = time.time()
        print(f"harness: {', '.join(f'{n} exited {c}' for n, c in failed.items())}; restarting "
              f"every rank ({self.restarts_left} restart(s) left)", file=sys.stderr)  # fmt: skip
        engine.compose(self.file, "stop", "--timeout", "5", capture=True)
        engine.compose(self.file, "start", *self.services, capture=True)
        self.restarts.append({"time": round(t, 3), "by": "harness", "failed": failed,
                              "restarted_s": round(time.time() - t, 2)})  # fmt: skip

    def details(self) -> dict[str, dict]:
        out = {}
        for name, ctr in self.containers.items():
            ctr.reload()
            s = ctr.attrs["State"]
            out[name] = {"container": ctr.name, "exit_code": s["ExitCode"],
                         "oom_killed": s["OOMKilled"], "started_at": s["StartedAt"],
                         "issued_at": self.issued_at, "error": s["Error"] or None}  # fmt: skip
        return out

    def save_logs(self) -> None:
        for name, ctr in self.containers.items():
            try:
                (self.run_dir / f"logs/{name}.log").write_bytes(ctr.logs())
            except Exception as e:  # the engine may be gone; keep what we have
                print(f"harness: could not read {name}'s log: {e}", file=sys.stderr)

    def stop(self) -> None:
        engine.compose(self.file, "down", "--volumes", "--remove-orphans", "--timeout", "10",
                       check=False, capture=True)  # fmt: skip
        engine.remove_labelled(self.c, self.layout.run_id)


class HostNodes:
    """LAYOUT=host: the launcher straight on the host, from this environment's Python."""

    def __init__(self, layout: Layout, run_dir: Path, argv: list[str], env: dict):
        self.layout, self.run_dir, self.argv, self.env = layout, run_dir, argv, env
        self.proc: subprocess.Popen | None = None
        self.issued_at: float | None = None

    def start(self) -> None:
        log = open(self.run_dir / "logs/host.log", "wb")
        bindir = str(Path(sys.executable).parent)
        env = {**os.environ, **{k: v for k, v in self.env.items() if v is not None}}
        env["PATH"] = bindir + os.pathsep + os.environ["PATH"]
        self.issued_at = time.time()
        self.proc = subprocess.Popen(self.argv, env=env, cwd=ROOT, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    def poll(self) -> dict[str, int | None]:
        return {"host": self.proc.poll()}

    def details(self) -> dict[str, dict]:
        return {"host": {"container": None, "exit_code": self.proc.returncode,
                         "oom_killed": False, "pid": self.proc.pid,
                         "issued_at": self.issued_at}}  # fmt: skip

    def save_logs(self) -> None:
        pass  # written as it runs

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def job_for(layout: Layout, base_job: Path, steps: int | None, seed: int | None,
            timeout: int | None, resume: bool) -> dict:  # fmt: skip
    if layout.entry:  # a foreign trainer's own format (fms: JSON), and it resumes by itself
        job, resume = workload.load_job(base_job), False
    else:
        job = yaml.safe_load(base_job.read_text()) or {}
    job.setdefault("torch_dtype", "bfloat16" if layout.gpus else "float32")  # fms's GPU default
    job.update(
        model_name_or_path=layout.model_path(str(HOST_ASSETS / "tiny-model")),
        training_data_path=layout.data_path(str(HOST_ASSETS / "demo.jsonl")),
        output_dir=layout.output_dir,
    )
    for key, value in (("max_steps", steps), ("seed", seed), ("ddp_timeout", timeout)):
        if value is not None:
            job[key] = value
    if resume:
        job["resume_from_checkpoint"] = True
    return job


def node_commands(layout: Layout, accelerate_config: Path) -> dict[str, dict]:
    """Each node's launch command and environment, from the image's own launcher; the host
    reads `accelerate_config`, the file each node will find at ACCELERATE_CONFIG."""
    out = {}
    for node in layout.nodes():
        job = layout.trainer_args
        argv, extra = launch.command(node.env, job, str(accelerate_config))
        out[node.name] = {"argv": argv, "env": {**node.env, **extra}}
    return out


def execute(layout: Layout, run_dir: Path, nodes, total_steps: int | None, grace: float,
            t0: float, on_tick=None) -> tuple[str, dict]:  # fmt: skip
    """Start, follow to the end, tear down. Returns (status, per-node details).

    `on_tick(metrics, state, nodes)` is called on every poll while ranks run (fault injection
    waits for a step there); it may return "stop" to end the follow early."""
    old = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    status = "failed"
    progress = Progress(total_steps=total_steps)
    output = run_dir / "output"
    try:
        nodes.start()
        failed_at = None
        while True:
            metrics = runs.read_metrics(output)
            progress.update(metrics)
            state = nodes.poll()
            if on_tick and on_tick(metrics, state, nodes) == "stop":
                break
            failed = any(code not in (None, 0) for code in state.values())
            if failed and getattr(nodes, "restarts_left", 0) > 0:
                nodes.restart(state)
                failed_at = None
                continue
            if all(code is not None for code in state.values()):
                status = "succeeded" if all(code == 0 for code in state.values()) else "failed"
                break
            if failed_at is None and failed:
                failed_at = time.monotonic()  # peers should fail too; don't wait forever
            if failed_at and time.monotonic() - failed_at > grace:
                print(f"harness: a rank failed and the others were still running after "
                      f"{grace:.0f} s; stopping them", file=sys.stderr)  # fmt: skip
                break
            time.sleep(0.5)
        progress.update(runs.read_metrics(output))
    except Interrupted as e:
        print(f"\nharness: {e} received; stopping the run", file=sys.stderr)
        status = "interrupted"
    finally:
        # Teardown must finish even if a second Ctrl-C comes.
        for s in old:
            signal.signal(s, signal.SIG_IGN)
        try:
            nodes.save_logs()
            details = nodes.details() if status != "interrupted" or _safe(nodes) else {}
        except Exception:
            details = {}
        nodes.stop()
        for s, handler in old.items():
            signal.signal(s, handler)
    return status, details


def _safe(nodes) -> bool:
    try:
        nodes.poll()
        return True
    except Exception:
        return False
