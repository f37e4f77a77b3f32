"""Where flag strings become typed values: GPUS, NPROC, paths, the layout, the accelerate
config, the job and the `Spec` every command starts a run from (up, bench, fault, kube).

The flags themselves (`add_run_flags`, the Makefile's variables) are declared here too, so a
command that runs jobs takes the same ones and reads them the same way.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tuning import torn
from tuning.harness.errors import ROOT, HarnessError
from tuning.harness.rundirs import runs
from tuning.harness.spec import devices, preflight, ranks_user, trainers
from tuning.harness.spec.devices import GpuPlan
from tuning.harness.spec.flags import GRACE_S, JobFlags, RunFlags
from tuning.harness.spec.layout import IMAGE, KINDS, PORT, Layout, LayoutError, output_dir_of

Env = Callable[[int, str], dict[str, str]]  # (world size, output dir) -> ranks' variables

DUMP_BATCHES = "HARNESS_DUMP_BATCHES"  # =1: each rank dumps its batches to output/batches/
SECRET_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")
HOST_ASSETS = ROOT / "build/assets"  # LAYOUT=host: the tiny model and demo data, made here
RUNS = ROOT / "runs"


def load_env_file(path: Path = ROOT / ".env") -> None:
    """Secrets may live in a git-ignored .env (NAME=value lines); the environment wins."""
    if not path.is_file():
        return
    for line in path.read_text().splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name in SECRET_NAMES and not name.startswith("#"):
            os.environ.setdefault(name, value.strip().strip("'\""))


def checked_run_id(raw: str | None, limit: int = runs.RUN_ID_MAX) -> str:
    """RUN_ID, checked by the one rule (runs.check_run_id) before anything is written; a new
    id when unset."""
    if not raw:
        return runs.new_run_id()
    try:
        return runs.check_run_id(raw, limit)
    except ValueError as e:
        raise HarnessError(str(e)) from None


def plan_from(f: RunFlags) -> GpuPlan:
    """GPUS, IMAGE and CUDA as the host's GPUs, image, dtype and accelerate default: the one
    place a run's GPUs are decided."""
    return devices.for_host(f.gpus, f.image, f.cuda)


def threads_per_rank(world_size: int) -> int:
    """OMP_NUM_THREADS for ranks sharing this host: its cores split between them. More
    threads than cores spin against each other, and under a CPU quota (fault `slow`) their
    spinning eats the quota itself."""
    return max(1, (os.cpu_count() or 1) // world_size)


def existing(name: str, raw: str | None, kind: str) -> str | None:
    if not raw:
        return None
    path = Path(raw).expanduser().resolve()
    ok = {"directory": path.is_dir, "file": path.is_file, "file or directory": path.exists}[kind]()
    if not ok:
        raise HarnessError(f"{name}={raw}: no such {kind}")
    return str(path)


def layout_from(f: RunFlags, run_id: str, run_dir: Path, plan: GpuPlan,
                env: Env | None = None) -> Layout:  # fmt: skip
    """The run's Layout, made once with all it needs: `env(world size, output dir)` gives the
    variables a command adds for its ranks (bench's probe, fault's pacing)."""
    nproc = f.nproc
    ranks = ranks_user.for_ranks(f.layout)  # the invoking user's uid:gid, or 1000 under root
    model = existing("MODEL", f.model, "directory")
    data = existing("DATA", f.data, "file or directory")
    for name, path in (("MODEL", model), ("DATA", data)):
        ranks_user.check_readable(name, path, ranks["user"], f.layout)
    preflight.check_model(model)
    secrets = tuple(name for name in SECRET_NAMES if os.environ.get(name))
    output = output_dir_of(f.layout, str(run_dir))
    extra = tuple(env(plan.count or nproc, output).items()) if env else ()
    if os.environ.get(DUMP_BATCHES, "0") not in ("", "0"):  # a debug switch: tuning/batch_dump.py
        extra += ((DUMP_BATCHES, f"{output}/batches"),)
    try:
        return Layout(
            secrets=secrets, extra_env=extra,
            kind=f.layout, gpus=plan.count, gpu_ids=plan.ids, nproc=nproc, run_id=run_id,
            image=plan.image, port=free_port() if f.layout == "host" else PORT,
            network=f.network, model=model, data=data,
            run_dir=str(run_dir), max_restarts=f.max_restarts,
            entry=f.entry, memory=f.memory, pids=f.pids, **ranks,
        )  # fmt: skip
    except LayoutError as e:
        raise HarnessError(str(e)) from None


def accelerate_config(f: JobFlags, layout: Layout) -> Path:
    if not f.config:
        return devices.accelerate_default(layout.device)
    path = Path(f.config)
    if not path.is_file():
        fixtures = sorted(trainers.CONFIGS.glob("accelerate/*"))
        known = ", ".join(str(p.relative_to(ROOT)) for p in fixtures)
        raise HarnessError(f"CONFIG={f.config}: no such file; known fixtures: {known}")
    return path


def job_for(layout: Layout, base_job: Path, steps: int | None, seed: int | None,
            timeout: int | None, resume: bool) -> dict:  # fmt: skip
    """The trainer's job: the job file, with the layout's paths and the run's flags."""
    if not base_job.is_file():
        known = ", ".join(str(p.relative_to(ROOT)) for p in sorted(trainers.CONFIGS.glob("jobs/*")))
        raise HarnessError(f"JOB={base_job}: no such file; known fixtures: {known}")
    if layout.entry:  # a foreign trainer's own format (fms: JSON), and it resumes by itself
        job, resume = trainers.load_job(base_job), False
    else:
        job = yaml.safe_load(base_job.read_text()) or {}
    job.setdefault("torch_dtype", devices.DTYPE[layout.device])
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


def job_from(f: JobFlags, layout: Layout, resume: bool = False) -> dict:
    """job_for with STEPS, SEED and TIMEOUT from the flags."""
    return job_for(layout, Path(f.job), f.steps, f.seed, f.timeout, resume)


@dataclass
class Spec:
    """Everything a run needs, checked: what `run.start` runs for up, bench, fault and kube."""

    layout: Layout
    job: dict
    accelerate_config: Path
    runs_root: Path
    grace: float
    user_config: bool = False  # CONFIG given by the user: accelerate checks it before start
    services: list[str] | None = None  # Compose services to start (None: every node)
    resume_from: Path | None = None  # a previous run whose checkpoints the run starts from
    # A run another command frames (kube's rehearsal): its run directory is made already,
    # /job holds the files given (the ConfigMap's), and it has its own first and last words.
    run_dir_made: bool = False
    job_files: dict[str, str] | None = None
    banner: str | None = None  # the line that announces the start (None: layout and ranks)
    title: str = ""  # before the status in the closing line ("rehearsal ")
    summary_extra: dict = field(default_factory=dict)  # more keys for summary.json
    explain: bool = True  # say why ranks failed, from their logs
    quiet: bool = False  # no start, step or closing lines (bench off a terminal: one per run)
    plan: GpuPlan | None = None  # the host GPUs it runs on (devices.for_host)


def spec_from(f: RunFlags, run_id: str | None = None, env: Env | None = None) -> Spec:
    # A command's own id for one of its runs (bench, fault) derives from a checked RUN_ID.
    run_id = checked_run_id(run_id, runs.LABEL_MAX) if run_id else checked_run_id(f.run_id)
    runs_root = Path(f.runs).resolve()
    plan = plan_from(f)
    layout = layout_from(f, run_id, runs_root / run_id, plan, env)
    preflight.check_runs_dir(runs_root)
    # MAX_RESTARTS: every (re)start of the group resumes from the newest checkpoint in /output.
    job = job_from(f, layout, bool(f.resume or f.resume_from) or layout.max_restarts > 0)
    if not layout.entry:  # a foreign trainer checks its own job and data (fms: at start)
        cfg = preflight.check_job(job, f"job file {f.job}")
        preflight.check_data(layout.data, cfg)
    resume_from = resume_source(f, runs_root, layout)
    config = accelerate_config(f, layout)
    if f.config:
        preflight.check_world_size(config, layout.world_size)
    return Spec(layout, job, config, runs_root, f.grace, resume_from=resume_from,
                user_config=bool(f.config), plan=plan,
                summary_extra={"gpus": plan.record()} if plan.chosen else {})  # fmt: skip


def resume_source(f: RunFlags, runs_root: Path, layout: Layout) -> Path | None:
    """RESUME=1: the newest run (runs/latest, read now: a start moves it); RESUME_FROM=<id>:
    that run. Checked and named before anything starts (dry run too): the checkpoint the
    trainer will load (the newest complete one) must be saved by as many ranks as this run
    has. An incomplete one after it (a save cut short) is taken too and moved aside in this
    run's output when it starts (tuning/torn.py); the earlier run stays as it was."""
    if not (f.resume or f.resume_from):
        return None
    name = checked_run_id(f.resume_from) if f.resume_from else "latest"
    previous = (runs_root / name).resolve()
    what = f"RESUME_FROM={f.resume_from}" if f.resume_from else f"RESUME=1 ({runs_root}/latest)"
    if not previous.is_dir():
        raise HarnessError(f"{what}: no such run; `ls {runs_root}` shows the runs to resume from")
    found = torn.checkpoints(previous / "output")
    complete = [c for c in found if torn.missing(c) is None]
    if not complete:
        why = "; ".join(f"{c.name}: {torn.missing(c)}" for c in found)
        raise HarnessError(f"{what}: run {previous.name} has no complete checkpoint in its output"
                           f"{f' ({why})' if why else ''}; start afresh without RESUME, or name "
                           "a run that saved one")  # fmt: skip
    newest = complete[-1]
    for c in found[found.index(newest) + 1 :]:
        print(f"harness: {c.name} of run {previous.name} is incomplete ({torn.missing(c)}): "
              "it is moved aside in this run, never loaded")  # fmt: skip
    saved_by = runs.checkpoint_world_size(newest)
    if saved_by and saved_by != layout.world_size:
        raise HarnessError(
            f"{what}: {newest.name} of run {previous.name} was saved by {saved_by} rank(s); this "
            f"run has {layout.world_size}. Resume with {saved_by} rank(s) (GPUS or NPROC), "
            "or start afresh"
        )
    status = runs.read_json(previous / "summary.json").get("status", "no summary")
    print(f"harness: resuming from run {previous.name} ({status}): {newest.name}, saved by "
          f"{saved_by or '?'} rank(s)")  # fmt: skip
    return previous


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def add_job_flags(p: argparse.ArgumentParser) -> None:
    """The job's flags, shared by every command that renders one (kube included)."""
    p.add_argument("--steps", help="max_steps")
    p.add_argument("--seed")
    p.add_argument("--timeout", help="collective timeout in seconds (ddp_timeout)")
    p.add_argument("--config", help="accelerate config fixture")
    p.add_argument("--job", default=str(trainers.DEFAULT_JOB), help="job fixture")


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """The flags of a run, shared by up, bench and fault (the Makefile's variables)."""
    p.add_argument("--layout", default="single", help=f"one of {', '.join(KINDS)}")
    p.add_argument("--gpus", help="GPUs to use (default: all visible; 0 = CPU ranks)")
    p.add_argument("--cuda", help="the GPU image's CUDA: 13.0 (default) or 12.8")
    p.add_argument("--nproc", help="CPU ranks when GPUS=0 (default 2)")
    p.add_argument("--model", help="local model directory (default: the tiny model)")
    p.add_argument("--data", help="training data: a file or directory (default: the demo data)")
    add_job_flags(p)
    p.add_argument("--network", default="isolated", help="per-rank: isolated or shared")
    p.add_argument("--max-restarts")
    p.add_argument("--resume", action="store_true", help="resume from the last run's checkpoint")
    p.add_argument("--resume-from", help="resume from this run's newest checkpoint (a run id)")
    p.add_argument("--grace", type=float, default=GRACE_S,
                   help="seconds to wait for peers after a rank fails")  # fmt: skip
    p.add_argument("--run-id")
    p.add_argument("--trainer", default="harness", help="harness (default) | fms")
    p.add_argument("--memory", help="memory limit per container (e.g. 8g)")
    p.add_argument("--pids", help="process limit per container (e.g. 4096)")
    p.add_argument("--entry", help="module to run in IMAGE, a trainer of your own")


def add_common_flags(p: argparse.ArgumentParser) -> None:
    """What every command takes: where runs live and which image."""
    p.add_argument("--runs", default=str(RUNS))
    p.add_argument("--image", default=IMAGE)
