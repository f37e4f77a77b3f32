"""`make kube`: the run as a Kubernetes job for `kubectl apply -f`, and a local rehearsal of
it (rehearsal/rehearse.py). KIND chooses the object:
- pytorchjob (default): a Kubeflow PyTorchJob, NODES pods (backends/kube_pytorchjob.py);
- trainjob: a Trainer v2 TrainJob and its TrainingRuntime (backends/kube_trainjob.py);
- job: option 2, one pod with a container per rank, a batch/v1 Job (backends/kube_job.py);
each with the ConfigMap of the job's files, and for ENTRY the launcher's (kube_pod.py).

1. `JobLayout` (job_layout.py): the layout model with a job's shape and the claims it mounts.
2. The job as `up` runs it (job_files.job_for), key by key: only the paths change, to where the
   pods find them: MODEL and DATA a claim (`pvc:<claim>/<path>`, mounted read-only where the job
   says) or a path inside the image (job_paths.for_cluster). /output is an emptyDir, gone with
   its pod, or OUTPUT_CLAIM. resume_from_checkpoint is rendered only over a claim; MAX_RESTARTS
   without one is rendered, and said: every restart starts from step 0.
3. `pods_of()`: what the object's operator (or the Job controller) runs, read from the object.

The SDKs are imported only in the backends, lazily: the rest of the CLI works without the
`kube` extra, and nothing on this side imports torch.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import sys
from pathlib import Path

from tuning.harness.backends import (
    kube_job,
    kube_manifest,
    kube_pod,
    kube_pytorchjob,
    kube_restarts,
    kube_trainjob,
)
from tuning.harness.backends.kube_objects import pods_of, render
from tuning.harness.checks import preflight, save_interval, timeouts
from tuning.harness.commands.kube import said
from tuning.harness.contract.container import CONTAINER_UID, SRC_DIR
from tuning.harness.errors import HarnessError
from tuning.harness.flags import own_trainer, run_flags
from tuning.harness.layout import job_files, job_paths, options
from tuning.harness.layout.job_layout import claim_mounts, job_layout
from tuning.harness.layout.layout import JOB_KINDS
from tuning.harness.machine import image_recipes, nvidia
from tuning.harness.run_files import folders
from tuning.harness.run_files.status import EXIT_CODES

KINDS = JOB_KINDS
MANIFESTS = {
    "pytorchjob": kube_pytorchjob.MANIFEST,
    "trainjob": kube_trainjob.MANIFEST,
    "job": kube_job.MANIFEST,
}
MANIFEST = kube_pytorchjob.MANIFEST
dump = kube_manifest.dump
operator_pods = kube_pytorchjob.operator_pods
config_map_name = kube_pod.config_map_name


# --- The command ----------------------------------------------------------------------------


def register(sub) -> None:
    p = sub.add_parser(
        "kube",
        help="render the run as a Kubeflow PyTorchJob, a TrainJob or a "
        "Job of one pod (and rehearse it)",
    )
    # KIND (default pytorchjob), NODES, NAME (default sft), RESTART_POLICY (PyTorchJob: Never
    # without restarts, ExitCode with MAX_RESTARTS), OUTPUT_CLAIM, REHEARSE, KILL and AT_STEP
    # (default 12), RDZV_TIMEOUT (default TIMEOUT), GRACE, and the job's flags: flag_table
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    if a.out == "-":  # the objects alone on stdout (kubectl apply -f -); all else on stderr
        objects_to = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            return _main(a, objects_to)
    return _main(a, None)


def _main(a: argparse.Namespace, objects_to) -> int:
    from tuning.harness.rehearsal import rehearse

    kind = (a.kind or JOB_KINDS[0]).lower()  # KIND=PyTorchJob, as the API spells it
    if kind not in KINDS:
        raise HarnessError(f"KIND={kind} is unknown; use one of {', '.join(KINDS)}")
    if a.restart_policy and a.restart_policy not in kube_restarts.V1_POLICIES:
        raise HarnessError(
            f"RESTART_POLICY={a.restart_policy} is unknown; use one of "
            f"{', '.join(kube_restarts.V1_POLICIES)}"
        )
    f = run_flags.RunFlags.of(a)
    if f.gpu_names:
        raise HarnessError(
            f"GPUS=device={','.join(f.gpu_names)} names GPUs of this host; a "
            "cluster's scheduler picks a pod's GPUs: GPUS=N per pod"
        )
    nodes = run_flags.int_arg("NODES", a.nodes, 1) or 1
    # GPUS per pod, on a cluster; unset: as many as this host shows
    gpus = len(nvidia.visible(nvidia.inventory())) if f.gpus is None else f.gpus
    if gpus and a.nproc:
        raise HarnessError(
            f"NPROC={a.nproc} is CPU ranks per pod; with GPUS={gpus} a pod runs one rank a GPU: "
            "drop NPROC, or GPUS=0 for CPU ranks"
        )
    nproc = f.nproc if a.nproc else (2 if nodes == 1 else 1)  # CPU ranks per pod
    if max(nproc, gpus) > kube_pod.MAX_RANKS_PER_POD:
        raise HarnessError(
            f"{'GPUS' if gpus else 'NPROC'}={max(nproc, gpus)} ranks in one pod: more than a "
            f"node can hold ({kube_pod.MAX_RANKS_PER_POD} here, a core a rank); spread them "
            "over pods with NODES=<n>"
        )
    namespace = check_namespace(a.namespace)
    uid_auto, user = kube_user(a.kube_uid)
    if a.restart_policy and kind != "pytorchjob":
        raise HarnessError(f"RESTART_POLICY is a PyTorchJob's; {RESTARTS[kind]}")
    kill = run_flags.int_arg("KILL", a.kill, 0)
    if kill is not None and not a.rehearse:
        raise HarnessError("KILL kills a pod of the rehearsal; add REHEARSE=1")
    if a.at_step and kill is None:
        raise HarnessError(
            f"AT_STEP={a.at_step} is the step the rehearsal's KILL strikes at; "
            "a rendered job has no such step: add KILL=<rank> REHEARSE=1, or "
            "drop AT_STEP"
        )
    with_args = own_trainer.words(f.args) is not None  # ENTRY takes ARGS, reads no job file
    if with_args and a.save_advised:
        raise HarnessError(
            "SAVE_ADVISED=1 writes save_steps into the job file, which a script "
            "taking ARGS never reads: put --save_steps <n> in ARGS"
        )
    run_id = options.checked_run_id(f.run_id)
    runs_root = Path(f.runs).resolve()
    base = {} if with_args else job_files.load_job(Path(f.job))
    own_image = image_recipes.named(f.image) is not None
    model, data = (
        job_paths.for_cluster(v, getattr(f, v.lower()), base, Path(f.job), own_image)
        for v in ("MODEL", "DATA")
    )
    own = own_trainer_of(f)
    layout = job_layout(
        gpus,
        nproc,
        nodes,
        f.cuda,
        kind=kind,
        name=a.name or "sft",
        image=f.image,
        run_id=run_id,
        run_dir=str(runs_root / run_id),
        user=user,
        uid_auto=uid_auto,
        namespace=namespace,
        entry=own and own.entry,
        src=own and own.src,
        args=own and own.args,
        claims=claim_mounts(model, data, a.output_claim),
        rdzv_timeout=run_flags.int_arg("RDZV_TIMEOUT", a.rdzv_timeout, 1),
        grace_s=round(f.grace) if a.grace is not None else None,
    )
    # Every (re)start resumes from the newest checkpoint in /output: only when it outlives a pod.
    resume = f.max_restarts > 0 and layout.output_claim is not None
    job = job_files.job_for(layout, base, model, data, f.steps, f.seed, f.timeout, resume)
    if with_args:  # what the pods run, recorded in the job's ConfigMap; no rank reads it
        job = job_files.args_job(layout)
    accelerate_config = job_files.accelerate_config(f, layout)
    if f.config:
        preflight.check_world_size(accelerate_config, layout.topology.world_size)
    measured_in = (
        None if with_args else timeouts.newest_of_job(runs_root, str(Path(f.job).resolve()))
    )
    rate = save_interval.rate_arg(a.gpu_hours_per_failure)
    job = save_interval.advise(
        job, layout.topology.gpus or layout.topology.world_size, measured_in, rate, a.save_advised
    )
    objects = render(layout, job, accelerate_config.read_text(), f.max_restarts, a.restart_policy)
    for obj in objects:  # NAMESPACE: every object's, the runtime's and ConfigMaps' included
        obj.metadata.namespace = namespace
    warnings = said.warnings(layout)
    text = "".join(f"# {w}\n" for w in warnings) + dump(*objects)
    # the rehearsal's stand-ins for the claims, checked before anything is written
    here = rehearse.claims_here(layout, runs_root) if a.rehearse else {}
    if objects_to is not None and a.rehearse:
        raise HarnessError(
            "OUT=- prints the objects for kubectl; REHEARSE=1 runs them here: one or the other"
        )
    for line in said.said(layout, objects, model, data, accelerate_config, f.max_restarts):
        print(f"harness: {line}")
    for w in warnings:
        print(f"harness: warning: {w}")
    if measured_in:  # what the job measured here, against the cluster's timeouts
        grace = layout.grace_s if layout.grace_s is not None else timeouts.K8S_GRACE_S
        t = timeouts.Timeouts.of(job, layout.rdzv_timeout, grace_period_s=grace)
        timeouts.say(timeouts.check(t, timeouts.measured(measured_in)), "on the cluster")
    if objects_to is not None:  # nothing written: the same objects, on stdout
        objects_to.write(text)
        objects_to.flush()
        return 0
    # a rehearsal is a run: `latest` moves, as for `up`
    run_dir = folders.create(runs_root, run_id, starts=bool(a.rehearse))
    manifest = Path(a.out).expanduser().resolve() if a.out else run_dir / MANIFESTS[kind]
    manifest.write_text(text)
    print(f"harness: apply with `kubectl apply -f {manifest}` ({WHAT[kind]})")
    print(manifest, flush=True)
    if not a.rehearse:
        return 0
    made = pods_of(objects)
    if kill is None:
        summary = rehearse.rehearse(
            layout, run_dir, objects, made, f.grace, accelerate_config, here
        )
        return EXIT_CODES.get(summary["status"], 1)
    return rehearse.rehearse_kill(
        a, f, layout, run_dir, objects, made, accelerate_config, kill, here
    )


def check_namespace(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not (len(raw) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", raw)):
        raise HarnessError(
            f"NAMESPACE={raw!r}: a namespace is lower-case letters, digits and '-', starts and "
            "ends with a letter or digit, at most 63 characters (a DNS label); e.g. "
            "NAMESPACE=team-ml"
        )
    return raw


def kube_user(raw: str | None) -> tuple[bool, str]:
    """(the platform assigns the uid, the uid:gid the rehearsal's containers run as). auto:
    none is set in the pods; the rehearsal runs them as OpenShift would, an arbitrary uid in
    group 0 (the image works so: docs/kubernetes.md)."""
    if raw is None:
        return False, CONTAINER_UID
    if raw.lower() == "auto":
        return True, ARBITRARY_UID
    if not re.fullmatch(r"[1-9]\d*:\d+", raw):
        raise HarnessError(
            f"KUBE_UID={raw!r}: a non-root uid:gid (KUBE_UID=1001:0), or auto to leave it to "
            "the platform (OpenShift's restricted SCC assigns one)"
        )
    return False, raw


def own_trainer_of(f):
    """ENTRY, SRC and ARGS checked; SRC may be one file (the ConfigMap holds just it; ENTRY is
    that file where none is given)."""
    if f.src and Path(f.src).expanduser().is_file():
        one = Path(f.src).expanduser().resolve()
        entry = f.entry or one.name
        own = own_trainer.resolve(entry, str(one.parent), f.args, f.image)
        if own.entry != f"{SRC_DIR}/{one.name}":
            raise HarnessError(
                f"SRC={f.src} is one file, and ENTRY={f.entry} is not it: ENTRY={one.name}, or "
                "SRC=<the folder of both>"
            )
        return dataclasses.replace(own, src=str(one))
    return own_trainer.resolve(f.entry, f.src, f.args, f.image) if f.entry else None


ARBITRARY_UID = "1000770000:0"  # an OpenShift namespace's first uid, in the root group


RESTARTS = {  # how each object restarts (kube_restarts.py), for a refused RESTART_POLICY
    "trainjob": "a TrainJob restarts every pod (MAX_RESTARTS = JobSet failurePolicy.maxRestarts)",
    "job": "a Job's pod restarts whole, every container (restartPolicy Never, MAX_RESTARTS = "
    "backoffLimit)",
}
WHAT = {
    "pytorchjob": "the ConfigMap(s) and the PyTorchJob",
    "trainjob": "the ConfigMap(s), the TrainingRuntime and the TrainJob",
    "job": "the ConfigMap(s) and the Job",
}
