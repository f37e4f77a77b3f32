"""The backends a run's nodes run on: `ComposeNodes` (Compose starts and stops, the SDK
watches) and `HostNodes` (processes on the host). Both follow `Nodes`; run/lifecycle.py drives
them and knows nothing else of either, and fault injection reaches a node's container only through
`container()`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

import docker.errors
import requests.exceptions

from tuning.container.shared import affinity
from tuning.harness.backends import compose, engine
from tuning.harness.contract.container import RUNS_LABEL
from tuning.harness.errors import ROOT, NodeLost
from tuning.harness.layout.layout import Layout
from tuning.harness.layout.own_output import RUN_OUTPUT, OwnOutput


class Nodes(Protocol):
    """What `lifecycle.execute` needs of a backend."""

    issued_at: float | None  # when the start was issued (bench: container start)
    restarts_left: int  # group restarts the harness may still make
    restarts: list[dict]  # the ones it made
    # when the harness began stopping what still ran (its teardown): a rank's SIGTERM from
    # then on is the harness's own, never a stop from outside (lifecycle.execute sets it)
    stopping_at: float | None

    @staticmethod
    def render(layout: Layout, output: OwnOutput = RUN_OUTPUT) -> dict[str, str]:
        """The backend's own files (path in the run directory -> text); the dry run's."""

    def start(self) -> None: ...
    def poll(self) -> dict[str, int | None]: ...  # node -> exit code, None while it runs
    def restart(self, state: dict[str, int | None], why: str = "", left: bool = True) -> None: ...
    def details(self) -> dict[str, dict]: ...  # node -> container, exit code, OOM, times
    def save_logs(self) -> None: ...
    def stop(self) -> None: ...


def backend(layout: Layout) -> type:
    return HostNodes if layout.topology.kind == "host" else ComposeNodes


class ComposeNodes:
    def __init__(
        self,
        layout: Layout,
        run_dir: Path,
        commands: dict,
        client=None,
        services: list[str] | None = None,
    ):
        self.layout, self.run_dir, self.client = layout, run_dir, client
        self.services = list(services or [])  # Compose services to start; empty: every one
        self.file = run_dir / "compose.yaml"
        self.containers: dict[str, object] = {}
        self.issued_at: float | None = None
        # per-rank MAX_RESTARTS: the harness restarts the whole group (torchrun does in single)
        self.restarts_left = layout.limits.max_restarts if layout.topology.kind == "per-rank" else 0
        self.restarts: list[dict] = []
        self.stopping_at: float | None = None

    @staticmethod
    def render(layout: Layout, output: OwnOutput = RUN_OUTPUT) -> dict[str, str]:
        return {"compose.yaml": compose.dump(compose.render(layout, output=output))}

    def container(self, name: str):
        """The engine's container of node `name` (once started)."""
        return self.containers[name]

    def all_containers(self) -> list:
        return list(self.containers.values())

    def start(self) -> None:
        self.issued_at = time.time()  # the moment `compose up` is issued (bench: container start)
        engine.compose(
            self.file,
            "up",
            "--detach",
            "--no-build",
            "--pull",
            "never",
            "--quiet-pull",
            *self.services,
            capture=True,
        )
        self._find()

    def start_late(self, name: str) -> None:
        """Start a service `start` left out (fault late-master: rank 0's node, N s late)."""
        self.services.append(name)
        engine.compose(
            self.file,
            "up",
            "--detach",
            "--no-build",
            "--pull",
            "never",
            "--quiet-pull",
            name,
            capture=True,
        )
        self._find()

    def _find(self) -> None:
        for ctr in engine.labelled(self.client, self.layout.run_id, runs=self.runs)["containers"]:
            self.containers[ctr.labels["harness.node"]] = ctr

    @property
    def runs(self) -> str:  # this run's RUNS folder, as its labels say it
        return self.layout.labels[RUNS_LABEL]

    def poll(self) -> dict[str, int | None]:
        state = {}
        for name, ctr in self.containers.items():
            try:
                ctr.reload()
            except docker.errors.NotFound:
                raise NodeLost(
                    f"{name}'s container {ctr.name} was removed from outside the "
                    "harness (docker rm, or `make down`)"
                ) from None
            except (docker.errors.APIError, requests.exceptions.ConnectionError) as e:
                raise NodeLost(f"the engine did not answer about {name} ({e})") from None
            s = ctr.attrs["State"]
            ended = s["Status"] in ("exited", "dead") or (s["Status"] == "created" and s["Error"])
            state[name] = (
                (s["ExitCode"] or 128)
                if ended and s["Error"]
                else (s["ExitCode"] if ended else None)
            )
        return state

    def restart(self, state: dict[str, int | None], why: str = "", left: bool = True) -> None:
        """A node failed: stop every rank container, start them all again (as a JobSet
        recreates every pod); the trainers resume from the newest checkpoint in /output.
        A soak restarts the group whenever it stops (`why`; `left`: no count to say)."""
        self.restarts_left -= 1
        failed = {name: code for name, code in state.items() if code not in (None, 0)}
        t = time.time()
        why = why or ", ".join(f"{n} exited {c}" for n, c in failed.items())
        count = f" ({self.restarts_left} restart(s) left)" if left else ""
        print(f"harness: {why}; restarting every rank{count}", file=sys.stderr)
        engine.compose(self.file, "stop", "--timeout", "5", capture=True)
        stopped = time.time()
        engine.compose(self.file, "start", *self.services, capture=True)
        self.restarts.append(
            {
                "time": round(t, 3),
                "by": "harness",
                "failed": failed,
                "stopped_s": round(stopped - t, 2),
                "restarted_s": round(time.time() - t, 2),
            }
        )

    def details(self) -> dict[str, dict]:
        out = {}
        for name, ctr in self.containers.items():
            ctr.reload()
            s = ctr.attrs["State"]
            out[name] = {
                "container": ctr.name,
                "exit_code": s["ExitCode"],
                "oom_killed": s["OOMKilled"],
                "started_at": s["StartedAt"],
                "finished_at": s["FinishedAt"],
                "issued_at": self.issued_at,
                "error": s["Error"] or None,
            }
        return out

    def save_logs(self) -> None:
        for name, ctr in self.containers.items():
            try:
                (self.run_dir / f"logs/{name}.log").write_bytes(ctr.logs())
            except Exception as e:  # the engine may be gone; keep what we have
                print(f"harness: could not read {name}'s log: {e}", file=sys.stderr)

    def stop(self) -> None:
        engine.compose(
            self.file,
            "down",
            "--volumes",
            "--remove-orphans",
            "--timeout",
            "10",
            check=False,
            capture=True,
        )
        engine.remove_labelled(self.client, self.layout.run_id, runs=self.runs)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with(parent: int, cpus: str | None = None):
    """The launcher gets SIGTERM when the harness dies, even by SIGKILL (Linux's parent-death
    signal): torchrun passes it to the ranks, which checkpoint and stop, so host ranks never
    outlive their harness. Its own session keeps Ctrl-C ours alone."""

    def arm() -> None:
        if sys.platform != "linux":
            return  # no such signal elsewhere: Ctrl-C and the harness's stop() still apply
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the harness died before the signal was armed
            os._exit(1)
        # bench: every rank's cores, as a container's cpuset (tuning/container/shared/affinity.py)
        if cpus:
            os.sched_setaffinity(0, affinity.parse_list(cpus))

    return arm


class HostNodes:
    """LAYOUT=host: the launcher straight on the host, from this environment's Python."""

    restarts_left = 0  # torchrun restarts the group itself (HARNESS_MAX_RESTARTS)

    def __init__(
        self,
        layout: Layout,
        run_dir: Path,
        commands: dict,
        client=None,
        services: list[str] | None = None,
    ):
        self.layout, self.run_dir = layout, run_dir
        self.argv, self.env = commands["host"]["argv"], commands["host"]["env"]
        self.proc: subprocess.Popen | None = None
        self.issued_at: float | None = None
        self.restarts: list[dict] = []
        self.stopping_at: float | None = None

    @staticmethod
    def render(layout: Layout, output: OwnOutput = RUN_OUTPUT) -> dict[str, str]:
        return {}  # no file of its own: the launch command is the whole of it

    def start(self) -> None:
        log = open(self.run_dir / "logs/host.log", "wb")
        bindir = str(Path(sys.executable).parent)
        env = {**os.environ, **{k: v for k, v in self.env.items() if v is not None}}
        env["PATH"] = bindir + os.pathsep + os.environ["PATH"]
        cpus = affinity.union(env.get(affinity.VAR, ""), range(self.layout.topology.world_size))
        self.issued_at = time.time()
        self.proc = subprocess.Popen(
            self.argv,
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with(os.getpid(), cpus),
        )

    def poll(self) -> dict[str, int | None]:
        return {"host": self.proc.poll()}

    def restart(self, state: dict[str, int | None], why: str = "", left: bool = True) -> None:
        raise NotImplementedError("host ranks are restarted by torchrun, never by the harness")

    def details(self) -> dict[str, dict]:
        return {
            "host": {
                "container": None,
                "exit_code": self.proc.returncode,
                "oom_killed": False,
                "pid": self.proc.pid,
                "issued_at": self.issued_at,
            }
        }

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
