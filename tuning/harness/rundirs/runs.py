"""Run directories (`runs/<run-id>/`) and what the host reads back from them."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import statistics
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from tuning.harness.errors import HarnessError

WARMUP_STEPS = 2  # steps excluded from steady-state figures (compile, allocator, caches)
# fms-hf-tuning's FileLoggingTracker: <output_dir>/training_logs.jsonl, written by the world
# process zero only, one line per logged step:
#   {"data": {"epoch": 0.1, "step": 3, "timestamp": "<local isoformat>", "value": 2.3},
#    "name": "training_loss"}   ("validation_loss" for eval_loss)
FMS_LOGS = "training_logs.jsonl"


# A run id names a directory under runs/, a Compose project (harness-<id>), labels and a
# PyTorchJob's labels: so one rule, a DNS label (RFC 1123), lower case, at most 63. Commands
# append to the id a user gives (fault: "-partition-per-rank", bench:
# "-r10-per-rank-isolated-probe", 29 at most), hence 32 for that one.
RUN_ID_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
RUN_ID_MAX = 32
LABEL_MAX = 63


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def check_run_id(run_id: str, limit: int = RUN_ID_MAX) -> str:
    """`run_id` if it keeps the rule, else ValueError saying why and how to fix it. `limit`:
    LABEL_MAX for the ids commands derive from a checked one."""
    if len(run_id) <= limit and RUN_ID_RE.fullmatch(run_id):
        return run_id
    why = (
        f"is {len(run_id)} characters, more than {limit}"
        if len(run_id) > limit
        else "must be lower-case letters, digits and '-', starting and ending with a "
        "letter or digit"
    )
    raise ValueError(f"RUN_ID={run_id!r} {why}; e.g. RUN_ID=my-run-2")


def create(root: Path, run_id: str, starts: bool = True) -> Path:
    """A fresh run directory; never reuses one. `latest` moves only now, when a run starts;
    starts=False: the directory alone, for files and no run (kube's render)."""
    run_dir = root / run_id
    try:
        root.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir()
        for sub in ("job", "output", "logs", "ranks") if starts else ():
            (run_dir / sub).mkdir()
    except FileExistsError:
        raise HarnessError(f"{run_dir} exists; a run never writes over another") from None
    except OSError as e:
        raise HarnessError(
            f"cannot write the run directory under {root}: {e.strerror}. "
            "Make it writable or point RUNS=<dir> elsewhere."
        ) from None
    if starts:
        point_latest(root, run_id)
    return run_dir


def point_latest(root: Path, name: str) -> None:
    """runs/latest -> the run that started last (up, fault, kube's rehearsal, a bench). The
    link is made under its own name and renamed over `latest`, so two runs starting at once
    never leave it missing or half-made: the later rename wins."""
    tmp = root / f".latest-{name}-{os.getpid()}"
    tmp.symlink_to(name)
    os.replace(tmp, root / "latest")


def job_text(job: dict, name: str = "job.yaml") -> str:
    """The job file's text: JSON for a foreign trainer's job.json, else YAML (kube's ConfigMap
    holds the same text)."""
    if name.endswith(".json"):
        return json.dumps(job, indent=2) + "\n"
    return yaml.safe_dump(job, sort_keys=False)


def write_job(run_dir: Path, job: dict, accelerate_config: Path, name: str = "job.yaml") -> None:
    (run_dir / "job" / name).write_text(job_text(job, name))
    shutil.copyfile(accelerate_config, run_dir / "job/accelerate.yaml")


def write_json(path: Path, data) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    """A JSON file the harness wrote ({} when it is missing or half-written)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def read_metrics(output_dir: Path) -> dict[int, list[dict]]:
    """Each rank's metric lines; a line being written (no newline yet) is skipped."""
    out: dict[int, list[dict]] = {}
    for path in sorted((output_dir / "metrics").glob("rank*.jsonl")):
        rank = int(path.stem.removeprefix("rank"))
        lines = []
        with open(path) as f:
            for raw in f:
                if raw.endswith("\n"):
                    try:
                        lines.append(json.loads(raw))
                    except json.JSONDecodeError:
                        pass
        out[rank] = lines
    if (output_dir / FMS_LOGS).is_file() and not steps(out.get(0, [])):
        # A foreign trainer (fms): its steps and losses are rank 0's, from its own log; the
        # metrics files hold only what the rank recorder saw (process group, end).
        own = out.get(0, [])
        offset = next((x["utc_offset_s"] for x in own if "utc_offset_s" in x), 0)
        world = next((x["world_size"] for x in reversed(own) if "world_size" in x), None)
        fms = [{**x, "rank": 0, "world_size": world} for x in read_fms_logs(output_dir, offset)]
        out[0] = sorted(own + fms, key=lambda x: x["time"])
    return out


def read_fms_logs(output_dir: Path, utc_offset_s: int = 0) -> list[dict]:
    """fms's training_logs.jsonl as step lines (step, loss, epoch, time). Its timestamps are
    the container's local time; `utc_offset_s` is that zone's offset (the rank recorder's).
    step_s is the time since the previous logged step over the steps between (None first)."""
    tz = timezone(timedelta(seconds=utc_offset_s))
    out: list[dict] = []
    with open(output_dir / FMS_LOGS) as f:
        for raw in f:
            try:
                line = json.loads(raw) if raw.endswith("\n") else None
                data = line["data"] if line and line.get("name") == "training_loss" else None
                if data is None:
                    continue
                t = datetime.fromisoformat(data["timestamp"]).replace(tzinfo=tz).timestamp()
                step, loss = int(data["step"]), float(data["value"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
            prev = out[-1] if out else None
            step_s = (
                (t - prev["time"]) / (step - prev["step"]) if prev and step > prev["step"] else None
            )
            out.append(
                {
                    "event": "step",
                    "step": step,
                    "loss": loss,
                    "epoch": data.get("epoch"),
                    "time": t,
                    "step_s": step_s,
                    "source": FMS_LOGS,
                }
            )
    return out


def steps(lines: list[dict]) -> list[dict]:
    return [x for x in lines if x.get("event") == "step"]


def trainer_max_steps(metrics: dict[int, list[dict]]) -> int | None:
    """The max_steps an HF Trainer said it runs (its "training" phase line, from the rank
    recorder's step callback), rank 0's latest; None when none said."""
    said = [
        x for x in metrics.get(0, []) if (x.get("event"), x.get("name")) == ("phase", "training")
    ]
    return said[-1].get("max_steps") if said else None


def summarize(metrics: dict[int, list[dict]], t0: float) -> dict:
    """Training figures of a run from its ranks' metric lines (rank 0 is the reference).
    A group restarted from a checkpoint logs some steps again: the latest line of a step wins."""
    rank0 = list({s["step"]: s for s in steps(metrics.get(0, []))}.values())
    # an HF Trainer under the rank recorder has a loss on the steps it logs only
    losses = [[s["step"], s["loss"]] for s in rank0 if s.get("loss") is not None]
    warm = [s for s in rank0 if s["step"] > WARMUP_STEPS] or rank0
    warm_steps = {s["step"] for s in warm}
    tokens = sum(
        s.get("tokens", 0)
        for lines in metrics.values()
        for s in steps(lines)
        if s["step"] in warm_steps
    )
    timed = [s["step_s"] for s in warm if s["step_s"] is not None]  # fms: none for its first
    seconds = sum(timed)
    return {
        "losses": losses,
        "first_loss": losses[0][1] if losses else None,
        "final_loss": losses[-1][1] if losses else None,
        "steps": len(rank0),
        "time_to_first_step_s": round(rank0[0]["time"] - t0, 3) if rank0 else None,
        "steady_step_s": statistics.median(timed) if timed else None,
        "tokens_per_s": round(tokens / seconds, 1) if seconds and tokens else None,
    }


def is_start(line: dict) -> bool:
    """A start of a rank's trainer: every start logs the "imports" phase first."""
    return (line.get("event"), line.get("name")) == ("phase", "imports")


def attempts(lines: list[dict]) -> list[list[dict]]:
    """A rank's metric lines split at each start of its trainer (is_start)."""
    out: list[list[dict]] = []
    for x in lines:
        if is_start(x) or not out:
            out.append([])
        out[-1].append(x)
    return out


def restarts_seen(metrics: dict[int, list[dict]]) -> list[dict]:
    """Restarts of the group, from the metrics: every start of a rank's trainer logs the
    "imports" phase first, so a rank with n of them was restarted n - 1 times. Each restart:
    when the first rank came back, and which ranks had failed (their end line's error)."""
    by_rank = {r: attempts(lines) for r, lines in metrics.items()}
    out = []
    for k in range(1, max((len(a) for a in by_rank.values()), default=0)):
        back = [a[k][0]["time"] for a in by_rank.values() if len(a) > k]
        failed = {}
        for r, a in sorted(by_rank.items()):
            end = next((x for x in a[k - 1] if x.get("event") == "end"), None)
            if end is None or end.get("status") != "completed":
                failed[str(r)] = (end or {}).get("error") or "no end line"
        out.append({"time": min(back), "by": "torchrun", "failed": failed})
    return out


def ends_seen(metrics: dict[int, list[dict]]) -> dict[int, dict]:
    """Each rank's last end line (its trainer's own account of how it stopped), if any."""
    out = {}
    for r, lines in metrics.items():
        ends = [x for x in lines if x.get("event") == "end"]
        if ends:
            out[r] = ends[-1]
    return out


def returned_now(metrics: dict[int, list[dict]]) -> list[int]:
    """The ranks whose latest start (attempts) has ended: its trainer returned. An end line of
    an earlier attempt (before a restart) does not count."""
    latest = {r: attempts(lines)[-1] for r, lines in metrics.items() if lines}
    return sorted(r for r, xs in latest.items() if any(x.get("event") == "end" for x in xs))


def status_of(
    exits: dict[str, int | None], metrics: dict[int, list[dict]]
) -> tuple[str, str | None]:
    """A run's status once every node exited, and why when it is not `succeeded`. Exit codes
    alone lie: a rank stopped by SIGTERM checkpoints and exits 0, and a run whose nodes never
    started has no exit code that failed. The rules (docs/design.md):
      failed     no node ran; or a rank's end line says failed/refused; or a node exited
                 non-zero; or a rank that logged anything ended without an end line
      preempted  some rank stopped early on SIGTERM (and checkpointed), none failed
      succeeded  every node exited 0 and every rank that logged ended `completed`"""
    if not exits:
        return "failed", "no node ran (no container or process was started)"
    ends = ends_seen(metrics)
    broken = sorted(r for r, e in ends.items() if e.get("status") not in ("completed", "preempted"))
    stopped = sorted(r for r, e in ends.items() if e.get("status") == "preempted")
    if stopped and not broken:
        return "preempted", (
            f"rank(s) {_ranks(stopped)} stopped early on SIGTERM and "
            "checkpointed; RESUME=1 continues from there"
        )
    if broken:
        first = ends[broken[0]]  # its own words (e.g. the GPU guard's), so the summary says why
        why = f": {first['error']}" if first.get("error") else ""
        return "failed", f"rank(s) {_ranks(broken)} ended {first.get('status')}{why}"
    bad = {n: c for n, c in exits.items() if c != 0}
    silent = sorted(r for r, lines in metrics.items() if lines and r not in ends)
    if bad:
        why = ", ".join(f"{n} exited {c}" for n, c in bad.items())
        if ends and not silent:  # each trainer returned; a process died later, on its way out
            why += (
                " after every rank's trainer returned (end lines: completed): a rank's "
                "process died on its way out; the node's log names the rank and signal"
            )
        return "failed", why
    if silent:
        return "failed", f"rank(s) {_ranks(silent)} exited 0 with no end line (killed?)"
    return "succeeded", None


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


def checkpoint_world_size(path: Path) -> int | None:
    """The ranks that saved it: the Trainer writes one rng_state_<rank>.pth per rank (one
    rng_state.pth for one process)."""
    per_rank = list(path.glob("rng_state_*.pth"))
    return len(per_rank) or (1 if (path / "rng_state.pth").is_file() else None)


def world_sizes_seen(metrics: dict[int, list[dict]]) -> dict[int, int | None]:
    return {
        r: next((x["world_size"] for x in lines if "world_size" in x), None)
        for r, lines in metrics.items()
    }


def sharding_seen(metrics: dict[int, list[dict]]) -> dict[int, dict]:
    """Each rank's share of the model, as its trainer logged it once wrapped (the last
    attempt's, after restarts): distributed_type, params_local, params_total."""
    keys = ("distributed_type", "params_local", "params_total")
    out = {}
    for r, lines in metrics.items():
        last = [x for x in lines if x.get("event") == "sharding"][-1:]
        out[r] = {k: last[0].get(k) for k in keys} if last else {}
    return out
