"""One run of a layout, start to end: prepare, render, start, follow, tear down, record.

`start(spec)` is the whole of it, for up, bench, fault and kube's rehearsal alike; the
backends (nodes.py) differ only in how nodes start, report their exit and stop. What it writes
before nodes start is render.py's (also what a dry run prints); its summary, summary.py's.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from tuning.container.rank import torn
from tuning.harness.backends import engine, images
from tuning.harness.backends.nodes import Nodes, backend
from tuning.harness.checks import preflight
from tuning.harness.contract.container import RUNS_LABEL
from tuning.harness.errors import NodeLost
from tuning.harness.layout.layout import Layout
from tuning.harness.layout.options import Spec
from tuning.harness.machine import gpu_locks
from tuning.harness.run import foreign, host_assets, leftovers, output_dir, render
from tuning.harness.run import summary as run_summary
from tuning.harness.run.progress import Progress
from tuning.harness.run_files import folders, metric_lines
from tuning.harness.run_files.status import Status, status_of
from tuning.harness.watch import TICK_S, Restarted, Stop, Watcher


class Interrupted(Exception):
    pass


def _raise_interrupted(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def prepare(layout: Layout):
    """The engine client with the image ready (None for LAYOUT=host, whose assets it makes)."""
    if layout.topology.kind == "host":
        host_assets.demo()
        return None
    client = engine.client()
    engine.compose_cmd()
    engine.check_gpu_runtime(client, layout.topology)
    images.ready(client, layout)
    return client


def start(spec: Spec, on_tick: Watcher | None = None) -> dict:
    """Run one spec to its end and record it; returns the summary (also in summary.json)."""
    t0 = time.time()
    layout = spec.layout
    client = prepare(layout)
    leftovers.reap(client, spec.runs_root)  # runs whose harness died: their GPUs, ports back
    if client:  # a run id going in another RUNS folder: refused before anything is written
        engine.refuse_shared_project(client, layout.project, layout.labels[RUNS_LABEL])
    if spec.user_config:
        preflight.check_accelerate_config(
            spec.accelerate_config, client and layout.topology.plan.image
        )
    held = gpu_locks.take(layout.device_ids(), layout.run_id)
    try:
        return _run(spec, client, t0, on_tick)
    finally:
        held.release()


def _run(spec: Spec, client, t0: float, on_tick) -> dict:
    layout = spec.layout
    commands = render.node_commands(layout, spec.accelerate_config)
    run_dir = (
        spec.runs_root / layout.run_id
        if spec.run_dir_made
        else folders.create(spec.runs_root, layout.run_id)
    )
    leftovers.claim(run_dir)
    if spec.job_files is None:
        folders.write_job(run_dir, spec.job, spec.accelerate_config, layout.trainer.job_file)
    for key, text in (spec.job_files or {}).items():
        (run_dir / "job" / key).write_text(text)  # a ConfigMap volume, as kubelet would
    if spec.resume_from:
        output_dir.take_checkpoints(spec.resume_from, run_dir / "output", layout)
        torn.move_aside(run_dir / "output")  # a torn newest one: named, renamed, not loaded
    for path, text in render.render(layout, commands, spec.own_output).items():
        (run_dir / path).write_text(text)
    output_dir.prepare(run_dir / "output", layout, spec.own_output)
    nodes = backend(layout)(layout, run_dir, commands, client, spec.services)
    kind = layout.topology.device.upper()  # GPU or CPU ranks
    if not spec.quiet:
        print(
            spec.banner
            or f"harness: run {layout.run_id}: layout {layout.topology.kind}, "
            f"{layout.topology.world_size} {kind} rank(s) in {len(commands)} node(s); "
            f"{run_dir}"
        )
        if spec.sources:  # what trains, said: never the demo's without a word
            print(f"harness: {spec.sources_said()}")
        if layout.trainer.entry and layout.trainer.recorder_steps:
            print(f"harness: {foreign.said(layout)}")
    status, details, reason = execute(
        layout, run_dir, nodes, spec.job.get("max_steps"), spec.grace, t0, on_tick, spec.quiet
    )
    # Restarts the harness made (per-rank), else the ones the metrics show (torchrun's).
    restarts = nodes.restarts or metric_lines.restarts_seen(
        metric_lines.read_metrics(run_dir / "output")
    )
    extra = {
        **({"reason": reason} if reason else {}),
        "image": engine.image_record(client, layout.topology.plan.image),
        "teardown_at": nodes.stopping_at,
        **spec.summary_extra,
    }
    summary = run_summary.write(layout, run_dir, status, details, t0, restarts, extra)
    if status == Status.FAILED and spec.explain:
        run_summary.explain_failure(run_dir, summary)
    why = f" ({reason})" if reason else ""
    if not spec.quiet:
        print(
            f"harness: {spec.title}{status}{why}; first loss {summary['first_loss']}, final "
            f"loss {summary['final_loss']}; {run_dir / 'summary.json'}"
        )
    return summary


def execute(
    layout: Layout,
    run_dir: Path,
    nodes: Nodes,
    total_steps: int | None,
    grace: float,
    t0: float,
    on_tick: Watcher | None = None,
    quiet=False,
) -> tuple[Status, dict, str | None]:
    """Start, follow to the end, tear down. Returns (status, per-node details, why it is not
    `succeeded`); the status comes from what the ranks did (status_of), not only from
    their exit codes.

    `on_tick(metrics, state, nodes)` (watch.py's Watcher) is called on every poll while ranks
    run (fault injection waits for a step there); it may return a `Stop` to end the follow early,
    or `Restarted` when it restarted the group itself (a soak)."""
    old = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    status, reason = Status.FAILED, None
    progress = Progress(total_steps=total_steps, quiet=quiet)
    output = run_dir / "output"
    try:
        nodes.start()
        failed_at = ended_at = None
        read_metrics = metric_lines.MetricsReader(output)
        while True:
            metrics = read_metrics()
            progress.update(metrics)
            state = nodes.poll()
            told = on_tick(metrics, state, nodes) if on_tick else None
            if isinstance(told, Stop):
                # Every rank may have ended already (a launcher lingers in torchrun's exit
                # barrier): then they say how the run went; else the harness cut it short.
                if len(metric_lines.returned_now(metrics)) == layout.topology.world_size:
                    status, reason = status_of({n: c or 0 for n, c in state.items()}, metrics)
                else:
                    reason = told.why
                break
            if isinstance(told, Restarted):  # the watcher restarted the group itself (soak)
                failed_at = ended_at = None
                continue
            failed = any(code not in (None, 0) for code in state.values())
            if failed and nodes.restarts_left > 0:
                nodes.restart(state)
                failed_at = None
                continue
            if all(code is not None for code in state.values()):
                status, reason = status_of(state, read_metrics())
                break
            # Every trainer returned, a node runs on: torchrun's exit takes seconds (20-30 s
            # throttled); past GRACE a process hung on its way out (destroy_process_group, an
            # atexit handler) and would hold the run for ever.
            if len(metric_lines.returned_now(metrics)) == layout.topology.world_size:
                ended_at = ended_at or time.monotonic()
                if time.monotonic() - ended_at > grace:
                    reason = _hung_on_exit(nodes, state, metrics, grace)
                    break
            else:
                ended_at = None
            if failed_at is None and failed:
                failed_at = time.monotonic()  # peers should fail too; don't wait forever
            if failed_at and time.monotonic() - failed_at > grace:
                reason = (
                    f"a rank failed and the others were still running after {grace:.0f} s"
                    "; the harness stopped them"
                )
                print(f"harness: {reason}", file=sys.stderr)
                break
            time.sleep((on_tick and on_tick.tick_s) or TICK_S)
        progress.finish(read_metrics())
    except Interrupted as e:
        print(f"\nharness: {e} received; stopping the run", file=sys.stderr)
        status, reason = Status.INTERRUPTED, f"the harness received {e}"
    except NodeLost as e:  # removed from outside (docker rm, another `make down`), engine gone
        print(f"harness: {e}; ending the run as failed", file=sys.stderr)
        status, reason = Status.FAILED, str(e)
    finally:
        # Teardown must finish even if a second Ctrl-C comes.
        for s in old:
            signal.signal(s, signal.SIG_IGN)
        try:
            nodes.save_logs()
            details = nodes.details() if status != Status.INTERRUPTED or _safe(nodes) else {}
        except Exception:
            details = {}
        try:
            nodes.stopping_at = time.time()
            nodes.stop()
        except Exception as e:  # a Docker API error in teardown: recorded, never a traceback
            status, reason = Status.FAILED, f"{reason + '; ' if reason else ''}teardown failed: {e}"
            print(
                f"harness: teardown failed: {e}; `make down RUN_ID={layout.run_id}` "
                "removes what is left",
                file=sys.stderr,
            )
        for s, handler in old.items():
            signal.signal(s, handler)
    return status, details, reason


def _hung_on_exit(nodes, state: dict, metrics: dict, grace: float) -> str:
    """Every rank's trainer returned, a node did not exit: where it hangs, said and kept."""
    from tuning.harness.stacks import dumps

    running = sorted(n for n, code in state.items() if code is None)
    ends = sorted({e.get("status", "?") for e in metric_lines.ends_seen(metrics).values()})
    taken = dumps.take(nodes, "hung after every rank's trainer returned")
    where = "; ".join(taken["summaries"]) if taken else "its stacks could not be dumped"
    reason = (
        f"{', '.join(running)} still running {grace:.0f} s after every rank's "
        f"trainer returned (end lines: {', '.join(ends)}): a process hung on its way out "
        f"({where}); the harness stopped it"
    )
    print(f"harness: {reason}", file=sys.stderr)
    return reason


def _safe(nodes) -> bool:
    try:
        nodes.poll()
        return True
    except Exception:
        return False
