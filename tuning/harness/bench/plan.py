"""The bench's plan: its layouts in run order, the probe's sizes, the workload (the user's job, or
the bench's own on long records), each round's runs and the spec of each, and report.json's
meta. `__init__.py` runs it."""

from __future__ import annotations

import argparse
import atexit
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from tuning.container.shared import affinity
from tuning.harness.bench import report
from tuning.harness.bench.rounds import DEFAULT_REPEAT
from tuning.harness.errors import HarnessError
from tuning.harness.flags import trainers
from tuning.harness.flags.run_flags import RunFlags
from tuning.harness.layout import options
from tuning.harness.layout.job_paths import HOST_ASSETS
from tuning.harness.layout.layout import SHAPES
from tuning.harness.run import foreign, host_assets
from tuning.harness.run_files import folders, metric_lines

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
# records: every one fills max_seq_length 128 (tuning.container.demo_data: 2 W + 9 tokens a record).
BENCH_JOB = trainers.CONFIGS / "jobs/bench.yaml"
BENCH_WORDS, BENCH_RECORDS = 64, 2048
BENCH_DATA = HOST_ASSETS / f"bench-w{BENCH_WORDS}.jsonl"
FOREIGN_NO_PROBE = (
    "skipped: the all-reduce probe (tuning.container.probe) is this repo's code and not in "
    "a foreign trainer's image (TRAINER=fms, ENTRY=...)"
)
FOREIGN_NO_HOST = (
    "host skipped: LAYOUT=host runs this repo's trainer from .venv; a foreign "
    "trainer runs only in its own image"
)


def layout_names(raw: str) -> list[str]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in LAYOUTS]
    if unknown or not names or len(set(names)) != len(names):
        raise HarnessError(
            f"--layouts {raw!r}: use distinct names from {', '.join(LAYOUTS)} "
            f"(unknown: {', '.join(unknown) or 'none'})"
        )
    return names


def probe_max(a: argparse.Namespace, f: RunFlags) -> int:
    if a.probe_max_bytes is not None:
        return a.probe_max_bytes
    return PROBE_MAX_BYTES if options.plan_from(f).count else PROBE_MAX_BYTES_CPU


def probe_args(a: argparse.Namespace, f: RunFlags, out_dir: str) -> str:
    top = probe_max(a, f)
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


def workload(a: argparse.Namespace, f: RunFlags) -> RunFlags:
    """The user's job as given; with no JOB (this repo's trainer) the bench's own, and with no
    DATA too, its long records, made once here like the host's demo assets."""
    if f.entry or a.job:
        return f
    if f.data:
        return replace(f, job=str(BENCH_JOB))
    data = BENCH_DATA
    if a.dry_run and not data.exists():  # a dry run writes nothing in the checkout: the records
        scratch = Path(tempfile.mkdtemp(prefix="harness-bench-dry-"))  # it checks are made
        atexit.register(shutil.rmtree, scratch, True)  # aside, and gone when it ends
        data = scratch / BENCH_DATA.name
    host_assets.host_asset(
        data, "tuning.container.demo_data", "--n", str(BENCH_RECORDS), "--words", str(BENCH_WORDS)
    )
    return replace(f, job=str(BENCH_JOB), data=str(data))


def spec(
    a, f: RunFlags, bench_dir: Path, run_id: str, name: str, probe: bool, threads: int
) -> options.Spec:
    """The spec of one layout run: the user's job in layout `name`, or the probe under it;
    layout runs live inside the bench's directory."""
    shape = LAYOUTS[name]
    f = replace(f, runs=str(bench_dir), layout=shape.kind, network=shape.network)

    def env(world: int, output_dir: str) -> dict[str, str]:
        # rank i on the same cores in every layout (tuning/container/shared/affinity.py)
        shares = affinity.split(os.sched_getaffinity(0), world)
        out = {"OMP_NUM_THREADS": str(threads), affinity.VAR: affinity.encode(shares)}
        if probe:
            args = probe_args(a, f, output_dir)
            out.update(HARNESS_ENTRY="tuning.container.probe", HARNESS_ENTRY_ARGS=args)
        return out

    # Off a terminal (CI), a run is one line, its outcome (`main`), not every step of every rank.
    return replace(options.spec_from(f, run_id, env), quiet=not sys.stdout.isatty())


def runs_of(
    bench_id: str, names: list[str], rnd: int, whats=("train", "probe")
) -> list[tuple[int, str, str, str]]:
    """Round `rnd`'s runs [(round, layout name, "train"|"probe", run id)]: every train, then
    every probe."""
    return [
        (rnd, name, what, f"{bench_id}-r{rnd + 1}-{name}" + ("-probe" if what == "probe" else ""))
        for what in whats
        for name in names
    ]


def meta(a, f: RunFlags, bench_id: str, names: list[str], rounds, first, threads: int) -> dict:
    """report.json's meta: what the bench ran, how, on what; `first` is its first run's spec."""
    out = {
        "bench_id": bench_id,
        "command": shlex.join(["python", "-m", "tuning.harness", *sys.argv[1:]]),
        "code": folders.commit(),  # the code it measured, for a record (benchmarks/tables.py)
        "layouts": names,
        "repeat": a.repeat or DEFAULT_REPEAT,
        "rounds": rounds.describe(),
        "design": rounds.design_meta(),  # the report decides its goals by the rounds' rule
        "order": "per round: every layout's training run, then every layout's probe run",
        "device": first.layout.topology.device,
        "world_size": first.layout.topology.world_size,
        "gpus": first.layout.topology.gpus,
        "nproc": first.layout.topology.nproc,
        "omp_num_threads": threads,
        "model": f.model or "the tiny model (built in)",
        "data": f.data or "the demo data (built in)",
        **report.job_meta(first.job, f.job, own=f.job == str(BENCH_JOB)),
        "warmup_steps": metric_lines.WARMUP_STEPS,
        "probe": {
            "min_bytes": a.probe_min_bytes,
            "max_bytes": probe_max(a, f),
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
        out["probe"] = {"skipped": FOREIGN_NO_PROBE}
    return out
