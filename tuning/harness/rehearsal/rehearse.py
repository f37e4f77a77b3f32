"""`make kube REHEARSE=1`: what runs of the rendered objects, run here as Compose services
(one per pod, named and reachable as the pod; KIND=job: one per container of the one pod, in
one network and IPC namespace), with exactly the environment the object gives each container,
the ConfigMaps' files at /job (and ENTRY's at the launch dir), followed to the end by
`lifecycle.start` as `up` is. With KILL, a rank's pod is killed at a step and the operator's
restart rules act (rehearsal/kube_operator.py).

The volumes play as rendered. A claim is one host folder that every pod start shares: its
stand-in is RUNS/.claims/<claim>/, which persists from one rehearsal to the next as a claim
does (MODEL and DATA on claims must be put there first). An emptyDir /output is a folder of
its pod's own (runs/<id>/pods/<pod>/emptydir), new for each new pod (the old one set aside as
emptydir.deleted-<n>, where the cluster deletes it), kept when a container restarts in place.
The ranks' metrics stay bound from runs/<id>/output/metrics over /output/metrics either way:
the harness follows the run by them (on a cluster they are in /output with the rest)."""

from __future__ import annotations

import base64
import os
from dataclasses import replace
from pathlib import Path

import yaml

from tuning.container.rank import torn
from tuning.harness.backends import kube_manifest, kube_pod, kube_restarts
from tuning.harness.contract import ranks_user
from tuning.harness.contract.container import MODEL_DIR, OUTPUT_DIR
from tuning.harness.errors import HarnessError
from tuning.harness.flags import run_flags
from tuning.harness.layout import options
from tuning.harness.layout.job_layout import JobLayout
from tuning.harness.layout.own_output import OwnOutput
from tuning.harness.machine import devices
from tuning.harness.rehearsal import kube_operator
from tuning.harness.run import lifecycle, output_dir
from tuning.harness.run_files.status import EXIT_CODES

CLAIMS = ".claims"  # under RUNS: a claim's stand-in (a run id never starts with a dot)


def claim_folder(runs_root: Path, claim: str) -> Path:
    return runs_root / CLAIMS / claim


def claims_here(layout: JobLayout, runs_root: Path) -> dict:
    """The host paths that stand in for MODEL and DATA on claims ({"model": ..., "data": ...}
    for the layout), each checked to be there; said before anything is written."""
    here = {}
    for m in layout.claims:
        if m.target == OUTPUT_DIR:
            continue
        path = claim_folder(runs_root, m.claim) / m.path
        want = path.is_dir() if m.target == MODEL_DIR else path.exists()
        if not want:
            raise HarnessError(
                f"{m.said_by}=pvc:{m.claim}/{m.path}: the rehearsal stands claim {m.claim} in "
                f"by the folder {claim_folder(runs_root, m.claim)}, and {path} is not there; "
                f"copy it in (cp -r <yours> {path}), or rehearse without the claim"
            )
        # who the rehearsal's ranks run as
        user = ranks_user.for_ranks(layout.topology.kind)["user"]
        uid, gid = ranks_user.ids(user)
        unreadable = ranks_user.first_unreadable(path, uid, {gid})
        if unreadable:
            raise HarnessError(
                f"{m.said_by}=pvc:{m.claim}/{m.path}: {unreadable} in the claim's stand-in is "
                f"not readable by the ranks' user ({user}), as on a claim whose files "
                f"the pod's fsGroup does not reach; `chmod -R a+rX {path}`"
            )
        here["model" if m.target == MODEL_DIR else "data"] = str(path)
    return here


def empty_dir(run_dir: Path, pod: str) -> Path:
    return run_dir / "pods" / pod / "emptydir"


def renewer(run_dir: Path, layout: JobLayout):
    """A pod made again gets a new emptyDir: the old folder set aside (its ranks may still
    write there until they are stopped, as an old pod does), a new one for the ranks' user."""

    def renew(pod: str) -> None:
        folder = empty_dir(run_dir, pod)
        n = len(list(folder.parent.glob("emptydir.deleted-*"))) + 1
        folder.rename(folder.with_name(f"emptydir.deleted-{n}"))
        folder.mkdir()
        output_dir.give(folder, layout)

    return renew


def output_of(layout: JobLayout, run_dir: Path, runs_root: Path) -> dict:
    """What /output is for the record: the claim, or the emptyDirs kept and lost."""
    claim = layout.output_claim
    if claim:
        return {"claim": claim, "folders": [str(claim_folder(runs_root, claim))], "lost": []}
    pods = run_dir / "pods"
    return {
        "claim": None,
        "folders": sorted(str(p) for p in pods.glob("*/emptydir")),
        "lost": sorted(str(p) for p in pods.glob("*/emptydir.deleted-*")),
    }


def rehearse(
    layout: JobLayout,
    run_dir: Path,
    objects: tuple,
    made,
    grace: float,
    accelerate_config: Path,
    here: dict,
    on_tick=None,
) -> dict:
    """Run the nodes `made` (backends/kube_objects.pods_of) of `objects` and follow them to the
    end; `run_dir` exists, `here` holds claims_here's stand-ins; returns the summary."""
    pods = made.nodes
    plan = layout.topology.plan  # the cluster's: no host GPU asked
    if layout.topology.device == "gpu":  # the pods' GPUs are free host GPUs here, each its share
        try:
            plan = devices.for_host(plan.count, made.image)
        except HarnessError as e:
            raise HarnessError(
                f"a rehearsal of {layout.replicas} pod(s) x "
                f"{layout.gpus_per_pod} GPU(s) here: {e}; or rehearse with "
                "GPUS=0 (CPU ranks, NPROC per pod)"
            ) from None
        share = plan.count // len(pods)
        pods = [
            replace(p, gpu_ids=plan.ids[i * share : (i + 1) * share]) for i, p in enumerate(pods)
        ]
    runs_root = run_dir.parent
    claim = layout.output_claim
    if claim:
        folder = claim_folder(runs_root, claim)
        outputs = tuple((p.name, str(folder)) for p in pods)
        found = torn.checkpoints(folder)
        if found:  # as on a cluster: a claim keeps what the last job left there
            print(
                f"harness: claim {claim} ({folder}) holds {', '.join(c.name for c in found)} "
                "already: the job resumes from the newest, as it would on the cluster"
            )
    else:
        outputs = tuple((p.name, str(empty_dir(run_dir, made.pod_of[p.name]))) for p in pods)
    # the launcher's and SRC's ConfigMaps, as the kubelet lays them out in their volumes
    entry = layout.trainer.entry
    launch = entry and lay_out(objects, kube_pod.launch_map_name(layout), run_dir / "launch")
    src = layout.mounts.src and lay_out(
        objects, kube_pod.src_map_name(layout), run_dir / "src", "src"
    )
    # the job as its operator made it: its nodes (JobLayout.nodes), image and volumes, run as
    # the rendered uid under root (1000, KUBE_UID's, or with KUBE_UID=auto an arbitrary one in
    # group 0, as OpenShift assigns); as the user who rehearses it otherwise, who could not
    # give that uid the output folder, nor delete what it wrote there (contract/ranks_user.py)
    runs_as = ranks_user.for_ranks(layout.topology.kind)
    if os.geteuid() == 0:
        runs_as = {"user": layout.trainer.user, "login": None}
    layout = replace(
        layout,
        topology=replace(layout.topology, plan=replace(plan, image=made.image)),
        mounts=replace(
            layout.mounts,
            launch_dir=launch and str(launch),
            src=src and str(src),
            model=here.get("model"),
            data=here.get("data"),
        ),
        trainer=replace(layout.trainer, **runs_as),
        pods=tuple(pods),
    )
    files = dict(kube_manifest.job_config_map(objects).data or {})
    names = ", ".join(p.name for p in pods)
    banner = (
        f"harness: rehearsing {made.kind} {layout.name}: "
        f"{'containers' if layout.one_pod else 'pods'} {names}; "
        f"{layout.topology.world_size} rank(s); /output "
        f"{'claim ' + claim if claim else 'an emptyDir per pod'}; {run_dir}"
    )
    record = {
        made.kind.lower(): {
            "name": layout.name,
            "manifest": str(run_dir / made.manifest),
            "pods": list(dict.fromkeys(made.pod_of.values())),
            "output": f"claim {claim}" if claim else "emptyDir",
        },
        **({"gpus": plan.record()} if plan.chosen else {}),
    }
    spec = options.Spec(
        layout,
        yaml.safe_load(files[layout.trainer.job_file]),
        accelerate_config,
        runs_root,
        grace,
        run_dir_made=True,
        job_files=files,
        banner=banner,
        title="rehearsal ",
        summary_extra=record,
        explain=False,
        own_output=OwnOutput(nodes=outputs),
    )
    return lifecycle.start(spec, on_tick)


def lay_out(objects: tuple, name: str, folder: Path, volume: str | None = None) -> Path:
    """ConfigMap `name`'s files in `folder`, each at the path the pod's `volume` gives its key
    (its items; else the key itself), readable by the ranks' user, as a kubelet writes them."""
    cm = next(o for o in objects if o.kind == "ConfigMap" and o.metadata.name == name)
    paths = kube_manifest.volume_items(objects, volume) if volume else {}
    files = {k: v.encode() for k, v in (cm.data or {}).items()}
    files.update({k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()})
    for key, raw in files.items():
        path = folder / paths.get(key, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw)
    for p in (folder, *folder.rglob("*")):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return folder


def rehearse_kill(
    a,
    f: run_flags.RunFlags,
    layout: JobLayout,
    run_dir: Path,
    objects: tuple,
    made,
    accelerate_config: Path,
    rank: int,
    here: dict,
) -> int:
    """The rehearsal with rank `rank`'s pod SIGKILLed at a step; the operator's rules act on
    every pod's exit, and restarts.json / restarts.md record it. The exit code is the job's."""
    if not 0 <= rank < layout.topology.world_size:
        raise HarnessError(f"KILL={rank} is outside the {layout.topology.world_size} rank(s)")
    job_map = kube_manifest.job_config_map(objects)
    timeout = f.timeout or int(yaml.safe_load(job_map.data[layout.trainer.job_file])["ddp_timeout"])
    rdzv = run_flags.int_arg("RDZV_TIMEOUT", a.rdzv_timeout, 1) or timeout
    at_step = run_flags.int_arg("AT_STEP", a.at_step, 1) or 12
    made = replace(made, nodes=kube_operator.rehearsal_env(made.nodes, timeout, rdzv))
    rules = kube_restarts.rules(made.kind, made.rules_from)
    deadline = timeout + rdzv + kube_operator.SLACK_S
    renew = None if layout.output_claim else renewer(run_dir, layout)
    op = kube_operator.Operator(
        made.kind, rules, made.nodes, rank, at_step, layout.run_id, deadline, made.pod_of, renew
    )
    # The operator decides when the job ends; the harness's own grace must not cut it first.
    summary = rehearse(
        layout, run_dir, objects, made, max(f.grace, deadline), accelerate_config, here, op
    )
    out = output_of(layout, run_dir, run_dir.parent)
    rec = kube_operator.record(op, summary, replace(layout, pods=tuple(made.nodes)), run_dir, out)
    kube_operator.write(run_dir, rec)
    print(
        f"harness: {made.kind} with rank {rank}'s pod killed at step {op.kill_step}: "
        f"{rec['outcome']} ({rec['ended_by']}); kill to end {rec['kill_to_end_s']} s; "
        f"resumed from {rec['resumed_from']}; steps lost {rec['steps_lost']}; /output "
        f"{rec['output']}; {run_dir / 'restarts.md'}"
    )
    return EXIT_CODES.get(summary["status"], 1)
