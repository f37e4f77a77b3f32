"""What `make kube` rendered, in words: the shape, what trains (SRC, ENTRY, ARGS), the
rendezvous timeout and grace period, where /output lives and what a restart then does."""

from __future__ import annotations

import shlex
from pathlib import Path

from tuning.harness.backends import kube_pod, kube_src
from tuning.harness.contract.container import LAUNCH_DIR, OUTPUT_DIR, SRC_DIR
from tuning.harness.layout.job_layout import JobLayout


def warnings(layout: JobLayout) -> list[str]:
    """What would keep a cluster from running the objects as rendered: said on the terminal
    and at the top of the manifest."""
    out, image = [], layout.topology.plan.image
    if kube_pod.local_tag(image):
        out.append(
            f"IMAGE {image} is this machine's local tag: a cluster's nodes cannot pull "
            "it (ImagePullBackOff). Build it (make image), push it (docker tag "
            f"{image} <registry>/<name>:<tag> && docker push <registry>/<name>:<tag>), "
            "and render with IMAGE=<registry>/<name>:<tag>"
        )
    if layout.mounts.src:
        gone = kube_src.left_out(layout.mounts.src)
        if gone:
            out.append(
                f"SRC={layout.mounts.src}: left out of the ConfigMap (dotfiles, keys, tokens, "
                f"credentials): {', '.join(gone[:10])}" + (" ..." if len(gone) > 10 else "")
            )
    return out


def said(
    layout: JobLayout, objects: tuple, model, data, accelerate_config: Path, max_restarts: int
) -> list[str]:
    """What was rendered, in words: the shape, what trains, where /output lives and what a
    restart then does."""
    on_gpus = layout.topology.device == "gpu"
    per = f"{layout.gpus_per_pod} x nvidia.com/gpu" if on_gpus else "CPU ranks, no GPU"
    if layout.one_pod:
        one = "1 GPU" if on_gpus else "1 CPU rank"
        shape = (
            f"1 pod of {layout.per_pod} containers, {one} each, sharing the pod's network "
            "(master 127.0.0.1) and /dev/shm (option 2); a restart recreates the pod: "
            f"every rank together (backoffLimit {max_restarts})"
        )
    elif layout.topology.kind == "trainjob":
        shape = f"numNodes {layout.replicas}; numProcPerNode {layout.per_pod} ({per} per pod)"
    else:
        pods = f"Master 1 + Worker {layout.replicas - 1}" if layout.replicas > 1 else "Master 1"
        shape = f"{pods}; nprocPerNode {layout.per_pod} ({per} per pod)"
    lines = [
        f"{objects[-1].kind} {layout.name}: {shape}; world size {layout.topology.world_size}; "
        f"image {layout.topology.plan.image}",
        f"model {model.describe()}; data {data.describe()}; accelerate config {accelerate_config}",
    ]
    if layout.trainer.entry:
        where = "of the image"
        if layout.mounts.src:
            n = len(kube_src.files(layout.mounts.src))
            where = (
                f"from SRC={layout.mounts.src} ({n} file(s) in ConfigMap "
                f"{kube_pod.src_map_name(layout)}, read-only at {SRC_DIR}, the working dir)"
            )
        words = layout.trainer.args
        args = shlex.join(words) if words is not None else "none (its JSON job)"
        lines.append(
            f"trainer: ENTRY={layout.trainer.entry} {where}, under the harness's launcher "
            f"and rank recorder from ConfigMap {kube_pod.launch_map_name(layout)} at "
            f"{LAUNCH_DIR}; ARGS: {args}"
        )
    if layout.rdzv_timeout or layout.grace_s is not None:
        lines.append(
            "rendezvous timeout "
            + (
                f"{layout.rdzv_timeout} s (HARNESS_RDZV_TIMEOUT)"
                if layout.rdzv_timeout
                else "torchrun's"
            )
            + "; terminationGracePeriodSeconds "
            + (str(layout.grace_s) if layout.grace_s is not None else "Kubernetes' 30")
        )
    claim = layout.output_claim
    if claim:
        access = (
            f"{layout.writers} pods write to it: it must be ReadWriteMany"
            if layout.writers > 1
            else "one pod writes to it (ReadWriteOnce will do)"
        )
        resumes = "; every restart resumes from its newest checkpoint" if max_restarts else ""
        made = "made beforehand: docs/kubernetes.md"
        group = "the platform's" if layout.uid_auto else layout.trainer.user.split(":")[1]
        lines.append(
            f"output: claim {claim} at {OUTPUT_DIR} ({made}), fsGroup {group}; {access}{resumes}"
        )
    elif max_restarts:
        lines.append(
            f"output: an emptyDir at {OUTPUT_DIR}, gone with its pod: each of the "
            f"MAX_RESTARTS={max_restarts} restart(s) starts from step 0 "
            "(resume_from_checkpoint is not set); OUTPUT_CLAIM=<claim> keeps the "
            "checkpoints and resumes from them"
        )
    else:
        lines.append(
            f"output: an emptyDir at {OUTPUT_DIR}: checkpoints and metrics go with "
            "the pod; OUTPUT_CLAIM=<claim> keeps them"
        )
    return lines
