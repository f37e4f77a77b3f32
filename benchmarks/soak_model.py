"""Young and Daly's model, checked against soaks (issue 32): the best save interval beats a
quarter of it and four times it, and each predicted ETT falls inside its measured interval.

    flock /work/logs/docker.lock .venv/bin/python benchmarks/soak_model.py \
        [--mtbf 2m] [--duration 15m] [--layout single] [--fault-seed 1] [--runs DIR]
        [--calibration RUN_ID] [--calibrate 4m] [--out FILE.json]

1. A calibration soak (KINDS=kill, a save every 20 steps, `--calibrate` long; or the soak
   `--calibration` names) measures the save cost C, the restart cost R and the step time.
2. Young/Daly's interval tau* = sqrt(2 C M) for the MTBF M, in steps; then three soaks with
   KINDS=kill at tau*, tau*/4 and 4 tau*, each `--duration` long. The three share FAULT_SEED
   and MTBF in steps (the calibration's M over its step), so they draw the same gaps: common
   random numbers, fairer between intervals than three independent draws.
3. The table: per interval, the model's ETT with the C and R the three soaks measured together
   (and the renewal model of the soaks' own failure process, exact where Young/Daly is first
   order), beside each soak's measured ETT, its 90 % interval from its count of failures
   (soak/record.py), and whether the prediction falls inside. It is printed as markdown (for
   docs/faults.md) and written with every number to --out.
Each soak is `python -m tuning.harness soak`, the real command; the script only chooses the
intervals and reads the soaks' soak.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuning.harness.commands.soak.record import renewal  # noqa: E402
from tuning.harness.spec import save_interval  # noqa: E402
from tuning.harness.spec.flags import time_arg  # noqa: E402

CALIBRATION_SAVE_EVERY = 20


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
    rec = json.loads((Path(args.runs) / run_id / "soak.json").read_text())
    rec["took_s"] = round(time.time() - t, 1)
    if done.returncode:
        print(f"soak {run_id} exited {done.returncode}: {rec.get('stop_reason')}", flush=True)
    return rec


def pooled(recs: list[dict]) -> dict:
    """C, R and the step time of the soaks together: medians of every save, restart, step."""
    saves = [s["save_s"] for r in recs for s in r["saves"]["each"]]
    restarts = [
        f["restart_cost_s"]
        for r in recs
        for f in r["failures"]
        if f.get("restart_cost_s") is not None
    ]
    return {
        "save_s": statistics.median(saves),
        "restart_s": statistics.median(restarts),
        "step_s": statistics.median(r["step_s"] for r in recs),
        "saves": len(saves),
        "restarts": len(restarts),
    }


def table(recs: list[dict], names: list[str], c: dict, mtbf_steps: int) -> tuple[list, str]:
    m = mtbf_steps * c["step_s"]
    rows, out = [], []
    for name, r in zip(names, recs, strict=True):
        tau = r["save_steps"] * c["step_s"]
        pred = save_interval.ett(tau, c["save_s"], c["restart_s"], m)
        exact = renewal(tau, c["save_s"], c["restart_s"], m)
        iv = r.get("ett_interval")
        inside = bool(iv and iv[0] <= pred <= iv[1])
        rows.append(
            {
                "interval": name,
                "save_steps": r["save_steps"],
                "tau_s": round(tau, 2),
                "predicted": round(pred, 4),
                "renewal": round(exact, 4),
                "measured": r.get("ett"),
                "measured_interval": iv,
                "failures": len(r["failures"]),
                "wall_s": r.get("wall_s"),
                "inside": inside,
                "run_id": r["run_id"],
                "took_s": r["took_s"],
            }
        )
    out.append(
        "| interval | save every | predicted ETT (Young/Daly) | renewal model | measured "
        "ETT | 90 % interval | failures | inside |"
    )
    out.append("|" + " --- |" * 8)
    for x in rows:
        iv = x["measured_interval"]
        span = f"{100 * iv[0]:.1f}-{100 * iv[1]:.1f} %" if iv else "n/a"
        out.append(
            f"| {x['interval']} | {x['save_steps']} steps ({x['tau_s']:.1f} s) | "
            f"{100 * x['predicted']:.1f} % | {100 * x['renewal']:.1f} % | "
            f"{100 * (x['measured'] or 0):.1f} % | {span} | {x['failures']} | "
            f"{'yes' if x['inside'] else 'NO'} |"
        )
    return rows, "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mtbf", default="2m")
    p.add_argument("--duration", default="15m")
    p.add_argument("--calibrate", default="4m", help="the calibration soak's DURATION")
    p.add_argument("--calibration", help="a soak's run id to calibrate from (none: run one)")
    p.add_argument("--layout", default="single")
    p.add_argument("--fault-seed", type=int, default=1)
    p.add_argument("--runs", default=str(ROOT / "runs" / "soak-model"))
    p.add_argument("--out", default=None)
    args = p.parse_args()
    Path(args.runs).mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%m%d%H%M")
    t0 = time.time()
    if args.calibration:
        cal = json.loads((Path(args.runs) / args.calibration / "soak.json").read_text())
        cal["took_s"] = 0
    else:
        cal = soak(args, f"cal-{stamp}", args.mtbf, args.calibrate, CALIBRATION_SAVE_EVERY)
    c = pooled([cal])
    mtbf_s = time_arg("MTBF", args.mtbf)
    mtbf_steps = max(2, round(mtbf_s / c["step_s"]))
    best = save_interval.interval_s(c["save_s"], mtbf_s)
    n = max(4, round(best / c["step_s"]))
    plan = [("tau*/4", max(1, round(n / 4))), ("tau*", n), ("4 tau*", 4 * n)]
    print(
        f"calibration: C {c['save_s']:.3f} s, R {c['restart_s']:.1f} s, step "
        f"{c['step_s']:.4f} s; M {mtbf_s:.0f} s = {mtbf_steps} steps; tau* {best:.1f} s = "
        f"{n} steps",
        flush=True,
    )
    recs = [
        soak(args, f"m{i}-{stamp}", f"{mtbf_steps}steps", args.duration, every)
        for i, (_, every) in enumerate(plan)
    ]
    both = pooled(recs)
    rows, md = table(recs, [name for name, _ in plan], both, mtbf_steps)
    result = {
        "mtbf_s": mtbf_s,
        "mtbf_steps": mtbf_steps,
        "calibration": c,
        "calibration_run": cal["run_id"],
        "pooled": both,
        "rows": rows,
        "layout": args.layout,
        "fault_seed": args.fault_seed,
        "duration": args.duration,
        "took_s": round(time.time() - t0, 1),
    }
    out = Path(args.out or Path(args.runs) / f"soak-model-{stamp}.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"\nC {both['save_s']:.3f} s ({both['saves']} saves), R {both['restart_s']:.1f} s "
        f"({both['restarts']} restarts), M {mtbf_steps} steps x {both['step_s']:.4f} s = "
        f"{mtbf_steps * both['step_s']:.0f} s; took {result['took_s'] / 60:.0f} min\n"
    )
    print(md)
    print(f"\n{out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
