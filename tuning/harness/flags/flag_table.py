"""The one table of the harness's flags: every Makefile variable, the flag it becomes, what it
means, which commands take it, and its group: the heading it shows under in each command's
--help and in `make help` (run as a script: it needs no package). The Makefile passes exactly
the variables typed on its command line (`$(origin)`), so an environment variable that shares a
name is never a flag.

The table on a command's parser, and the refusal of a flag a command does not take, are
flag_args.py's; typing the values (whole numbers, sizes, TRAINER's preset) is flags.py's; what
they mean for a run is options.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

RUN = ("up", "bench", "fault", "soak", "repro")  # the commands that run a job here
JOB = (*RUN, "kube")  # ... and the one that renders it for a cluster


@dataclass(frozen=True)
class Flag:
    form: str  # as typed on make's command line: VAR=what it is; VAR=1, a switch (on or off)
    commands: tuple[str, ...]  # the commands that take it; every other refuses it
    help: str

    @property
    def var(self) -> str:  # the Makefile's variable; the flag is --var-in-lower-case
        return self.form.partition("=")[0]

    @property
    def switch(self) -> bool:
        return self.form.endswith("=1")

    @property
    def option(self) -> str:
        return "--" + self.var.lower().replace("_", "-")

    @property
    def dest(self) -> str:
        return self.var.lower()


# By concern, in --help's order: what trains, where and how, the run, then each command's own.
GROUPS: dict[str, tuple[Flag, ...]] = {
    "the job": (
        Flag(
            "JOB=file", JOB, "job file: trainer arguments in YAML (a foreign trainer's: its JSON)"
        ),
        Flag(
            "MODEL=dir",
            JOB,
            "model directory (default: the job file's model_name_or_path, else the demo's "
            "tiny model); kube: pvc:<claim>/<path> or a path inside the image",
        ),
        Flag(
            "DATA=path",
            JOB,
            "training data: a JSON/JSONL/Parquet/Arrow file or a directory of them "
            "(default: the job file's training_data_path, else the demo data); kube: as MODEL",
        ),
        Flag(
            "CONFIG=file",
            JOB,
            "accelerate config (default configs/accelerate/fsdp.yaml; fsdp-cpu.yaml on CPU ranks)",
        ),
        Flag(
            "SEED=s",
            (*JOB, "pool"),
            "seed for init, data order and dropout; pool: a fresh draw of runs from it",
        ),
        Flag("STEPS=k", JOB, "training steps (max_steps)"),
        Flag("TIMEOUT=s", JOB, "collective timeout in seconds (ddp_timeout)"),
        Flag(
            "TRAINER=name",
            (*JOB, "image"),
            "harness (this repo's trainer, default) | fms (fms-hf-tuning 3.2.2 in its own image)",
        ),
    ),
    "your code and image": (
        Flag(
            "IMAGE=img",
            (*JOB, "image", "gpus"),
            "the image the ranks run (a trainer of your own: with ENTRY)",
        ),
        Flag(
            "ENTRY=x.py|mod",
            JOB,
            "your trainer: a script (train.py, in SRC) or a module (docs/your-job.md)",
        ),
        Flag(
            "ARGS='...'",
            JOB,
            'ENTRY\'s command line, quoted whole: ARGS="--output_dir /output --learning_rate 1e-5"',
        ),
        Flag(
            "SRC=dir",
            JOB,
            "your code's folder, bound read-only at /src (the ranks' working dir): no image "
            "rebuild; kube: in a ConfigMap mounted there",
        ),
    ),
    "GPUs and ranks": (
        Flag(
            "GPUS=N",
            JOB,
            "GPUs: N free visible ones (default: all; 0: CPU ranks on gloo), or device=i,j "
            "(indices or UUIDs: those, busy or not); kube: N per pod",
        ),
        Flag("NPROC=n", JOB, "CPU ranks when GPUS=0 (default 2); kube: per pod"),
        Flag(
            "CUDA=12.8",
            (*JOB, "image", "gpus"),
            "the GPU image's CUDA: 13.0 (default, driver R580+) or 12.8 (R525-R570)",
        ),
        Flag(
            "THREADS=n", ("bench",), "OMP_NUM_THREADS of every rank (default: cores // world size)"
        ),
    ),
    "layout and limits": (
        Flag("LAYOUT=name", ("up", "fault", "soak"), "single (default) | per-rank | host"),
        Flag(
            "NETWORK=mode",
            ("up", "fault", "soak"),
            "per-rank: isolated (default, a pod per rank) | shared (rank 0's namespaces)",
        ),
        Flag("MEMORY=size", RUN, "memory limit per container, e.g. 8g (default: none)"),
        Flag("PIDS=n", RUN, "process limit per container, e.g. 4096 (default: none)"),
    ),
    "restarts and checkpoints": (
        Flag(
            "MAX_RESTARTS=n",
            ("up", "fault", "kube"),
            "restart the group up to n times, from its newest checkpoint",
        ),
        Flag(
            "RESUME=1",
            ("up",),
            "resume from RUNS/latest's newest checkpoint (checked and named first)",
        ),
        Flag("RESUME_FROM=id", ("up",), "resume from that run's newest checkpoint"),
        Flag("SAVE_EVERY=n", ("soak",), "save every n steps (the job's save_steps)"),
        Flag(
            "GPU_HOURS_PER_FAILURE=h",
            ("kube", "soak"),
            "the cluster's failure rate for the save-interval advice (default Llama 3's: one per "
            "~50,700 GPU-hours)",
        ),
        Flag("SAVE_ADVISED=1", ("kube",), "the rendered job saves at the advised interval"),
    ),
    "the run": (
        Flag(
            "RUN_ID=id",
            (*JOB, "down", "logs", "stacks", "pool"),
            "the run's id (default: a new one); down, logs, stacks: which run; pool: its runs' "
            "prefix (default pool)",
        ),
        Flag(
            "DRY_RUN=1",
            ("up", "bench", "fault", "image", "pool"),
            "print what would run, run nothing, write nothing",
        ),
        Flag(
            "GRACE=s",
            JOB,
            "seconds to wait for peers after a rank fails, and for a node to exit "
            "once every trainer returned (default 60)",
        ),
        Flag(
            "STALL=s",
            ("up",),
            "dump every rank's stack after s s without progress (default max(12, 10 x step), "
            "60 before the steps are known; 0: off)",
        ),
        Flag(
            "HANG=end",
            ("up",),
            "end (default): a run whose every rank is stuck 30 s past the job's collective "
            "timeout is ended, its stacks kept; wait: left running (a debugger to attach)",
        ),
        Flag(
            "ALL=1",
            ("down", "ps"),
            "every harness run on the engine, other checkouts' and users' too (default: RUNS's)",
        ),
    ),
    "bench": (
        Flag(
            "REPEAT=r",
            ("bench",),
            "rounds over the layouts (default 5, one look); auto: a look a round up to 30, under "
            "bounds that keep a goal's false MET or MISSED at 3.7 per cent",
        ),
        Flag(
            "BUDGET=t",
            ("bench",),
            "REPEAT=auto's cap on time: 900s, 15m, 1h (default 46m: the design's 30 rounds here)",
        ),
        Flag(
            "LAYOUTS=a,b",
            ("bench",),
            "the layouts, comma-separated, in run order (default: all four)",
        ),
    ),
    "faults": (
        Flag("FAULT=kind", ("fault",), "the failure to reproduce (docs/faults.md), or all"),
        Flag("RANK=i", ("fault",), "the rank to hit (default 1)"),
        Flag("AT_STEP=k", ("fault", "kube"), "the step to hit it at (default 12)"),
        Flag(
            "RDZV_TIMEOUT=s",
            ("fault", "kube"),
            "seconds ranks wait for a missing peer at start (default TIMEOUT)",
        ),
        Flag(
            "LATE=s",
            ("fault",),
            "late-master: seconds rank 0's node starts after the others (default 10)",
        ),
        Flag(
            "KILL=i",
            ("kube",),
            "rehearsal: SIGKILL rank i's pod at AT_STEP; the operator's rules act",
        ),
    ),
    "soak": (
        Flag(
            "MTBF=t",
            ("soak",),
            "mean time between the job's failures: a time (3m, 180s) or steps (400steps)",
        ),
        Flag("DURATION=t", ("soak",), "how long the soak trains: 20m, 1200s, 1h"),
        Flag(
            "KINDS=a,b",
            ("soak",),
            "the failures, comma-separated: kill (default), oom, save-kill, term, preempt",
        ),
        Flag(
            "FAULT_SEED=n",
            ("soak",),
            "seed of the failures' steps, ranks and kinds (default 0); SEED stays training's",
        ),
    ),
    "pool": (
        Flag(
            "PICK=n,m",
            ("pool",),
            "the experiments to run, by number, e.g. 1,9,23 (default: all; DRY_RUN=1 lists them)",
        ),
    ),
    "repro": (
        Flag(
            "FROM=dir",
            ("repro",),
            "the failed job's folder: one log a pod (kubectl logs), and its objects (kubectl get "
            "pods -o yaml) if you have them; or a harness run's folder",
        ),
        Flag("RUN=1", ("repro",), "also run the replay here and say whether its verdict matches"),
    ),
    "kube": (
        Flag("NODES=m", ("kube",), "pods: a Master and NODES-1 Workers, or NODES TrainJob nodes"),
        Flag("NAME=job", ("kube",), "the job's name (default sft; pods <name>-master-0, ...)"),
        Flag(
            "KIND=kind",
            ("kube",),
            "pytorchjob (default) | trainjob (Trainer v2) | job (one pod, a container per rank: "
            "option 2)",
        ),
        Flag(
            "RESTART_POLICY=p",
            ("kube",),
            "PyTorchJob: Never | OnFailure | ExitCode (MAX_RESTARTS: backoffLimit)",
        ),
        Flag(
            "OUTPUT_CLAIM=pvc",
            ("kube",),
            "an existing PersistentVolumeClaim mounted at /output (checkpoints outlive a pod; "
            "MAX_RESTARTS resumes from them)",
        ),
        Flag("NAMESPACE=ns", ("kube",), "the namespace of every object (default: kubectl's)"),
        Flag(
            "OUT=file",
            ("kube",),
            "where the objects go: a file (default runs/<id>/<manifest>), or - for stdout "
            "(kubectl apply -f -)",
        ),
        Flag(
            "KUBE_UID=uid:gid",
            ("kube",),
            "the pods' user (default the image's 1000:1000); auto leaves it to the platform "
            "(OpenShift assigns one, in group 0)",
        ),
        Flag("REHEARSE=1", ("kube",), "also run the job's pods here, as Compose services"),
    ),
    "image": (
        Flag("DEVICE=d", ("image",), "cpu | gpu: which image (default: gpu when GPUs are visible)"),
        Flag("REBUILD=1", ("image",), "build the image even if it is up to date"),
    ),
}
TABLE = tuple(f for flags in GROUPS.values() for f in flags)
BY_VAR = {f.var: f for f in TABLE}
SWITCHES = tuple(f.var for f in TABLE if f.switch)
VALUES = tuple(f.var for f in TABLE if not f.switch)
RUN_GROUP = "the run"  # where RUNS (--runs), which every command takes, shows too
RUNS_HELP = "where runs are recorded"


def usage() -> str:
    """`make help`'s variables, under their groups: each with what it means and who takes it."""
    out = ["Variables (typed on make's command line; a target refuses one it does not take):"]
    width = max(len(f.form) for f in TABLE) + 2
    for title, flags in GROUPS.items():
        out.append(f"  {title}:")
        for f in flags:
            takes = " ".join(c for c in f.commands if c != "gpus")
            out.append(f"    {f.form:<{width}}{f.help} [{takes}]")
        if title == RUN_GROUP:
            out.append(f"    {'RUNS=dir':<{width}}{RUNS_HELP} (default runs/) [every target]")
    return "\n".join(out)


# The Makefile's own variables, besides the table's: where things are, and what some targets
# pass through (make test PYTEST_ARGS=..., make lock UPGRADE=1, make gpu-check GPU_PYTHON=...)
MAKE_OWN = ("RUNS", "VENV", "PYTHON", "PYTEST_ARGS", "UPGRADE", "GPU_PYTHON")


def refusal(typed: list[str], from_env: list[str], goals: list[str] = ()) -> str | None:
    """The one line make stops with, or None: a variable typed on its command line that no
    target knows (with the nearest known name), or one set in the environment that a target
    in `goals` takes, which make reads only when typed after it (`DRY_RUN=1 make up` would run
    for real; an OUT in the environment means nothing to `make gpu-check`)."""
    import difflib

    from_env = [v for v in from_env if set(BY_VAR[v].commands) & set(goals)]
    known = (*BY_VAR, *MAKE_OWN)
    unknown = [v for v in typed if v not in known]
    if unknown:
        said = []
        for v in unknown:
            near = difflib.get_close_matches(v.upper(), known, n=1, cutoff=0.6)
            said.append(f"{v}" + (f" (did you mean {near[0]}?)" if near else ""))
        return (
            f"unknown variable(s) {', '.join(said)}: no target takes it, and make would ignore "
            "it; `make help` lists every variable"
        )
    if from_env:
        v = from_env[0]
        return (
            f"{', '.join(from_env)} set in the environment, which make reads only when typed "
            f"after it: put it after make (make <target> {v}=...), or unset it "
            f"(env -u {v} make <target>)"
        )
    return None


if __name__ == "__main__":  # `make help`, with any Python: the table needs no package
    import sys

    if sys.argv[1:2] == ["--refusal"]:  # the Makefile's guard: TYPED ENV GOALS (each a list)
        said = refusal(sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split())
        print(said or "")
    else:
        print(usage())
