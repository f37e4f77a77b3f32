"""Young and Daly's model, checked against soaks (issues 32, 40): each soak's predicted ETT
beside its measured ETT and 90 % interval, at the best save interval, a quarter of it and four
times it.

    flock /work/logs/docker.lock .venv/bin/python benchmarks/soak_model.py \
        [--mtbf 3m] [--durations 16m,28m,150m] [--layout single] [--fault-seed 1] [--runs DIR]
        [--calibration RUN_ID] [--calibrate 3m] [--rows 0,1,2] [--soaks RUN,RUN,RUN]
        [--out FILE.json]

1. A calibration soak (KINDS=kill, a save every 20 steps, `--calibrate` long; or the soak
   `--calibration` names) measures the save cost C, the restart cost R and the step time.
2. Young/Daly's interval tau* = sqrt(2 C M) for the MTBF M, in steps; then soaks with KINDS=kill
   saving at tau*/4, tau* and 4 tau*, each as long as `--durations` says (one for all, or one
   each: 4 tau* loses the most a failure and needs the longest soak for the same interval). All
   share FAULT_SEED and MTBF in steps (the calibration's M over its step), so they draw the same
   gaps: common random numbers. `--rows` runs some of them (a later call can run the rest with
   the same calibration), `--soaks` tables soaks already run.
3. The table: per soak, the model as the soak recorded it (soak.json's `model`: Young/Daly's
   first-order ETT and the renewal model's exact one, with the C, R and M that soak measured),
   its measured ETT, its 90 % interval from its count of failures (soak/record.py) and that
   interval's half-width, and whether the prediction falls inside. The interval's half-width is
   about (1 - ETT) x 1.645 / sqrt(n) for n failures: it is the soak's length, not the model,
   that decides whether a wrong prediction can show. Printed as markdown (for docs/faults.md)
   and written with every number to --out.
Each soak is `python -m tuning.harness soak`, the real command; the script only chooses the
intervals and reads the soaks' soak.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuning.harness.checks import save_interval  # noqa: E402
from tuning.harness.errors import HarnessError  # noqa: E402
from tuning.harness.flags.run_flags import time_arg  # noqa: E402

CALIBRATION_SAVE_EVERY = 20
ROWS = (("tau*/4", 0.25), ("tau*", 1), ("4 tau*", 4))  # the save intervals, as tau* times


def soak(args, run_id: str, mtbf: str, duration: str, save_every: int) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "tuning.harness",
        "soak",
        "--runs",
        args.runs,
        "--run-id",
        run_id,
        "--mtbf",
        mtbf,
        "--duration",
        duration,
        "--save-every",
        str(save_every),
        "--kinds",
        "kill",
        "--fault-seed",
        str(args.fault_seed),
        "--layout",
        args.layout,
    ]
    t = time.time()
    print("+ " + " ".join(cmd[2:]), flush=True)
    done = subprocess.run(cmd, cwd=ROOT)
    rec = read(args.runs, run_id)
    rec["took_s"] = round(time.time() - t, 1)
    if done.returncode:
        print(f"soak {run_id} exited {done.returncode}: {rec.get('stop_reason')}", flush=True)
    return rec


def durations_arg(text: str) -> list[str]:
    """--durations: one DURATION for every row, or one per row (tau*/4, tau*, 4 tau*)."""
    each = [x.strip() for x in text.split(",")]
    if len(each) == 1:
        each *= len(ROWS)
    try:
        good = len(each) == len(ROWS) and all(time_arg("--durations", x) for x in each)
    except HarnessError:  # not a time: said below with what --durations takes
        good = False
    if not good:
        raise SystemExit(
            f"--durations {text!r}: one DURATION, or {len(ROWS)} comma-separated (tau*/4, "
            "tau*, 4 tau*), e.g. 16m,28m,150m"
        )
    return each


def row(name: str, rec: dict) -> dict:
    """One soak's line: what it measured and the model as it recorded it (soak/record.py)."""
    model, iv = rec.get("model") or {}, rec.get("ett_interval")
    return {
        "interval": name,
        "save_steps": rec["save_steps"],
        "tau_s": model.get("tau_s"),
        "save_s": model.get("save_s"),
        "restart_s": model.get("restart_s"),
        "mtbf_s": model.get("mtbf_s"),
        "predicted": model.get("ett"),
        "renewal": model.get("ett_renewal"),
        "measured": rec.get("ett"),
        "measured_interval": iv,
        "half_width": round((iv[1] - iv[0]) / 2, 4) if iv else None,
        "failures": len(rec["failures"]),
        "wall_s": rec.get("wall_s"),
        "inside": bool(model.get("inside")),
        "run_id": rec["run_id"],
        "took_s": rec.get("took_s"),
    }


def table(rows: list[dict]) -> str:
    def pct(x):
        return f"{100 * x:.1f} %" if x is not None else "n/a"

    out = [
        "| interval | save every | C, R, M (this soak) | predicted ETT (Young/Daly) | renewal "
        "model | measured ETT | 90 % interval | +- | failures | soak | inside |",
        "|" + " --- |" * 11,
    ]
    for x in rows:
        iv = x["measured_interval"]
        span = f"{100 * iv[0]:.1f}-{100 * iv[1]:.1f} %" if iv else "n/a"
        half = f"{100 * x['half_width']:.1f}" if x["half_width"] is not None else "n/a"
        costs = (
            f"{x['save_s']:.3f} s, {x['restart_s']:.1f} s, {x['mtbf_s']:.0f} s"
            if x["save_s"] is not None
            else "n/a"
        )
        tau = f" ({x['tau_s']:.1f} s)" if x["tau_s"] is not None else ""
        out.append(
            f"| {x['interval']} | {x['save_steps']} steps{tau} | {costs} | "
            f"{pct(x['predicted'])} | {pct(x['renewal'])} | {pct(x['measured'])} | {span} | "
            f"{half} | {x['failures']} | {(x['wall_s'] or 0) / 60:.0f} min | "
            f"{'yes' if x['inside'] else 'NO'} |"
        )
    return "\n".join(out)


def read(runs: str, run_id: str) -> dict:
    return json.loads((Path(runs) / run_id / "soak.json").read_text())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mtbf", default="3m")
    p.add_argument("--durations", default="16m,28m,150m", help="one DURATION, or one a row")
    p.add_argument("--calibrate", default="3m", help="the calibration soak's DURATION")
    p.add_argument("--calibration", help="a soak's run id to calibrate from (none: run one)")
    p.add_argument("--rows", default="0,1,2", help="which of tau*/4, tau*, 4 tau* to run")
    p.add_argument("--soaks", help="table these run ids (tau*/4, tau*, 4 tau*); run nothing")
    p.add_argument("--layout", default="single")
    p.add_argument("--fault-seed", type=int, default=1)
    p.add_argument("--runs", default=str(ROOT / "runs" / "soak-model"))
    p.add_argument("--out", default=None)
    args = p.parse_args()
    durations = durations_arg(args.durations)
    picked = [x.strip() for x in args.rows.split(",")]
    if any(x not in ("0", "1", "2") for x in picked):  # said before anything runs
        raise SystemExit(f"--rows {args.rows!r}: 0 (tau*/4), 1 (tau*), 2 (4 tau*), e.g. 0,1")
    picked = [int(x) for x in picked]
    Path(args.runs).mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%m%d%H%M")
    t0 = time.time()
    names = [name for name, _ in ROWS]
    result: dict = {"layout": args.layout, "fault_seed": args.fault_seed}
    if args.soaks:
        recs = [read(args.runs, x.strip()) for x in args.soaks.split(",")]
        names = names[: len(recs)]
    else:
        if args.calibration:
            cal = read(args.runs, args.calibration)
        else:
            cal = soak(args, f"cal-{stamp}", args.mtbf, args.calibrate, CALIBRATION_SAVE_EVERY)
        c = cal.get("model")
        if not c:
            raise SystemExit(
                f"calibration {cal['run_id']}: no save or no restart to measure C and R from; "
                "run a longer --calibrate or a shorter --mtbf"
            )
        step_s = cal["step_s"]
        mtbf_s = time_arg("MTBF", args.mtbf)
        mtbf_steps = max(2, round(mtbf_s / step_s))
        best = save_interval.interval_s(c["save_s"], mtbf_s)
        n = max(4, round(best / step_s))
        print(
            f"calibration {cal['run_id']}: C {c['save_s']:.3f} s, R {c['restart_s']:.1f} s, "
            f"step {step_s:.4f} s; M {mtbf_s:.0f} s = {mtbf_steps} steps; tau* {best:.1f} s = "
            f"{n} steps",
            flush=True,
        )
        recs, names = [], [names[i] for i in picked]
        for i in picked:
            every = max(1, round(n * ROWS[i][1]))
            recs.append(soak(args, f"m{i}-{stamp}", f"{mtbf_steps}steps", durations[i], every))
        result |= {
            "mtbf_s": mtbf_s,
            "mtbf_steps": mtbf_steps,
            "calibration_run": cal["run_id"],
            "durations": durations,
        }
    rows = [row(name, rec) for name, rec in zip(names, recs, strict=True)]
    md = table(rows)
    result |= {"rows": rows, "took_s": round(time.time() - t0, 1)}
    out = Path(args.out or Path(args.runs) / f"soak-model-{stamp}.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(md)
    print(f"\n{out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
