"""Where typed flags become a run: GPUS as the host's GPUs, the layout, RESUME's checkpoint and
the `Spec` every command starts a run from (up, bench, fault, kube).

The flags themselves are declared in flag_table.py, once for every command; the files the ranks
read in /job (the trainer's job, the accelerate config) are job_files.py's.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tuning.container.rank import torn
from tuning.harness.checks import preflight
from tuning.harness.contract import ranks_user
from tuning.harness.contract.container import PORT, output_dir_of
from tuning.harness.errors import ROOT, HarnessError
from tuning.harness.flags import own_trainer, trainers
from tuning.harness.flags.run_flags import RunFlags
from tuning.harness.layout import job_paths
from tuning.harness.layout.job_files import accelerate_config, args_job, job_for, load_job
from tuning.harness.layout.job_paths import Source
from tuning.harness.layout.layout import Layout, LayoutError
from tuning.harness.layout.limits import Limits
from tuning.harness.layout.mounts import Mounts
from tuning.harness.layout.own_output import RUN_OUTPUT, OwnOutput
from tuning.harness.layout.topology import Topology
from tuning.harness.layout.trainer import Trainer
from tuning.harness.machine import devices
from tuning.harness.machine.devices import GpuPlan
from tuning.harness.run_files import folders

Env = Callable[[int, str], dict[str, str]]  # (world size, output dir) -> ranks' variables

DUMP_BATCHES = "HARNESS_DUMP_BATCHES"  # =1: each rank dumps its batches to output/batches/
SECRET_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")
RUNS = ROOT / "runs"


def load_env_file(path: Path = ROOT / ".env") -> None:
    """Secrets may live in a git-ignored .env (NAME=value lines); the environment wins."""
    if not path.is_file():
        return
    for line in path.read_text().splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name in SECRET_NAMES and not name.startswith("#"):
            os.environ.setdefault(name, value.strip().strip("'\""))


def checked_run_id(raw: str | None, limit: int = folders.RUN_ID_MAX) -> str:
    """RUN_ID, checked by the one rule (folders.check_run_id) before anything is written; a new
    id when unset."""
    if not raw:
        return folders.new_run_id()
    try:
        return folders.check_run_id(raw, limit)
    except ValueError as e:
        raise HarnessError(str(e)) from None


def plan_from(f: RunFlags) -> GpuPlan:
    """GPUS, IMAGE and CUDA as the host's GPUs, image, dtype and accelerate default: the one
    place a run's GPUs are decided."""
    return devices.for_host(f.gpus, f.image, f.cuda, names=f.gpu_names)


def threads_per_rank(world_size: int) -> int:
    """OMP_NUM_THREADS for ranks sharing this host: its cores split between them. More
    threads than cores spin against each other, and under a CPU quota (fault `slow`) their
    spinning eats the quota itself."""
    return max(1, (os.cpu_count() or 1) // world_size)


def layout_from(
    f: RunFlags,
    run_id: str,
    run_dir: Path,
    plan: GpuPlan,
    env: Env | None = None,
    model: Source | None = None,
    data: Source | None = None,
) -> Layout:
    """The run's Layout, made once with all it needs: `env(world size, output dir)` gives the
    variables a command adds for its ranks (bench's probe, fault's pacing); `model` and `data`
    where the ranks find them (job_paths; host paths are bound into the containers)."""
    nproc = f.nproc
    ranks = ranks_user.for_ranks(f.layout)  # the invoking user's uid:gid, or 1000 under root
    model = model or job_paths.for_run("MODEL", f.model, {}, None, False)
    data = data or job_paths.for_run("DATA", f.data, {}, None, False)
    for src in (model, data):
        if src.where == "host":  # bound into the containers: the ranks must read it
            ranks_user.check_readable(src.said_by, src.bind, ranks["user"], f.layout)
    if model.where == "host":
        preflight.check_model(model.path, model.said_by)
    secrets = tuple(name for name in SECRET_NAMES if os.environ.get(name))
    output = output_dir_of(f.layout, str(run_dir))
    extra = tuple(env(plan.count or nproc, output).items()) if env else ()
    if os.environ.get(DUMP_BATCHES, "0") not in (
        "",
        "0",
    ):  # a debug switch: tuning/container/rank/batch_dump.py
        extra += ((DUMP_BATCHES, f"{output}/batches"),)
    own = own_trainer.resolve(f.entry, f.src, f.args, f.image) if f.entry else None
    try:
        return Layout(
            run_id=run_id,
            topology=Topology(
                f.layout, plan, nproc, free_port() if f.layout == "host" else PORT, f.network
            ),
            mounts=Mounts(str(run_dir), _host(model), _host(data), src=own and own.src),
            trainer=Trainer(
                entry=own and own.entry,
                args=own and own.args,
                recorder_steps=not trainers.logs_own_steps(f.trainer),
                extra_env=extra,
                secrets=secrets,
                **ranks,
            ),
            limits=Limits(f.memory, f.pids, f.max_restarts),
        )
    except LayoutError as e:
        raise HarnessError(str(e)) from None


def _host(src: Source) -> str | None:
    return src.bind if src.where == "host" else None


@dataclass
class Spec:
    """Everything a run needs, checked: what lifecycle.start runs for up, bench, fault, kube."""

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
    own_output: OwnOutput = RUN_OUTPUT  # /output elsewhere (fault disk-full, kube's rehearsal)
    sources: tuple[Source, ...] = ()  # where the ranks find the model and data (job_paths)

    def sources_said(self) -> str:
        said = "; ".join(f"{s.var.lower()} {s.describe()}" for s in self.sources)
        return said or "model and data: where ENTRY's ARGS name them"


def spec_from(f: RunFlags, run_id: str | None = None, env: Env | None = None) -> Spec:
    # A command's own id for one of its runs (bench, fault) derives from a checked RUN_ID.
    run_id = checked_run_id(run_id, folders.LABEL_MAX) if run_id else checked_run_id(f.run_id)
    runs_root = Path(f.runs).resolve()
    plan = plan_from(f)
    with_args = own_trainer.words(f.args) is not None  # ENTRY takes ARGS, reads no job file
    base = {} if with_args else load_job(Path(f.job))
    own_image = bool(f.entry)  # a path not here may be inside the user's own image
    model, data = (
        job_paths.for_run(v, getattr(f, v.lower()), base, Path(f.job), own_image)
        for v in ("MODEL", "DATA")
    )
    layout = layout_from(f, run_id, runs_root / run_id, plan, env, model, data)
    preflight.check_runs_dir(runs_root, create=not f.dry_run)
    # MAX_RESTARTS: every (re)start of the group resumes from the newest checkpoint in /output.
    resume = bool(f.resume or f.resume_from) or layout.limits.max_restarts > 0
    job = job_for(layout, base, model, data, f.steps, f.seed, f.timeout, resume)
    sources = (model, data)
    if with_args:  # what the ranks get, recorded; MODEL and DATA: where ARGS finds them
        job = args_job(layout)
        sources = tuple(s for s in sources if s.where != "demo")
    if not layout.trainer.entry:  # a foreign trainer checks its own job and data (fms: at start)
        cfg = preflight.check_job(job, f"job file {f.job}")
        preflight.check_data(layout.mounts.data, cfg, layout.mounts.model)
    resume_from = resume_source(f, runs_root, layout)
    config = accelerate_config(f, layout)
    if f.config:
        preflight.check_world_size(config, layout.topology.world_size)
    extra = {} if with_args else {"job_file": str(Path(f.job).resolve())}
    extra.update({s.var.lower(): s.describe() for s in sources})
    if plan.chosen:
        extra["gpus"] = plan.record()
    return Spec(
        layout,
        job,
        config,
        runs_root,
        f.grace,
        resume_from=resume_from,
        user_config=bool(f.config),
        sources=sources,
        summary_extra=extra,
    )


def resume_source(f: RunFlags, runs_root: Path, layout: Layout) -> Path | None:
    """RESUME=1: the newest run (runs/latest, read now: a start moves it); RESUME_FROM=<id>:
    that run. Checked and named before anything starts (dry run too): the checkpoint the
    trainer will load (the newest complete one) must be saved by as many ranks as this run
    has. An incomplete one after it (a save cut short) is taken too and moved aside in this
    run's output when it starts (tuning/container/rank/torn.py); the earlier run stays as it was."""
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
        raise HarnessError(
            f"{what}: run {previous.name} has no complete checkpoint in its output"
            f"{f' ({why})' if why else ''}; start afresh without RESUME, or name "
            "a run that saved one"
        )
    newest = complete[-1]
    for c in found[found.index(newest) + 1 :]:
        print(
            f"harness: {c.name} of run {previous.name} is incomplete ({torn.missing(c)}): "
            "it is moved aside in this run, never loaded"
        )
    saved_by = folders.checkpoint_world_size(newest)
    world = layout.topology.world_size
    if saved_by and saved_by != world:
        raise HarnessError(
            f"{what}: {newest.name} of run {previous.name} was saved by {saved_by} rank(s); this "
            f"run has {world}. Resume with {saved_by} rank(s) (GPUS or NPROC), "
            "or start afresh"
        )
    status = folders.read_json(previous / "summary.json").get("status", "no summary")
    print(
        f"harness: resuming from run {previous.name} ({status}): {newest.name}, saved by "
        f"{saved_by or '?'} rank(s)"
    )
    return previous


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
