"""What the ranks wrote of themselves: their metric lines (`output/metrics/rank<N>.jsonl`, the
rank recorder's), fms's own training log, and the training figures read off them."""

from __future__ import annotations

import json
import statistics
from datetime import datetime, timedelta, timezone
from pathlib import Path

WARMUP_STEPS = 2  # steps excluded from steady-state figures (compile, allocator, caches)
# fms-hf-tuning's FileLoggingTracker: <output_dir>/training_logs.jsonl, written by the world
# process zero only, one line per logged step:
#   {"data": {"epoch": 0.1, "step": 3, "timestamp": "<local isoformat>", "value": 2.3},
#    "name": "training_loss"}   ("validation_loss" for eval_loss)
FMS_LOGS = "training_logs.jsonl"


def read_metrics(output_dir: Path) -> dict[int, list[dict]]:
    """Each rank's metric lines; a line being written (no newline yet) is skipped."""
    return MetricsReader(output_dir)()


class MetricsReader:
    """read_metrics for a run being followed: each call parses only what the ranks wrote since
    the last. Parsing every file whole on each 0.5 s tick grew with the run: 0.32 s a tick
    after 24,000 steps of 2 ranks (a 95-minute soak), a third of one of the ranks' cores."""

    def __init__(self, output_dir: Path):
        self.output_dir = output_dir
        self._seen: dict[Path, tuple[int, list[dict]]] = {}  # bytes parsed, their lines

    def __call__(self) -> dict[int, list[dict]]:
        out: dict[int, list[dict]] = {}
        for path in sorted((self.output_dir / "metrics").glob("rank*.jsonl")):
            rank = int(path.stem.removeprefix("rank"))
            offset, lines = self._seen.get(path, (0, []))
            if path.stat().st_size < offset:  # rewritten shorter, not appended to: read anew
                offset, lines = 0, []
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            whole = chunk.rfind(b"\n") + 1  # a line being written waits for its newline
            for raw in chunk[:whole].splitlines():
                try:
                    lines.append(json.loads(raw))
                except json.JSONDecodeError:
                    pass
            self._seen[path] = (offset + whole, lines)
            out[rank] = list(lines)  # the caller's own list: the next call appends to ours
        if (self.output_dir / FMS_LOGS).is_file() and not steps(out.get(0, [])):
            # A foreign trainer (fms): its steps and losses are rank 0's, from its own log;
            # the metrics files hold only what the rank recorder saw (process group, end).
            own = out.get(0, [])
            offset = next((x["utc_offset_s"] for x in own if "utc_offset_s" in x), 0)
            world = next((x["world_size"] for x in reversed(own) if "world_size" in x), None)
            fms = [
                {**x, "rank": 0, "world_size": world}
                for x in read_fms_logs(self.output_dir, offset)
            ]
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


SLOWED_X = 3  # steps this many times slower than before the fault: a dump, judged as slow
SLOWED_STEPS = 3  # ... over this many steps


def slowed(metrics: dict, fault_at: float) -> float | None:
    """How many times slower the group's last SLOWED_STEPS steps came than its steps before the
    fault (by the time between them), when that is SLOWED_X or more. A step's time is the
    group's: when its last rank logged it (every rank logs its steps under the rank recorder,
    ms apart: their times side by side are no step's interval; fms logs rank 0's alone)."""
    done: dict[int, float] = {}
    for lines in metrics.values():
        for x in steps(lines):
            done[x["step"]] = max(done.get(x["step"], 0.0), x["time"])
    times = sorted(done.values())
    before = [b - a for a, b in zip(times, times[1:], strict=False) if b < fault_at]
    after = [b - a for a, b in zip(times, times[1:], strict=False) if a > fault_at]
    if len(before) < 3 or len(after) < SLOWED_STEPS:
        return None
    base = sorted(before)[len(before) // 2]
    now = sorted(after[-SLOWED_STEPS:])[SLOWED_STEPS // 2]
    return now / base if base > 0 and now / base >= SLOWED_X else None
