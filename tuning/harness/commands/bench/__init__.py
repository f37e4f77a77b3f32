"""`make bench`: the same job in every layout, side by side.

    python -m tuning.harness bench [run flags] [--repeat r] [--layouts a,b,..] [--runs DIR]

Layouts: ``host`` (accelerate launch on the host, no container), ``single`` (one container),
``per-rank-isolated`` (a container per rank, each in its own network and IPC namespace) and
``per-rank-shared`` (ranks join rank 0's network and IPC namespaces). Every layout runs the same
job (model, data, batch, steps, seed) and the same OMP_NUM_THREADS: the user's JOB, or without
one the bench's own (configs/jobs/bench.yaml, on long records made here: `_workload`). A round
runs each layout's training, then each layout's all-reduce probe (``tuning.probe`` under the
same launcher, in the same layout); rounds repeat (A B C D A' B' C' D', A B C D ...), so
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
import os
import shlex
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

from tuning.harness.backends import engine
from tuning.harness.commands.bench import report
from tuning.harness.commands.bench.rounds import DEFAULT_REPEAT, Rounds
from tuning.harness.commands.bench.samples import boot_correction, probe_sample, train_sample
from tuning.harness.errors import HarnessError
from tuning.harness.run import foreign, host_assets, lifecycle, render
from tuning.harness.run_files import folders, metric_lines
from tuning.harness.run_files.status import EXIT_CODES, Status
from tuning.harness.spec import flags, options, trainers
from tuning.harness.spec.flags import RunFlags
from tuning.harness.spec.job_paths import HOST_ASSETS
from tuning.harness.spec.layout import SHAPES
from tuning.shared import affinity

# layout.SHAPES, the host first (no container: the run order of the report's columns)
LAYOUTS = {s.name: s for s in sorted(SHAPES.values(), key=lambda s: s.in_containers)}
MIB = 1024 * 1024
PROBE_MIN_BYTES = 1024
PROBE_MAX_BYTES = 256 * MIB  # GPUs: NCCL's busbw is still climbing below it
# gloo on 2 cores (docs/benchmarks.md, "Goals that resolve"): over 23 rounds at 16 MiB the
# busbw of two probes run one after the other moved together (correlation 0.69), at 64 MiB
# hardly (0.36), so the paired ratio spread half as much at 16 MiB.
PROBE_MAX_BYTES_CPU = 16 * MIB
PROBE_ITERS = 100  # timed all-reduces a size, as the per-size budget allows (at least 20)
PROBE_SECONDS = 2.0
# Without JOB, the bench's own workload (configs/jobs/bench.yaml); without DATA, its long
# records: every one fills max_seq_length 128 (tuning.demo_data: 2 W + 9 tokens a record).
BENCH_JOB = trainers.CONFIGS / "jobs/bench.yaml"
BENCH_WORDS, BENCH_RECORDS = 64, 2048
BENCH_DATA = HOST_ASSETS / f"bench-w{BENCH_WORDS}.jsonl"
FOREIGN_NO_PROBE = (
    "skipped: the all-reduce probe (tuning.probe) is this repo's code and not in "
    "a foreign trainer's image (TRAINER=fms, ENTRY=...)"
)
FOREIGN_NO_HOST = (
    "host skipped: LAYOUT=host runs this repo's trainer from .venv; a foreign "
    "trainer runs only in its own image"
)


def register(sub) -> None:
    p = sub.add_parser(
        "bench", help="the layouts side by side: host, single, per-rank isolated and shared"
    )
    # The run flags are flag_table's; the probe's sizes are the bench's alone.
    p.add_argument("--probe-min-bytes", type=int, default=PROBE_MIN_BYTES)
    p.add_argument(
        "--probe-max-bytes",
        type=int,
        default=None,
        help="largest all_reduce of the probe (default 256 MiB on GPUs, 16 MiB on CPU ranks)",
    )
    p.add_argument(
        "--probe-seconds",
        type=float,
        default=PROBE_SECONDS,
        help="the probe's time budget per size (--max-seconds-per-size)",
    )
    p.set_defaults(fn=main)


# ---------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------


def _layout_names(raw: str) -> list[str]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in LAYOUTS]
    if unknown or not names or len(set(names)) != len(names):
        raise HarnessError(
            f"--layouts {raw!r}: use distinct names from {', '.join(LAYOUTS)} "
            f"(unknown: {', '.join(unknown) or 'none'})"
        )
    return names


def _probe_max(a: argparse.Namespace, f: RunFlags) -> int:
    if a.probe_max_bytes is not None:
        return a.probe_max_bytes
    return PROBE_MAX_BYTES if options.plan_from(f).count else PROBE_MAX_BYTES_CPU


def _probe_args(a: argparse.Namespace, f: RunFlags, out_dir: str) -> str:
    top = _probe_max(a, f)
    if a.probe_min_bytes < 4 or a.probe_min_bytes % 4 or top < a.probe_min_bytes:
        raise HarnessError(
            "--probe-min-bytes must be a positive multiple of 4, at most --probe-max-bytes"
        )
    if a.probe_seconds <= 0:
        raise HarnessError("--probe-seconds must be positive")
    return shlex.join(
        [
            "--out",
            out_dir,
            "--min-bytes",
            str(a.probe_min_bytes),
            "--max-bytes",
            str(top),
            "--iters",
            str(PROBE_ITERS),
            "--max-seconds-per-size",
            str(a.probe_seconds),
        ]
    )


def _workload(a: argparse.Namespace, f: RunFlags) -> RunFlags:
    """The user's job as given; with no JOB (this repo's trainer) the bench's own, and with no
    DATA too, its long records, made once here like the host's demo assets."""
    if f.entry or a.job:
        return f
    if f.data:
        return replace(f, job=str(BENCH_JOB))
    host_assets.host_asset(
        BENCH_DATA, "tuning.demo_data", "--n", str(BENCH_RECORDS), "--words", str(BENCH_WORDS)
    )
    return replace(f, job=str(BENCH_JOB), data=str(BENCH_DATA))


def _spec(
    a, f: RunFlags, bench_dir: Path, run_id: str, name: str, probe: bool, threads: int
) -> options.Spec:
    """The spec of one layout run: the user's job in layout `name`, or the probe under it;
    layout runs live inside the bench's directory."""
    shape = LAYOUTS[name]
    f = replace(f, runs=str(bench_dir), layout=shape.kind, network=shape.network)

    def env(world: int, output_dir: str) -> dict[str, str]:
        # rank i on the same cores in every layout (tuning/shared/affinity.py)
        shares = affinity.split(os.sched_getaffinity(0), world)
        out = {"OMP_NUM_THREADS": str(threads), affinity.VAR: affinity.encode(shares)}
        if probe:
            args = _probe_args(a, f, output_dir)
            out.update(HARNESS_ENTRY="tuning.probe", HARNESS_ENTRY_ARGS=args)
        return out

    # Off a terminal (CI), a run is one line, its outcome (`main`), not every step of every rank.
    return replace(options.spec_from(f, run_id, env), quiet=not sys.stdout.isatty())


def _plan(
    bench_id: str, names: list[str], rnd: int, whats=("train", "probe")
) -> list[tuple[int, str, str, str]]:
    """Round `rnd`'s runs [(round, layout name, "train"|"probe", run id)]: every train, then
    every probe."""
    return [
        (rnd, name, what, f"{bench_id}-r{rnd + 1}-{name}" + ("-probe" if what == "probe" else ""))
        for what in whats
        for name in names
    ]


# ---------------------------------------------------------------------------------------
# The bench
# ---------------------------------------------------------------------------------------


def _sigterm(signum, _frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(a: argparse.Namespace) -> int:
    names = _layout_names(a.layouts or ",".join(LAYOUTS))
    f = RunFlags.of(a)
    if f.entry and "host" in names:
        print(f"bench: {FOREIGN_NO_HOST}")
        names.remove("host")
        if not names:
            raise HarnessError("a foreign trainer runs in containers: use --layouts single,...")
    if f.entry:
        print(f"bench: probe {FOREIGN_NO_PROBE}")
    rounds = Rounds(a.repeat, a.budget)
    bench_id = options.checked_run_id(f.run_id)
    bench_dir = Path(f.runs).resolve() / bench_id
    existed = bench_dir.exists()
    if existed and any(bench_dir.iterdir()):
        raise HarnessError(f"{bench_dir} exists; a bench never writes over another run")
    f = _workload(a, f)  # its data written only once the flags above are good
    world = options.plan_from(f).count or f.nproc
    threads = flags.int_arg("THREADS", a.threads, 1) or options.threads_per_rank(world)
    whats = ("train",) if f.entry else ("train", "probe")
    plan = _plan(bench_id, names, 0, whats)

    def spec(rnd_name_what_id) -> options.Spec:
        _, name, what, run_id = rnd_name_what_id
        return _spec(a, f, bench_dir, run_id, name, what == "probe", threads)

    # Every distinct run checked now (flags, files, probe sizes); specs are made again just
    # before each run (LAYOUT=host takes a free port then).
    checked = {(item[1], item[2]): spec(item) for item in plan}
    first = checked[(names[0], "train")]
    meta = {
        "bench_id": bench_id,
        "command": shlex.join(["python", "-m", "tuning.harness", *sys.argv[1:]]),
        "layouts": names,
        "repeat": a.repeat or DEFAULT_REPEAT,
        "rounds": rounds.describe(),
        "design": rounds.design_meta(),  # the report decides its goals by the rounds' rule
        "order": "per round: every layout's training run, then every layout's probe run",
        "device": first.layout.device,
        "world_size": first.layout.world_size,
        "gpus": first.layout.gpus,
        "nproc": first.layout.nproc,
        "omp_num_threads": threads,
        "model": f.model or "the tiny model (built in)",
        "data": f.data or "the demo data (built in)",
        **report.job_meta(first.job, f.job, own=f.job == str(BENCH_JOB)),
        "warmup_steps": metric_lines.WARMUP_STEPS,
        "probe": {
            "min_bytes": a.probe_min_bytes,
            "max_bytes": _probe_max(a, f),
            "max_seconds_per_size": a.probe_seconds,
        },
        "peak_memory": "per rank: the largest peak_rss_bytes (CUDA: max_memory_allocated) "
        "of its step lines",
        "host_cpus": os.cpu_count(),
        **(
            {
                "trainer": {"image": f.image, "entry": f.entry},
                "skipped": [FOREIGN_NO_HOST],
                "metrics_source": (
                    foreign.METRICS_NOTE
                    if trainers.logs_own_steps(f.trainer)
                    else foreign.RECORDER_NOTE
                )
                + " tokens: trl's num_tokens per step (every rank's), counted on rank 0. "
                "first step: includes model load (no model_loaded phase).",
            }
            if f.entry
            else {}
        ),
        "image": f.image,
        "runs": [],
        "interrupted": False,
    }
    if f.entry:
        meta["probe"] = {"skipped": FOREIGN_NO_PROBE}
    if a.dry_run:
        if not existed:
            bench_dir.rmdir()  # made by spec_from's check that the runs directory is writable
        first = [it for rnd in range(rounds.planned) for it in _plan(bench_id, names, rnd, whats)]
        return _dry_run(first, checked, meta)
    if any(LAYOUTS[n].in_containers for n in names):
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
            for item in _plan(bench_id, rounds.layouts(names), rnd, whats):
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
