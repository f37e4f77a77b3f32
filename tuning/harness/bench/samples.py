"""A bench layout run's samples, read from its run directory once it has finished: the
training half (launch to first step by part, steady steps, tokens, peak memory) and the probe
half (probe.json, NCCL's transport). `report.py` derives the figures from them.

Launch to first step is cut at these moments (the slowest rank or container sets each one):
``issued`` (``compose up`` issued, or the host launcher spawned), ``container running``
(``docker inspect`` State.StartedAt), ``rank process started`` (from /proc: a metrics line's
``time - t``), then the trainer's phases ``imports``, ``rendezvous``, ``model_loaded`` and the
end of step 1. The parts are the differences, so they add up to first step minus issued:

    container_start_s  StartedAt - issued                      (null for host)
    launcher_s         rank process start - StartedAt (host: - issued): the launcher
                       (`python -m tuning.launch`, `accelerate launch`, torchrun) up to the ranks
    imports_s          imports - rank process start: interpreter and imports
    rendezvous_s       rendezvous - imports
    model_load_s       model_loaded - rendezvous
    first_step_s       end of step 1 - model_loaded (tokenize data, build the Trainer, step 1)

Steady state: the step_s and tokens of steps after `metric_lines.WARMUP_STEPS`, per rank.
Peak memory:
per rank, the largest ``peak_rss_bytes`` (on CUDA ``max_memory_allocated_bytes``) of its step
lines. Transport: gloo's from probe.json; NCCL's from the probe run's logs (the launcher sets
NCCL_DEBUG=INFO for a probe on GPUs): its channel lines, e.g. ``nccl/P2P/CUMEM``.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path

from tuning.container.shared.boot import boot_time
from tuning.container.shared.transport import parse_nccl_transport
from tuning.harness.bench import report
from tuning.harness.run import foreign
from tuning.harness.run_files import folders, metric_lines


def boot_correction() -> float:
    """Seconds to add to a metrics line's `time - t` for the true process start.

    tuning.container.sft.metrics dates a process from /proc: btime (boot time, WHOLE seconds) plus
    its start in clock ticks since boot. The exact boot time is now minus CLOCK_BOOTTIME; the
    difference is the same for every process on this kernel, containers included."""
    try:
        return (time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)) - boot_time()
    except (OSError, StopIteration, ValueError, AttributeError):
        return 0.0


def parse_docker_time(raw: str | None) -> float | None:
    """Docker's RFC 3339 time with nanoseconds ('2026-01-01T12:00:00.123456789Z') -> unix."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", raw or "")
    if not m or m[1].startswith("0001-"):
        return None  # never started
    tz = "+00:00" if m[3] == "Z" else m[3]
    whole = datetime.fromisoformat(m[1] + tz).timestamp()
    return whole + (float("0." + m[2]) if m[2] else 0.0)


def _latest(metrics: dict[int, list[dict]], pick) -> float | None:
    """The latest over ranks of pick(lines) (the slowest rank sets the moment)."""
    seen = [v for lines in metrics.values() if (v := pick(lines)) is not None]
    return max(seen) if seen else None


def _phase_time(name: str):
    def pick(lines):
        return next(
            (x["time"] for x in lines if x.get("event") == "phase" and x.get("name") == name), None
        )

    return pick


def _process_start(fix: float):
    def pick(lines):
        x = next((x for x in lines if "t" in x and "time" in x), None)
        return None if x is None else x["time"] - x["t"] + fix

    return pick


def _first_step(lines):
    st = metric_lines.steps(lines)
    return min(st, key=lambda s: s["step"])["time"] if st else None


def _diff(end: float | None, begin: float | None) -> float | None:
    return round(end - begin, 4) if end is not None and begin is not None else None


def phases(metrics: dict[int, list[dict]], nodes: list[dict], fix: float) -> dict:
    """The parts of launch to first step (see the module's docstring); null where unseen."""
    issued = next((n["issued_at"] for n in nodes if n.get("issued_at")), None)
    started = [parse_docker_time(n.get("started_at")) for n in nodes if n.get("container")]
    running = max(started) if started and None not in started else None
    process = _latest(metrics, _process_start(fix))
    imports = _latest(metrics, _phase_time("imports"))
    rendezvous = _latest(metrics, _phase_time("rendezvous"))
    loaded = _latest(metrics, _phase_time("model_loaded"))
    out = {
        "container_start_s": _diff(running, issued) if started else None,
        "launcher_s": _diff(process, running if started else issued),
        "imports_s": _diff(imports, process),
        "rendezvous_s": _diff(rendezvous, imports),
        "model_load_s": _diff(loaded, rendezvous),
        # a foreign trainer (fms) logs no model_loaded: its model load counts in its first step
        "first_step_s": _diff(_latest(metrics, _first_step), loaded or rendezvous),
    }
    assert tuple(out) == report.PHASES
    return out


def _nodes(summary: dict) -> list[dict]:
    """The per-node details of a run summary (one entry per node, not per rank)."""
    seen, out = set(), []
    for r in summary.get("ranks") or []:
        if r.get("node") not in seen:
            seen.add(r.get("node"))
            out.append(r)
    return out


def train_sample(run_dir: Path, summary: dict, fix: float) -> dict:
    """A report repeat's training half: phases, steady steps and tokens, peak memory."""
    metrics = metric_lines.read_metrics(run_dir / "output")
    if summary.get("trainer") and summary.get("ranks"):  # foreign: trl's tokens, on rank 0
        log = run_dir / f"logs/{summary['ranks'][0]['node']}.log"
        pairs, _ = foreign.trl_tokens(log, metric_lines.steps(metrics.get(0, [])))
        for (s, n), prev in zip(pairs or [], [None, *(pairs or [])[:-1]], strict=False):
            s["tokens"] = n - prev[1] if prev else n
    step_s, tokens, memory = [], [], []
    memory_kind = "rss"
    for rank in sorted(metrics):
        by_step = {
            s["step"]: s for s in metric_lines.steps(metrics[rank])
        }  # a resumed step: last wins
        steady = [by_step[k] for k in sorted(by_step) if k > metric_lines.WARMUP_STEPS]
        step_s.append([s["step_s"] for s in steady])
        tokens.append([s.get("tokens", 0) for s in steady])
        cuda = [
            s["max_memory_allocated_bytes"]
            for s in by_step.values()
            if s.get("max_memory_allocated_bytes") is not None
        ]
        rss = [s["peak_rss_bytes"] for s in by_step.values() if s.get("peak_rss_bytes")]
        if cuda:
            memory_kind = "cuda max_memory_allocated"
        memory.append(max(cuda) if cuda else max(rss) if rss else None)
    train_summary = run_dir / "output/train_summary.json"
    if memory and memory[0] is None and train_summary.is_file():  # an image without step peaks
        memory[0] = folders.read_json(train_summary).get("peak_rss_bytes")
    return {
        "run_id": summary["run_id"],
        "status": summary["status"],
        "phases": phases(metrics, _nodes(summary), fix),
        "step_s": step_s,
        "tokens": tokens,
        "peak_memory_bytes": memory,
        "peak_memory_kind": memory_kind,
        "world_size_seen": [r.get("world_size_seen") for r in summary.get("ranks") or []],
    }


def probe_sample(run_dir: Path, summary: dict) -> dict:
    """A report repeat's probe half: probe.json, and NCCL's transport from the logs."""
    probe = folders.read_json(run_dir / "output/probe.json") or None
    out = {"probe_run_id": summary["run_id"], "probe_status": summary["status"], "probe": probe}
    if probe and probe.get("backend") == "nccl":
        text = "\n".join(p.read_text(errors="replace") for p in sorted(run_dir.glob("logs/*.log")))
        # NCCL's own channel lines; without them (NCCL_DEBUG not INFO, one rank) it is
        # unknown: probe.json's TCP sockets are NCCL's bootstrap, not how the GPUs talk.
        found = parse_nccl_transport(text)
        out["transport"] = [f"nccl/{t}" for t in found] or ["nccl/unknown"]
    return out
