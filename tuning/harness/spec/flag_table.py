"""The one table of the harness's flags: every Makefile variable, the flag it becomes, what it
means, and which commands honour it; `make help` prints it (run as a script: it needs no
package). The Makefile passes exactly the variables typed on its command line (`$(origin)`), so
an environment variable that shares a name is never a flag.

The table on a command's parser, and the refusal of a flag a command does not honour, are
flag_args.py's; typing the values (whole numbers, sizes, TRAINER's preset) is flags.py's; what
they mean for a run is options.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RUN = ("up", "bench", "fault", "soak", "repro")  # the commands that run a job here
JOB = (*RUN, "kube")  # ... and the one that renders it for a cluster


@dataclass(frozen=True)
class Flag:
    var: str  # the Makefile's variable; the flag is --var-in-lower-case
    help: str
    commands: tuple[str, ...]
    metavar: str = ""  # what the value is, in `make help`
    switch: bool = False  # on or off (DRY_RUN=1); else it takes a value
    why_not: dict[str, str] = field(default_factory=dict)  # command -> why it is refused there

    @property
    def option(self) -> str:
        return "--" + self.var.lower().replace("_", "-")

    @property
    def dest(self) -> str:
        return self.var.lower()


_KUBE_SHAPE = (
    "a Kubeflow job's shape is NODES pods of GPUS (or NPROC) ranks each, one "
    "container per pod; KIND=job is one pod with a container per rank, the shape of "
    "LAYOUT=per-rank NETWORK=shared"
)
_BENCH_LAYOUTS = "bench runs every layout side by side; choose them with LAYOUTS=single,..."
_FRESH = "every fault run starts afresh, so that what the fault did is all that happened"
_HERE = "a run here writes to runs/<id>/output; a claim is a cluster's (make kube)"
_SOAK_FRESH = "a soak starts afresh and resumes from its own checkpoints after each failure"

TABLE = (
    # The job: what trains, the same in every command that runs or renders it.
    Flag("JOB", "job file: trainer arguments in YAML (a foreign trainer's: its JSON)", JOB, "file"),
    Flag(
        "MODEL",
        "model directory (default: the job file's model_name_or_path, else the demo's "
        "tiny model); kube: pvc:<claim>/<path> or a path inside the image",
        JOB,
        "dir",
    ),
    Flag(
        "DATA",
        "training data: a JSON/JSONL/Parquet/Arrow file or a directory of them "
        "(default: the job file's training_data_path, else the demo data); kube: as MODEL",
        JOB,
        "path",
    ),
    Flag(
        "CONFIG",
        "accelerate config (default configs/accelerate/fsdp.yaml; fsdp-cpu.yaml on CPU ranks)",
        JOB,
        "file",
    ),
    Flag(
        "SEED",
        "seed for init, data order and dropout; pool: a fresh draw of runs from it",
        (*JOB, "pool"),
        "s",
    ),
    Flag("STEPS", "training steps (max_steps)", JOB, "k"),
    Flag("TIMEOUT", "collective timeout in seconds (ddp_timeout)", JOB, "s"),
    Flag(
        "TRAINER",
        "harness (this repo's trainer, default) | fms (fms-hf-tuning 3.2.2 in its own image)",
        (*JOB, "image"),
        "name",
    ),
    Flag(
        "IMAGE",
        "the image the ranks run (a trainer of your own: with ENTRY)",
        (*JOB, "image", "gpus"),
        "img",
    ),
    Flag(
        "ENTRY",
        "your trainer: a script (train.py, in SRC) or a module (docs/your-job.md)",
        JOB,
        "x.py|mod",
    ),
    Flag(
        "ARGS",
        'ENTRY\'s command line, quoted whole: ARGS="--output_dir /output --learning_rate 1e-5"',
        JOB,
        "'...'",
    ),
    Flag(
        "SRC",
        "your code's folder, bound read-only at /src (the ranks' working dir): no image "
        "rebuild; kube: in a ConfigMap mounted there",
        JOB,
        "dir",
    ),
    # Where, and how many ranks.
    Flag(
        "GPUS",
        "GPUs: N free visible ones (default: all; 0: CPU ranks on gloo), or device=i,j "
        "(indices or UUIDs: those, busy or not); kube: N per pod",
        JOB,
        "N",
    ),
    Flag("NPROC", "CPU ranks when GPUS=0 (default 2); kube: per pod", JOB, "n"),
    Flag(
        "CUDA",
        "the GPU image's CUDA: 13.0 (default, driver R580+) or 12.8 (R525-R570)",
        (*JOB, "image", "gpus"),
        "12.8",
    ),
    Flag(
        "LAYOUT",
        "single (default) | per-rank | host",
        ("up", "fault", "soak"),
        "name",
        why_not={"bench": _BENCH_LAYOUTS, "kube": _KUBE_SHAPE},
    ),
    Flag(
        "NETWORK",
        "per-rank: isolated (default, a pod per rank) | shared (rank 0's namespaces)",
        ("up", "fault", "soak"),
        "mode",
        why_not={"bench": _BENCH_LAYOUTS, "kube": _KUBE_SHAPE},
    ),
    Flag(
        "MEMORY",
        "memory limit per container, e.g. 8g (default: none)",
        RUN,
        "size",
        why_not={"kube": "a pod's memory is its requests per rank (kube_pod.py)"},
    ),
    Flag("PIDS", "process limit per container, e.g. 4096 (default: none)", RUN, "n"),
    # Restarts and resumes.
    Flag(
        "MAX_RESTARTS",
        "restart the group up to n times, from its newest checkpoint",
        ("up", "fault", "kube"),
        "n",
        why_not={
            "bench": "a bench measures runs that are not restarted",
            "soak": "a soak restarts the group without a limit until DURATION is up",
        },
    ),
    Flag(
        "RESUME",
        "resume from RUNS/latest's newest checkpoint (checked and named first)",
        ("up",),
        switch=True,
        why_not={
            "bench": "every layout run of a bench starts afresh",
            "fault": _FRESH,
            "soak": _SOAK_FRESH,
        },
    ),
    Flag(
        "RESUME_FROM",
        "resume from that run's newest checkpoint",
        ("up",),
        "id",
        why_not={
            "bench": "every layout run of a bench starts afresh",
            "fault": _FRESH,
            "soak": _SOAK_FRESH,
        },
    ),
    Flag(
        "GRACE",
        "seconds to wait for peers after a rank fails, and for a node to exit "
        "once every trainer returned (default 60)",
        JOB,
        "s",
    ),
    # The run and its record.
    Flag(
        "RUN_ID",
        "the run's id (default: a new one); down, logs, stacks: which run; pool: its runs' "
        "prefix (default pool)",
        (*JOB, "down", "logs", "stacks", "pool"),
        "id",
    ),
    Flag(
        "DRY_RUN",
        "print what would run, run nothing",
        ("up", "bench", "image", "pool"),
        switch=True,
        why_not={"kube": "kube renders and runs nothing unless REHEARSE=1"},
    ),
    Flag(
        "STALL",
        "dump every rank's stack after s s without progress (default max(60, 10 x step); 0: off)",
        ("up",),
        "s",
    ),
    # bench
    Flag(
        "REPEAT",
        "rounds over the layouts (default 5, one look); auto: a look a round up to 30, under "
        "bounds that keep a goal's false MET or MISSED at 3.7 per cent",
        ("bench",),
        "r",
    ),
    Flag(
        "BUDGET",
        "REPEAT=auto's cap on time: 900s, 15m, 1h (default 46m: the design's 30 rounds here)",
        ("bench",),
        "t",
    ),
    Flag(
        "LAYOUTS",
        "the layouts, comma-separated, in run order (default: all four)",
        ("bench",),
        "a,b",
    ),
    Flag(
        "THREADS", "OMP_NUM_THREADS of every rank (default: cores // world size)", ("bench",), "n"
    ),
    # fault
    Flag("FAULT", "the failure to reproduce (docs/faults.md), or all", ("fault",), "kind"),
    Flag(
        "RANK",
        "the rank to hit (default 1)",
        ("fault",),
        "i",
        why_not={"kube": "the rehearsal kills a pod: KILL=i"},
    ),
    Flag("AT_STEP", "the step to hit it at (default 12)", ("fault", "kube"), "k"),
    Flag(
        "RDZV_TIMEOUT",
        "seconds ranks wait for a missing peer at start (default TIMEOUT)",
        ("fault", "kube"),
        "s",
    ),
    Flag(
        "LATE",
        "late-master: seconds rank 0's node starts after the others (default 10)",
        ("fault",),
        "s",
    ),
    Flag(
        "PICK",
        "pool: the experiments to run, by number, e.g. 1,9,23 (default: all; DRY_RUN=1 lists them)",
        ("pool",),
        "n,m",
    ),
    # soak
    Flag(
        "MTBF",
        "mean time between the job's failures: a time (3m, 180s) or steps (400steps)",
        ("soak",),
        "t",
    ),
    Flag("DURATION", "how long the soak trains: 20m, 1200s, 1h", ("soak",), "t"),
    Flag(
        "KINDS",
        "the failures, comma-separated: kill (default), oom, save-kill, term, preempt",
        ("soak",),
        "a,b",
    ),
    Flag(
        "FAULT_SEED",
        "seed of the failures' steps, ranks and kinds (default 0); SEED stays training's",
        ("soak",),
        "n",
    ),
    Flag("SAVE_EVERY", "save every n steps (the job's save_steps)", ("soak",), "n"),
    # repro
    Flag(
        "FROM",
        "the failed job's folder: one log a pod (kubectl logs), and its objects (kubectl get "
        "pods -o yaml) if you have them; or a harness run's folder",
        ("repro",),
        "dir",
    ),
    Flag(
        "RUN",
        "also run the replay here and say whether its verdict matches",
        ("repro",),
        switch=True,
    ),
    # kube
    Flag("NODES", "pods: a Master and NODES-1 Workers, or NODES TrainJob nodes", ("kube",), "m"),
    Flag("NAME", "the job's name (default sft; pods <name>-master-0, ...)", ("kube",), "job"),
    Flag(
        "KIND",
        "pytorchjob (default) | trainjob (Trainer v2) | job (one pod, a container per rank: "
        "option 2)",
        ("kube",),
        "kind",
    ),
    Flag(
        "RESTART_POLICY",
        "PyTorchJob: Never | OnFailure | ExitCode (MAX_RESTARTS: backoffLimit)",
        ("kube",),
        "p",
    ),
    Flag(
        "OUTPUT_CLAIM",
        "an existing PersistentVolumeClaim mounted at /output (checkpoints outlive a pod; "
        "MAX_RESTARTS resumes from them)",
        ("kube",),
        "pvc",
        why_not={c: _HERE for c in RUN},
    ),
    Flag("REHEARSE", "also run the job's pods here, as Compose services", ("kube",), switch=True),
    Flag(
        "GPU_HOURS_PER_FAILURE",
        "the cluster's failure rate for the save-interval advice (default Llama 3's: one per "
        "~50,700 GPU-hours)",
        ("kube", "soak"),
        "h",
    ),
    Flag("SAVE_ADVISED", "the rendered job saves at the advised interval", ("kube",), switch=True),
    Flag(
        "KILL",
        "rehearsal: SIGKILL rank i's pod at AT_STEP; the operator's rules act",
        ("kube",),
        "i",
        why_not={"fault": "make fault hits RANK=i with FAULT=kill"},
    ),
    # image
    Flag("DEVICE", "cpu | gpu: which image (default: gpu when GPUs are visible)", ("image",), "d"),
    Flag("REBUILD", "build the image even if it is up to date", ("image",), switch=True),
    # down, ps: this checkout's runs (its RUNS folder), unless ALL=1
    Flag(
        "ALL",
        "every harness run on the engine, other checkouts' and users' too (default: RUNS's)",
        ("down", "ps"),
        switch=True,
    ),
)
BY_VAR = {f.var: f for f in TABLE}
BY_DEST = {f.dest: f for f in TABLE}
SWITCHES = tuple(f.var for f in TABLE if f.switch)
VALUES = tuple(f.var for f in TABLE if not f.switch)


def usage() -> str:
    """The variables for `make help`: each with what it means and who takes it."""
    out = ["Variables (typed on make's command line; a target refuses one it does not take):"]
    for f in TABLE:
        name = f"{f.var}=1" if f.switch else f"{f.var}={f.metavar}"
        takes = " ".join(c for c in f.commands if c != "gpus")
        out.append(f"  {name:<17}{f.help} [{takes}]")
    out.append(f"  {'RUNS=dir':<17}where runs are recorded (default runs/) [every target]")
    return "\n".join(out)


if __name__ == "__main__":  # `make help`, with any Python: the table needs no package
    print(usage())
