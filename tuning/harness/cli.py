"""`python -m tuning.harness <command>`: what the Makefile's targets call."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import compose as compose_mod
from . import engine, images, preflight, runs, workload
from .engine import HarnessError
from .layout import KINDS, PORT, Layout, LayoutError
from .run import HOST_ASSETS, ROOT, ComposeNodes, HostNodes, execute, job_for, node_commands

CONFIGS = ROOT / "configs"
SECRET_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")


def load_env_file(path: Path = ROOT / ".env") -> None:
    """Secrets may live in a git-ignored .env (NAME=value lines); the environment wins."""
    if not path.is_file():
        return
    for line in path.read_text().splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name in SECRET_NAMES and not name.startswith("#"):
            os.environ.setdefault(name, value.strip().strip("'\""))


def _int_arg(name: str, raw: str | None, minimum: int) -> int | None:
    if raw in (None, ""):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise HarnessError(f"{name}={raw!r} is not a whole number; e.g. {name}={minimum}") from None
    if value < minimum:
        raise HarnessError(f"{name}={value} must be at least {minimum}")
    return value


def _existing(name: str, raw: str | None, kind: str) -> str | None:
    if not raw:
        return None
    path = Path(raw).expanduser().resolve()
    ok = path.is_dir() if kind == "dir" else path.is_file()
    if not ok:
        raise HarnessError(f"{name}={raw}: no such {'directory' if kind == 'dir' else 'file'}")
    return str(path)


def layout_from(a: argparse.Namespace, run_id: str, run_dir: Path) -> Layout:
    gpus = _int_arg("GPUS", a.gpus, 0)
    visible = engine.gpu_count()
    if gpus is None:
        gpus = visible
    elif gpus > visible:
        raise HarnessError(
            f"GPUS={gpus} but this host shows {visible} GPU(s) (nvidia-smi -L); "
            f"use GPUS={visible} or fewer, or GPUS=0 for CPU ranks"
        )
    nproc = _int_arg("NPROC", a.nproc, 1) or 2
    model = _existing("MODEL", a.model, "dir")
    if model and not (Path(model) / "config.json").is_file():
        raise HarnessError(f"MODEL={a.model} has no config.json: not a Hugging Face model dir")
    secrets = tuple(name for name in SECRET_NAMES if os.environ.get(name))
    try:
        return Layout(
            secrets=secrets,
            kind=a.layout, gpus=gpus, nproc=nproc, run_id=run_id,
            image=images.resolve(a.image, "gpu" if gpus else "cpu"),
            network=a.network, model=model, data=_existing("DATA", a.data, "file"),
            run_dir=str(run_dir), max_restarts=_int_arg("MAX_RESTARTS", a.max_restarts, 0) or 0,
            entry=getattr(a, "entry", None),
        )  # fmt: skip
    except LayoutError as e:
        raise HarnessError(str(e)) from None


def accelerate_config(a: argparse.Namespace, layout: Layout) -> Path:
    if not a.config and layout.entry:
        return workload.accelerate_default(layout)
    if not a.config:
        return CONFIGS / "accelerate" / ("fsdp.yaml" if layout.gpus else "fsdp-cpu.yaml")
    path = Path(a.config)
    if not path.is_file():
        known = ", ".join(str(p.relative_to(ROOT)) for p in sorted(CONFIGS.glob("accelerate/*")))
        raise HarnessError(f"CONFIG={a.config}: no such file; known fixtures: {known}")
    return path


@dataclass
class Spec:
    """Everything a run needs, checked: what `up`, `bench` and `fault` all start from."""

    layout: Layout
    job: dict
    accelerate_config: Path
    runs_root: Path
    grace: float
    user_config: bool = False  # CONFIG given by the user: accelerate checks it before start
    services: list[str] | None = None  # Compose services to start (None: every node)
    resume_from: Path | None = None  # a previous run whose checkpoints the run starts from


def spec_from(a: argparse.Namespace, run_id: str | None = None, **layout_changes) -> Spec:
    run_id = run_id or a.run_id or runs.new_run_id()
    workload.resolve(a)  # TRAINER=fms: its image, entry and job, where not set
    runs_root = Path(a.runs).resolve()
    layout = layout_from(a, run_id, runs_root / run_id)
    preflight.check_runs_dir(runs_root)
    if layout_changes:
        layout = layout.with_(**layout_changes)
    if layout.kind == "host" and layout.port == PORT:
        layout = layout.with_(port=free_port())  # host ranks share the host's ports
    steps = _int_arg("STEPS", a.steps, 1)
    seed = _int_arg("SEED", a.seed, 0)
    timeout = _int_arg("TIMEOUT", a.timeout, 1)
    # MAX_RESTARTS: every (re)start of the group resumes from the newest checkpoint in /output.
    job = job_for(layout, Path(a.job), steps, seed, timeout, a.resume or layout.max_restarts > 0)
    preflight.check_model(layout.model)
    if not layout.entry:  # a foreign trainer checks its own job and data (fms: at start)
        cfg = preflight.check_job(job, f"job file {a.job}")
        preflight.check_data(layout.data, cfg)
    # RESUME=1 continues the newest run (runs/latest, read now: start() moves it).
    previous = (runs_root / "latest").resolve() if a.resume else None
    resume_from = previous if previous and previous.is_dir() else None
    return Spec(layout, job, accelerate_config(a, layout), runs_root, a.grace,
                resume_from=resume_from, user_config=bool(a.config))  # fmt: skip


def cmd_up(a: argparse.Namespace) -> int:
    spec = spec_from(a)
    if a.dry_run:
        if spec.layout.kind != "host":
            print(compose_mod.dump(compose_mod.render(spec.layout)))
        for name, cmd in node_commands(spec.layout, spec.accelerate_config).items():
            print(f"# {name}: {shlex.join(cmd['argv'])}")
        return 0
    summary = start(spec)
    return {"succeeded": 0, "interrupted": 130}.get(summary["status"], 1)


def start(spec: Spec, on_tick=None) -> dict:
    """Run one spec to its end and record it; returns the summary (also in summary.json)."""
    t0 = time.time()
    layout = spec.layout
    client = prepare(layout)
    if spec.user_config:
        preflight.check_accelerate_config(spec.accelerate_config, client and layout.image)
    commands = node_commands(layout, spec.accelerate_config)
    try:
        run_dir = runs.create(spec.runs_root, layout.run_id)
    except FileExistsError:
        raise HarnessError(f"{spec.runs_root / layout.run_id} exists; a run never writes over "
                           "another") from None  # fmt: skip
    except PermissionError as e:
        raise HarnessError(str(e)) from None
    runs.write_job(run_dir, spec.job, spec.accelerate_config, layout.job_file)
    if spec.resume_from:
        _take_checkpoints(spec.resume_from, run_dir / "output", layout)
    for name, cmd in commands.items():
        runs.write_json(run_dir / f"ranks/{name}.launch.json", cmd)
    if layout.kind == "host":
        nodes = HostNodes(layout, run_dir, commands["host"]["argv"], commands["host"]["env"])
    else:
        (run_dir / "compose.yaml").write_text(compose_mod.dump(compose_mod.render(layout)))
        _give_to_container_user(run_dir / "output", layout.user)
        nodes = ComposeNodes(layout, run_dir, client, spec.services)
    kind = "GPU" if layout.gpus else "CPU"
    print(f"harness: run {layout.run_id}: layout {layout.kind}, {layout.world_size} {kind} "
          f"rank(s) in {len(commands)} node(s); {run_dir}")  # fmt: skip
    status, details = execute(
        layout, run_dir, nodes, spec.job.get("max_steps"), spec.grace, t0, on_tick
    )
    # Restarts the harness made (per-rank), else the ones the metrics show (torchrun's).
    restarts = getattr(nodes, "restarts", None) or runs.restarts_seen(
        runs.read_metrics(run_dir / "output")
    )
    summary = write_summary(layout, run_dir, status, details, t0, restarts)
    if status == "failed":
        explain_failure(run_dir, summary)
    print(f"harness: {status}; first loss {summary['first_loss']}, final loss "
          f"{summary['final_loss']}; {run_dir / 'summary.json'}")  # fmt: skip
    return summary


def prepare(layout: Layout):
    """The engine client with the image ready (None for LAYOUT=host, whose assets it makes)."""
    if layout.kind == "host":
        _host_assets()
        return None
    client = engine.client()
    engine.compose_cmd()
    if layout.gpus and not engine.has_nvidia_runtime(client):
        raise HarnessError(
            f"GPUS={layout.gpus} but the engine has no NVIDIA runtime; install the NVIDIA "
            "Container Toolkit, or use GPUS=0 for CPU ranks"
        )
    if layout.entry:
        workload.check_image(client, layout)
    else:
        images.ensure(client, layout.image, layout.device)
    return client


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_summary(layout: Layout, run_dir: Path, status: str, details: dict, t0: float,
                  restarts: list[dict] = ()) -> dict:  # fmt: skip
    metrics = runs.read_metrics(run_dir / "output")
    seen, shards = runs.world_sizes_seen(metrics), runs.sharding_seen(metrics)
    ranks = []
    for node in layout.nodes():
        d = details.get(node.name, {})
        for r in node.ranks:
            ranks.append({"rank": r, "node": node.name, **d, "world_size_seen": seen.get(r),
                          **shards.get(r, {})})  # fmt: skip
    summary = {"run_id": layout.run_id, "layout": layout.kind, "network": layout.network,
               "device": layout.device, "world_size": layout.world_size, "status": status,
               **runs.summarize(metrics, t0), "ranks": ranks,
               "restarts": [{**x, "t": round(x["time"] - t0, 2)} for x in restarts]}  # fmt: skip
    if layout.entry:
        summary.update(workload.summary_fields(layout, run_dir, metrics))
    runs.write_json(run_dir / "summary.json", summary)
    return summary


def _take_checkpoints(previous: Path, output: Path, layout: Layout) -> None:
    """RESUME=1: hard-link the previous run's checkpoints into this run's output (copies if
    links cannot be made), so the trainer's resume_from_checkpoint=true finds the last one."""
    found = sorted((previous / "output").glob("checkpoint-*"))
    if not found:
        print(f"harness: RESUME=1 but {previous.name} has no checkpoint; starting afresh")
        return
    for ckpt in found:
        try:
            shutil.copytree(ckpt, output / ckpt.name, copy_function=os.link)
        except OSError:
            shutil.rmtree(output / ckpt.name, ignore_errors=True)
            shutil.copytree(ckpt, output / ckpt.name)
        if layout.kind != "host":
            for path in [output / ckpt.name, *(output / ckpt.name).rglob("*")]:
                _give_to_container_user(path, layout.user)
    print(f"harness: resuming from {previous.name}: {', '.join(c.name for c in found)}")


def explain_failure(run_dir: Path, summary: dict) -> None:
    """Say why ranks failed: their own error lines, else the end of their logs."""
    for node in dict.fromkeys(r["node"] for r in summary["ranks"] if r.get("exit_code")):
        log = run_dir / f"logs/{node}.log"
        lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
        errors = [x for x in lines if "error:" in x.lower() or x.startswith(("Error", "OSError"))]
        shown = list(dict.fromkeys(errors))[-5:] or lines[-10:]
        print(f"harness: {node} failed; from {log}:", file=sys.stderr)
        for line in shown:
            print(f"  {line}", file=sys.stderr)


def _give_to_container_user(path: Path, user: str) -> None:
    # The ranks run as the image's non-root user and must write their output here.
    if os.geteuid() == 0:
        uid, gid = (int(x) for x in user.split(":"))
        os.chown(path, uid, gid)


def _host_assets() -> None:
    model, data = HOST_ASSETS / "tiny-model", HOST_ASSETS / "demo.jsonl"
    py = sys.executable
    if not (model / "config.json").is_file():
        subprocess.run([py, "-m", "tuning.tiny_model", "--out", str(model)], check=True, cwd=ROOT)
    if not data.is_file():
        subprocess.run([py, "-m", "tuning.demo_data", "--out", str(data)], check=True, cwd=ROOT)


def cmd_down(a: argparse.Namespace) -> int:
    gone = engine.remove_labelled(engine.client(), a.run_id)
    print(f"harness: removed {gone} container(s), network(s) and volume(s) labelled harness.run")
    return 0


def cmd_ps(a: argparse.Namespace) -> int:
    found = engine.labelled(engine.client())
    for ctr in found["containers"]:
        print(f"{ctr.labels.get('harness.run')}  {ctr.name}  {ctr.status}")
    for net in found["networks"]:
        print(f"{net.attrs['Labels'].get('harness.run')}  network {net.name}")
    if not any(found.values()):
        print("harness: nothing running")
    return 0


def cmd_logs(a: argparse.Namespace) -> int:
    run_dir = Path(a.runs) / (a.run_id or "latest")
    compose_file = run_dir / "compose.yaml"
    c = engine.client()
    if compose_file.is_file() and engine.labelled(c, run_dir.resolve().name)["containers"]:
        return engine.compose(compose_file, "logs", "--follow", check=False).returncode
    logs = sorted((run_dir / "logs").glob("*.log"))
    if not logs:
        raise HarnessError(f"no logs under {run_dir}; start a run with `make up`")
    for log in logs:
        print(f"==> {log} <==\n{log.read_text(errors='replace')}")
    return 0


def cmd_image(a: argparse.Namespace) -> int:
    device = a.device or ("gpu" if engine.gpu_count() else "cpu")
    if a.trainer == "fms":  # fms-hf-tuning's own image (workload.py)
        a.image = workload.FMS_IMAGE
    tag = images.resolve(a.image, device)
    base = images.ensure(engine.client(), tag, device, rebuild=a.rebuild)
    print(f"harness: image {tag} ({device}, base {base})")
    return 0


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """The flags of a run, shared by up, bench and fault (the Makefile's variables)."""
    p.add_argument("--layout", default="single", help=f"one of {', '.join(KINDS)}")
    p.add_argument("--gpus", help="GPUs to use (default: all visible; 0 = CPU ranks)")
    p.add_argument("--nproc", help="CPU ranks when GPUS=0 (default 2)")
    p.add_argument("--model", help="local model directory (default: the tiny model)")
    p.add_argument("--data", help="JSON Lines training file (default: the demo data)")
    p.add_argument("--steps", help="max_steps")
    p.add_argument("--seed")
    p.add_argument("--timeout", help="collective timeout in seconds (ddp_timeout)")
    p.add_argument("--config", help="accelerate config fixture")
    p.add_argument("--job", default=str(CONFIGS / "jobs/demo.yaml"), help="job fixture")
    p.add_argument("--network", default="isolated", help="per-rank: isolated or shared")
    p.add_argument("--max-restarts")
    p.add_argument("--resume", action="store_true", help="resume from the last checkpoint")
    p.add_argument("--grace", type=float, default=60.0,
                   help="seconds to wait for peers after a rank fails")  # fmt: skip
    p.add_argument("--run-id")
    p.add_argument("--trainer", default="harness", help="harness (default) | fms")
    p.add_argument("--entry", help="module to run in IMAGE, a trainer of your own")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tuning.harness")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="train one layout to the end")
    add_run_flags(up)
    up.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    from . import bench, examples, fault, kube  # they build on spec_from and start

    for ext in (bench, fault, kube, examples):
        ext.register(sub)  # each adds its subcommand, with add_run_flags where it runs jobs
    for s in sub.choices.values():
        s.add_argument("--runs", default=str(ROOT / "runs"))
        s.add_argument("--image", default="tuning-harness:latest")
    for name, fn, text in (("down", cmd_down, "remove everything labelled by the harness"),
                           ("ps", cmd_ps, "list the harness's containers and networks"),
                           ("logs", cmd_logs, "follow (or show) the latest run's logs"),
                           ("image", cmd_image, "build the image if it is missing")):  # fmt: skip
        s = sub.add_parser(name, help=text)
        s.add_argument("--runs", default=str(ROOT / "runs"))
        s.add_argument("--image", default="tuning-harness:latest")
        s.add_argument("--run-id")
        s.set_defaults(fn=fn)
    sub.choices["image"].add_argument("--rebuild", action="store_true")
    sub.choices["image"].add_argument("--trainer", default="harness", choices=workload.TRAINERS)
    sub.choices["image"].add_argument(
        "--device", choices=("cpu", "gpu"), help="which image (default: gpu when GPUs are visible)"
    )
    up.set_defaults(fn=cmd_up)
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    load_env_file()
    try:
        return a.fn(a)
    except HarnessError as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
