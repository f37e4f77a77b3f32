"""One run of a layout, start to end: prepare, render, start, follow, tear down, record.

`start(spec)` is the whole of it, for up, bench, fault and kube's rehearsal alike; the
backends (nodes.py) differ only in how nodes start, report their exit and stop. `render`
is every file a run writes before its nodes start, which is also what a dry run prints.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tuning import launch

from . import engine, images, preflight, runs, workload
from .engine import ROOT, HarnessError
from .layout import Layout
from .nodes import Nodes, backend
from .options import HOST_ASSETS, Spec
from .progress import Progress

EXIT_CODES = {"succeeded": 0, "interrupted": 130}  # a command's exit status; else 1


class Interrupted(Exception):
    pass


def _raise_interrupted(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def prepare(layout: Layout):
    """The engine client with the image ready (None for LAYOUT=host, whose assets it makes)."""
    if layout.kind == "host":
        _host_assets()
        return None
    client = engine.client()
    engine.compose_cmd()
    if layout.gpus and not engine.has_nvidia_runtime(client):
        raise HarnessError(
            f"GPUS={layout.gpus} but the engine has no NVIDIA runtime; install the NVIDIA "
            "Container Toolkit, or use GPUS=0 for CPU ranks"
        )
    if layout.entry:
        workload.check_image(client, layout)
    else:
        images.ensure(client, layout.image, layout.device)
    return client


def node_commands(layout: Layout, accelerate_config: Path) -> dict[str, dict]:
    """Each node's launch command and environment, from the image's own launcher; the host
    reads `accelerate_config`, the file each node will find at ACCELERATE_CONFIG."""
    out = {}
    for node in layout.nodes():
        job = layout.trainer_args
        argv, extra = launch.command(node.env, job, str(accelerate_config))
        out[node.name] = {"argv": argv, "env": {**node.env, **extra}}
    return out


def render(layout: Layout, commands: dict[str, dict]) -> dict[str, str]:
    """The files a run writes before its nodes start, besides /job (path in the run
    directory -> text): each node's launch command, and the backend's own (compose.yaml)."""
    files = {f"ranks/{name}.launch.json": json.dumps(cmd, indent=2) + "\n"
             for name, cmd in commands.items()}  # fmt: skip
    return {**files, **backend(layout).render(layout)}


def dry_run(layout: Layout, accelerate_config: Path, prefix: str = "# ", files=True) -> None:
    """What would run, printed: the backend's files (up: the Compose file), then each
    node's command. Nothing starts and nothing is written."""
    commands = node_commands(layout, accelerate_config)
    for path, text in render(layout, commands).items() if files else ():
        if not path.startswith("ranks/"):
            print(text)
    for name, cmd in commands.items():
        print(f"{prefix}{name}: {shlex.join(cmd['argv'])}")


def start(spec: Spec, on_tick=None) -> dict:
    """Run one spec to its end and record it; returns the summary (also in summary.json)."""
    t0 = time.time()
    layout = spec.layout
    client = prepare(layout)
    if spec.user_config:
        preflight.check_accelerate_config(spec.accelerate_config, client and layout.image)
    commands = node_commands(layout, spec.accelerate_config)
    run_dir = spec.runs_root / layout.run_id if spec.run_dir_made else _create(spec)
    if spec.job_files is None:
        runs.write_job(run_dir, spec.job, spec.accelerate_config, layout.job_file)
    for key, text in (spec.job_files or {}).items():
        (run_dir / "job" / key).write_text(text)  # a ConfigMap volume, as kubelet would
    if spec.resume_from:
        _take_checkpoints(spec.resume_from, run_dir / "output", layout)
    for path, text in render(layout, commands).items():
        (run_dir / path).write_text(text)
    if layout.kind != "host":
        _give_to_container_user(run_dir / "output", layout.user)
    nodes = backend(layout)(layout, run_dir, commands, client, spec.services)
    kind = "GPU" if layout.gpus else "CPU"
    print(spec.banner or f"harness: run {layout.run_id}: layout {layout.kind}, "
          f"{layout.world_size} {kind} rank(s) in {len(commands)} node(s); {run_dir}")  # fmt: skip
    status, details = execute(
        layout, run_dir, nodes, spec.job.get("max_steps"), spec.grace, t0, on_tick
    )
    # Restarts the harness made (per-rank), else the ones the metrics show (torchrun's).
    restarts = nodes.restarts or runs.restarts_seen(runs.read_metrics(run_dir / "output"))
    summary = write_summary(layout, run_dir, status, details, t0, restarts, spec.summary_extra)
    if status == "failed" and spec.explain:
        explain_failure(run_dir, summary)
    print(f"harness: {spec.title}{status}; first loss {summary['first_loss']}, final loss "
          f"{summary['final_loss']}; {run_dir / 'summary.json'}")  # fmt: skip
    return summary


def _create(spec: Spec) -> Path:
    try:
        return runs.create(spec.runs_root, spec.layout.run_id)
    except FileExistsError:
        raise HarnessError(f"{spec.runs_root / spec.layout.run_id} exists; a run never writes "
                           "over another") from None  # fmt: skip
    except PermissionError as e:
        raise HarnessError(str(e)) from None


def execute(layout: Layout, run_dir: Path, nodes: Nodes, total_steps: int | None, grace: float,
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
            if failed and nodes.restarts_left > 0:
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


def write_summary(layout: Layout, run_dir: Path, status: str, details: dict, t0: float,
                  restarts: list[dict] = (), extra: dict | None = None) -> dict:  # fmt: skip
    metrics = runs.read_metrics(run_dir / "output")
    seen, shards = runs.world_sizes_seen(metrics), runs.sharding_seen(metrics)
    ranks = []
    for node in layout.nodes():
        d = details.get(node.name, {})
        for r in node.ranks:
            ranks.append({"rank": r, "node": node.name, **d, "world_size_seen": seen.get(r),
                          **shards.get(r, {})})  # fmt: skip
    summary = {"run_id": layout.run_id, "layout": layout.kind, "network": layout.network,
               "device": layout.device, "world_size": layout.world_size, "status": status,
               **runs.summarize(metrics, t0), "ranks": ranks,
               "restarts": [{**x, "t": round(x["time"] - t0, 2)} for x in restarts]}  # fmt: skip
    if layout.entry:
        summary.update(workload.summary_fields(layout, run_dir, metrics))
    summary.update(extra or {})
    runs.write_json(run_dir / "summary.json", summary)
    return summary


def _take_checkpoints(previous: Path, output: Path, layout: Layout) -> None:
    """RESUME=1: hard-link the previous run's checkpoints into this run's output (copies if
    links cannot be made), so the trainer's resume_from_checkpoint=true finds the last one."""
    found = sorted((previous / "output").glob("checkpoint-*"))
    if not found:
        print(f"harness: RESUME=1 but {previous.name} has no checkpoint; starting afresh")
        return
    for ckpt in found:
        try:
            shutil.copytree(ckpt, output / ckpt.name, copy_function=os.link)
        except OSError:
            shutil.rmtree(output / ckpt.name, ignore_errors=True)
            shutil.copytree(ckpt, output / ckpt.name)
        if layout.kind != "host":
            for path in [output / ckpt.name, *(output / ckpt.name).rglob("*")]:
                _give_to_container_user(path, layout.user)
    print(f"harness: resuming from {previous.name}: {', '.join(c.name for c in found)}")


def explain_failure(run_dir: Path, summary: dict) -> None:
    """Say why ranks failed: their own error lines, else the end of their logs."""
    for node in dict.fromkeys(r["node"] for r in summary["ranks"] if r.get("exit_code")):
        log = run_dir / f"logs/{node}.log"
        lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
        errors = [x for x in lines if "error:" in x.lower() or x.startswith(("Error", "OSError"))]
        shown = list(dict.fromkeys(errors))[-5:] or lines[-10:]
        print(f"harness: {node} failed; from {log}:", file=sys.stderr)
        for line in shown:
            print(f"  {line}", file=sys.stderr)


def _give_to_container_user(path: Path, user: str) -> None:
    # The ranks run as the image's non-root user and must write their output here.
    if os.geteuid() == 0:
        uid, gid = (int(x) for x in user.split(":"))
        os.chown(path, uid, gid)


def _host_assets() -> None:
    model, data = HOST_ASSETS / "tiny-model", HOST_ASSETS / "demo.jsonl"
    py = sys.executable
    if not (model / "config.json").is_file():
        subprocess.run([py, "-m", "tuning.tiny_model", "--out", str(model)], check=True, cwd=ROOT)
    if not data.is_file():
        subprocess.run([py, "-m", "tuning.demo_data", "--out", str(data)], check=True, cwd=ROOT)
