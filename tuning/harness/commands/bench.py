"""`make bench`: the same job in every layout, side by side.

    python -m tuning.harness bench [run flags] [--repeat r] [--layouts a,b,..] [--runs DIR]

Layouts: ``host`` (accelerate launch on the host, no container), ``single`` (one container),
``per-rank-isolated`` (a container per rank, each in its own network and IPC namespace) and
``per-rank-shared`` (ranks join rank 0's network and IPC namespaces). Every layout runs the same
job (model, data, batch, steps, seed) and the same OMP_NUM_THREADS: the user's JOB, or without
one the bench's own (configs/jobs/bench.yaml, on long records made here: `plan.workload`). A round
runs each layout's training, then each layout's all-reduce probe (``tuning.container.probe`` under
the same launcher, in the same layout); rounds repeat (A B C D A' B' C' D', A B C D ...), so
drift on this machine falls on every layout, and `report.py` pairs repeat i of a layout with
repeat i of the reference. REPEAT=auto's later rounds run only the layouts an open goal reads
(`rounds.py`).

Everything lands in ``<runs>/<bench-id>/``: each layout run as its own run directory
(``<bench-id>-r<round>-<layout>[-probe]``, with summary.json, logs and metrics as for
``make up``), and ``report.json`` / ``report.md`` / ``report.png`` (`report.write`).

What a finished layout run gives the report (phases, steady steps, memory, transport):
`bench/samples.py`.

A SIGINT (or SIGTERM) stops the run in flight (`lifecycle.start` tears it down), ends the bench and
writes the report from the runs that finished.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from tuning.harness.backends import engine
from tuning.harness.bench import plan, report
from tuning.harness.bench.rounds import Rounds
from tuning.harness.bench.samples import boot_correction, probe_sample, train_sample
from tuning.harness.errors import HarnessError
from tuning.harness.flags import run_flags
from tuning.harness.flags.run_flags import RunFlags
from tuning.harness.layout import options
from tuning.harness.run import lifecycle, render
from tuning.harness.run_files import folders
from tuning.harness.run_files.status import EXIT_CODES, Status


def register(sub) -> None:
    p = sub.add_parser(
        "bench", help="the layouts side by side: host, single, per-rank isolated and shared"
    )
    # The run flags are flag_table's; the probe's sizes are the bench's alone.
    p.add_argument("--probe-min-bytes", type=int, default=plan.PROBE_MIN_BYTES)
    p.add_argument(
        "--probe-max-bytes",
        type=int,
        default=None,
        help="largest all_reduce of the probe (default 256 MiB on GPUs, 16 MiB on CPU ranks)",
    )
    p.add_argument(
        "--probe-seconds",
        type=float,
        default=plan.PROBE_SECONDS,
        help="the probe's time budget per size (--max-seconds-per-size)",
    )
    p.set_defaults(fn=main)


def _sigterm(signum, _frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(a: argparse.Namespace) -> int:
    names = plan.layout_names(a.layouts or ",".join(plan.LAYOUTS))
    f = RunFlags.of(a)
    if f.entry and "host" in names:
        print(f"bench: {plan.FOREIGN_NO_HOST}")
        names.remove("host")
        if not names:
            raise HarnessError("a foreign trainer runs in containers: use --layouts single,...")
    if f.entry:
        print(f"bench: probe {plan.FOREIGN_NO_PROBE}")
    rounds = Rounds(a.repeat, a.budget)
    bench_id = options.checked_run_id(f.run_id)
    bench_dir = Path(f.runs).resolve() / bench_id
    existed = bench_dir.exists()
    if existed and any(bench_dir.iterdir()):
        raise HarnessError(f"{bench_dir} exists; a bench never writes over another run")
    f = plan.workload(a, f)  # its data written only once the flags above are good
    world = options.plan_from(f).count or f.nproc
    threads = run_flags.int_arg("THREADS", a.threads, 1) or options.threads_per_rank(world)
    whats = ("train",) if f.entry else ("train", "probe")
    runs = plan.runs_of(bench_id, names, 0, whats)

    def spec(rnd_name_what_id) -> options.Spec:
        _, name, what, run_id = rnd_name_what_id
        return plan.spec(a, f, bench_dir, run_id, name, what == "probe", threads)

    # Every distinct run checked now (flags, files, probe sizes); specs are made again just
    # before each run (LAYOUT=host takes a free port then).
    checked = {(item[1], item[2]): spec(item) for item in runs}
    first = checked[(names[0], "train")]
    meta = plan.meta(a, f, bench_id, names, rounds, first, threads)
    if a.dry_run:
        if not existed and bench_dir.exists():
            bench_dir.rmdir()  # a dry run's specs make nothing; this is a guard
        first = [
            it for rnd in range(rounds.planned) for it in plan.runs_of(bench_id, names, rnd, whats)
        ]
        return _dry_run(first, checked, meta)
    if any(plan.LAYOUTS[n].in_containers for n in names):
        engine.client()  # fail now, not after the host layout ran (the message names LAYOUT=host)
    bench_dir.mkdir(parents=True, exist_ok=True)
    folders.point_latest(
        bench_dir.parent, bench_id
    )  # the bench is the newest run (its runs inside)
    print(f"bench: {rounds.describe()}", flush=True)  # the stopping rule and its error rate
    fix = boot_correction()
    repeats: dict[str, list[dict]] = {n: [] for n in names}  # repeat i = round i
    status = 0
    old_term = signal.signal(signal.SIGTERM, _sigterm)
    raw = {
        "schema_version": 1,
        "meta": meta,
        "layouts": [{"name": n, "repeats": repeats[n]} for n in names],
    }
    try:
        while rounds.next_round(raw):
            rnd = rounds.done - 1
            for item in plan.runs_of(bench_id, rounds.layouts(names), rnd, whats):
                _, name, what, run_id = item
                where = (
                    f"round {rnd + 1}/{rounds.planned}{'+' if rounds.auto else ''}, {name} {what}"
                )
                if sys.stdout.isatty():
                    print(f"\nbench: {where}", flush=True)
                t_run = time.monotonic()
                summary = lifecycle.start(spec(item))
                if not sys.stdout.isatty():
                    print(
                        f"bench: {where}: {summary['status']} in "
                        f"{time.monotonic() - t_run:.1f} s ({run_id})",
                        flush=True,
                    )
                meta["runs"].append(
                    {
                        "run_id": run_id,
                        "round": rnd + 1,
                        "layout": name,
                        "what": what,
                        "status": summary["status"],
                    }
                )
                if summary["status"] == Status.INTERRUPTED:
                    meta["interrupted"] = True
                    raise KeyboardInterrupt  # its partial figures would bias the report
                if summary["status"] != Status.SUCCEEDED:
                    status = 1
                if what == "train":
                    repeats[name].append(train_sample(bench_dir / run_id, summary, fix))
                elif rnd < len(repeats[name]):
                    repeats[name][rnd].update(probe_sample(bench_dir / run_id, summary))
        meta["stopped"] = rounds.stopped
    except KeyboardInterrupt:
        if not meta["interrupted"]:
            print("\nbench: interrupted between runs", file=sys.stderr)
        meta["interrupted"] = True
        meta["stopped"] = f"interrupted in round {rounds.done}; the report holds finished runs."
    finally:
        signal.signal(signal.SIGTERM, old_term)
        report.show(raw, report.write(raw, bench_dir))
    return EXIT_CODES[Status.INTERRUPTED] if meta["interrupted"] else status


def _dry_run(plan, checked, meta) -> int:
    print(
        f"bench {meta['bench_id']}: {meta['rounds']} over {', '.join(meta['layouts'])}; "
        f"OMP_NUM_THREADS={meta['omp_num_threads']}"
    )
    for rnd, name, what, run_id in plan:
        print(f"  round {rnd + 1}: {name} {what} -> {run_id}")
    for (name, what), spec in checked.items():
        print(f"# {name} {what}:")
        render.dry_run(spec.layout, spec.accelerate_config, prefix="#   ", files=False)
    return 0
