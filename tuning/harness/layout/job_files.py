"""The files a run's ranks read in /job: the trainer's job (the job file's, with where the
ranks find the model, the data and the output, and the run's flags; or, for an ENTRY that takes
ARGS, a record of what each rank runs) and the accelerate config. Made once for up, bench,
fault and kube (docs/design.md: the job file).
"""

from __future__ import annotations

from pathlib import Path

from tuning.harness.contract.container import MODEL_DIR, SRC_DIR, data_target
from tuning.harness.errors import ROOT, HarnessError
from tuning.harness.flags import trainers
from tuning.harness.flags.run_flags import RunFlags
from tuning.harness.layout import job_paths
from tuning.harness.layout.job_paths import Source
from tuning.harness.layout.layout import Layout


def accelerate_config(f: RunFlags, layout: Layout) -> Path:
    if not f.config:
        return layout.topology.plan.accelerate_config
    path = Path(f.config)
    if not path.is_file():
        fixtures = sorted(trainers.CONFIGS.glob("accelerate/*"))
        known = ", ".join(str(p.relative_to(ROOT)) for p in fixtures)
        raise HarnessError(f"CONFIG={f.config}: no such file; known fixtures: {known}")
    return path


def load_job(path: Path) -> dict:
    """The job file as a dict: YAML for this repo's trainer, a foreign trainer's own format
    (fms: JSON)."""
    if not path.is_file():
        known = ", ".join(str(p.relative_to(ROOT)) for p in sorted(trainers.CONFIGS.glob("jobs/*")))
        raise HarnessError(f"JOB={path}: no such file; known fixtures: {known}")
    return trainers.load_job(path)


def job_for(
    layout: Layout,
    base: dict,
    model: Source,
    data: Source,
    steps: int | None,
    seed: int | None,
    timeout: int | None,
    resume: bool,
) -> dict:
    """The trainer's job: the job file's, with the paths where the ranks find the model, the
    data and the output, and the run's flags. A foreign trainer resumes by itself (fms)."""
    job = dict(base)
    job.setdefault("torch_dtype", layout.topology.plan.dtype)
    job.update(
        model_name_or_path=job_paths.rank_path(model, layout),
        training_data_path=job_paths.rank_path(data, layout),
        output_dir=layout.output_dir,
    )
    for key, value in (("max_steps", steps), ("seed", seed), ("ddp_timeout", timeout)):
        if value is not None:
            job[key] = value
    if resume and not layout.trainer.entry:
        job["resume_from_checkpoint"] = True
    return job


def job_of_file(
    layout: Layout,
    path: Path,
    steps: int | None = None,
    seed: int | None = None,
    timeout: int | None = None,
    resume: bool = False,
) -> dict:
    """job_for of a job file run here with no MODEL or DATA: its own paths, else the demo's."""
    base = load_job(path)
    model, data = (
        job_paths.for_run(v, None, base, path, bool(layout.trainer.entry))
        for v in ("MODEL", "DATA")
    )
    return job_for(layout, base, model, data, steps, seed, timeout, resume)


def args_job(layout: Layout) -> dict:
    """A run whose ENTRY takes ARGS writes this in place of a job (job/job.json): what each rank
    runs, and where MODEL, DATA and SRC are bound; no rank reads it."""
    t, m = layout.trainer, layout.mounts
    out = {"entry": t.entry, "args": list(t.args or ()), "output_dir": layout.output_dir}
    for var, host, there in (("model", m.model, MODEL_DIR), ("src", m.src, SRC_DIR)):
        if host:
            out[var] = {"host": host, "ranks": there}
    if m.data:
        out["data"] = {"host": m.data, "ranks": data_target(m.data)}
    return out
