"""`make repro FROM=<folder>`: from what a failed cluster job left (its pods' logs and objects)
to the culprit and the same failure replayed here.

1. Read (source.py, read.py, log_lines.py, cluster.py): each pod's log and object, each line by its
   producer's format (torch, torchrun, gloo, NCCL, the HF Trainer, this harness).
2. The verdict: what the logs showed becomes the facts `facts.gather` takes from a live
   run (facts.py), and `rules.judge` decides, with the rules live runs use.
3. The replay (replay.py): the fault kind that causes that class, on the culprit's role, at the
   step the logs show, on the user's own JOB / ENTRY / ARGS / MODEL / DATA: the `make fault`
   line; RUN=1 runs it and says whether its verdict matches (class and role).
Where the logs cannot tell, one sentence says so and what to collect next; exit 2.
`repro.json` and `repro.md` are written in runs/<id>/.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from tuning.harness.clusterlogs import collect, replay, write
from tuning.harness.clusterlogs.judge import judge
from tuning.harness.clusterlogs.repro_json import ReplayLine, ReplayRun
from tuning.harness.errors import ROOT, HarnessError
from tuning.harness.faults import pool_list
from tuning.harness.faults.fault_json import FaultRecord
from tuning.harness.flags import flag_args, own_trainer, run_flags
from tuning.harness.layout import job_files, options
from tuning.harness.machine import nvidia
from tuning.harness.run_files import folders
from tuning.harness.verdict.record import Verdict

CANNOT_TELL = 2
# What a replay may not be told: repro chooses them from the culprit's role
CHOSEN = ("layout", "network", "fault", "rank", "at_step")
OWN = ("from", "run", "run_id")  # repro's own


def register(sub) -> None:
    # FROM, RUN, and the job's flags for the replay: flag_table
    p = sub.add_parser(
        "repro",
        help="read a failed cluster job's logs, name the culprit, and replay the same failure here",
    )
    p.set_defaults(fn=main)


def main(a: argparse.Namespace) -> int:
    raw = getattr(a, "from")
    if not raw:
        raise HarnessError(
            "FROM is not set: the folder of the failed job's pod logs "
            "(`kubectl logs <pod> > <pod>.log`) and, if you have them, its "
            "objects (`kubectl get pods -o yaml > pods.yaml`), or one log file"
        )
    folder = Path(raw).expanduser()
    if not folder.exists():
        raise HarnessError(f"FROM={raw}: no such folder or file")
    for dest in CHOSEN:
        if getattr(a, dest, None):
            raise HarnessError(
                f"{dest.upper()}={getattr(a, dest)}: make repro chooses it from "
                "the culprit's role and the logs; drop it"
            )
    f = run_flags.RunFlags.of(a)
    run_id = options.checked_run_id(f.run_id)
    runs_root = Path(f.runs).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        view = None
        if folder.is_dir() and (folder / "summary.json").is_file() and (folder / "logs").is_dir():
            view = collect.kubectl_view(folder, Path(tmp) / "from")  # a harness run, as kubectl
            folder = view  # gives it
        rec, inp, got = judge(folder, say=_progress)
        # nothing is written until the logs are read: a read that fails leaves nothing
        run_dir = folders.create(runs_root, run_id, starts=False)
        if view is not None:
            shutil.copytree(view, run_dir / "from")
    rec = replace(rec, run_id=run_id, from_folder=str(Path(raw).resolve()))
    named = rec.named
    if named:
        plan = replay.plan(rec.verdict, inp, got, f.nproc, bool(f.entry), local_steps(f))
        if plan:
            run = f"make repro FROM={shlex.quote(raw)} RUN=1 {typed_job(a)}".strip()
            line = ReplayLine(plan, plan.typed(typed_job(a, gpus=_gpus_word(a))), run)
            rec = replace(rec, replay=line)
    if named and not rec.replay:
        cls = rec.verdict.kind
        why = f"no fault kind here causes a verdict of {cls!r}: nothing replays it"
        rec = replace(rec, no_replay=why)
    code = 0 if named else CANNOT_TELL
    if rec.replay and a.run:
        rec = replace(rec, run=replay_here(a, rec.replay.plan, rec.verdict, runs_root, run_id))
        code = 0 if rec.run.matches else 1
    folders.write_json(run_dir / "repro.json", rec.to_json())
    (run_dir / "repro.md").write_text(write.markdown(rec))
    for line in write.said(rec):
        print(f"harness: {line}", file=sys.stdout if code == 0 else sys.stderr)
    print(run_dir / "repro.md")
    return code


def _progress(said: str) -> None:
    print(f"harness: repro: {said}", file=sys.stderr, flush=True)


def _gpus_word(a: argparse.Namespace) -> str | None:
    """GPUS=0 where the replay runs on CPU ranks here (no GPU on this box) and GPUS was not
    typed: the line must run as printed."""
    if getattr(a, "gpus", None) is not None:
        return None
    try:
        return None if nvidia.visible(nvidia.inventory()) else "GPUS=0"
    except HarnessError:
        return "GPUS=0"


def local_steps(f: run_flags.RunFlags) -> int | None:
    """The replay job's max_steps: STEPS, ARGS' --max_steps, or the job file's."""
    if f.steps:
        return f.steps
    words = own_trainer.words(f.args)
    if words is not None:
        raw = own_trainer.value_in(words, "max_steps")
        return int(raw) if raw and raw.isdigit() else None
    steps = job_files.load_job(Path(f.job)).get("max_steps")
    return int(steps) if str(steps or "").isdigit() else None


def _job_flags(a: argparse.Namespace):
    """The flags the user typed for the replay's job (not those repro chooses)."""
    return [fl for fl in flag_args.typed(a) if fl.dest not in CHOSEN + OWN]


def typed_job(a: argparse.Namespace, gpus: str | None = None) -> str:
    """The user's job flags as they typed them, for the `make fault` line (`gpus`: GPUS=0
    added where the replay runs on CPU ranks and GPUS was not typed)."""
    words = [gpus] if gpus else []
    for fl in _job_flags(a):
        value = "1" if fl.switch else str(getattr(a, fl.dest))
        words.append(f"{fl.var}={shlex.quote(value)}")
    return " ".join(words)


def replay_here(
    a: argparse.Namespace, plan: replay.Replay, cluster: Verdict, runs_root: Path, run_id: str
) -> ReplayRun:
    """RUN=1: the fault run, as a user types it (`python -m tuning.harness fault ...`, as the
    pool runs them), and whether its verdict matches the cluster's: the same class, and its
    culprits in the culprit's role here."""
    local_id = f"{run_id}-replay"[: folders.LABEL_MAX]
    job = [fl.option if fl.switch else f"{fl.option}={getattr(a, fl.dest)}" for fl in _job_flags(a)]
    argv = [*pool_list.fault_argv(plan.flags(), local_id, runs_root), *job]
    code = subprocess.run(argv, cwd=ROOT).returncode
    here = FaultRecord.from_json(folders.read_json(runs_root / local_id / "fault.json")).verdict
    nodes = 1 if plan.layout == "single" else plan.nproc
    roles = {replay.role(c, plan.nproc // nodes, nodes) for c in (here.culprits if here else [])}
    matches = here is not None and here.kind == cluster.kind and roles == {plan.role}
    return ReplayRun(local_id, code, here, sorted(roles), bool(matches))
